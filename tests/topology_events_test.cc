// A node whose NIC renegotiates from 400 to 200 Gb/s while the agent runs: the agent
// rediscovers, the planner records the change as an event visible through GetNode
// (montactl node) and montactl topology.
#include <fstream>

#include "agent/topology/sysfs_fixture.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace monta::testing {
namespace {

TEST(TopologyEventsTest, NicRateChangeBecomesAnEvent) {
  absl::StatusOr<std::string> root = topology::MaterializeTestdataSysfs("dgx_h100/sysfs");
  ASSERT_TRUE(root.ok()) << root.status();
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--lease_seconds=3", "--heartbeat_seconds=0.5",
                                    "--bench_on_register=false"})
                  .ok());
  ASSERT_TRUE(cluster
                  .StartAgent("dgx-01", {"--sysfs_root=" + *root, "--topology_refresh_seconds=1",
                                         "--labels=network.topology.nvidia.com/leaf=leaf-07"})
                  .ok());
  nlohmann::json node;
  auto fetch = [&] {
    CommandResult r = cluster.Montactl({"--output=json", "node", "dgx-01"});
    if (r.exit_code != 0) return false;
    node = nlohmann::json::parse(r.out, nullptr, false);
    return !node.is_discarded();
  };
  ASSERT_TRUE(WaitFor([&] { return fetch() && node["topology"]["nics"].size() == 8; },
                      absl::Seconds(20)))
      << ReadFile(cluster.agent("dgx-01").log_path());
  EXPECT_EQ(node["topology"]["labels"]["network.topology.nvidia.com/leaf"], "leaf-07");
  for (const auto& nic : node["topology"]["nics"]) {
    EXPECT_EQ(nic["rate_gbps"].get<double>(), 400) << nic.dump();
    EXPECT_EQ(nic["provenance"], "PROVENANCE_DISCOVERED");
  }
  EXPECT_TRUE(node["events"].empty());

  // The cable renegotiates to HDR.
  std::ofstream(*root + "/class/infiniband/mlx5_3/ports/1/rate") << "200 Gb/sec (4X HDR)\n";

  auto has_event = [&] {
    if (!fetch()) return false;
    for (const auto& e : node["events"]) {
      if (e["kind"] == "nic_rate_changed") return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitFor(has_event, absl::Seconds(15))) << node.dump(1);
  bool found = false;
  for (const auto& e : node["events"]) {
    if (e["kind"] != "nic_rate_changed") continue;
    found = true;
    const std::string message = e["message"];
    EXPECT_NE(message.find("mlx5_3"), std::string::npos) << message;
    EXPECT_NE(message.find("400"), std::string::npos) << message;
    EXPECT_NE(message.find("200"), std::string::npos) << message;
  }
  EXPECT_TRUE(found);

  CommandResult topo = cluster.Montactl({"topology", "dgx-01"});
  EXPECT_EQ(topo.exit_code, 0) << topo.err;
  EXPECT_NE(topo.out.find("nic_rate_changed"), std::string::npos) << topo.out;
  EXPECT_NE(topo.out.find("mlx5_3"), std::string::npos) << topo.out;
}

}  // namespace
}  // namespace monta::testing
