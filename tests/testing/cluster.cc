#include "tests/testing/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/admission/test_certs.h"

namespace monta::testing {

LocalCluster::LocalCluster() {
  static int counter = 0;
  dir_ = absl::StrCat(TempDir(), "/cluster-", getpid(), "-", counter++);
  Run({"/bin/mkdir", "-p", dir_});
  auto ca = admission::WriteTestCa(dir_, "ca", "monta-test-ca");
  if (!ca.ok()) {
    certs_ = ca.status();
    return;
  }
  for (const auto& [name, san] :
       {std::pair<std::string, std::string>{"planner",
                                            "DNS:localhost,IP:127.0.0.1"},
        {"operator", "URI:spiffe://monta/operator/test"}}) {
    auto written = admission::WriteTestLeafCert(*ca, dir_, name, san);
    if (!written.ok()) certs_ = written.status();
  }
}

std::vector<std::string> LocalCluster::TlsFlags(const std::string& name) const {
  if (!certs_.ok()) return {};
  return {absl::StrCat("--tls_ca_file=", dir_, "/ca.crt"),
          absl::StrCat("--tls_cert_file=", dir_, "/", name, ".crt"),
          absl::StrCat("--tls_key_file=", dir_, "/", name, ".key")};
}

std::vector<std::string> LocalCluster::PlannerTlsFlags() const {
  return TlsFlags("planner");
}

std::vector<std::string> LocalCluster::OperatorTlsFlags() const {
  return TlsFlags("operator");
}

std::vector<std::string> LocalCluster::NodeTlsFlags(const std::string& node) {
  const std::string name = absl::StrCat("node-cert-", node);
  if (certs_.ok() && ReadFile(absl::StrCat(dir_, "/", name, ".crt")).empty()) {
    auto written = admission::WriteTestLeafCert(
        {absl::StrCat(dir_, "/ca.crt"), absl::StrCat(dir_, "/ca.key")}, dir_,
        name, absl::StrCat("URI:spiffe://monta/node/", node));
    if (!written.ok()) certs_ = written.status();
  }
  return TlsFlags(name);
}

std::string LocalCluster::planner_address() const {
  return absl::StrCat("127.0.0.1:", grpc_port_);
}

absl::Status LocalCluster::StartPlanner(
    const std::vector<std::string>& flags, int grpc_port,
    const std::vector<std::string>& wrapper) {
  const std::string port_file =
      absl::StrCat(dir_, "/planner-ports-", planner_starts_, ".json");
  const std::string log =
      absl::StrCat(dir_, "/planner-", planner_starts_, ".log");
  ++planner_starts_;
  if (!certs_.ok()) return certs_;
  std::vector<std::string> argv = wrapper;
  for (const std::string& arg : {Runfile("server/monta-planner"),
                                 absl::StrCat("--listen=127.0.0.1:", grpc_port),
                                 std::string("--metrics_listen=127.0.0.1:0"),
                                 absl::StrCat("--port_file=", port_file)}) {
    argv.push_back(arg);
  }
  for (const std::string& flag : PlannerTlsFlags()) argv.push_back(flag);
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<Process> p = Process::Start(argv, log);
  if (!p.ok()) return p.status();
  planner_ = *std::move(p);
  nlohmann::json ports;
  const bool up = WaitFor(
      [&] {
        const std::string text = ReadFile(port_file);
        if (text.empty()) return false;
        ports = nlohmann::json::parse(text, nullptr, false);
        return !ports.is_discarded();
      },
      absl::Seconds(20));
  if (!up) {
    return absl::DeadlineExceededError(
        absl::StrCat("planner did not start; log:\n", ReadFile(log)));
  }
  grpc_port_ = ports["grpc"].get<int>();
  metrics_port_ = ports["metrics"].get<int>();
  return absl::OkStatus();
}

absl::StatusOr<int> LocalCluster::StartReplica(
    const std::vector<std::string>& flags) {
  // StartPlanner's process and ports, kept aside: the replica goes into
  // replicas_ and the cluster's planner() stays as it was.
  Process previous = std::move(planner_);
  const int previous_port = grpc_port_;
  const int previous_metrics = metrics_port_;
  absl::Status started = StartPlanner(flags);
  const int port = grpc_port_;
  if (started.ok()) replicas_[port] = std::move(planner_);
  planner_ = std::move(previous);
  grpc_port_ = previous_port;
  metrics_port_ = previous_metrics;
  if (!started.ok()) return started;
  return port;
}

std::vector<std::string> AgentArgv(const std::string& binary,
                                   const std::string& planners,
                                   const std::string& node,
                                   const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {binary};
  if (!planners.empty()) argv.push_back(absl::StrCat("--planner=", planners));
  argv.push_back(absl::StrCat("--node_name=", node));
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

std::string LoopbackAddresses(const std::vector<int>& ports) {
  std::vector<std::string> addresses;
  for (int port : ports) addresses.push_back(absl::StrCat("127.0.0.1:", port));
  return absl::StrJoin(addresses, ",");
}

absl::Status LocalCluster::StartAgent(const std::string& node,
                                      const std::vector<std::string>& flags) {
  const bool named =
      std::any_of(flags.begin(), flags.end(), [](const std::string& flag) {
        return absl::StartsWith(flag, "--planner=");
      });
  std::vector<std::string> all = NodeTlsFlags(node);
  all.insert(all.end(), flags.begin(), flags.end());
  absl::StatusOr<Process> p =
      Process::Start(AgentArgv(Runfile("agent/monta-agent"),
                               named ? "" : planner_address(), node, all),
                     absl::StrCat(dir_, "/agent-", node, ".log"));
  if (!p.ok()) return p.status();
  agents_[node] = *std::move(p);
  return absl::OkStatus();
}

CommandResult LocalCluster::Montactl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      Runfile("client/montactl"),
      absl::StrCat("--planner=", planner_address())};
  for (const std::string& flag : OperatorTlsFlags()) argv.push_back(flag);
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

nlohmann::json LocalCluster::Nodes(bool include_gone) {
  std::vector<std::string> args = {"--output=json", "nodes"};
  if (include_gone) args.push_back("--all");
  CommandResult r = Montactl(args);
  if (r.exit_code != 0) return nullptr;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

namespace {

std::string StateIn(const nlohmann::json& nodes, const std::string& node) {
  if (!nodes.is_object() || !nodes.contains("nodes")) return "";
  for (const auto& n : nodes["nodes"]) {
    if (n.value("name", "") == node) return n.value("state", "");
  }
  return "";
}

}  // namespace

std::string LocalCluster::NodeState(const std::string& node,
                                    bool include_gone) {
  return StateIn(Nodes(include_gone), node);
}

bool LocalCluster::AllAlive(const std::vector<std::string>& nodes) {
  const nlohmann::json listed = Nodes();
  for (const std::string& node : nodes) {
    if (StateIn(listed, node) != "NODE_STATE_ALIVE") return false;
  }
  return true;
}

bool LocalCluster::WaitForPlannerHealth(const std::string& status,
                                        absl::Duration timeout) {
  return WaitFor(
      [&] {
        return Montactl({"health", "monta.v1.Planner"}).out == status + "\n";
      },
      timeout);
}

}  // namespace monta::testing
