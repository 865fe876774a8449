#include "server/fabric/levels.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace monta::fabric {
namespace {

using monta::v1::FabricSpanLevel;

// `racks` racks of `per_rack` nodes each, "r<i>-n<j>", all idle; racks in
// `blocks` blocks (none when 0), rack i in block i * blocks / racks.
std::vector<LevelRack> Cluster(int racks, int per_rack, int blocks = 0) {
  std::vector<LevelRack> out;
  for (int r = 0; r < racks; ++r) {
    LevelRack rack;
    rack.name = absl::StrCat("r", r < 10 ? "0" : "", r);
    if (blocks > 0) rack.block = absl::StrCat("b", r * blocks / racks);
    for (int n = 0; n < per_rack; ++n) {
      rack.idle.push_back(absl::StrCat(rack.name, "-n", n < 10 ? "0" : "", n));
    }
    rack.alive = per_rack;
    out.push_back(rack);
  }
  return out;
}

// Which rack each node of `racks` is in.
std::map<std::string, std::string> RackOf(const std::vector<LevelRack>& racks) {
  std::map<std::string, std::string> out;
  for (const auto& rack : racks) {
    for (const auto& node : rack.idle) out[node] = rack.name;
  }
  return out;
}

std::map<FabricSpanLevel, int> CountByLevel(const LevelPlan& plan) {
  std::map<FabricSpanLevel, int> out;
  for (const auto& task : plan.tasks) ++out[task.span.level()];
  return out;
}

// Issue 19's bar: "A fabric picture of 512 simulated nodes in 16 racks costs
// <= 300 tasks beyond each node's own intra-node sweep, none spanning more
// than two racks".
TEST(LevelPlanTest, FiveHundredTwelveNodesInSixteenRacksCostFortyEightTasks) {
  const std::vector<LevelRack> racks = Cluster(16, 32);
  const std::map<std::string, std::string> rack_of = RackOf(racks);
  const LevelPlan plan = PlanLevels(racks, {});
  EXPECT_LE(plan.tasks.size(), 300u);
  EXPECT_EQ(plan.tasks.size(), 48u);
  std::map<FabricSpanLevel, int> by_level = CountByLevel(plan);
  EXPECT_EQ(by_level[monta::v1::FABRIC_SPAN_LEVEL_RACK], 16);
  EXPECT_EQ(by_level[monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK], 32);
  std::map<std::string, int> concurrent_of_rack;
  for (const auto& task : plan.tasks) {
    std::set<std::string> spanned;
    for (const auto& node : task.nodes) spanned.insert(rack_of.at(node));
    EXPECT_LE(spanned.size(), 2u) << absl::StrJoin(task.nodes, ",");
    ASSERT_EQ(task.span.racks_size(), static_cast<int>(spanned.size()));
    int nodes = 0;
    for (const auto& side : task.span.racks()) {
      EXPECT_TRUE(spanned.count(side.rack())) << side.rack();
      nodes += side.nodes();
    }
    EXPECT_EQ(nodes, static_cast<int>(task.nodes.size()));
    EXPECT_EQ(task.span.concurrent_nodes(), nodes);
    if (task.span.concurrent_nodes() == 8) {
      for (const auto& rack : spanned) ++concurrent_of_rack[rack];
    }
  }
  // Every rack's uplink is loaded by 4 of its nodes at once, twice (a ring).
  ASSERT_EQ(concurrent_of_rack.size(), 16u);
  for (const auto& [rack, count] : concurrent_of_rack) EXPECT_EQ(count, 2);
  EXPECT_TRUE(plan.notes.empty()) << absl::StrJoin(plan.notes, "\n");
}

// The level tasks on one rack's uplink never run at once: each has the first
// node of the rack's sample, and an agent runs its tasks one at a time.
TEST(LevelPlanTest, TasksThroughOneUplinkShareANode) {
  const std::vector<LevelRack> racks = Cluster(5, 6);
  const std::map<std::string, std::string> rack_of = RackOf(racks);
  const LevelPlan plan = PlanLevels(racks, {/*sample_nodes=*/3, /*round=*/0});
  for (const auto& rack : racks) {
    std::vector<std::set<std::string>> through;
    for (const auto& task : plan.tasks) {
      if (task.span.level() == monta::v1::FABRIC_SPAN_LEVEL_RACK) continue;
      std::set<std::string> mine;
      for (const auto& node : task.nodes) {
        if (rack_of.at(node) == rack.name) mine.insert(node);
      }
      if (!mine.empty()) through.push_back(mine);
    }
    ASSERT_EQ(through.size(), 4u) << rack.name;  // 2 pairs, 2 at once
    for (const auto& mine : through) {
      EXPECT_EQ(mine.count(rack.idle[0]), 1u) << rack.name;
    }
  }
}

TEST(LevelPlanTest, TwoRacksOfTwoMeasureEachLevelOnce) {
  const LevelPlan plan = PlanLevels(Cluster(2, 2), {});
  ASSERT_EQ(plan.tasks.size(), 4u);
  EXPECT_EQ(plan.tasks[0].nodes,
            (std::vector<std::string>{"r00-n00", "r00-n01"}));
  EXPECT_EQ(plan.tasks[0].span.level(), monta::v1::FABRIC_SPAN_LEVEL_RACK);
  EXPECT_EQ(plan.tasks[0].span.racks(0).rack(), "r00");
  EXPECT_EQ(plan.tasks[1].nodes,
            (std::vector<std::string>{"r01-n00", "r01-n01"}));
  EXPECT_EQ(plan.tasks[2].nodes,
            (std::vector<std::string>{"r00-n00", "r01-n00"}));
  EXPECT_EQ(plan.tasks[2].span.level(),
            monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  EXPECT_EQ(plan.tasks[2].span.concurrent_nodes(), 2);
  // Rank order: one rack's nodes, then the other's.
  EXPECT_EQ(
      plan.tasks[3].nodes,
      (std::vector<std::string>{"r00-n00", "r00-n01", "r01-n00", "r01-n01"}));
  EXPECT_EQ(plan.tasks[3].span.concurrent_nodes(), 4);
  ASSERT_EQ(plan.tasks[3].span.racks_size(), 2);
  EXPECT_EQ(plan.tasks[3].span.racks(1).rack(), "r01");
  EXPECT_EQ(plan.tasks[3].span.racks(1).nodes(), 2);
}

TEST(LevelPlanTest, TheSampleRotatesWithTheRound) {
  const std::vector<LevelRack> racks = Cluster(2, 8);
  const LevelPlan first = PlanLevels(racks, {4, 0});
  const LevelPlan second = PlanLevels(racks, {4, 1});
  EXPECT_EQ(first.tasks[0].nodes[0], "r00-n00");
  EXPECT_EQ(second.tasks[0].nodes[0], "r00-n04");
  EXPECT_EQ(second.tasks.back().nodes.size(), 8u);
  EXPECT_EQ(second.tasks.back().nodes[3], "r00-n07");
}

TEST(LevelPlanTest, BusyRacksAreNotedAndTheRingClosesAroundThem) {
  std::vector<LevelRack> racks = Cluster(4, 2);
  racks[1].idle.clear();    // r01: all busy
  racks[2].idle.resize(1);  // r02: one idle
  const LevelPlan plan = PlanLevels(racks, {});
  const std::map<FabricSpanLevel, int> by_level = CountByLevel(plan);
  EXPECT_EQ(by_level.at(monta::v1::FABRIC_SPAN_LEVEL_RACK), 2);  // r00, r03
  // Ring r00 -> r02 -> r03 -> r00: 3 pairs, at once only r03 with r00 (r02
  // has one idle node: its pair is all it can give).
  EXPECT_EQ(by_level.at(monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK), 4);
  for (const auto& task : plan.tasks) {
    for (const auto& node : task.nodes) {
      EXPECT_NE(node.substr(0, 3), "r01") << node;
    }
  }
  const std::string notes = absl::StrJoin(plan.notes, "\n");
  EXPECT_NE(notes.find("rack r01: no idle node"), std::string::npos) << notes;
  EXPECT_NE(notes.find("rack r02: 1 idle node(s) of 2 alive"),
            std::string::npos)
      << notes;
}

TEST(LevelPlanTest, RacksOfTwoBlocksMeetAcrossTheBlocksUplinks) {
  const LevelPlan plan = PlanLevels(Cluster(4, 2, /*blocks=*/2), {});
  std::map<FabricSpanLevel, int> by_level = CountByLevel(plan);
  // Ring r00 r01 | r02 r03: r01-r02 and r03-r00 cross the blocks.
  EXPECT_EQ(by_level[monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK], 4);
  EXPECT_EQ(by_level[monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK], 4);
  for (const auto& task : plan.tasks) {
    if (task.span.level() != monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK) continue;
    ASSERT_EQ(task.span.racks_size(), 2);
    EXPECT_NE(task.span.racks(0).block(), task.span.racks(1).block());
  }
}

TEST(LevelPlanTest, OneRackOrNoneMeasuresNoUplink) {
  LevelPlan plan = PlanLevels(Cluster(1, 3), {});
  ASSERT_EQ(plan.tasks.size(), 1u);
  EXPECT_EQ(plan.tasks[0].span.level(), monta::v1::FABRIC_SPAN_LEVEL_RACK);
  EXPECT_NE(absl::StrJoin(plan.notes, "\n").find("no uplink is measured"),
            std::string::npos);
  EXPECT_TRUE(PlanLevels({}, {}).tasks.empty());
}

// An AllToAll curve of `nodes` nodes of 2 ranks, one point of M bytes per
// rank in `seconds`.
monta::v1::BandwidthCurve Curve(const std::string& task, int nodes,
                                double seconds, uint64_t sequence) {
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.set_task_id(task);
  c.set_n_nodes(nodes);
  c.set_nranks(2 * nodes);
  c.set_sequence(sequence);
  auto* p = c.add_points();
  p->set_message_bytes(8 << 20);
  p->set_time_seconds(seconds);
  return c;
}

void Span(monta::v1::BandwidthCurve& c, FabricSpanLevel level,
          std::vector<std::pair<std::string, int>> sides,
          std::vector<std::string> blocks = {}) {
  auto* span = c.mutable_fabric();
  span->set_level(level);
  int nodes = 0;
  for (size_t i = 0; i < sides.size(); ++i) {
    auto* side = span->add_racks();
    side->set_rack(sides[i].first);
    side->set_nodes(sides[i].second);
    if (i < blocks.size()) side->set_block(blocks[i]);
    nodes += sides[i].second;
  }
  span->set_concurrent_nodes(nodes);
}

TEST(LevelRateTest, TheBytesCrossingASideOverTheTime) {
  // 4 nodes of 2 ranks, 2 nodes a side: 8 MiB * 4 * 4 / 8 = 16 MiB cross
  // each way in 2 s.
  monta::v1::BandwidthCurve c = Curve("t", 4, 2.0, 1);
  Span(c, monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK, {{"r0", 2}, {"r1", 2}});
  EXPECT_DOUBLE_EQ(LevelBytesPerSecond(c, "r0"), 8.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(LevelBytesPerSecond(c, "r2"), 0);
  // A pair inside a rack: one node's 2 ranks send half of 8 MiB each to the
  // other node: 8 MiB in 2 s.
  monta::v1::BandwidthCurve inside = Curve("u", 2, 2.0, 2);
  Span(inside, monta::v1::FABRIC_SPAN_LEVEL_RACK, {{"r0", 2}});
  EXPECT_DOUBLE_EQ(LevelBytesPerSecond(inside, "r0"), 4.0 * (1 << 20));
  // At the largest size, however fast a smaller one was (a shaper's burst);
  // a side of all ranks carries nothing.
  c.mutable_points(0)->set_time_seconds(1e-3);
  auto* largest = c.add_points();
  largest->set_message_bytes(16 << 20);
  largest->set_time_seconds(2.0);
  EXPECT_DOUBLE_EQ(SideBytesPerSecond(c, 4), 16.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(SideBytesPerSecond(c, 8), 0);
  EXPECT_DOUBLE_EQ(SideBytesPerSecond(c, 0), 0);
}

monta::v1::FabricReply TwoBlocks() {
  monta::v1::FabricReply reply;
  for (const char* b : {"b0", "b1"}) {
    auto* block = reply.add_blocks();
    block->set_name(b);
    for (const char* r : {"x", "y"}) {
      auto* rack = block->add_racks();
      rack->set_name(absl::StrCat(b, r));
      rack->set_block(b);
    }
  }
  reply.mutable_blocks(1)
      ->mutable_racks(1)
      ->mutable_uplink()
      ->set_declared_bytes_per_second(1e9);
  return reply;
}

TEST(AttachMeasurementsTest, EachLevelFromItsNewestLoadedMeasurement) {
  std::vector<monta::v1::NodeInfo> nodes(2);
  auto add = [&nodes](const monta::v1::BandwidthCurve& c) {
    for (auto& n : nodes) *n.add_curves() = c;  // on each of its nodes
  };
  // b0x with b0y: a pair (fast), then 4 at once (slower, older), then 4 at
  // once again (newest): the newest loaded one stands.
  monta::v1::BandwidthCurve pair = Curve("pair", 2, 0.5, 10);
  Span(pair, monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK, {{"b0x", 1}, {"b0y", 1}});
  monta::v1::BandwidthCurve old4 = Curve("old4", 4, 4.0, 5);
  Span(old4, monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK, {{"b0x", 2}, {"b0y", 2}});
  monta::v1::BandwidthCurve new4 = Curve("new4", 4, 2.0, 7);
  Span(new4, monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK, {{"b0x", 2}, {"b0y", 2}});
  // b0x with b1x across the blocks: slower, so b0x keeps new4.
  monta::v1::BandwidthCurve cross = Curve("cross", 4, 8.0, 8);
  Span(cross, monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK,
       {{"b0x", 2}, {"b1x", 2}}, {"b0", "b1"});
  monta::v1::BandwidthCurve inside = Curve("inside", 2, 0.25, 9);
  Span(inside, monta::v1::FABRIC_SPAN_LEVEL_RACK, {{"b0x", 2}});
  // Not level curves: untagged, a strategy schedule.
  monta::v1::BandwidthCurve plain = Curve("plain", 4, 0.1, 11);
  monta::v1::BandwidthCurve schedule = Curve("sched", 4, 0.1, 12);
  Span(schedule, monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK,
       {{"b0x", 2}, {"b0y", 2}});
  schedule.set_strategy_kind(monta::v1::STRATEGY_KIND_TP_DEDUP);
  for (const auto& c : {pair, old4, new4, cross, inside, plain, schedule}) {
    add(c);
  }
  monta::v1::FabricReply reply = TwoBlocks();
  AttachMeasurements(nodes, reply);
  const auto& b0x = reply.blocks(0).racks(0);
  ASSERT_TRUE(b0x.uplink().has_measured()) << b0x.DebugString();
  EXPECT_EQ(b0x.uplink().measured().task_id(), "new4");
  EXPECT_EQ(b0x.uplink().measured().concurrent_nodes(), 4);
  EXPECT_DOUBLE_EQ(b0x.uplink().measured().bytes_per_second(), 8.0 * (1 << 20));
  EXPECT_NE(b0x.uplink().note().find("the fastest of 2 partners"),
            std::string::npos)
      << b0x.uplink().note();
  EXPECT_EQ(b0x.inside().task_id(), "inside");
  // 8 MiB * 2 * 2 / 4 in 0.25 s.
  EXPECT_DOUBLE_EQ(b0x.inside().bytes_per_second(), 32.0 * (1 << 20));
  // b1x has only the cross-block task; its block's uplink too.
  const auto& b1x = reply.blocks(1).racks(0);
  EXPECT_EQ(b1x.uplink().measured().task_id(), "cross");
  EXPECT_DOUBLE_EQ(b1x.uplink().measured().bytes_per_second(), 2.0 * (1 << 20));
  EXPECT_EQ(reply.blocks(1).uplink().measured().task_id(), "cross");
  EXPECT_EQ(reply.blocks(0).uplink().measured().task_id(), "cross");
  EXPECT_FALSE(b1x.has_inside());
  // Nothing measured b1y: its declared capacity stands, and the note says so.
  const auto& b1y = reply.blocks(1).racks(1);
  EXPECT_FALSE(b1y.uplink().has_measured());
  EXPECT_EQ(b1y.uplink().note(),
            "not measured yet: the declared capacity stands");
  EXPECT_EQ(reply.blocks(0).racks(1).uplink().measured().task_id(), "new4");
}

}  // namespace
}  // namespace monta::fabric
