// Where nodes sit, end to end over mutual TLS: the real planner reads an
// operator's fabric map and a node labels file, real agents (each with its
// own node certificate) report topology labels claiming other racks, and
// montactl (an operator's certificate) reads the tree. A node cannot move
// itself: its claim is flagged (montactl, metrics, the planner's log) and the
// node stays where the map put it, until the operator changes the map. A map
// that stops parsing keeps the previous one in use.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cluster.h"
#include "tests/testing/grpc_clients.h"

namespace monta::testing {
namespace {

constexpr char kLeaf[] = "network.topology.nvidia.com/leaf";

// As a ConfigMap volume or the labels sidecar writes: a new file renamed over
// the old one.
void Write(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

class FabricMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    map_ = cluster_.dir() + "/fabric-map.yaml";
    labels_ = cluster_.dir() + "/nodes.json";
    Write(map_,
          "version: 1\n"
          "racks:\n"
          "- name: r0\n"
          "  uplink_bits_per_second: 100gbit\n"
          "  nodes: [node-a]\n"
          "- name: r1\n"
          "  uplink_bits_per_second: 100gbit\n"
          "  nodes: [node-b]\n");
    // The Kubernetes labels place node-c, which the map does not name.
    Write(labels_, absl::StrCat(R"({"kind": "List", "items": [)",
                                R"({"metadata": {"name": "node-c", "labels": )",
                                R"({")", kLeaf, R"(": "leaf-5"}}}]})"));
  }

  // `montactl --output json topology --fabric`, parsed.
  nlohmann::json Tree() {
    const CommandResult r =
        cluster_.Montactl({"--output=json", "topology", "--fabric"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  // The rack `node` sits under in `tree`, and its entry there.
  static std::string RackOf(const nlohmann::json& tree, const std::string& node,
                            nlohmann::json* entry = nullptr) {
    for (const auto& block : tree.value("blocks", nlohmann::json::array())) {
      for (const auto& rack : block.value("racks", nlohmann::json::array())) {
        for (const auto& n : rack.value("nodes", nlohmann::json::array())) {
          if (n["name"] != node) continue;
          if (entry != nullptr) *entry = n;
          return rack["name"];
        }
      }
    }
    return "";
  }

  void StartCluster();
  void ExpectClaimsFlaggedNotFollowed();

  std::string Metrics() { return PlannerMetrics(cluster_); }

  LocalCluster cluster_;
  std::string map_, labels_;
};

// Starts the planner with the map and the labels file, and three agents:
// node-a's claims r1 (where node-b is), node-c's claims r0; node-b's says
// nothing.
void FabricMapTest::StartCluster() {
  ASSERT_TRUE(cluster_
                  .StartPlanner({"--bench_on_register=false",
                                 "--fabric_map_file=" + map_,
                                 "--fabric_node_labels_file=" + labels_,
                                 "--fabric_refresh_seconds=1"})
                  .ok());
  ASSERT_TRUE(
      cluster_.StartAgent("node-a", {absl::StrCat("--labels=", kLeaf, "=r1")})
          .ok());
  ASSERT_TRUE(cluster_.StartAgent("node-b").ok());
  ASSERT_TRUE(
      cluster_.StartAgent("node-c", {absl::StrCat("--labels=", kLeaf, "=r0")})
          .ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_.AllAlive({"node-a", "node-b", "node-c"});
      },
      absl::Seconds(30)))
      << cluster_.Montactl({"nodes"}).out;
}

// Every node where the map or its labels put it, each claim flagged: in the
// tree, the node's record, montactl's text, the metrics and the log.
void FabricMapTest::ExpectClaimsFlaggedNotFollowed() {
  const nlohmann::json tree = Tree();
  nlohmann::json a;
  EXPECT_EQ(RackOf(tree, "node-a", &a), "r0") << tree.dump(1);
  EXPECT_EQ(a["state"], "NODE_STATE_ALIVE");
  EXPECT_EQ(a["position"]["source"], "FABRIC_SOURCE_MAP");
  EXPECT_EQ(a["position"]["hint_rack"], "r1");
  EXPECT_EQ(a["position"]["hint_disagrees"], true);
  EXPECT_EQ(RackOf(tree, "node-b"), "r1");
  nlohmann::json c;
  EXPECT_EQ(RackOf(tree, "node-c", &c), "leaf-5") << tree.dump(1);
  EXPECT_EQ(c["position"]["source"], "FABRIC_SOURCE_NODE_LABELS");
  EXPECT_EQ(c["position"]["hint_disagrees"], true);
  EXPECT_EQ(tree.value("unplaced", nlohmann::json::array()).size(), 0u);

  const CommandResult node = cluster_.Montactl({"node", "node-a"});
  const nlohmann::json info = nlohmann::json::parse(node.out, nullptr, false);
  EXPECT_EQ(info["fabric"]["rack"], "r0") << node.out;
  const CommandResult text = cluster_.Montactl({"topology", "--fabric"});
  EXPECT_TRUE(absl::StrContains(text.out, "! its agent says rack r1"))
      << text.out;
  const CommandResult topology = cluster_.Montactl({"topology", "node-a"});
  EXPECT_TRUE(absl::StrContains(topology.out, "Fabric: rack r0 (fabric map"))
      << topology.out;

  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(ReadFile(cluster_.planner().log_path()),
                                 "node node-a: its agent says rack r1 (" +
                                     std::string(kLeaf) +
                                     "); the fabric map places it in rack r0");
      },
      absl::Seconds(10)))
      << ReadFile(cluster_.planner().log_path());
  const std::string metrics = Metrics();
  for (const char* series :
       {"monta_fabric_hint_disagreement{node=\"node-a\"} 1",
        "monta_fabric_hint_disagreement{node=\"node-c\"} 1",
        "monta_fabric_nodes{source=\"map\"} 2",
        "monta_fabric_nodes{source=\"node_labels\"} 1"}) {
    EXPECT_TRUE(absl::StrContains(metrics, series)) << series << "\n"
                                                    << metrics;
  }
}

TEST_F(FabricMapTest, AnAgentCannotMoveItsNodeToAnotherRack) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  ExpectClaimsFlaggedNotFollowed();

  // The operator, who is trusted, moves node-a to r1.
  Write(map_,
        "version: 1\n"
        "racks:\n"
        "- name: r0\n"
        "  nodes: []\n"
        "- name: r1\n"
        "  nodes: [node-b, node-a]\n");
  ASSERT_TRUE(WaitFor([&] { return RackOf(Tree(), "node-a") == "r1"; },
                      absl::Seconds(10)))
      << Tree().dump(1);
  nlohmann::json a;
  RackOf(Tree(), "node-a", &a);
  EXPECT_EQ(a["position"].value("hint_disagrees", false), false);

  // A map that stops parsing changes nothing, and says so.
  Write(map_, "version: 1\nracks:\n- name: r0\n  nodes: [node-a, node-a]\n");
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(
            Metrics(),
            "monta_fabric_source_loads_total{source=\"map\",result=\"error\"}"
            " 1");
      },
      absl::Seconds(10)))
      << Metrics();
  const nlohmann::json tree = Tree();
  EXPECT_EQ(RackOf(tree, "node-a"), "r1");
  EXPECT_TRUE(absl::StrContains(tree["sources"][0]["error"].get<std::string>(),
                                "line 4: node node-a is listed twice"))
      << tree.dump(1);
  EXPECT_TRUE(absl::StrContains(Metrics(),
                                "monta_fabric_source_valid{source=\"map\"} 0"));
}

}  // namespace
}  // namespace monta::testing
