#include "common/topology_diff.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology_diff {
namespace {

using monta::v1::NodeTopology;
namespace v1 = monta::v1;

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
  nic->set_state_kind(v1::NIC_PORT_STATE_ACTIVE);
  nic->set_phys_state("LinkUp");
  nic->set_phys_state_kind(v1::NIC_PHYS_STATE_LINK_UP);
  return topo;
}

std::vector<v1::TopologyChange> Kinds(
    const std::vector<TopologyChange>& changes) {
  std::vector<v1::TopologyChange> kinds;
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
  after.mutable_nics(0)->set_state_kind(v1::NIC_PORT_STATE_DOWN);
  after.mutable_nics(0)->set_phys_state("Polling");
  after.mutable_nics(0)->set_phys_state_kind(v1::NIC_PHYS_STATE_POLLING);
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].kind, v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED);
  EXPECT_EQ(changes[0].subject, "mlx5_3:1");
  EXPECT_EQ(changes[0].message, "mlx5_3 port 1: rate 400 -> 200 Gb/s");
  EXPECT_EQ(changes[1].kind, v1::TOPOLOGY_CHANGE_NIC_STATE_CHANGED);
  EXPECT_EQ(changes[1].message,
            "mlx5_3 port 1: state active/link_up -> down/polling");

  // The events the registry records carry the same kinds and messages.
  std::vector<v1::TopologyEvent> events =
      DiffTopologyEvents(TwoGpusOneNic(), after);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].change(), v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED);
  EXPECT_EQ(events[1].change(), v1::TOPOLOGY_CHANGE_NIC_STATE_CHANGED);
  EXPECT_EQ(events[1].message(), changes[1].message);
  EXPECT_FALSE(events[1].has_time());
}

TEST(DiffTopology, NicStatesCompareByMeaning) {
  // The same state in other words (an older agent's text only, a declared
  // Ethernet operstate) is no change.
  NodeTopology after = TwoGpusOneNic();
  after.mutable_nics(0)->clear_state_kind();
  after.mutable_nics(0)->set_phys_state("up");
  after.mutable_nics(0)->clear_phys_state_kind();
  EXPECT_TRUE(DiffTopology(TwoGpusOneNic(), after).empty());

  // States Monta cannot name compare by their text.
  NodeTopology nop = TwoGpusOneNic();
  nop.mutable_nics(0)->set_state("NOP");
  nop.mutable_nics(0)->set_state_kind(v1::NIC_PORT_STATE_UNKNOWN);
  NodeTopology other = nop;
  EXPECT_TRUE(DiffTopology(nop, other).empty());
  other.mutable_nics(0)->set_state("SOMETHING_NEW");
  std::vector<TopologyChange> changes = DiffTopology(nop, other);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, v1::TOPOLOGY_CHANGE_NIC_STATE_CHANGED);
  EXPECT_EQ(changes[0].message,
            "mlx5_3 port 1: state unknown (NOP)/link_up -> unknown "
            "(SOMETHING_NEW)/link_up");
  // A state no longer known at all is a change too.
  NodeTopology unread = TwoGpusOneNic();
  unread.mutable_nics(0)->clear_state();
  unread.mutable_nics(0)->clear_state_kind();
  changes = DiffTopology(TwoGpusOneNic(), unread);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].message,
            "mlx5_3 port 1: state active/link_up -> ?/link_up");
}

TEST(DiffTopology, NicsAddedAndRemoved) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_nics(0)->set_name("mlx5_4");
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  EXPECT_THAT(Kinds(changes),
              ::testing::ElementsAre(v1::TOPOLOGY_CHANGE_NIC_REMOVED,
                                     v1::TOPOLOGY_CHANGE_NIC_ADDED));
  EXPECT_EQ(changes[0].message, "mlx5_3 port 1 removed");
  EXPECT_EQ(changes[1].message, "mlx5_4 port 1 added: 400 Gb/s active/link_up");
}

TEST(DiffTopology, NvLinkDownAndUp) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_gpu_links(0)->set_nvlink_count(17);
  after.mutable_gpu_links(0)->set_nvlink_inactive_count(1);
  std::vector<TopologyChange> down = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].kind, v1::TOPOLOGY_CHANGE_NVLINK_DOWN);
  EXPECT_EQ(down[0].subject, "gpu0-gpu1");
  EXPECT_EQ(down[0].message, "GPU0-GPU1: active NVLinks 18 -> 17 (1 inactive)");
  std::vector<TopologyChange> up = DiffTopology(after, TwoGpusOneNic());
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].kind, v1::TOPOLOGY_CHANGE_NVLINK_UP);
}

TEST(DiffTopology, GpuRemovedReportsOnlyTheGpu) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_gpus()->RemoveLast();
  after.clear_gpu_links();
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, v1::TOPOLOGY_CHANGE_GPU_REMOVED);
  EXPECT_EQ(changes[0].subject, "gpu1");
  EXPECT_EQ(DiffTopology(after, TwoGpusOneNic())[0].kind,
            v1::TOPOLOGY_CHANGE_GPU_ADDED);
}

TEST(DiffTopology, SwappedGpuAtSameIndexIsRemovedAndAdded) {
  NodeTopology after = TwoGpusOneNic();
  after.mutable_gpus(1)->set_uuid("GPU-new");
  EXPECT_THAT(Kinds(DiffTopology(TwoGpusOneNic(), after)),
              ::testing::ElementsAre(v1::TOPOLOGY_CHANGE_GPU_REMOVED,
                                     v1::TOPOLOGY_CHANGE_GPU_ADDED));
}

TEST(DiffTopology, PairNoLongerReportedIsNvLinkDown) {
  NodeTopology after = TwoGpusOneNic();
  after.clear_gpu_links();
  std::vector<TopologyChange> changes = DiffTopology(TwoGpusOneNic(), after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, v1::TOPOLOGY_CHANGE_NVLINK_DOWN);
}

}  // namespace
}  // namespace monta::topology_diff
