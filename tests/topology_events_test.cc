// A node whose NIC renegotiates from 400 to 200 Gb/s while the agent runs: the
// agent rediscovers, the planner records the change as an event visible through
// GetNode (montactl node) and montactl topology.
#include <fstream>
#include <iostream>

#include "agent/topology/sysfs_fixture.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace monta::testing {
namespace {

TEST(TopologyEventsTest, NicRateChangeBecomesAnEvent) {
  absl::StatusOr<std::string> root =
      topology::MaterializeTestdataSysfs("dgx_h100/sysfs");
  ASSERT_TRUE(root.ok()) << root.status();
  LocalCluster cluster;
  ASSERT_TRUE(cluster
                  .StartPlanner({"--lease_seconds=3", "--heartbeat_seconds=0.5",
                                 "--bench_on_register=false"})
                  .ok());
  ASSERT_TRUE(
      cluster
          .StartAgent("dgx-01",
                      {"--sysfs_root=" + *root, "--topology_refresh_seconds=1",
                       "--labels=network.topology.nvidia.com/leaf=leaf-07"})
          .ok());
  nlohmann::json node;
  auto fetch = [&] {
    CommandResult r = cluster.Montactl({"--output=json", "node", "dgx-01"});
    if (r.exit_code != 0) return false;
    node = nlohmann::json::parse(r.out, nullptr, false);
    return !node.is_discarded();
  };
  ASSERT_TRUE(
      WaitFor([&] { return fetch() && node["topology"]["nics"].size() == 8; },
              absl::Seconds(20)))
      << ReadFile(cluster.agent("dgx-01").log_path());
  EXPECT_EQ(node["topology"]["labels"]["network.topology.nvidia.com/leaf"],
            "leaf-07");
  for (const auto& nic : node["topology"]["nics"]) {
    EXPECT_EQ(nic["rate_bytes_per_second"].get<double>(), 400e9 / 8)
        << nic.dump();
    EXPECT_EQ(nic["provenance"], "PROVENANCE_DISCOVERED");
  }
  EXPECT_TRUE(node["events"].empty());

  // The cable renegotiates to HDR.
  std::ofstream(*root + "/class/infiniband/mlx5_3/ports/1/rate")
      << "200 Gb/sec (4X HDR)\n";

  auto has_event = [&] {
    if (!fetch()) return false;
    for (const auto& e : node["events"]) {
      if (e["change"] == "TOPOLOGY_CHANGE_NIC_RATE_CHANGED") return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitFor(has_event, absl::Seconds(15))) << node.dump(1);
  bool found = false;
  for (const auto& e : node["events"]) {
    if (e["change"] != "TOPOLOGY_CHANGE_NIC_RATE_CHANGED") continue;
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

// A DGX H100 whose drivers the agent cannot read, described by a topology file:
// montactl topology prints it as `nvidia-smi topo -m` does, and the planner
// plans for it with the node's declared profile.
TEST(TopologyEventsTest, DeclaredH100RendersAsTopoMatrix) {
  absl::StatusOr<std::string> root =
      topology::MaterializeTestdataSysfs("dgx_h100/sysfs");
  ASSERT_TRUE(root.ok()) << root.status();
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--bench_on_register=false"}).ok());
  ASSERT_TRUE(
      cluster
          .StartAgent(
              "dgx-02",
              {"--sysfs_root=" + *root,
               "--topology_file=" +
                   Runfile("agent/topology/testdata/declared_h100.yaml")})
          .ok());
  ASSERT_TRUE(
      WaitFor([&] { return cluster.NodeState("dgx-02") == "NODE_STATE_ALIVE"; },
              absl::Seconds(20)))
      << ReadFile(cluster.agent("dgx-02").log_path());
  CommandResult topo = cluster.Montactl({"topology", "dgx-02"});
  ASSERT_EQ(topo.exit_code, 0) << topo.err;
  std::cout << topo.out << std::endl;
  // The header and GPU0's row as on a DGX H100: NV18 to every GPU, PXB to its
  // own NIC.
  EXPECT_NE(
      topo.out.find("\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0"),
      std::string::npos)
      << topo.out;
  EXPECT_NE(
      topo.out.find("GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPXB"),
      std::string::npos)
      << topo.out;
  EXPECT_NE(topo.out.find("NIC0: mlx5_0"), std::string::npos);
  EXPECT_NE(topo.out.find("Legend:"), std::string::npos);

  // Planning on the node itself uses its declared profile (one node, 8 GPUs).
  const std::string job = cluster.dir() + "/one-node.yaml";
  std::ofstream(job)
      << "job:\n  hidden_size: 4096\n  num_experts: 8\n  top_k: 2\n"
         "  capacity_factor: 1.0\n  micro_batch_size: 1\n"
         "  sequence_length: 4096\n  bytes_per_element: 2\n  moe_layers: 32\n"
         "  world_size: 8\n  tensor_parallel_size: 2\n"
         "  expert_parallel_size: 4\n  pipeline_parallel_size: 1\n"
         "  data_parallel_size: 4\n  experts_tensor_parallel: true\n";
  CommandResult plan = cluster.Montactl(
      {"--output=json", "plan", "--job=" + job, "--node_names=dgx-02"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  nlohmann::json reply = nlohmann::json::parse(plan.out, nullptr, false);
  ASSERT_FALSE(reply.is_discarded());
  EXPECT_EQ(reply["evidence"]["profile"], "h100-hgx")
      << reply["evidence"].dump(1);
  EXPECT_EQ(reply["traffic"]["gpus_per_node"], 8);
}

}  // namespace
}  // namespace monta::testing
