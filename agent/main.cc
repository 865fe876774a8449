// monta-agent: one per node. Discovers the node, registers with the planner, keeps
// its lease, and runs the benchmarks the planner asks for.
#include <unistd.h>

#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "agent/runtime/agent_runtime.h"
#include "common/signals.h"

ABSL_FLAG(std::string, planner, "127.0.0.1:7400", "planner gRPC address");
ABSL_FLAG(std::string, node_name, "",
          "node name; default: $NODE_NAME (Kubernetes downward API), else the hostname");
ABSL_FLAG(std::string, instance_id, "", "agent instance id; default: random per process");
ABSL_FLAG(std::string, bench_address, "127.0.0.1",
          "address other agents use to reach this node for benchmark traffic");

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

absl::StatusOr<monta::v1::NodeTopology> BasicTopology() {
  monta::v1::NodeTopology topology;
  topology.set_hostname(Hostname());
  const char* env = std::getenv("NODE_NAME");
  if (env != nullptr) topology.set_kubernetes_node_name(env);
  topology.set_cpu_logical_count(static_cast<int>(std::thread::hardware_concurrency()));
  topology.set_cuda_status("GPU discovery not built into this agent");
  return topology;
}

}  // namespace

int main(int argc, char** argv) {
  monta::BlockTerminationSignals();
  absl::SetProgramUsageMessage("monta-agent: Monta node agent");
  absl::ParseCommandLine(argc, argv);

  monta::agent::AgentOptions options;
  options.planner_address = absl::GetFlag(FLAGS_planner);
  options.node_name = absl::GetFlag(FLAGS_node_name);
  if (options.node_name.empty()) options.node_name = DefaultNodeName();
  options.instance_id = absl::GetFlag(FLAGS_instance_id);
  options.bench_address = absl::GetFlag(FLAGS_bench_address);
  options.discover = BasicTopology;

  monta::agent::AgentRuntime runtime(options);
  runtime.Start();
  const int sig = monta::WaitForTerminationSignal();
  std::cerr << "monta-agent: signal " << sig << ", shutting down" << std::endl;
  runtime.Stop();
  return 0;
}
