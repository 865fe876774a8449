// Backup and restore of the planner's etcd (issue 20 item 8, deploy/README.md
// "Back up and restore etcd"): a planner on a one-member etcd stores the nodes
// and curves its two agents register and measure; `etcdctl snapshot save`;
// the etcd and the planner are SIGKILLed (the data directory is gone with
// them); `etcdctl snapshot restore` into three fresh data directories, a
// three-member etcd started on them, a planner on it: the same nodes and
// curves.
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

std::vector<std::string> StoreFlags(const std::string& endpoints) {
  return {"--store=etcd", "--etcd_endpoints=" + endpoints, "--etcd_insecure",
          "--etcd_prefix=/backup-test/", "--leader_lease_seconds=2"};
}

// Each node's curves (task ids) as montactl shows them; none for a node the
// planner does not show (yet).
std::map<std::string, std::vector<std::string>> CurvesOf(
    LocalCluster& cluster) {
  std::map<std::string, std::vector<std::string>> out;
  for (const char* name : {"node-a", "node-b"}) {
    CommandResult r = cluster.Montactl({"--output=json", "node", name});
    nlohmann::json node = r.exit_code == 0
                              ? nlohmann::json::parse(r.out, nullptr, false)
                              : nlohmann::json();
    if (!node.is_object()) continue;
    for (const auto& curve : node["curves"]) {
      out[name].push_back(curve["task_id"]);
    }
  }
  return out;
}

TEST(EtcdBackupTest,
     ASnapshotRestoredIntoFreshMembersBringsBackNodesAndCurves) {
  auto source = EtcdCluster::Start({});
  ASSERT_TRUE(source.ok()) << source.status();
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner(StoreFlags((*source)->endpoint(0))).ok());
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)));
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());
  std::map<std::string, std::vector<std::string>> before;
  ASSERT_TRUE(WaitFor(
      [&] {
        before = CurvesOf(cluster);
        return before["node-a"].size() >= 3 && before["node-b"].size() >= 3;
      },
      absl::Seconds(60)));
  const std::string backup = TempDir() + "/etcd-backup.db";
  ASSERT_TRUE((*source)->SaveSnapshot(0, backup).ok());

  // Everything goes: the planner, and the etcd with its data directory.
  const int port = cluster.grpc_port();
  cluster.planner().Signal(SIGKILL);
  ASSERT_TRUE(cluster.planner().Wait(absl::Seconds(5)).ok());
  source->reset();

  EtcdCluster::Options restored_options;
  restored_options.members = 3;
  restored_options.restore_snapshot = backup;
  auto restored = EtcdCluster::Start(std::move(restored_options));
  ASSERT_TRUE(restored.ok()) << restored.status();
  std::vector<std::string> flags =
      StoreFlags(absl::StrJoin((*restored)->endpoints(), ","));
  flags.push_back("--bench_on_register=false");  // whatever it shows: etcd's
  ASSERT_TRUE(cluster.StartPlanner(flags, port).ok());
  // The killed replica's election key came back with the snapshot: this one
  // leads once that key's lease (2 s) has run out.
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
  EXPECT_EQ(CurvesOf(cluster), before);
}

}  // namespace
}  // namespace monta::testing
