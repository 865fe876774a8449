#include "server/fabric/fabric_map.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace monta::fabric {
namespace {

constexpr char kMap[] = R"(# two blocks, three racks
version: 1
blocks:
- name: block-b
  oversubscription: 2
- name: block-a
  uplink_bits_per_second: 3.2e12
racks:
- name: rack-a2
  block: block-a
  uplink_bits_per_second: 800gbit
  oversubscription: 4
  nodes: [gpu-003]
- name: rack-a1
  block: block-a
  nodes:
  - gpu-001
  - gpu-002
- name: rack-b1
  block: block-b
- name: lone
  nodes: [cpu-1]
)";

TEST(FabricMapTest, ReadsBlocksRacksNodesAndDeclaredUplinks) {
  absl::StatusOr<FabricMap> map = ParseFabricMap(kMap);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->blocks.size(), 2u);
  EXPECT_EQ(map->blocks[0].name, "block-a");  // sorted by name
  EXPECT_DOUBLE_EQ(map->blocks[0].uplink.bytes_per_second, 3.2e12 / 8);
  EXPECT_EQ(map->blocks[0].uplink.oversubscription_ratio, 0);
  EXPECT_EQ(map->blocks[0].uplink.line, 6);  // the declaring entry
  EXPECT_EQ(map->blocks[1].uplink.oversubscription_ratio, 2);
  EXPECT_EQ(map->blocks[1].uplink.bytes_per_second, 0);

  ASSERT_EQ(map->racks.size(), 4u);
  const MapRack* a2 = map->FindRack("rack-a2");
  ASSERT_NE(a2, nullptr);
  EXPECT_EQ(a2->block, "block-a");
  EXPECT_DOUBLE_EQ(a2->uplink.bytes_per_second, 100e9);
  EXPECT_EQ(a2->uplink.oversubscription_ratio, 4);
  EXPECT_EQ(a2->line, 9);
  const MapRack* b1 = map->FindRack("rack-b1");
  ASSERT_NE(b1, nullptr);
  EXPECT_TRUE(b1->nodes.empty());  // declared: node labels may fill it
  EXPECT_EQ(b1->uplink.line, 0);
  EXPECT_EQ(map->FindRack("lone")->block, "");
  EXPECT_EQ(map->FindRack("rack-z"), nullptr);

  ASSERT_EQ(map->nodes.size(), 4u);
  const auto& gpu2 = map->nodes.at("gpu-002");
  EXPECT_EQ(map->racks[gpu2.rack].name, "rack-a1");
  EXPECT_EQ(gpu2.line, 18);
  EXPECT_EQ(map->racks[map->nodes.at("cpu-1").rack].name, "lone");
}

TEST(FabricMapTest, JsonIsReadToo) {
  absl::StatusOr<FabricMap> map = ParseFabricMap(
      R"({"version": 1, "racks": [{"name": "r0", "uplink_bits_per_second": )"
      R"("100mbit", "nodes": ["r0-n0", "r0-n1"]},)"
      "\n"
      R"({"name": "r1", "nodes": ["r1-n0"]}]})");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->nodes.size(), 3u);
  EXPECT_DOUBLE_EQ(map->FindRack("r0")->uplink.bytes_per_second, 12.5e6);
  EXPECT_EQ(map->FindRack("r1")->line, 2);
}

TEST(FabricMapTest, AnEmptyListOfRacksIsAValidMap) {
  absl::StatusOr<FabricMap> map = ParseFabricMap("version: 1\nracks: []\n");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE(map->racks.empty());
  EXPECT_TRUE(map->nodes.empty());
}

// Each bad map is refused with the line and the field that is wrong.
TEST(FabricMapTest, ErrorsNameTheLineAndTheField) {
  struct Case {
    std::string text;
    std::string want;
  };
  const Case cases[] = {
      {"", "empty: expected version: 1 and racks"},
      {"racks: []\n", "line 1: version: required"},
      {"version: 2\nracks: []\n", "line 1: version: expected 1"},
      {"version: 1\n", "racks: required"},
      {"version: 1\nracks: []\nrack: []\n",
       "line 3: map: unknown key \"rack\" (expected version, blocks, racks)"},
      {"version: 1\nracks:\n- name: r0\n  nodes: [a]\n  uplink: 1\n",
       "line 5: racks[0]: unknown key \"uplink\""},
      {"version: 1\nracks:\n- nodes: [a]\n", "line 3: racks[0].name: required"},
      {"version: 1\nracks:\n- name: -r0\n",
       "line 3: racks[0].name: expected a name of 1..63 characters"},
      {absl::StrCat("version: 1\nracks:\n- name: ", std::string(64, 'r'), "\n"),
       "racks[0].name: expected a name of 1..63"},
      {"version: 1\nracks:\n- name: r0\n  nodes: [Node_A]\n",
       "line 4: racks[0].nodes[0]: expected a node name"},
      {"version: 1\nracks:\n- name: r0\n  nodes: a\n",
       "line 4: racks[0].nodes: expected a list of nodes"},
      {"version: 1\nracks:\n- name: r0\n  nodes: [a]\n- name: r1\n"
       "  nodes: [b, a]\n",
       "line 6: node a is listed twice (also line 4): a node sits in one rack"},
      {"version: 1\nracks:\n- name: r0\n- name: r0\n",
       "line 4: racks: \"r0\" is declared twice (also line 3)"},
      {"version: 1\nracks:\n- name: r0\n  block: b0\n",
       "line 4: racks[0].block: \"b0\" is not a block of `blocks`"},
      {"version: 1\nracks:\n- name: r0\n  uplink_bits_per_second: fast\n",
       "line 4: racks[0].uplink_bits_per_second: expected bits per second"},
      {"version: 1\nracks:\n- name: r0\n  uplink_bits_per_second: -5\n",
       "expected bits per second in (0, 1e15]"},
      {"version: 1\nracks:\n- name: r0\n  uplink_bits_per_second: 2e15\n",
       "expected bits per second in (0, 1e15]"},
      {"version: 1\nracks:\n- name: r0\n  oversubscription: 0.5\n",
       "line 4: racks[0].oversubscription: expected a ratio in 1..1000"},
      {"version: 1\nblocks:\n- name: b0\n  oversubscription: nan\nracks: []\n",
       "line 4: blocks[0].oversubscription: expected a ratio"},
      {"version: 1\nracks: [\n", "invalid YAML or JSON"},
      {"version: 1\nracks:\n- name: r0\n  name: r1\n", "duplicate key name"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<FabricMap> map = ParseFabricMap(c.text);
    ASSERT_FALSE(map.ok()) << c.text;
    EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument)
        << c.text;
    EXPECT_TRUE(absl::StrContains(map.status().message(), c.want))
        << "map:\n"
        << c.text << "\ngot: " << map.status().message()
        << "\nwant: " << c.want;
  }
}

TEST(FabricMapTest, SizesAreBounded) {
  FabricLimits limits;
  limits.max_nodes = 3;
  limits.max_racks = 2;
  limits.max_map_bytes = 200;
  absl::StatusOr<FabricMap> nodes = ParseFabricMap(
      "version: 1\nracks:\n- name: r0\n  nodes: [a, b, c, d]\n", limits);
  EXPECT_EQ(nodes.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(nodes.status().message(),
                                "racks[0].nodes[3]: more than 3 nodes"))
      << nodes.status();
  absl::StatusOr<FabricMap> racks = ParseFabricMap(
      "version: 1\nracks: [{name: a}, {name: b}, {name: c}]\n", limits);
  EXPECT_EQ(racks.status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<FabricMap> bytes = ParseFabricMap(
      absl::StrCat("version: 1\nracks: []\n# ", std::string(300, 'x'), "\n"),
      limits);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kResourceExhausted);
  // A node list built from one alias is still counted node by node.
  absl::StatusOr<FabricMap> alias = ParseFabricMap(
      "version: 1\nracks:\n- name: r0\n  nodes: &n [a, b]\n- name: r1\n"
      "  nodes: *n\n",
      limits);
  EXPECT_FALSE(alias.ok());
}

TEST(FabricMapTest, DeepNestingIsRefusedNotOverflowed) {
  absl::StatusOr<FabricMap> deep = ParseFabricMap(
      absl::StrCat("version: 1\nracks: ", std::string(100000, '['),
                   std::string(100000, ']'), "\n"));
  EXPECT_FALSE(deep.ok());
}

TEST(FabricMapTest, ErrorsDoNotRepeatLongValues) {
  absl::StatusOr<FabricMap> map = ParseFabricMap(
      absl::StrCat("version: 1\nracks:\n- name: r0\n  uplink_bits_per_second: ",
                   std::string(5000, '9'), "x\n"));
  ASSERT_FALSE(map.ok());
  EXPECT_LT(map.status().message().size(), 400u) << map.status();
  EXPECT_TRUE(absl::StrContains(map.status().message(), "(5001 bytes)"));
}

TEST(FabricMapTest, BitsPerSecond) {
  EXPECT_DOUBLE_EQ(*ParseBitsPerSecond("400e9"), 400e9);
  EXPECT_DOUBLE_EQ(*ParseBitsPerSecond("400gbit"), 400e9);
  EXPECT_DOUBLE_EQ(*ParseBitsPerSecond("400Gbit"), 400e9);
  EXPECT_DOUBLE_EQ(*ParseBitsPerSecond("1.5tbit"), 1.5e12);
  EXPECT_DOUBLE_EQ(*ParseBitsPerSecond("100mbit"), 1e8);
  EXPECT_DOUBLE_EQ(*ParseBitsPerSecond("64kbit"), 64e3);
  for (const char* bad : {"", "gbit", "0", "-1", "inf", "1e16", "10 gb"}) {
    EXPECT_FALSE(ParseBitsPerSecond(bad).ok()) << bad;
  }
}

TEST(FabricMapTest, LevelNames) {
  for (const char* good : {"r0", "rack-a1", "Leaf_07.x", "a"}) {
    EXPECT_TRUE(ValidateLevelName(good).ok()) << good;
  }
  for (const std::string& bad :
       {std::string(""), std::string("-a"), std::string("a-"),
        std::string("a b"), std::string("a/b"), std::string(64, 'a')}) {
    EXPECT_FALSE(ValidateLevelName(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace monta::fabric
