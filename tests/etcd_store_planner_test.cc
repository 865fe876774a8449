// The planner on etcd (--store=etcd, issue 20 item 2): one planner replica on
// a real three-member etcd (tests/testing/etcd_cluster) and two real agents on
// loopback. The agents register and measure themselves; the planner is
// SIGKILLed and started again on the same etcd: the nodes and their curves
// are back, loaded from etcd.
#include <signal.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd_cluster.h"

namespace monta::testing {
namespace {

TEST(EtcdStorePlannerTest, NodesAndCurvesSurviveAPlannerRestartOnEtcd) {
  EtcdCluster::Options options;
  options.members = 3;
  auto etcd = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::vector<std::string> store_flags = {
      "--store=etcd",
      "--etcd_endpoints=" + absl::StrJoin((*etcd)->endpoints(), ","),
      "--etcd_insecure", "--etcd_prefix=/planner-test/",
      "--leader_lease_seconds=2"};
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner(store_flags).ok());
  // The one replica leads once the election says so.
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)));
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());
  // The node's JSON, or a non-object while montactl fails (not registered
  // yet).
  const auto json = [&](const CommandResult& r) {
    return r.exit_code == 0 ? nlohmann::json::parse(r.out, nullptr, false)
                            : nlohmann::json();
  };
  // The agents measure themselves on registration: each node's curves.
  std::map<std::string, std::vector<std::string>> tasks;
  const auto curves_of = [&](const std::string& name) {
    std::vector<std::string> out;
    nlohmann::json node =
        json(cluster.Montactl({"--output=json", "node", name}));
    if (!node.is_object()) return out;
    for (const auto& curve : node["curves"]) out.push_back(curve["task_id"]);
    return out;
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const char* name : {"node-a", "node-b"}) {
          tasks[name] = curves_of(name);
          if (tasks[name].size() < 3) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  const int port = cluster.grpc_port();
  cluster.planner().Signal(SIGKILL);
  ASSERT_TRUE(cluster.planner().Wait(absl::Seconds(5)).ok());
  // Without bench-on-register and without --db: whatever it shows came from
  // etcd.
  std::vector<std::string> restart_flags = store_flags;
  restart_flags.push_back("--bench_on_register=false");
  ASSERT_TRUE(cluster.StartPlanner(restart_flags, port).ok());
  // It leads once the killed replica's election key ran out (2 s).
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)))
      << ReadFile(cluster.planner().log_path());
  for (const char* name : {"node-a", "node-b"}) {
    nlohmann::json node =
        json(cluster.Montactl({"--output=json", "node", name}));
    ASSERT_TRUE(node.is_object()) << name;
    EXPECT_EQ(node["name"], name);
    EXPECT_EQ(curves_of(name), tasks[name]) << node.dump(1);
  }
  // The agents carry on with the restarted planner.
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster.AllAlive({"node-a", "node-b"});
      },
      absl::Seconds(20)));
}

// etcd down: the planner keeps answering from memory but says NOT_SERVING
// for monta.v1.Planner until a commit to etcd succeeds again.
TEST(EtcdStorePlannerTest, FailedCommitsMakeThePlannerNotServingUntilOneLands) {
  EtcdCluster::Options options;
  options.members = 1;
  auto etcd = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  LocalCluster cluster;
  ASSERT_TRUE(cluster
                  .StartPlanner({"--store=etcd",
                                 "--etcd_endpoints=" + (*etcd)->endpoint(0),
                                 "--etcd_insecure", "--bench_on_register=false",
                                 "--leader_lease_seconds=2"})
                  .ok());
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)));
  (*etcd)->Kill(0);
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());  // registers: a node commit
  EXPECT_TRUE(cluster.WaitForPlannerHealth("NOT_SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
  EXPECT_NE(ReadFile(cluster.planner().log_path()).find("etcd store"),
            std::string::npos);
  ASSERT_TRUE((*etcd)->Restart(0).ok());
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());  // the next commit lands
  EXPECT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
}

}  // namespace
}  // namespace monta::testing
