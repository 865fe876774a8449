#include "client/fabric_render.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace monta::client {
namespace {

monta::v1::FabricReply Tree() {
  monta::v1::FabricReply reply;
  auto* block = reply.add_blocks();
  block->set_name("b0");
  block->set_source(monta::v1::FABRIC_SOURCE_MAP);
  block->set_source_detail("line 3");
  block->mutable_uplink()->set_declared_bytes_per_second(800e9 / 8);
  auto* rack = block->add_racks();
  rack->set_name("r0");
  rack->set_source(monta::v1::FABRIC_SOURCE_MAP);
  rack->set_source_detail("line 6");
  rack->mutable_uplink()->set_declared_bytes_per_second(100e6 / 8);
  rack->mutable_uplink()->set_declared_oversubscription_ratio(2);
  auto* n0 = rack->add_nodes();
  n0->set_name("n0");
  n0->set_state(monta::v1::NODE_STATE_ALIVE);
  n0->mutable_position()->set_source(monta::v1::FABRIC_SOURCE_MAP);
  n0->mutable_position()->set_source_detail("line 9");
  n0->mutable_position()->set_rack("r0");
  n0->mutable_position()->set_hint_rack("r1");
  n0->mutable_position()->set_hint_disagrees(true);
  auto* n1 = rack->add_nodes();
  n1->set_name("n1");
  n1->mutable_position()->set_source(monta::v1::FABRIC_SOURCE_MAP);
  auto* loose = reply.add_blocks();  // racks in no block
  auto* r9 = loose->add_racks();
  r9->set_name("leaf-9");
  r9->set_source(monta::v1::FABRIC_SOURCE_NODE_LABELS);
  auto* measured = r9->mutable_uplink()->mutable_measured();
  measured->set_bytes_per_second(50e9 / 8);
  measured->set_concurrent_nodes(4);
  auto* x = reply.add_unplaced();
  x->set_name("x9");
  x->set_state(monta::v1::NODE_STATE_STALE);
  x->mutable_position()->set_source(monta::v1::FABRIC_SOURCE_NONE);
  x->mutable_position()->set_hint_rack("r0");
  auto* source = reply.add_sources();
  source->set_source(monta::v1::FABRIC_SOURCE_MAP);
  source->set_path("/etc/monta/fabric/map.yaml");
  source->mutable_loaded_at()->set_seconds(1700000000);
  source->set_nodes(2);
  source->set_racks(1);
  source->set_error("line 4: bad");
  reply.add_notes(
      "1 registered node(s) outside the fabric keep pair measurements");
  return reply;
}

TEST(FabricRenderTest, DrawsTheTreeWithDeclaredAndMeasuredUplinks) {
  const std::string text = FabricText(Tree());
  for (const char* want : {
           "FABRIC",
           "UPLINK DECLARED",
           "UPLINK MEASURED",
           "block b0",
           "800 Gb/s",
           "fabric map, line 3",
           "  rack r0",
           "100 Mb/s, 2:1",
           "    n0",
           "alive",
           "! its agent says rack r1 (not used)",
           "    n1",
           "not registered",
           "(racks in no block)",
           "  rack leaf-9",
           "50 Gb/s, 4 nodes at once",
           "node labels",
           "(outside the fabric)",
           "pair measurements, as before",
           "  x9",
           "stale",
           "its agent says rack r0 (not used)",
           "fabric map /etc/monta/fabric/map.yaml: 2 nodes in 1 racks, read "
           "2023-11-14 22:13:20 UTC; now: line 4: bad",
           "Notes:\n  1 registered node(s) outside the fabric keep pair",
       }) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  }
  // r0's measured uplink is empty: "-" holds its place.
  const size_t r0 = text.find("  rack r0");
  const std::string r0_line = text.substr(r0, text.find('\n', r0) - r0);
  EXPECT_TRUE(absl::StrContains(r0_line, " - ")) << r0_line;
}

TEST(FabricRenderTest, EmptyFabricAndPositions) {
  monta::v1::FabricReply empty;
  empty.add_notes("no fabric map");
  const std::string text = FabricText(empty);
  EXPECT_TRUE(absl::StrContains(text, "(no racks and no registered nodes)"));
  EXPECT_TRUE(absl::StrContains(text, "no fabric map"));

  monta::v1::FabricPosition p;
  p.set_source(monta::v1::FABRIC_SOURCE_MAP);
  p.set_rack("r0");
  p.set_block("b0");
  p.set_source_detail("line 10");
  EXPECT_EQ(FabricPositionText(p), "rack r0, block b0 (fabric map, line 10)");
  p.set_hint_disagrees(true);
  p.set_note("its agent says rack r1");
  EXPECT_EQ(FabricPositionText(p),
            "rack r0, block b0 (fabric map, line 10)\n  ! its agent says rack "
            "r1");
  monta::v1::FabricPosition none;
  none.set_source(monta::v1::FABRIC_SOURCE_NONE);
  none.set_note("outside the fabric map and node labels");
  EXPECT_EQ(FabricPositionText(none), "outside the fabric map and node labels");
  EXPECT_EQ(BitRate(12.5e6), "100 Mb/s");
  EXPECT_EQ(BitRate(50e9), "400 Gb/s");
  EXPECT_EQ(BitRate(200e9), "1.6 Tb/s");
}

}  // namespace
}  // namespace monta::client

namespace monta::client {
namespace {

TEST(FabricRenderTest, ARacksOwnLevelAndWhatStandsForAnUnmeasuredUplink) {
  monta::v1::FabricReply reply = Tree();
  auto* r0 = reply.mutable_blocks(0)->mutable_racks(0);
  r0->mutable_inside()->set_bytes_per_second(400e6 / 8);
  r0->mutable_uplink()->set_note(
      "not measured yet: the declared capacity stands");
  const std::string text = FabricText(reply);
  const size_t at = text.find("  rack r0");
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_TRUE(absl::StrContains(
      line,
      "inside 400 Mb/s (a pair); not measured yet: the declared capacity "
      "stands"))
      << line;
}

TEST(FabricRenderTest, ALevelRoundsTasksAndNotes) {
  monta::v1::RunBenchmarkReply reply;
  auto* task = reply.add_fabric_tasks();
  task->set_task_id("bench-1-7");
  task->add_nodes("a");
  task->add_nodes("b");
  task->mutable_fabric()->set_level(monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  task->mutable_fabric()->set_concurrent_nodes(2);
  for (const char* rack : {"r0", "r1"}) {
    auto* side = task->mutable_fabric()->add_racks();
    side->set_rack(rack);
    side->set_nodes(1);
  }
  reply.add_notes("rack r2: no idle node");
  const std::string text = LevelTasksText(reply, /*dry_run=*/false);
  for (const char* want : {"bench-1-7", "cross_rack", "r0 (1), r1 (1)", "a,b",
                           "1 level task(s) scheduled", "rack r2: no idle"}) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  }
  EXPECT_TRUE(
      absl::StrContains(LevelTasksText(reply, /*dry_run=*/true), "(dry run)"));
}

}  // namespace
}  // namespace monta::client
