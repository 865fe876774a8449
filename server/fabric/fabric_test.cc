#include "server/fabric/fabric.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace monta::fabric {
namespace {

using monta::v1::FabricPosition;
using monta::v1::FabricReply;

constexpr char kLeaf[] = "network.topology.nvidia.com/leaf";
constexpr char kSpine[] = "network.topology.nvidia.com/spine";

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

constexpr char kMap[] = R"(version: 1
blocks:
- name: b0
  uplink_bits_per_second: 800gbit
racks:
- name: r0
  block: b0
  uplink_bits_per_second: 400gbit
  oversubscription: 2
  nodes: [n0, n1]
- name: r1
  block: b0
  nodes: [n2]
- name: r2
)";

std::string NodeList(
    const std::vector<std::pair<std::string, std::string>>& node_racks) {
  std::string items;
  for (const auto& [node, rack] : node_racks) {
    absl::StrAppend(&items, items.empty() ? "" : ",",
                    R"({"metadata": {"name": ")", node, R"(", "labels": {")",
                    kLeaf, R"(": ")", rack, R"(", ")", kSpine,
                    R"(": "spine-x"}}})");
  }
  return absl::StrCat(R"({"kind": "List", "items": [)", items, "]}");
}

class FabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = tmp != nullptr ? tmp : "/tmp";
    map_path_ = absl::StrCat(dir_, "/", Name(), "-map.yaml");
    labels_path_ = absl::StrCat(dir_, "/", Name(), "-nodes.json");
    std::remove(map_path_.c_str());
    std::remove(labels_path_.c_str());
  }

  static std::string Name() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // Writes as a ConfigMap volume or a sidecar does: a new file renamed over
  // the old one.
  static void Write(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
  }

  std::unique_ptr<Fabric> Open(bool labels = false) {
    FabricOptions options;
    options.map_file = map_path_;
    if (labels) options.node_labels_file = labels_path_;
    absl::StatusOr<std::unique_ptr<Fabric>> fabric =
        Fabric::Open(options, kStart);
    EXPECT_TRUE(fabric.ok()) << fabric.status();
    return fabric.ok() ? *std::move(fabric) : nullptr;
  }

  static monta::v1::NodeInfo Registered(const std::string& name,
                                        const std::string& claimed_rack = "") {
    monta::v1::NodeInfo node;
    node.set_name(name);
    node.set_state(monta::v1::NODE_STATE_ALIVE);
    if (!claimed_rack.empty()) {
      (*node.mutable_topology()->mutable_labels())[kLeaf] = claimed_rack;
    }
    return node;
  }

  std::string dir_, map_path_, labels_path_;
};

TEST_F(FabricTest, TheMapPlacesNodesAndTheAgentsClaimIsOnlyAHint) {
  Write(map_path_, kMap);
  auto fabric = Open();
  ASSERT_NE(fabric, nullptr);

  FabricPosition n0 = fabric->Position("n0", {});
  EXPECT_EQ(n0.source(), monta::v1::FABRIC_SOURCE_MAP);
  EXPECT_EQ(n0.rack(), "r0");
  EXPECT_EQ(n0.block(), "b0");
  EXPECT_EQ(n0.source_detail(), "line 10");
  EXPECT_FALSE(n0.hint_disagrees());

  // n0's agent claims rack r1: it stays in r0, flagged.
  FabricPosition moved = fabric->PositionOf(Registered("n0", "r1"));
  EXPECT_EQ(moved.rack(), "r0");
  EXPECT_EQ(moved.source(), monta::v1::FABRIC_SOURCE_MAP);
  EXPECT_EQ(moved.hint_rack(), "r1");
  EXPECT_TRUE(moved.hint_disagrees());
  EXPECT_TRUE(absl::StrContains(moved.note(), "its agent says rack r1"))
      << moved.note();
  EXPECT_TRUE(absl::StrContains(moved.note(), "never move a node"));

  // Agreeing with the map is no disagreement.
  FabricPosition agrees = fabric->PositionOf(Registered("n0", "r0"));
  EXPECT_FALSE(agrees.hint_disagrees());
  EXPECT_EQ(agrees.hint_rack(), "r0");

  // A node outside the map stays outside, whatever its agent claims.
  FabricPosition stranger = fabric->PositionOf(Registered("x9", "r0"));
  EXPECT_EQ(stranger.source(), monta::v1::FABRIC_SOURCE_NONE);
  EXPECT_EQ(stranger.rack(), "");
  EXPECT_FALSE(stranger.hint_disagrees());
  EXPECT_TRUE(absl::StrContains(stranger.note(), "pair measurements"));
  EXPECT_TRUE(absl::StrContains(stranger.note(), "a hint that places nothing"))
      << stranger.note();
}

TEST_F(FabricTest, AChangedMapIsReadAndABadOneKeepsThePrevious) {
  Write(map_path_, kMap);
  auto fabric = Open();
  ASSERT_NE(fabric, nullptr);
  EXPECT_TRUE(fabric->Refresh(kStart).empty());  // nothing changed

  // The operator moves n0 to r1.
  std::string moved = kMap;
  moved.replace(moved.find("[n0, n1]"), 8, "[n1]");
  moved.replace(moved.find("[n2]"), 4, "[n2, n0]");
  Write(map_path_, moved);
  std::vector<Fabric::Reload> reloads = fabric->Refresh(kStart);
  ASSERT_EQ(reloads.size(), 1u);
  EXPECT_TRUE(reloads[0].status.ok()) << reloads[0].status;
  EXPECT_TRUE(reloads[0].changed);
  EXPECT_EQ(reloads[0].nodes, 3);
  EXPECT_EQ(fabric->Position("n0", {}).rack(), "r1");

  // A broken map: the previous one stays in use, and says why.
  Write(map_path_, "version: 1\nracks:\n- name: r0\n  nodes: [n0, n0]\n");
  reloads = fabric->Refresh(kStart + absl::Seconds(5));
  ASSERT_EQ(reloads.size(), 1u);
  EXPECT_EQ(reloads[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(
      reloads[0].status.message(),
      absl::StrCat("--fabric_map_file ", map_path_, ": line 4: node n0")))
      << reloads[0].status;
  EXPECT_FALSE(reloads[0].changed);
  EXPECT_EQ(fabric->Position("n0", {}).rack(), "r1");
  std::vector<monta::v1::FabricSourceStatus> sources = fabric->Sources();
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_TRUE(absl::StrContains(sources[0].error(), "listed twice"));
  EXPECT_EQ(sources[0].nodes(), 3);
  EXPECT_EQ(sources[0].loaded_at().seconds(), absl::ToUnixSeconds(kStart));

  // Deleted: still the previous one. Back as it was: the error clears and
  // nothing changed.
  std::remove(map_path_.c_str());
  reloads = fabric->Refresh(kStart);
  ASSERT_EQ(reloads.size(), 1u);
  EXPECT_EQ(reloads[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(fabric->Refresh(kStart).empty());  // reported once
  Write(map_path_, moved);
  reloads = fabric->Refresh(kStart);
  ASSERT_EQ(reloads.size(), 1u);
  EXPECT_TRUE(reloads[0].status.ok());
  EXPECT_FALSE(reloads[0].changed);
  EXPECT_EQ(fabric->Sources()[0].error(), "");
}

TEST_F(FabricTest, ABadMapAtStartIsAnErrorNamingFlagFileAndLine) {
  Write(map_path_, "version: 1\nracks:\n- name: r0\n  nodes: [A]\n");
  FabricOptions options;
  options.map_file = map_path_;
  absl::StatusOr<std::unique_ptr<Fabric>> fabric =
      Fabric::Open(options, kStart);
  ASSERT_FALSE(fabric.ok());
  EXPECT_EQ(fabric.status().message(),
            absl::StrCat("--fabric_map_file ", map_path_,
                         ": line 4: racks[0].nodes[0]: expected a node name "
                         "(1..253 of [a-z0-9.-], alphanumeric at both ends), "
                         "got \"A\""));
  options.map_file = map_path_ + ".missing";
  fabric = Fabric::Open(options, kStart);
  ASSERT_FALSE(fabric.ok());
  EXPECT_TRUE(absl::StartsWith(fabric.status().message(),
                               absl::StrCat("--fabric_map_file ", map_path_,
                                            ".missing: cannot be read")))
      << fabric.status();
}

TEST_F(FabricTest, NodeLabelsPlaceWhatTheMapDoesNotAndTheMapWins) {
  Write(map_path_, kMap);
  // n0 is in the map (r0) and its labels say leaf-9: the map wins. n5's
  // labels name r2, a rack the map declares in no block; n6's a rack only
  // labels know, under spine-x.
  Write(labels_path_,
        NodeList({{"n0", "leaf-9"}, {"n5", "r2"}, {"n6", "leaf-9"}}));
  auto fabric = Open(/*labels=*/true);
  ASSERT_NE(fabric, nullptr);
  EXPECT_EQ(fabric->Position("n0", {}).rack(), "r0");
  EXPECT_EQ(fabric->Position("n0", {}).source(), monta::v1::FABRIC_SOURCE_MAP);
  FabricPosition n5 = fabric->Position("n5", {});
  EXPECT_EQ(n5.source(), monta::v1::FABRIC_SOURCE_NODE_LABELS);
  EXPECT_EQ(n5.rack(), "r2");
  EXPECT_EQ(n5.block(), "");  // the map's declaration of r2 decides
  EXPECT_EQ(n5.source_detail(), kLeaf);
  FabricPosition n6 = fabric->Position("n6", {});
  EXPECT_EQ(n6.rack(), "leaf-9");
  EXPECT_EQ(n6.block(), "spine-x");
  EXPECT_EQ(n6.source_detail(), absl::StrCat(kLeaf, ", ", kSpine));
  // An agent disagreeing with its node labels is flagged the same way.
  FabricPosition n6_claims = fabric->Position("n6", {{kLeaf, "r0"}});
  EXPECT_TRUE(n6_claims.hint_disagrees());
  EXPECT_EQ(n6_claims.rack(), "leaf-9");
  EXPECT_TRUE(absl::StrContains(n6_claims.note(), "its node labels place"));
}

TEST_F(FabricTest, ANodeLabelsFileNotWrittenYetIsReadWhenItAppears) {
  Write(map_path_, kMap);
  auto fabric = Open(/*labels=*/true);
  ASSERT_NE(fabric, nullptr);
  EXPECT_EQ(fabric->Position("n6", {}).source(), monta::v1::FABRIC_SOURCE_NONE);
  std::vector<monta::v1::FabricSourceStatus> sources = fabric->Sources();
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_TRUE(absl::StrContains(sources[1].error(), "cannot be read"));
  EXPECT_FALSE(sources[1].has_loaded_at());

  Write(labels_path_, NodeList({{"n6", "leaf-9"}}));
  std::vector<Fabric::Reload> reloads = fabric->Refresh(kStart);
  ASSERT_EQ(reloads.size(), 1u);
  EXPECT_EQ(reloads[0].source, monta::v1::FABRIC_SOURCE_NODE_LABELS);
  EXPECT_TRUE(reloads[0].changed);
  EXPECT_EQ(fabric->Position("n6", {}).rack(), "leaf-9");

  // A bad labels file at start is an error, as a bad map is.
  Write(labels_path_, R"({"kind": "List", "items": {}})");
  FabricOptions options;
  options.node_labels_file = labels_path_;
  absl::StatusOr<std::unique_ptr<Fabric>> bad = Fabric::Open(options, kStart);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StartsWith(
      bad.status().message(),
      absl::StrCat("--fabric_node_labels_file ", labels_path_, ": items:")))
      << bad.status();
}

TEST_F(FabricTest, TheTreeHasEveryMapNodeAndTheRegisteredOnes) {
  Write(map_path_, kMap);
  Write(labels_path_, NodeList({{"n6", "leaf-9"}, {"k8s-only", "leaf-9"}}));
  auto fabric = Open(/*labels=*/true);
  ASSERT_NE(fabric, nullptr);
  const FabricReply tree = fabric->Tree(
      {Registered("n1", "r1"), Registered("n6"), Registered("x9")});

  // b0 (the map's), spine-x (labels), then racks in no block.
  ASSERT_EQ(tree.blocks_size(), 3);
  const auto& b0 = tree.blocks(0);
  EXPECT_EQ(b0.name(), "b0");
  EXPECT_EQ(b0.source(), monta::v1::FABRIC_SOURCE_MAP);
  EXPECT_DOUBLE_EQ(b0.uplink().declared_bytes_per_second(), 100e9);
  EXPECT_EQ(b0.uplink().declared_at(), "line 3");
  EXPECT_FALSE(b0.uplink().has_measured());
  ASSERT_EQ(b0.racks_size(), 2);
  const auto& r0 = b0.racks(0);
  EXPECT_EQ(r0.name(), "r0");
  EXPECT_DOUBLE_EQ(r0.uplink().declared_bytes_per_second(), 50e9);
  EXPECT_EQ(r0.uplink().declared_oversubscription_ratio(), 2);
  ASSERT_EQ(r0.nodes_size(), 2);
  EXPECT_EQ(r0.nodes(0).name(), "n0");  // named by the map, not registered
  EXPECT_EQ(r0.nodes(0).state(), monta::v1::NODE_STATE_UNSPECIFIED);
  EXPECT_EQ(r0.nodes(1).name(), "n1");
  EXPECT_EQ(r0.nodes(1).state(), monta::v1::NODE_STATE_ALIVE);
  EXPECT_TRUE(r0.nodes(1).position().hint_disagrees());

  EXPECT_EQ(tree.blocks(1).name(), "spine-x");
  EXPECT_EQ(tree.blocks(1).source(), monta::v1::FABRIC_SOURCE_NODE_LABELS);
  ASSERT_EQ(tree.blocks(1).racks_size(), 1);
  const auto& leaf = tree.blocks(1).racks(0);
  EXPECT_EQ(leaf.name(), "leaf-9");
  EXPECT_EQ(leaf.source(), monta::v1::FABRIC_SOURCE_NODE_LABELS);
  EXPECT_EQ(leaf.uplink().declared_bytes_per_second(), 0);
  EXPECT_FALSE(leaf.uplink().has_measured());
  EXPECT_EQ(leaf.uplink().note(), "not measured yet, and nothing declared");
  EXPECT_EQ(r0.uplink().note(),
            "not measured yet: the declared capacity stands");
  // k8s-only is in the node labels but runs no agent: not in the tree.
  ASSERT_EQ(leaf.nodes_size(), 1);
  EXPECT_EQ(leaf.nodes(0).name(), "n6");

  EXPECT_EQ(tree.blocks(2).name(), "");
  ASSERT_EQ(tree.blocks(2).racks_size(), 1);
  EXPECT_EQ(tree.blocks(2).racks(0).name(), "r2");  // declared, empty
  EXPECT_EQ(tree.blocks(2).racks(0).nodes_size(), 0);

  ASSERT_EQ(tree.unplaced_size(), 1);
  EXPECT_EQ(tree.unplaced(0).name(), "x9");
  EXPECT_EQ(tree.unplaced(0).position().source(),
            monta::v1::FABRIC_SOURCE_NONE);
  ASSERT_EQ(tree.sources_size(), 2);
  EXPECT_EQ(tree.sources(0).racks(), 3);
  EXPECT_EQ(tree.sources(1).nodes(), 2);
  ASSERT_EQ(tree.notes_size(), 1);
  EXPECT_EQ(tree.notes(0),
            "1 registered node(s) outside the fabric keep pair measurements");
}

TEST_F(FabricTest, WithoutSourcesEveryNodeKeepsPairMeasurements) {
  absl::StatusOr<std::unique_ptr<Fabric>> fabric =
      Fabric::Open(FabricOptions(), kStart);
  ASSERT_TRUE(fabric.ok());
  EXPECT_FALSE((*fabric)->has_sources());
  const FabricReply tree = (*fabric)->Tree({Registered("a", "r0")});
  EXPECT_EQ(tree.blocks_size(), 0);
  ASSERT_EQ(tree.unplaced_size(), 1);
  EXPECT_EQ(tree.unplaced(0).position().hint_rack(), "r0");
  ASSERT_EQ(tree.notes_size(), 1);
  EXPECT_TRUE(absl::StrContains(tree.notes(0), "no fabric map"));
  EXPECT_TRUE(tree.sources().empty());
}

TEST_F(FabricTest, APlansEvidenceSaysWhoPlacedEachNode) {
  Write(map_path_, kMap);
  Write(labels_path_, NodeList({{"n6", "leaf-9"}}));
  auto fabric = Open(/*labels=*/true);
  ASSERT_NE(fabric, nullptr);
  EXPECT_EQ(fabric->EvidenceNote({"n2", "n6", "x9", "n0", "n1"}),
            "fabric: rack r1 (fabric map): n2; rack leaf-9 (node labels): n6; "
            "rack r0 (fabric map): n0, n1; outside the fabric: x9. With nodes "
            "outside the fabric the uplinks are not priced: the plan rests on "
            "node and pair measurements, as without a fabric");
  EXPECT_EQ(fabric->EvidenceNote({"n2", "n0"}),
            "fabric: rack r1 (fabric map): n2; rack r0 (fabric map): n0. The "
            "uplinks are priced (docs/MODEL.md §12)");
  EXPECT_EQ(fabric->EvidenceNote({}), std::nullopt);
  absl::StatusOr<std::unique_ptr<Fabric>> none =
      Fabric::Open(FabricOptions(), kStart);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->EvidenceNote({"a"}), std::nullopt);
}

TEST_F(FabricTest, ATasksSpanIsTheLevelItsNodesCross) {
  Write(map_path_, kMap);
  Write(labels_path_, NodeList({{"n6", "leaf-9"}}));
  auto fabric = Open(/*labels=*/true);
  ASSERT_NE(fabric, nullptr);
  EXPECT_EQ(fabric->SpanOf({"n0"}).level(), monta::v1::FABRIC_SPAN_LEVEL_NODE);
  const monta::v1::FabricSpan rack = fabric->SpanOf({"n1", "n0"});
  EXPECT_EQ(rack.level(), monta::v1::FABRIC_SPAN_LEVEL_RACK);
  EXPECT_EQ(rack.concurrent_nodes(), 2);
  ASSERT_EQ(rack.racks_size(), 1);
  EXPECT_EQ(rack.racks(0).rack(), "r0");
  EXPECT_EQ(rack.racks(0).block(), "b0");
  EXPECT_EQ(rack.racks(0).nodes(), 2);
  const monta::v1::FabricSpan across = fabric->SpanOf({"n2", "n0", "n1"});
  EXPECT_EQ(across.level(), monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  ASSERT_EQ(across.racks_size(), 2);
  EXPECT_EQ(across.racks(0).rack(), "r0");  // by name
  EXPECT_EQ(across.racks(0).nodes(), 2);
  EXPECT_EQ(across.racks(1).nodes(), 1);
  // n6 sits in block spine-x by its node labels.
  EXPECT_EQ(fabric->SpanOf({"n0", "n6"}).level(),
            monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK);
  // A node outside the fabric, or a third rack: not a level measurement.
  const monta::v1::FabricSpan outside = fabric->SpanOf({"n0", "x9"});
  EXPECT_EQ(outside.level(), monta::v1::FABRIC_SPAN_LEVEL_UNSPECIFIED);
  EXPECT_EQ(outside.concurrent_nodes(), 2);
  EXPECT_EQ(outside.racks_size(), 0);
  EXPECT_EQ(fabric->SpanOf({"n0", "n2", "n6"}).level(),
            monta::v1::FABRIC_SPAN_LEVEL_UNSPECIFIED);
}

TEST_F(FabricTest, ARoundMeasuresThePlacedIdleNodesAndKeepsItsNotes) {
  Write(map_path_, kMap);
  auto fabric = Open();
  ASSERT_NE(fabric, nullptr);
  std::vector<monta::v1::NodeInfo> registered = {
      Registered("n0"), Registered("n1"), Registered("n2"), Registered("y7"),
      Registered("x9")};
  registered[1].set_state(monta::v1::NODE_STATE_STALE);
  const auto all_idle = [](const std::string&) { return true; };
  const Fabric::Round dry =
      fabric->PlanRound(registered, all_idle, 4, /*dry_run=*/true, kStart);
  // r0 has one alive node (n1 is stale): no pair inside; n0 with n2 across.
  ASSERT_EQ(dry.plan.tasks.size(), 1u);
  EXPECT_EQ(dry.plan.tasks[0].nodes, (std::vector<std::string>{"n0", "n2"}));
  EXPECT_EQ(dry.plan.tasks[0].span.level(),
            monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  EXPECT_EQ(dry.outside, (std::vector<std::string>{"x9", "y7"}));
  // A dry run leaves no notes behind; a round does.
  const FabricReply before = fabric->Tree(registered);
  for (const auto& note : before.notes()) {
    EXPECT_FALSE(absl::StrContains(note, "level round")) << note;
  }
  registered[1].set_state(monta::v1::NODE_STATE_ALIVE);
  const Fabric::Round round = fabric->PlanRound(
      registered, [](const std::string& n) { return n != "n2"; }, 4,
      /*dry_run=*/false, kStart);
  ASSERT_EQ(round.plan.tasks.size(), 1u);
  EXPECT_EQ(round.plan.tasks[0].nodes, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(round.outside, (std::vector<std::string>{"x9", "y7"}));
  std::string notes;
  const FabricReply after = fabric->Tree(registered);
  for (const auto& note : after.notes()) {
    absl::StrAppend(&notes, note, "\n");
  }
  EXPECT_TRUE(absl::StrContains(
      notes, "level round of 2023-11-14 22:13:20 UTC: rack r1: no idle node"))
      << notes;
}

}  // namespace
}  // namespace monta::fabric
