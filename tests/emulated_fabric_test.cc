// The emulated fabric (scripts/emulated-cluster.sh --racks) end to end, as
// root: 2 racks x 2 nodes x 2 ranks, each rack a bridge, the two joined by one
// spine link shaped at 100 Mbit/s each way, node links at 400 Mbit/s. The
// planner reads the fabric map the script wrote and reports the tree
// (montactl topology --fabric); the shaping is real: an AllToAll between two
// nodes of different racks is bounded by the spine link, one between two
// nodes of a rack is not; a plan on the nodes with the racks interleaved is
// bounded by the spine link and advises the rank order that keeps its EP
// groups inside the racks; a round of level measurements (montactl bench
// --fabric: a pair inside each rack, a pair across, all four nodes at once)
// lands in the tree, each uplink's measured share bounded by the spine link
// and each rack's own level not; `down` leaves no namespace and no process
// behind.
//
// Where this machine cannot make namespaces (not root, or a container without
// veth/bridge/tbf) the test skips (GTEST_SKIP) with the script's reason.
//
// Every step is bounded (up 70 s, each bench 70 s, the level round 90 s, down
// 30 s); it takes about 50 s where it runs.

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/emulated_cluster.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

constexpr double kNodeBytesPerSecond = 400e6 / 8;
constexpr double kUplinkBytesPerSecond = 100e6 / 8;

class EmulatedFabricTest : public ::testing::Test {
 protected:
  // Always runs, also after a failed assertion: nothing may outlive the test.
  void TearDown() override { cluster_.ExpectDown(); }

  CommandResult Ctl(const std::vector<std::string>& args,
                    absl::Duration timeout = absl::Seconds(20)) {
    return cluster_.Ctl(args, kLogs, timeout);
  }
  nlohmann::json CtlJson(const std::vector<std::string>& args,
                         absl::Duration timeout = absl::Seconds(20)) {
    return cluster_.CtlJson(args, kLogs, timeout);
  }
  std::string Logs() const { return cluster_.Logs(kLogs); }

  // The AllToAll algbw of the largest size an inter-node benchmark of
  // `nodes` measured (bytes per second); every point data-checked.
  double LargestAlgbw(const std::string& nodes);

  // The tree the planner reports matches the map the script wrote.
  void ExpectTwoRacksOfTwo();

  // One round of level measurements (montactl bench --fabric) lands in the
  // tree: each uplink's share bounded by the spine link, each rack's own
  // level not.
  void MeasureTheLevels();

  const std::vector<std::string> kLogs = {"planner.log", "agent-r0-n0.log",
                                          "agent-r1-n0.log"};
  EmulatedCluster cluster_{"mf", "fabric"};
};

double EmulatedFabricTest::LargestAlgbw(const std::string& nodes) {
  nlohmann::json bench =
      CtlJson({"bench", "--nodes=" + nodes, "--bench_timeout_seconds=60"},
              absl::Seconds(70));
  EXPECT_EQ(bench["status"]["state"], "TASK_STATE_SUCCEEDED")
      << bench.dump(1) << Logs();
  const std::string task_id = bench["status"].value("task_id", "");
  const std::string first = nodes.substr(0, nodes.find(','));
  nlohmann::json node = CtlJson({"node", first});
  for (const auto& curve : node.value("curves", nlohmann::json::array())) {
    // The plain collective, not one of the strategy schedules.
    const std::string strategy =
        curve.value("strategy_kind", "STRATEGY_KIND_UNSPECIFIED");
    if (curve["task_id"] != task_id ||
        curve["collective"] != "COLLECTIVE_ALLTOALL" ||
        strategy != "STRATEGY_KIND_UNSPECIFIED") {
      continue;
    }
    EXPECT_EQ(curve["scope"], "SCOPE_INTER_NODE");
    EXPECT_GE(curve["points"].size(), 3u) << curve.dump(1);
    for (const auto& p : curve["points"]) {
      EXPECT_EQ(p.value("wrong_bytes", "0"), "0") << p.dump();
    }
    return curve["points"].back()["algbw_bytes_per_second"].get<double>();
  }
  ADD_FAILURE() << "no AllToAll curve of task " << task_id << " on " << first
                << ": " << node.dump(1);
  return 0;
}

void EmulatedFabricTest::ExpectTwoRacksOfTwo() {
  nlohmann::json tree = CtlJson({"topology", "--fabric"});
  ASSERT_EQ(tree["blocks"].size(), 1u) << tree.dump(1);
  const nlohmann::json& racks = tree["blocks"][0]["racks"];
  ASSERT_EQ(racks.size(), 2u) << tree.dump(1);
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& rack = racks[r];
    EXPECT_EQ(rack["name"], absl::StrCat("r", r));
    EXPECT_EQ(rack["source"], "FABRIC_SOURCE_MAP");
    EXPECT_DOUBLE_EQ(rack["uplink"]["declared_bytes_per_second"].get<double>(),
                     kUplinkBytesPerSecond);
    ASSERT_EQ(rack["nodes"].size(), 2u) << rack.dump(1);
    for (int i = 0; i < 2; ++i) {
      const nlohmann::json& node = rack["nodes"][i];
      EXPECT_EQ(node["name"], absl::StrCat("r", r, "-n", i));
      EXPECT_EQ(node["state"], "NODE_STATE_ALIVE");
      EXPECT_EQ(node["position"]["rack"], absl::StrCat("r", r));
      EXPECT_EQ(node["position"]["source"], "FABRIC_SOURCE_MAP");
    }
  }
  EXPECT_EQ(tree.value("unplaced", nlohmann::json::array()).size(), 0u);
  const std::string text = Ctl({"topology", "--fabric"}).out;
  for (const char* want : {"rack r0", "rack r1", "  r1-n1", "100 Mb/s"}) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  }
  // Every node on its rack's subnet address.
  nlohmann::json nodes = CtlJson({"nodes"});
  ASSERT_EQ(nodes["nodes"].size(), 4u) << nodes.dump(1);
  for (const auto& node : nodes["nodes"]) {
    const std::string name = node["name"];
    EXPECT_EQ(node["bench_address"], absl::StrCat("10.213.", name[1] - '0' + 1,
                                                  ".", name[4] - '0' + 1));
  }
}

TEST_F(EmulatedFabricTest, TwoRacksShowInTheTreeAndTheSpineBoundsTraffic) {
  std::string skip;
  const CommandResult up = cluster_.Up(
      {"--racks=2", "--nodes=2", "--ranks_per_node=2", "--rate=400mbit",
       "--uplink_rate=100mbit", "--self_bench=false", "--timeout=60"},
      absl::Seconds(70), &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err << Logs();
  ASSERT_NO_FATAL_FAILURE(ExpectTwoRacksOfTwo());

  // Across racks a node's traffic leaves through the 100 Mbit/s spine link:
  // the AllToAll is bounded by it (10% for tbf's burst), as it is by the
  // node link in the flat cluster (emulated_cluster_test).
  const double across = LargestAlgbw("r0-n0,r1-n0");
  EXPECT_GT(across, 0);
  EXPECT_LE(across, 1.1 * kUplinkBytesPerSecond);
  // Inside a rack only the 400 Mbit/s node links bound it: well above what
  // the spine link could carry.
  const double within = LargestAlgbw("r1-n0,r1-n1");
  EXPECT_GE(within, 1.5 * kUplinkBytesPerSecond);
  EXPECT_LE(within, 1.1 * kNodeBytesPerSecond);
  std::cout << "algbw at the largest size: across racks " << across / 1e6
            << " MB/s (spine link " << kUplinkBytesPerSecond / 1e6
            << " MB/s), within a rack " << within / 1e6 << " MB/s (node link "
            << kNodeBytesPerSecond / 1e6 << " MB/s)\n";

  // The plan on the nodes with the racks interleaved (docs/MODEL.md §12):
  // every EP group of 2 nodes crosses the spine link, which bounds it (as
  // the pair across the racks measured it); the advice keeps the EP
  // groups inside the racks, where the node links bound them.
  const std::string job =
      std::filesystem::absolute("examples/fabric-ep4.yaml").string();
  nlohmann::json plan =
      CtlJson({"plan", "--job=" + job, "--node_names=r0-n0,r1-n0,r0-n1,r1-n1"});
  const nlohmann::json& bound = plan["chosen"]["fabric_bound"];
  EXPECT_EQ(bound["level"], "FABRIC_LEVEL_RACK_UPLINK") << plan.dump(1);
  // Measured: the pair across the racks above is a cross-rack level task.
  EXPECT_FALSE(bound.value("declared", false)) << bound.dump(1);
  EXPECT_GT(bound["bytes_per_second"].get<double>(), 0);
  EXPECT_LE(bound["bytes_per_second"].get<double>(),
            1.1 * kUplinkBytesPerSecond);
  const nlohmann::json& advice = plan["rank_order"];
  EXPECT_EQ(advice["nodes"],
            nlohmann::json({"r0-n0", "r0-n1", "r1-n0", "r1-n1"}))
      << advice.dump(1);
  EXPECT_EQ(advice["advised_bound"]["level"], "FABRIC_LEVEL_NODE_LINK");
  EXPECT_GT(advice["given_dispatch_seconds"].get<double>(),
            2 * advice["advised_dispatch_seconds"].get<double>())
      << advice.dump(1);
  const std::string text =
      Ctl({"plan", "--job=" + job, "--node_names=r0-n0,r1-n0,r0-n1,r1-n1"}).out;
  EXPECT_TRUE(absl::StrContains(text, "Rank order: r0-n0,r0-n1,r1-n0,r1-n1"))
      << text;

  ASSERT_NO_FATAL_FAILURE(MeasureTheLevels());
}

void EmulatedFabricTest::MeasureTheLevels() {
  // What a round would run: inside each rack, a pair across, all four at once.
  nlohmann::json dry = CtlJson({"bench", "--fabric", "--dry_run"});
  ASSERT_EQ(dry["fabric_tasks"].size(), 4u) << dry.dump(1);
  EXPECT_EQ(dry["fabric_tasks"][3]["fabric"]["level"],
            "FABRIC_SPAN_LEVEL_CROSS_RACK");
  EXPECT_EQ(dry["fabric_tasks"][3]["fabric"]["concurrent_nodes"], 4);
  EXPECT_EQ(dry["fabric_tasks"][3].value("task_id", ""), "");  // none made
  // One round, as the periodic schedule runs it, up to 4 MiB per rank.
  nlohmann::json round = CtlJson({"bench", "--fabric", "--max_bytes=4194304",
                                  "--bench_timeout_seconds=60"});
  ASSERT_EQ(round["fabric_tasks"].size(), 4u) << round.dump(1);
  const std::string at_once = round["fabric_tasks"][3].value("task_id", "");
  // Until both uplinks show the four-node task and both racks their inside.
  nlohmann::json tree;
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  bool measured = false;
  while (!measured && absl::Now() < deadline) {
    absl::SleepFor(absl::Seconds(1));
    tree = CtlJson({"topology", "--fabric"});
    measured = true;
    for (const auto& rack : tree["blocks"][0]["racks"]) {
      measured = measured && rack.contains("inside") &&
                 rack["uplink"].contains("measured") &&
                 rack["uplink"]["measured"].value("task_id", "") == at_once;
    }
  }
  ASSERT_TRUE(measured) << tree.dump(1) << Logs();
  for (const auto& rack : tree["blocks"][0]["racks"]) {
    // The spine link's share the four nodes carried at once: bounded by it
    // (10% for tbf's burst).
    const nlohmann::json& up = rack["uplink"]["measured"];
    EXPECT_EQ(up["concurrent_nodes"], 4) << rack.dump(1);
    EXPECT_GT(up["bytes_per_second"].get<double>(),
              0.3 * kUplinkBytesPerSecond);
    EXPECT_LE(up["bytes_per_second"].get<double>(),
              1.1 * kUplinkBytesPerSecond);
    // Inside the rack only the node links bound a pair.
    const double inside = rack["inside"]["bytes_per_second"].get<double>();
    EXPECT_GE(inside, 1.5 * kUplinkBytesPerSecond) << rack.dump(1);
    EXPECT_LE(inside, 1.1 * kNodeBytesPerSecond) << rack.dump(1);
    std::cout << "rack " << rack["name"].get<std::string>() << ": uplink "
              << up["bytes_per_second"].get<double>() / 1e6
              << " MB/s with 4 nodes at once, inside " << inside / 1e6
              << " MB/s\n";
  }
  const std::string text = Ctl({"topology", "--fabric"}).out;
  for (const char* want : {"4 nodes at once", "inside "}) {
    EXPECT_TRUE(absl::StrContains(text, want)) << want << "\n" << text;
  }
}

}  // namespace
}  // namespace monta::testing
