#include "common/http/metrics_endpoint.h"

#include <sstream>
#include <utility>

#include "prometheus/text_serializer.h"

namespace monta::http {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    HttpServerOptions options) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  MetricsEndpoint* self = endpoint.get();
  std::vector<HttpRoute> routes;
  routes.push_back({"GET", "/metrics", [self](const HttpRequest&) {
                      HttpResponse response;
                      response.content_type =
                          "text/plain; version=0.0.4; charset=utf-8";
                      response.body = self->Scrape();
                      return response;
                    }});
  // Metrics requests carry no body.
  options.max_body_bytes = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(std::move(options), std::move(routes));
  if (!server.ok()) return server.status();
  endpoint->server_ = *std::move(server);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  // The handler points at this object: stop before the members go.
  if (server_ != nullptr) server_->Shutdown();
}

void MetricsEndpoint::RegisterCollectable(
    const std::weak_ptr<prometheus::Collectable>& c) {
  absl::MutexLock lock(&mu_);
  collectables_.push_back(c);
}

std::string MetricsEndpoint::Scrape() const {
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables;
  {
    absl::MutexLock lock(&mu_);
    collectables = collectables_;
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables) {
    std::shared_ptr<prometheus::Collectable> c = weak.lock();
    if (c == nullptr) continue;
    std::vector<prometheus::MetricFamily> collected = c->Collect();
    families.insert(families.end(), std::make_move_iterator(collected.begin()),
                    std::make_move_iterator(collected.end()));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace monta::http
