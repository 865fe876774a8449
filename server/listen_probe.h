// Why an address cannot be listened on. gRPC's ServerBuilder and civetweb (the
// Prometheus exposer) only say that binding failed; a start-up failure should
// name the cause ("Address already in use"), so after such a failure the
// planner binds the address itself the way those servers do and reports errno.
#ifndef MONTA_SERVER_LISTEN_PROBE_H_
#define MONTA_SERVER_LISTEN_PROBE_H_

#include <string>

namespace monta {

// The reason a TCP listener on `address` ("host:port", "[v6]:port", ":port")
// fails now: strerror of bind/listen, "cannot resolve host: ...", or
// "bad address". "no reason found" when a probe listener binds (the failure was
// elsewhere or has passed). The probe closes its socket before returning.
std::string ListenFailureReason(const std::string& address);

}  // namespace monta

#endif  // MONTA_SERVER_LISTEN_PROBE_H_
