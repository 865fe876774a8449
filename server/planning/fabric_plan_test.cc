#include "server/planning/fabric_plan.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;

// A rack of two nodes named <rack>-a, <rack>-b with `uplink`.
void AddRack(v1::FabricBlock* block, const std::string& name,
             const v1::FabricLink& uplink) {
  v1::FabricRack* rack = block->add_racks();
  rack->set_name(name);
  *rack->mutable_uplink() = uplink;
  rack->add_nodes()->set_name(name + "-a");
  rack->add_nodes()->set_name(name + "-b");
}

TEST(FabricPlanTest, CapacitiesFromMeasurementDeclarationOrOversubscription) {
  v1::FabricReply tree;
  v1::FabricBlock* block = tree.add_blocks();  // no name: racks only
  v1::FabricLink ratio_only;
  ratio_only.set_declared_oversubscription_ratio(4);
  AddRack(block, "r0", ratio_only);
  v1::FabricLink measured_and_ratio;
  measured_and_ratio.set_declared_oversubscription_ratio(2);
  measured_and_ratio.mutable_measured()->set_bytes_per_second(1e6);
  measured_and_ratio.mutable_measured()->set_task_id("t-level");
  AddRack(block, "r1", measured_and_ratio);
  v1::FabricLink declared_bytes;
  declared_bytes.set_declared_bytes_per_second(3e7);
  declared_bytes.set_declared_oversubscription_ratio(8);  // bytes win
  AddRack(block, "r2", declared_bytes);
  AddRack(block, "r3", v1::FabricLink());

  std::optional<JobFabricView> view = JobFabricFromTree(
      tree, {"r0-a", "r1-a", "r2-a", "r3-a", "r3-b", "elsewhere"});
  ASSERT_TRUE(view.has_value());
  ASSERT_EQ(view->fabric.racks.size(), 4u);
  EXPECT_TRUE(view->fabric.blocks.empty());
  EXPECT_EQ(view->outside, std::vector<std::string>{"elsewhere"});
  ResolveCapacities(1e8, *view);
  const auto& racks = view->fabric.racks;
  // Only an oversubscription: 2 nodes x 1e8 / 4, priced and declared.
  EXPECT_DOUBLE_EQ(racks[0].uplink_bytes_per_second, 5e7);
  EXPECT_DOUBLE_EQ(racks[0].uplink_declared_bytes_per_second, 5e7);
  EXPECT_TRUE(view->rack_sources[0].declared);
  // Measured: priced at the measurement; declared from the ratio.
  EXPECT_DOUBLE_EQ(racks[1].uplink_bytes_per_second, 1e6);
  EXPECT_DOUBLE_EQ(racks[1].uplink_declared_bytes_per_second, 1e8);
  EXPECT_EQ(view->rack_sources[1].task_id, "t-level");
  EXPECT_FALSE(view->rack_sources[1].declared);
  // Declared in bytes: that, not the ratio.
  EXPECT_DOUBLE_EQ(racks[2].uplink_bytes_per_second, 3e7);
  EXPECT_DOUBLE_EQ(racks[2].uplink_declared_bytes_per_second, 3e7);
  // Nothing known: not priced, nothing declared.
  EXPECT_EQ(racks[3].uplink_bytes_per_second, 0);
  EXPECT_EQ(racks[3].uplink_declared_bytes_per_second, 0);
  EXPECT_FALSE(view->rack_sources[3].declared);
}

}  // namespace
}  // namespace monta::planning
