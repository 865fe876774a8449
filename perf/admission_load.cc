// Load on the admission webhook: an in-process planner with the webhook on
// 127.0.0.1 (throwaway self-signed certificate), N concurrent HTTPS clients
// posting AdmissionReviews for --seconds; reports requests/s and latency
// percentiles. Run with: bazel run -c opt //perf:admission_load -- --clients=16
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/admission/test_certs.h"
#include "server/planner_server.h"

ABSL_FLAG(int, clients, 16, "concurrent HTTPS clients");
ABSL_FLAG(double, seconds, 5, "duration of the run");
ABSL_FLAG(bool, keep_alive, true,
          "reuse connections (as the API server does); false = a TLS handshake "
          "per request");
ABSL_FLAG(std::string, path, "/mutate", "/mutate or /validate");
ABSL_FLAG(bool, annotated, true,
          "send Pods with monta.io/moe (false: the skip path)");

namespace {

using json = nlohmann::json;

std::string ReviewBody(bool annotated) {
  json spec = json::parse(R"({
    "job": {"name": "paper", "hidden_size": 8192, "num_experts": 2, "top_k": 1,
            "capacity_factor": 1.0, "micro_batch_size": 1, "sequence_length": 8192,
            "bytes_per_element": 2, "moe_layers": 80, "world_size": 16,
            "tensor_parallel_size": 8, "expert_parallel_size": 2,
            "pipeline_parallel_size": 1, "data_parallel_size": 2,
            "experts_tensor_parallel": true},
    "placement": {"profile": "a800-hgx", "nodes": 2}})");
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "trainer-0"}, {"namespace", "team-moe"}}},
              {"spec",
               {{"containers",
                 {{{"name", "trainer"},
                   {"image", "trainer:1"},
                   {"env", {{{"name", "FOO"}, {"value", "bar"}}}}},
                  {{"name", "sidecar"}, {"image", "sidecar:1"}}}}}}};
  if (annotated)
    pod["metadata"]["annotations"] = {{"monta.io/moe", spec.dump()}};
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"request",
               {{"uid", "load"},
                {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                {"operation", "CREATE"},
                {"namespace", "team-moe"},
                {"object", pod}}}}
      .dump();
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[i];
}

// An in-process planner serving the webhook on 127.0.0.1 with `certs`.
absl::StatusOr<std::unique_ptr<monta::PlannerServer>> StartPlanner(
    const monta::admission::TestCertFiles& certs) {
  monta::PlannerOptions options;
  options.grpc_address = "127.0.0.1:0";
  options.grpc_security.insecure = true;  // only the webhook is loaded
  options.metrics_address = "";
  options.webhook_address = "127.0.0.1:0";
  options.tls_cert_file = certs.cert_file;
  options.tls_key_file = certs.key_file;
  options.webhook_log_decisions = false;
  return monta::PlannerServer::Start(options);
}

// What one client thread saw.
struct ClientStats {
  std::vector<double> latencies_ms;  // successful requests only
  int errors = 0;
  std::string first_error;
};

struct LoadResult {
  std::vector<ClientStats> clients;
  double elapsed_s = 0;
};

// Runs `clients` threads posting `body` to the webhook for `seconds`.
LoadResult RunClients(int port, const std::string& ca_cert_file, int clients,
                      double seconds, bool keep_alive, const std::string& path,
                      const std::string& body) {
  std::atomic<bool> stop{false};
  LoadResult result;
  result.clients.resize(clients);
  std::vector<std::thread> threads;
  auto make_client = [&] {
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    client->set_ca_cert_path(ca_cert_file);
    client->enable_server_certificate_verification(true);
    client->set_keep_alive(keep_alive);
    client->set_tcp_nodelay(true);
    client->set_connection_timeout(5);
    client->set_read_timeout(5);
    client->set_write_timeout(5);
    return client;
  };
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      ClientStats& stats = result.clients[c];
      auto client = make_client();
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = std::chrono::steady_clock::now();
        auto res = client->Post(path.c_str(), body, "application/json");
        const auto t1 = std::chrono::steady_clock::now();
        if (!res || res->status != 200) {
          if (stats.errors++ == 0) {
            stats.first_error = res ? absl::StrCat("HTTP ", res->status)
                                    : httplib::to_string(res.error());
          }
          continue;
        }
        stats.latencies_ms.push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  result.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

// Prints per-client errors and the summary; returns the number of errors.
int Report(const LoadResult& load, const std::string& path, bool keep_alive) {
  const int clients = static_cast<int>(load.clients.size());
  std::vector<double> all;
  int total_errors = 0;
  for (const ClientStats& stats : load.clients) {
    all.insert(all.end(), stats.latencies_ms.begin(), stats.latencies_ms.end());
    total_errors += stats.errors;
  }
  std::sort(all.begin(), all.end());
  for (int c = 0; c < clients; ++c) {
    if (load.clients[c].errors > 0) {
      std::cout << "client " << c << ": " << load.clients[c].errors
                << " errors, first: " << load.clients[c].first_error << "\n";
    }
  }
  const double elapsed = load.elapsed_s;
  std::cout << absl::StrFormat(
      "admission_load: %s, %d clients, keep_alive=%s, %.1f s, cores=%u\n"
      "  requests ok %zu, errors %d, %.0f req/s\n"
      "  latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n",
      path, clients, keep_alive ? "true" : "false", elapsed,
      std::thread::hardware_concurrency(), all.size(), total_errors,
      all.size() / elapsed, Percentile(all, 0.50), Percentile(all, 0.90),
      Percentile(all, 0.99), all.empty() ? 0.0 : all.back());
  return total_errors;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int clients = std::max(1, absl::GetFlag(FLAGS_clients));
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const bool keep_alive = absl::GetFlag(FLAGS_keep_alive);
  const std::string path = absl::GetFlag(FLAGS_path);

  char dir_template[] = "/tmp/monta-admission-load-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  auto certs = monta::admission::WriteSelfSignedCert(dir);
  if (!certs.ok()) {
    std::cerr << certs.status() << "\n";
    return 1;
  }
  auto planner = StartPlanner(*certs);
  if (!planner.ok()) {
    std::cerr << planner.status() << "\n";
    return 1;
  }
  const LoadResult load =
      RunClients((*planner)->webhook_port(), certs->cert_file, clients, seconds,
                 keep_alive, path, ReviewBody(absl::GetFlag(FLAGS_annotated)));
  const int total_errors = Report(load, path, keep_alive);
  (*planner)->Shutdown();
  std::remove(certs->cert_file.c_str());
  std::remove(certs->key_file.c_str());
  rmdir(dir);
  return total_errors == 0 ? 0 : 1;
}
