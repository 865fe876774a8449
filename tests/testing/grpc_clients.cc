#include "tests/testing/grpc_clients.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_security.h"
#include "grpcpp/create_channel.h"
#include "httplib.h"

namespace monta::testing {

std::shared_ptr<grpc::Channel> PlannerChannel(
    const LocalCluster& cluster, const std::vector<std::string>& tls_flags) {
  GrpcSecurityOptions security;
  for (const std::string& flag : tls_flags) {
    const std::vector<std::string> parts =
        absl::StrSplit(flag, absl::MaxSplits('=', 1));
    if (parts.size() != 2) continue;
    if (parts[0] == "--tls_ca_file") security.ca_file = parts[1];
    if (parts[0] == "--tls_cert_file") security.cert_file = parts[1];
    if (parts[0] == "--tls_key_file") security.key_file = parts[1];
  }
  auto credentials = MakeChannelCredentials(security);
  if (!credentials.ok()) return nullptr;
  return grpc::CreateChannel(cluster.planner_address(), *credentials);
}

std::unique_ptr<grpc::ClientContext> ContextWithDeadline(int seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds));
  return context;
}

std::string PlannerMetrics(const LocalCluster& cluster) {
  httplib::Client client("127.0.0.1", cluster.metrics_port());
  client.set_read_timeout(30, 0);
  auto response = client.Get("/metrics");
  if (!response || response->status != 200) return "";
  return response->body;
}

double MetricValue(const std::string& metrics_text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(metrics_text, '\n')) {
    if (!absl::StartsWith(line, series + " ")) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
  }
  return -1;
}

}  // namespace monta::testing
