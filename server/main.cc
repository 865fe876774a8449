// monta-planner: the cluster's planner. See README.md for flags and the quick
// start.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "server/planner_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7400",
          "gRPC listen address (host:port; port 0 picks a free one)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:7401",
          "Prometheus /metrics listen address; empty disables");
ABSL_FLAG(double, lease_seconds, 15,
          "node lease: a node without heartbeat is stale after it");
ABSL_FLAG(double, heartbeat_seconds, 5,
          "heartbeat interval the agents are told to use");
ABSL_FLAG(bool, bench_on_register, true,
          "measure a node (intra-node sweep) when it registers without curves");
ABSL_FLAG(double, bench_timeout_seconds, 120,
          "default deadline of a benchmark task");
ABSL_FLAG(double, bench_interval_seconds, 3600,
          "re-measure idle nodes (intra-node) and neighbouring pairs "
          "(inter-node) this often; "
          "0 disables");
ABSL_FLAG(int, cpu_ranks_per_node, 2,
          "ranks per node of a benchmark on nodes without GPUs when the "
          "request does not say (1..64)");
ABSL_FLAG(std::string, db, "",
          "SQLite file for nodes and measured curves (created if missing); "
          "empty keeps state "
          "in memory only");
ABSL_FLAG(bool, db_reset_corrupt, false,
          "when --db is corrupt (not a SQLite database, PRAGMA quick_check "
          "fails, a row does not parse), rename it to <db>.corrupt-<UTC time> "
          "(kept, its name logged) and start an empty database instead of "
          "refusing to start");
ABSL_FLAG(std::string, webhook_listen, "",
          "Kubernetes admission webhook HTTPS listen address (POST /mutate, "
          "/validate; GET "
          "/healthz), e.g. 0.0.0.0:8443; empty disables; needs --tls_cert and "
          "--tls_key");
ABSL_FLAG(
    std::string, tls_cert, "",
    "PEM certificate chain of the webhook (re-read when the file changes)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of the webhook");
ABSL_FLAG(std::string, port_file, "",
          "write the bound ports as JSON "
          "{\"grpc\":N,\"metrics\":M,\"webhook\":W} to this "
          "file (for tests)");

namespace {

// The planner's options from the flags; InvalidArgument names a flag that is
// out of range.
absl::StatusOr<monta::PlannerOptions> OptionsFromFlags() {
  monta::PlannerOptions options;
  options.grpc_address = absl::GetFlag(FLAGS_listen);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  const double lease = absl::GetFlag(FLAGS_lease_seconds);
  const double heartbeat = absl::GetFlag(FLAGS_heartbeat_seconds);
  if (lease <= 0 || heartbeat <= 0 || heartbeat >= lease) {
    return absl::InvalidArgumentError(
        "--heartbeat_seconds must be > 0 and < --lease_seconds");
  }
  options.registry.lease = absl::Seconds(lease);
  options.registry.heartbeat_interval = absl::Seconds(heartbeat);
  options.bench_on_register = absl::GetFlag(FLAGS_bench_on_register);
  options.db_path = absl::GetFlag(FLAGS_db);
  options.db_reset_corrupt = absl::GetFlag(FLAGS_db_reset_corrupt);
  if (absl::GetFlag(FLAGS_bench_interval_seconds) < 0) {
    return absl::InvalidArgumentError("--bench_interval_seconds must be >= 0");
  }
  options.bench_interval =
      absl::Seconds(absl::GetFlag(FLAGS_bench_interval_seconds));
  const int cpu_ranks = absl::GetFlag(FLAGS_cpu_ranks_per_node);
  if (cpu_ranks < 1 || cpu_ranks > 64) {
    return absl::InvalidArgumentError("--cpu_ranks_per_node must be in 1..64");
  }
  options.coordinator.default_cpu_ranks_per_node = cpu_ranks;
  options.coordinator.default_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_bench_timeout_seconds));
  options.webhook_address = absl::GetFlag(FLAGS_webhook_listen);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  if (!options.webhook_address.empty() &&
      (options.tls_cert_file.empty() || options.tls_key_file.empty())) {
    return absl::InvalidArgumentError(
        "--webhook_listen needs --tls_cert and --tls_key");
  }

  return options;
}

}  // namespace

int main(int argc, char** argv) {
  monta::BlockTerminationSignals();
  monta::ParseFlags(
      argc, argv,
      "the cluster's MoE AllToAll strategy planner (gRPC, "
      "Prometheus metrics, optional Kubernetes admission webhook).\n\n"
      "Usage: monta-planner [flags]\n"
      "Example: monta-planner --listen=0.0.0.0:7400 "
      "--metrics-listen=0.0.0.0:7401 --db=/var/lib/monta/planner.db",
      __FILE__);
  // Debian's Abseil is built with deadlock detection on, which walks a lock
  // graph on every Mutex acquisition (~2.5% of the planner's CPU under load).
  // The unit tests keep it; the production binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::StatusOr<monta::PlannerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "monta-planner: " << options.status().message() << "\n";
    return 2;
  }

  auto server = monta::PlannerServer::Start(*options);
  if (!server.ok()) {
    std::cerr << "monta-planner: " << server.status().message() << "\n";
    return 1;
  }
  std::cerr << "monta-planner: serving gRPC on port " << (*server)->grpc_port()
            << ", metrics on port " << (*server)->metrics_port();
  if ((*server)->webhook_port() != 0) {
    std::cerr << ", admission webhook (HTTPS) on port "
              << (*server)->webhook_port();
  }
  std::cerr << std::endl;
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    const absl::Status written = monta::WritePortFile(
        port_file, {{"grpc", (*server)->grpc_port()},
                    {"metrics", (*server)->metrics_port()},
                    {"webhook", (*server)->webhook_port()}});
    if (!written.ok()) {
      std::cerr << "monta-planner: --port_file: " << written.message() << "\n";
      (*server)->Shutdown(absl::Seconds(5));
      return 1;
    }
  }
  const int sig = monta::WaitForTerminationSignal();
  std::cerr << "monta-planner: signal " << sig << ", shutting down"
            << std::endl;
  (*server)->Shutdown(absl::Seconds(5));
  std::cerr << "monta-planner: stopped" << std::endl;
  return 0;
}
