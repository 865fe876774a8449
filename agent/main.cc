// monta-agent: one per node. Discovers the node, registers with the planner,
// keeps its lease, and runs the benchmarks the planner asks for.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "agent/runtime/agent_metrics.h"
#include "agent/runtime/agent_runtime.h"
#include "agent/runtime/bench_runner.h"
#include "agent/topology/discovery.h"
#include "common/flags.h"
#include "common/grpc_security_flags.h"
#include "common/http/http_flags.h"
#include "common/http/http_server.h"
#include "common/http/metrics_endpoint.h"
#include "common/port_file.h"
#include "common/replicas/endpoints.h"
#include "common/signals.h"
#include "prometheus/registry.h"

ABSL_FLAG(std::string, planner, "127.0.0.1:7400",
          "planner gRPC address (host:port), or the replicas of a planner on "
          "etcd comma-separated: the agent moves to the next one when a "
          "replica is down or not the leader");
ABSL_FLAG(std::string, node_name, "",
          "node name; default: $NODE_NAME (Kubernetes downward API), else the "
          "hostname");
ABSL_FLAG(std::string, instance_id, "",
          "agent instance id; default: random per process");
ABSL_FLAG(std::string, bench_address, "127.0.0.1",
          "address other agents use to reach this node for benchmark traffic");
ABSL_FLAG(std::string, sysfs_root, "/sys",
          "root of the sysfs tree to discover NICs and NUMA from");
ABSL_FLAG(
    std::string, topology_file, "",
    "YAML topology for nodes where discovery is impossible (declared facts)");
ABSL_FLAG(std::string, labels, "",
          "topology labels, comma-separated key=value (e.g. "
          "network.topology.nvidia.com/leaf=leaf-07)");
ABSL_FLAG(std::string, labels_file, "",
          "file of key=value topology labels (Kubernetes downward API format)");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus /metrics listen address (host:port; port 0 picks one); "
          "empty disables");
ABSL_FLAG(std::string, port_file, "",
          "write the bound metrics port as JSON {\"metrics\":M} to this file "
          "(for tests)");
ABSL_FLAG(
    double, topology_refresh_seconds, 30,
    "rediscover the topology this often and report changes with the heartbeat");

namespace {

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string DefaultNodeName() {
  const char* env = std::getenv("NODE_NAME");
  if (env != nullptr && *env != '\0') return env;
  return absl::AsciiStrToLower(Hostname());
}

// The discovery inputs the flags (and $NODE_NAME) declare.
absl::StatusOr<monta::topology::DiscoveryOptions> DiscoveryFromFlags() {
  monta::topology::DiscoveryOptions discovery;
  discovery.sysfs_root = absl::GetFlag(FLAGS_sysfs_root);
  discovery.topology_file = absl::GetFlag(FLAGS_topology_file);
  discovery.labels_file = absl::GetFlag(FLAGS_labels_file);
  if (const char* env = std::getenv("NODE_NAME"); env != nullptr) {
    discovery.kubernetes_node_name = env;
  }
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_labels), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels: expected key=value, got \"", item, "\""));
    }
    discovery.labels[kv.first] = kv.second;
  }
  return discovery;
}

// Serves `registry` and the agent's scrape-time gauges on --metrics_listen
// (nothing when it is empty; `endpoint` stays null) and writes --port_file.
absl::Status ServeMetrics(
    std::shared_ptr<prometheus::Registry> registry,
    const monta::agent::AgentMetrics& metrics,
    std::unique_ptr<monta::http::MetricsEndpoint>& endpoint) {
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  int metrics_port = 0;
  if (!metrics_listen.empty()) {
    absl::StatusOr<monta::http::HttpLimits> limits =
        monta::http::HttpLimitsFromFlags();
    if (!limits.ok()) return limits.status();
    monta::http::HttpServerOptions options;
    options.address = metrics_listen;
    options.name = "--metrics_listen";
    options.limits = *limits;
    absl::StatusOr<std::unique_ptr<monta::http::MetricsEndpoint>> started =
        monta::http::MetricsEndpoint::Start(std::move(options));
    if (!started.ok()) return started.status();
    endpoint = *std::move(started);
    endpoint->RegisterCollectable(registry);
    endpoint->RegisterCollectable(metrics.collectable());
    metrics_port = endpoint->port();
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (port_file.empty()) return absl::OkStatus();
  const absl::Status written =
      monta::WritePortFile(port_file, {{"metrics", metrics_port}});
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("--port_file: ", written.message()));
  }
  return absl::OkStatus();
}

// Benchmark tasks run on this node, their outcomes and the errors dropped on
// the way counted in `metrics` (which must outlive the runtime).
void SetUpBenchRunner(monta::agent::AgentOptions& options,
                      monta::agent::AgentMetrics& metrics) {
  monta::agent::BenchRunnerOptions bench;
  bench.node_name = options.node_name;
  bench.bench_address = options.bench_address;
  bench.on_finished = [&metrics](const std::string& result) {
    metrics.RecordBenchmarkRun(result);
  };
  options.on_discarded_error = [&metrics](const std::string& site) {
    metrics.RecordDiscardedError(site);
  };
  bench.on_discarded_error = options.on_discarded_error;
  options.runner = monta::agent::MakeBenchRunner(bench);
}

// Under mutual TLS the planner accepts this agent only as the node its
// certificate names: refuse to start, saying so, when that is another node.
absl::Status CheckCertificateNamesNode(
    const monta::GrpcSecurityOptions& security, const std::string& node) {
  if (security.insecure) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> uris =
      monta::CertificateUris("--tls_cert_file", security.cert_file);
  if (!uris.ok()) return uris.status();
  const std::string want = absl::StrCat("spiffe://monta/node/", node);
  for (const std::string& uri : *uris) {
    if (uri == want) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--tls_cert_file ", security.cert_file, " does not name node \"", node,
      "\" (expected the URI subjectAltName ", want, ", found [",
      absl::StrJoin(*uris, ", "), "]); the planner would refuse every call"));
}

// Who this agent is and how it reaches the planner: --planner, --tls_* /
// --insecure (logged), --node_name, --instance_id, --bench_address.
absl::StatusOr<monta::agent::AgentOptions> AgentOptionsFromFlags() {
  monta::agent::AgentOptions options;
  options.planner_address = absl::GetFlag(FLAGS_planner);
  if (absl::StatusOr<monta::replicas::Endpoints> planners =
          monta::replicas::Endpoints::Parse(options.planner_address,
                                            "--planner");
      !planners.ok()) {
    return planners.status();
  }
  absl::StatusOr<monta::GrpcSecurityOptions> security =
      monta::GrpcSecurityFromFlags();
  if (!security.ok()) return security.status();
  std::cerr << "monta-agent: " << monta::DescribeGrpcSecurity(*security)
            << std::endl;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      monta::MakeChannelCredentials(*security);
  if (!credentials.ok()) return credentials.status();
  options.credentials = *std::move(credentials);
  options.node_name = absl::GetFlag(FLAGS_node_name);
  if (options.node_name.empty()) options.node_name = DefaultNodeName();
  if (absl::Status named =
          CheckCertificateNamesNode(*security, options.node_name);
      !named.ok()) {
    return named;
  }
  options.instance_id = absl::GetFlag(FLAGS_instance_id);
  options.bench_address = absl::GetFlag(FLAGS_bench_address);
  return options;
}

// Discovery from the flags into `options`: run once now, so broken declared
// inputs fail at start and not in the background, then on every refresh.
absl::Status SetUpDiscovery(monta::agent::AgentOptions& options) {
  absl::StatusOr<monta::topology::DiscoveryOptions> discovery_flags =
      DiscoveryFromFlags();
  if (!discovery_flags.ok()) return discovery_flags.status();
  const monta::topology::DiscoveryOptions discovery = *discovery_flags;
  absl::StatusOr<monta::v1::NodeTopology> first =
      monta::topology::DiscoverTopology(discovery);
  if (!first.ok()) {
    return absl::Status(first.status().code(),
                        absl::StrCat("topology: ", first.status().message()));
  }
  std::cerr << "monta-agent: discovered " << first->gpus_size() << " GPU(s), "
            << first->nics_size()
            << " NIC port(s); CUDA: " << first->cuda_status()
            << "; NVML: " << first->nvml_status() << std::endl;
  options.discover = [discovery] {
    return monta::topology::DiscoverTopology(discovery);
  };
  options.topology_refresh =
      absl::Seconds(absl::GetFlag(FLAGS_topology_refresh_seconds));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  monta::BlockTerminationSignals();
  monta::ParseFlags(
      argc, argv,
      "Monta's node agent, one per node: discovers the node, "
      "registers with the planner, keeps its lease and runs the benchmarks "
      "the planner asks for.\n\n"
      "Usage: monta-agent [flags]\n"
      "Example: monta-agent --planner=planner.monta:7400 "
      "--bench-address=10.0.0.7 --metrics-listen=0.0.0.0:7402 "
      "--tls-ca-file=/etc/monta/tls/ca.crt --tls-cert-file="
      "/etc/monta/tls/tls.crt --tls-key-file=/etc/monta/tls/tls.key",
      __FILE__);
  // Debian's Abseil is built with deadlock detection on, which walks a lock
  // graph on every Mutex acquisition (~2.5% of the planner's CPU under load).
  // The unit tests keep it; the production binaries skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::StatusOr<monta::agent::AgentOptions> options_from_flags =
      AgentOptionsFromFlags();
  if (!options_from_flags.ok()) {
    std::cerr << "monta-agent: " << options_from_flags.status().message()
              << "\n";
    return 2;
  }
  monta::agent::AgentOptions options = *std::move(options_from_flags);
  if (absl::Status discovered = SetUpDiscovery(options); !discovered.ok()) {
    std::cerr << "monta-agent: " << discovered.message() << "\n";
    return 2;
  }

  // Two NCCL communicators run kernels concurrently in the pipelined schedules;
  // implicit launch order keeps their order consistent across ranks.
  setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", /*overwrite=*/0);

  auto metrics_registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<monta::http::MetricsEndpoint> metrics_endpoint;
  // Read by the endpoint's threads at scrape time.
  std::atomic<monta::agent::AgentRuntime*> runtime_ptr{nullptr};
  monta::agent::AgentMetrics metrics(
      *metrics_registry, options.node_name, [&runtime_ptr] {
        monta::agent::AgentRuntime* runtime = runtime_ptr.load();
        return runtime != nullptr && runtime->registered();
      });
  if (absl::Status served =
          ServeMetrics(metrics_registry, metrics, metrics_endpoint);
      !served.ok()) {
    std::cerr << "monta-agent: " << served.message() << "\n";
    return 1;
  }

  SetUpBenchRunner(options, metrics);

  monta::agent::AgentRuntime runtime(options);
  runtime_ptr = &runtime;
  runtime.Start();
  const int sig = monta::WaitForTerminationSignal();
  std::cerr << "monta-agent: signal " << sig << ", shutting down" << std::endl;
  runtime.Stop();
  runtime_ptr = nullptr;
  // Scrapes read `metrics`, which goes before the endpoint would.
  if (metrics_endpoint != nullptr) metrics_endpoint->Shutdown();
  return 0;
}
