// A local Monta cluster for multi-process tests: the real monta-planner and
// monta-agent binaries on free loopback ports, driven through the real
// montactl, over mutual TLS with certificates made for the cluster (a CA, the
// planner's for 127.0.0.1, one per node naming it, an operator's for
// montactl), as a deployment runs.
#ifndef MONTA_TESTS_TESTING_CLUSTER_H_
#define MONTA_TESTS_TESTING_CLUSTER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"

namespace monta::testing {

// The command line of a monta-agent named `node`: `binary`,
// --planner=`planners` (one address, or a planner's replicas comma-separated;
// none when empty, as when `flags` name it), --node_name, then `flags` (its TLS
// flags or
// --insecure, ...). LocalCluster::StartAgent and perf/ha_bench start agents
// with it.
std::vector<std::string> AgentArgv(const std::string& binary,
                                   const std::string& planners,
                                   const std::string& node,
                                   const std::vector<std::string>& flags);

// "127.0.0.1:<port>" of each of `ports`, comma-separated: the --planner of an
// agent (or montactl) that knows every replica.
std::string LoopbackAddresses(const std::vector<int>& ports);

class LocalCluster {
 public:
  LocalCluster();

  // Starts the planner with `flags`; port 0 (default) picks a free gRPC port, a
  // positive port reuses one (planner restart). Waits until it serves.
  // `wrapper` (a command that execs its arguments, e.g. /usr/bin/env with
  // variables) runs the planner when not empty.
  absl::Status StartPlanner(const std::vector<std::string>& flags = {},
                            int grpc_port = 0,
                            const std::vector<std::string>& wrapper = {});
  Process& planner() { return planner_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string planner_address() const;

  // Starts one more planner with `flags` on a free port (a replica of a
  // planner on etcd: its store and election flags are the caller's), kept
  // beside planner(); returns its gRPC port. UsePlanner(port) points
  // planner_address() (montactl, agents started after it) at a replica.
  absl::StatusOr<int> StartReplica(const std::vector<std::string>& flags);
  Process& replica(int port) { return replicas_.at(port); }
  void UsePlanner(int port) { grpc_port_ = port; }

  // The --tls_* flags of the planner, of node `node`'s agent (its certificate
  // is made on first use) and of an operator (montactl); empty after a
  // certificate could not be made (StartPlanner reports why).
  std::vector<std::string> PlannerTlsFlags() const;
  std::vector<std::string> NodeTlsFlags(const std::string& node);
  std::vector<std::string> OperatorTlsFlags() const;

  // Starts an agent named `node` against the planner (`flags` may name
  // another --planner, e.g. several replicas).
  absl::Status StartAgent(const std::string& node,
                          const std::vector<std::string>& flags = {});
  Process& agent(const std::string& node) { return agents_.at(node); }

  // montactl --planner <addr> <operator TLS flags> <args...>
  CommandResult Montactl(const std::vector<std::string>& args);
  // `montactl --output json nodes [--all]`, parsed; a null json on failure.
  nlohmann::json Nodes(bool include_gone = false);
  // State of `node` ("NODE_STATE_ALIVE", ...) from montactl, or "" if absent.
  std::string NodeState(const std::string& node, bool include_gone = false);
  // True when every one of `nodes` is alive, from one montactl call.
  bool AllAlive(const std::vector<std::string>& nodes);
  // Waits up to `timeout` until `montactl health monta.v1.Planner` prints
  // `status` (SERVING, NOT_SERVING); false when it never did.
  bool WaitForPlannerHealth(const std::string& status, absl::Duration timeout);

  const std::string& dir() const { return dir_; }

 private:
  std::vector<std::string> TlsFlags(const std::string& name) const;

  std::string dir_;
  absl::Status certs_;  // why the cluster's certificates could not be made
  Process planner_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int planner_starts_ = 0;
  std::map<std::string, Process> agents_;
  std::map<int, Process> replicas_;
};

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_CLUSTER_H_
