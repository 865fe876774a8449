// Prometheus' GET /metrics on common/http's server (so slow clients cannot hold
// it, see http_server.h): the text exposition format of every registered
// collectable, serialized by prometheus-cpp's TextSerializer. Replaces
// prometheus::Exposer (civetweb), whose fixed threads a few slow connections
// blocked and whose teardown took seconds.
#ifndef MONTA_COMMON_HTTP_METRICS_ENDPOINT_H_
#define MONTA_COMMON_HTTP_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/http/http_server.h"
#include "prometheus/collectable.h"

namespace monta::http {

class MetricsEndpoint {
 public:
  // Serves GET /metrics on `options.address` (port 0 picks one).
  // UNAVAILABLE, naming options.name, when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      HttpServerOptions options);
  ~MetricsEndpoint();

  // Adds `collectable` to every later scrape; one that is gone is skipped.
  void RegisterCollectable(const std::weak_ptr<prometheus::Collectable>& c);

  int port() const { return server_->port(); }
  HttpServerStats Stats() const { return server_->Stats(); }
  void Shutdown() { server_->Shutdown(); }

  // The exposition text of everything registered (what GET /metrics answers).
  std::string Scrape() const;

 private:
  MetricsEndpoint() = default;

  mutable absl::Mutex mu_;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<HttpServer> server_;
};

}  // namespace monta::http

#endif  // MONTA_COMMON_HTTP_METRICS_ENDPOINT_H_
