#include "common/topology_diff.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology_diff {
namespace {

using monta::v1::NodeTopology;

NodeTopology TwoGpusOneNic() {
  NodeTopology topo;
  for (int i = 0; i < 2; ++i) {
    auto* gpu = topo.add_gpus();
    gpu->set_index(i);
    gpu->set_uuid("GPU-" + std::to_string(i));
  }
  auto* link = topo.add_gpu_links();
  link->set_gpu_a(0);
  link->set_gpu_b(1);
  link->set_path(monta::v1::PATH_TYPE_NVLINK);
  link->set_nvlink_count(18);
  auto* nic = topo.add_nics();
  nic->set_name("mlx5_3");
  nic->set_port(1);
  nic->set_rate_bytes_per_second(400e9 / 8);
  nic->set_state("ACTIVE");
  nic->set_phys_state("LinkUp");
  return topo;
}

std::vector<std::string> Kinds(const std::vector<TopologyChange>& changes) {
  std::vector<std::string> kinds;
  for (const auto& change : changes) kinds.push_back(change.kind);
  return kinds;
}

TEST(DiffTopology, IdenticalIsEmpty) {
  EXPECT_TRUE(DiffTopology(TwoGpusOneNic(), TwoGpusOneNic()).empty());
}

TEST(DiffTopology, NicRenegotiatedAndWentDown) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_nics(0)->set_rate_bytes_per_second(200e9 / 8);
  after.mutable_nics(0)->set_state("DOWN");
  after.mutable_nics(0)->set_phys_state("Polling");
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].kind, "nic_rate_changed");
  EXPECT_EQ(changes[0].subject, "mlx5_3:1");
  EXPECT_EQ(changes[0].message, "mlx5_3 port 1: rate 400 -> 200 Gb/s");
  EXPECT_EQ(changes[1].kind, "nic_state_changed");
  EXPECT_EQ(changes[1].message,
            "mlx5_3 port 1: state ACTIVE/LinkUp -> DOWN/Polling");
}

TEST(DiffTopology, NicsAddedAndRemoved) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_nics(0)->set_name("mlx5_4");
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  EXPECT_THAT(Kinds(changes),
              ::testing::ElementsAre("nic_removed", "nic_added"));
  EXPECT_EQ(changes[0].message, "mlx5_3 port 1 removed");
  EXPECT_EQ(changes[1].message, "mlx5_4 port 1 added: 400 Gb/s ACTIVE/LinkUp");
}

TEST(DiffTopology, NvLinkDownAndUp) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_gpu_links(0)->set_nvlink_count(17);
  after.mutable_gpu_links(0)->set_nvlink_inactive_count(1);
  std::vector<TopologyChange> down = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].kind, "nvlink_down");
  EXPECT_EQ(down[0].subject, "gpu0-gpu1");
  EXPECT_EQ(down[0].message, "GPU0-GPU1: active NVLinks 18 -> 17 (1 inactive)");
  std::vector<TopologyChange> up = DiffTopology(after, TwoGpusOneNic());
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].kind, "nvlink_up");
}

TEST(DiffTopology, GpuRemovedReportsOnlyTheGpu) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_gpus()->RemoveLast();
  after.clear_gpu_links();
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, "gpu_removed");
  EXPECT_EQ(changes[0].subject, "gpu1");
  EXPECT_EQ(DiffTopology(after, TwoGpusOneNic())[0].kind, "gpu_added");
}

TEST(DiffTopology, SwappedGpuAtSameIndexIsRemovedAndAdded) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_gpus(1)->set_uuid("GPU-new");
  EXPECT_THAT(Kinds(DiffTopology(TwoGpusOneNic(), after)),
              ::testing::ElementsAre("gpu_removed", "gpu_added"));
}

TEST(DiffTopology, PairNoLongerReportedIsNvLinkDown) {
  NodeTopology after = TwoGpusOneNic();
  after.clear_gpu_links();
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, "nvlink_down");
}

}  // namespace
}  // namespace monta::topology_diff
