// The real monta-planner and two monta-agent processes on loopback, observed
// through montactl --output json, as an operator would.
#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace monta::testing {
namespace {

constexpr char kAlive[] = "NODE_STATE_ALIVE";

TEST(LocalClusterTest, TwoAgentsRegisterAndShowUpInMontactl) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--bench_on_register=false"}).ok());
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.AllAlive({"node-a", "node-b"});
      },
      absl::Seconds(20)))
      << cluster.Montactl({"nodes"}).out;
  nlohmann::json nodes = cluster.Nodes();
  ASSERT_EQ(nodes["nodes"].size(), 2u);
  for (const auto& node : nodes["nodes"]) {
    // Proto field names, not lowerCamelCase; no instance id (see
    // DuplicateNodeNameIsRefused).
    EXPECT_TRUE(node.contains("bench_address"));
    EXPECT_EQ(node.value("instance_id", ""), "");
    EXPECT_TRUE(node.contains("lease_age_seconds"));
    EXPECT_FALSE(node["topology"]["hostname"].get<std::string>().empty());
  }
  CommandResult health = cluster.Montactl({"health"});
  EXPECT_EQ(health.exit_code, 0);
  EXPECT_EQ(health.out, "SERVING\n");
  CommandResult table = cluster.Montactl({"nodes"});
  EXPECT_NE(table.out.find("node-a  alive"), std::string::npos) << table.out;
}

TEST(LocalClusterTest, PlannerStopsCleanlyOnSigterm) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner().ok());
  cluster.planner().Signal(SIGTERM);
  absl::StatusOr<int> status = cluster.planner().Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

// How many times the agent's log says `text`.
int CountInLog(LocalCluster& cluster, const std::string& node,
               const std::string& text) {
  const std::string log = ReadFile(cluster.agent(node).log_path());
  int count = 0;
  for (size_t at = log.find(text); at != std::string::npos;
       at = log.find(text, at + text.size())) {
    ++count;
  }
  return count;
}

TEST(LocalClusterTest, AgentsRegisterAgainAfterPlannerRestart) {
  LocalCluster cluster;
  const std::vector<std::string> nodes = {"node-a", "node-b"};
  const std::vector<std::string> flags = {"--lease_seconds=4",
                                          "--heartbeat_seconds=1",
                                          "--bench_on_register=false"};
  ASSERT_TRUE(cluster.StartPlanner(flags).ok());
  for (const auto& node : nodes) ASSERT_TRUE(cluster.StartAgent(node).ok());
  ASSERT_TRUE(
      WaitFor([&] { return cluster.AllAlive(nodes); }, absl::Seconds(20)));
  const int port = cluster.grpc_port();
  cluster.planner().Signal(SIGKILL);
  ASSERT_TRUE(cluster.planner().Wait(absl::Seconds(5)).ok());
  // Down until every agent has failed at least two heartbeats: they noticed,
  // backed off and kept trying.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& node : nodes) {
          if (CountInLog(cluster, node, "heartbeat failed") < 2) return false;
        }
        return true;
      },
      absl::Seconds(30)))
      << ReadFile(cluster.agent("node-a").log_path());
  ASSERT_TRUE(cluster.StartPlanner(flags, port).ok());
  // No operator action: the agents notice (heartbeat NOT_FOUND from the new
  // planner) and register again.
  EXPECT_TRUE(
      WaitFor([&] { return cluster.AllAlive(nodes); }, absl::Seconds(20)))
      << ReadFile(cluster.agent("node-a").log_path());
  for (const auto& node : nodes) {
    EXPECT_GE(CountInLog(cluster, node, "registering again"), 1) << node;
  }
}

TEST(LocalClusterTest, KilledAgentBecomesStaleAfterLease) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster
                  .StartPlanner({"--lease_seconds=2", "--heartbeat_seconds=0.5",
                                 "--bench_on_register=false"})
                  .ok());
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  ASSERT_TRUE(WaitFor([&] { return cluster.NodeState("node-a") == kAlive; },
                      absl::Seconds(20)));
  cluster.agent("node-a").Signal(SIGKILL);
  ASSERT_TRUE(cluster.agent("node-a").Wait(absl::Seconds(5)).ok());
  EXPECT_TRUE(
      WaitFor([&] { return cluster.NodeState("node-a") == "NODE_STATE_STALE"; },
              absl::Seconds(10)));
}

TEST(LocalClusterTest, SigtermDeregistersAgent) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--bench_on_register=false"}).ok());
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  ASSERT_TRUE(WaitFor([&] { return cluster.NodeState("node-a") == kAlive; },
                      absl::Seconds(20)));
  cluster.agent("node-a").Signal(SIGTERM);
  absl::StatusOr<int> status = cluster.agent("node-a").Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_EQ(cluster.NodeState("node-a"), "");  // hidden by default
  EXPECT_EQ(cluster.NodeState("node-a", /*include_gone=*/true),
            "NODE_STATE_GONE");
}

TEST(LocalClusterTest, DuplicateNodeNameIsRefused) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--bench_on_register=false"}).ok());
  ASSERT_TRUE(cluster.StartAgent("node-a", {"--instance_id=first"}).ok());
  ASSERT_TRUE(WaitFor([&] { return cluster.NodeState("node-a") == kAlive; },
                      absl::Seconds(20)));
  // A second agent claiming the same node name (e.g. a misconfigured
  // DaemonSet).
  std::vector<std::string> argv = {
      Runfile("agent/monta-agent"), "--planner=" + cluster.planner_address(),
      "--node_name=node-a", "--instance_id=second"};
  for (const std::string& flag : cluster.NodeTlsFlags("node-a")) {
    argv.push_back(flag);
  }
  absl::StatusOr<Process> second =
      Process::Start(argv, cluster.dir() + "/second.log");
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return ReadFile(second->log_path()).find("ALREADY_EXISTS") !=
               std::string::npos;
      },
      absl::Seconds(10)))
      << ReadFile(second->log_path());
  // The instance id is no secret any more, but still not handed out.
  EXPECT_NE(ReadFile(second->log_path()).find("held by another agent instance"),
            std::string::npos);
  EXPECT_EQ(ReadFile(second->log_path()).find("first"), std::string::npos);
  nlohmann::json nodes = cluster.Nodes();
  ASSERT_EQ(nodes["nodes"].size(), 1u);
  EXPECT_EQ(nodes["nodes"][0].value("instance_id", ""), "");
}

}  // namespace
}  // namespace monta::testing
