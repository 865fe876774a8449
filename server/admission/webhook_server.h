// The admission webhook's HTTPS server (cpp-httplib + OpenSSL): POST /mutate
// and /validate (AdmissionReview v1, answered by an AdmissionHandler) and GET
// /healthz.
//
// Bounded everywhere so answers stay well inside the API server's 5 s timeout:
// request bodies over max_body_bytes get 413; a fixed pool of worker threads
// serves connections, and when max_pending_connections are already waiting the
// accept loop pauses (the kernel's backlog then holds or refuses new ones, and
// the API server applies failurePolicy). Read/write timeouts bound slow
// clients; an idle keep-alive connection holds a worker for at most
// keep_alive_seconds.
//
// TLS: certificate chain and key are PEM files. They are checked for changes at
// most every cert_check_interval (on a handshake) and re-read when they change,
// so cert-manager's renewals take effect without a restart; a pair that does
// not load (or does not match) is ignored and the previous one kept.
#ifndef MONTA_SERVER_ADMISSION_WEBHOOK_SERVER_H_
#define MONTA_SERVER_ADMISSION_WEBHOOK_SERVER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/admission/admission_handler.h"

namespace httplib {
class SSLServer;
}  // namespace httplib

namespace monta::admission {

struct WebhookOptions {
  // host:port ("0.0.0.0:8443", "[::]:8443"); port 0 picks a free one.
  std::string address = "0.0.0.0:8443";
  std::string tls_cert_file;  // PEM: leaf first, then intermediates
  std::string tls_key_file;   // PEM private key
  size_t max_body_bytes = 1 << 20;
  int worker_threads = 64;
  int max_pending_connections = 256;
  // Kernel accept queue (capped by net.core.somaxconn).
  int listen_backlog = 1024;
  absl::Duration read_timeout = absl::Seconds(2);
  absl::Duration write_timeout = absl::Seconds(2);
  int keep_alive_seconds = 2;
  int keep_alive_max_requests = 100;
  // When a new connection has waited this long for a worker, kept-alive
  // connections are closed after their current request (clients reconnect and
  // queue behind it), so idle or busy keep-alive clients cannot starve it.
  absl::Duration fair_queue_wait = absl::Milliseconds(200);
  absl::Duration cert_check_interval = absl::Seconds(10);
};

class CertStore;

class WebhookServer {
 public:
  // Loads the certificate, binds and starts serving. `handler` is not owned and
  // must outlive the server. INVALID_ARGUMENT for unusable TLS files,
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WebhookServer>> Start(
      WebhookOptions options, const AdmissionHandler* handler);
  ~WebhookServer();

  int port() const { return port_; }

  // Stops accepting, finishes the requests in flight and joins the workers (an
  // idle keep-alive connection can delay this by keep_alive_seconds).
  void Shutdown();

 private:
  WebhookServer() = default;

  WebhookOptions options_;
  std::unique_ptr<CertStore> certs_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread listener_;
  int port_ = 0;
  bool shut_down_ = false;
};

// Splits "host:port" / "[v6]:port". INVALID_ARGUMENT when malformed.
absl::Status SplitHostPort(const std::string& address, std::string* host,
                           int* port);

}  // namespace monta::admission

#endif  // MONTA_SERVER_ADMISSION_WEBHOOK_SERVER_H_
