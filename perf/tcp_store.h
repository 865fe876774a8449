// A rendezvous store over TCP for monta-a2a-bench across hosts without a
// shared file system: one process serves the keys (TcpStoreServer), every rank
// reaches it as a client (TcpStore). A connection per operation keeps the
// protocol trivial; rendezvous takes a few dozen operations per rank.
//
// Wire format (one request, one reply, then the connection closes):
//   request: 'S' | 'G', u32 key length, key, ['S' only: u32 value length,
//   value] reply:   'K' (set) | 'Y', u32 value length, value (found) | 'N' (not
//   yet)
// Lengths are little-endian; keys and values are at most 1 MiB.
#ifndef MONTA_PERF_TCP_STORE_H_
#define MONTA_PERF_TCP_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/comm/rendezvous_store.h"

namespace monta::perf {

class TcpStoreServer {
 public:
  // Listens on `address` ("host:port", IPv4; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      const std::string& address);
  ~TcpStoreServer();
  int port() const { return port_; }

 private:
  TcpStoreServer(int fd, int port);
  void Serve();
  void Handle(int fd);

  const int listen_fd_;
  const int port_;
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class TcpStore : public comm::RendezvousStore {
 public:
  // `address` is the server's "host:port".
  explicit TcpStore(std::string address);
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Time deadline) override;

 private:
  // One request; the reply's first byte and value. Retries connecting (the
  // server may not be up yet) until `deadline`.
  absl::StatusOr<std::pair<char, std::string>> Call(const std::string& request,
                                                    absl::Time deadline);
  const std::string address_;
};

}  // namespace monta::perf

#endif  // MONTA_PERF_TCP_STORE_H_
