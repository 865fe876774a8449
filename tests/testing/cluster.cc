#include "tests/testing/cluster.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace monta::testing {

LocalCluster::LocalCluster() {
  static int counter = 0;
  dir_ = absl::StrCat(TempDir(), "/cluster-", getpid(), "-", counter++);
  Run({"/bin/mkdir", "-p", dir_});
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
  std::vector<std::string> argv = wrapper;
  for (const std::string& arg : {Runfile("server/monta-planner"),
                                 absl::StrCat("--listen=127.0.0.1:", grpc_port),
                                 std::string("--metrics_listen=127.0.0.1:0"),
                                 absl::StrCat("--port_file=", port_file)}) {
    argv.push_back(arg);
  }
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

absl::Status LocalCluster::StartAgent(const std::string& node,
                                      const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      Runfile("agent/monta-agent"),
      absl::StrCat("--planner=", planner_address()),
      absl::StrCat("--node_name=", node)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<Process> p =
      Process::Start(argv, absl::StrCat(dir_, "/agent-", node, ".log"));
  if (!p.ok()) return p.status();
  agents_[node] = *std::move(p);
  return absl::OkStatus();
}

CommandResult LocalCluster::Montactl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      Runfile("client/montactl"),
      absl::StrCat("--planner=", planner_address())};
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

}  // namespace monta::testing
