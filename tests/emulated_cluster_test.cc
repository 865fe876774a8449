// The emulated two-tier cluster (scripts/emulated-cluster.sh) end to end, as
// root: two node network namespaces with two ranks each on a bridge, links
// shaped with tbf, the planner in a hub namespace. Both agents register and
// measure themselves; an inter-node benchmark driven from the hub crosses the
// shaped link and reports correct curves that the link's rate bounds; `down`
// leaves no namespace and no process behind.
//
// Where this machine cannot make namespaces (not root, or a container without
// veth/bridge/tbf) the test skips (GTEST_SKIP) with the script's reason.
//
// Every step is bounded (up 100 s, bench 110 s, down 30 s) so the test ends,
// and tears the cluster down, well inside Bazel's 300 s for a medium test.

#include "tests/testing/emulated_cluster.h"

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

constexpr int kNodes = 2;
constexpr int kRanksPerNode = 2;
constexpr char kRate[] = "400mbit";
constexpr double kRateBytesPerSecond = 400e6 / 8;

class EmulatedClusterTest : public ::testing::Test {
 protected:
  // Always runs, also after a failed assertion: nothing may outlive the test.
  void TearDown() override { cluster_.ExpectDown(); }

  // montactl --output=json ARGS in the hub namespace, parsed.
  nlohmann::json Ctl(const std::vector<std::string>& args,
                     absl::Duration timeout = absl::Seconds(20)) {
    return cluster_.CtlJson(args, kLogs, timeout);
  }

  std::string Logs() const { return cluster_.Logs(kLogs); }

  // montactl verify of a small job (2 MiB dispatch per rank, TP 2 in a node,
  // EP 2 across the link): one MoE layer per candidate, data-checked and
  // timed, the run stored and exported (with its scope), and a later plan of
  // the job answered from it.
  void VerifySmallDispatch();

  const std::vector<std::string> kLogs = {"planner.log", "agent-node-0.log",
                                          "agent-node-1.log"};
  EmulatedCluster cluster_{"mt", "emul"};
};

constexpr char kSmallJob[] = R"(job:
  name: emulated-verify
  hidden_size: 1024
  num_experts: 8
  top_k: 2
  capacity_factor: 1.0
  micro_batch_size: 1
  sequence_length: 512
  bytes_per_element: 2
  moe_layers: 1
  world_size: 4
  tensor_parallel_size: 2
  expert_parallel_size: 2
  pipeline_parallel_size: 1
  data_parallel_size: 2
placement:
  gpus_per_node: 2
)";

void EmulatedClusterTest::VerifySmallDispatch() {
  const std::string job = TempDir() + "/small-job.yaml";
  std::ofstream(job) << kSmallJob;
  const std::string svg = TempDir() + "/verify.svg";
  nlohmann::json v = Ctl(
      {"verify", "--job=" + job, "--node_names=node-0,node-1", "--chunks=1,2,4",
       "--iterations=2", "--verify_timeout_seconds=60", "--svg=" + svg},
      absl::Seconds(80));
  ASSERT_EQ(v["task"]["state"], "TASK_STATE_SUCCEEDED") << v.dump(1) << Logs();
  std::set<std::string> kinds;
  int chosen = 0;
  for (const auto& c : v["candidates"]) {
    kinds.insert(c["kind"].get<std::string>());
    // proto3 JSON leaves zeros out: no wrong_bytes means 0 wrong bytes.
    EXPECT_EQ(c.value("wrong_bytes", "0"), "0") << c.dump(1);
    EXPECT_GT(c["measured_seconds"].get<double>(), 0) << c.dump(1);
    EXPECT_GT(c["predicted_seconds"].get<double>(), 0) << c.dump(1);
    EXPECT_EQ(c["dispatch_bytes"], "2097152") << c.dump(1);
    chosen += c.value("chosen", false) ? 1 : 0;
  }
  // The job leaves its experts whole (not tensor-parallel): tp_dedup runs
  // flat's schedule, and verify runs it once, as flat (docs/MODEL.md §11).
  EXPECT_EQ(kinds, (std::set<std::string>{"STRATEGY_KIND_FLAT",
                                          "STRATEGY_KIND_TP_DEDUP_PIPELINED"}))
      << v.dump(1);
  EXPECT_EQ(chosen, 1) << v.dump(1);
  EXPECT_GE(v.value("regret_ratio", 0.0), 0);
  // The layer, forward and backward, in the layout the plan priced; the
  // nodes have their own addresses and links, so the run may calibrate.
  EXPECT_EQ(v["scope"], "VERIFY_SCOPE_LAYER") << v.dump(1);
  EXPECT_FALSE(v.value("loopback_only", false)) << v.dump(1);
  const std::string outcome = v.value("calibration_outcome", "");
  EXPECT_TRUE(outcome == "CALIBRATION_OUTCOME_FITTED" ||
              outcome == "CALIBRATION_OUTCOME_SHRUNK" ||
              outcome == "CALIBRATION_OUTCOME_REFUSED" ||
              outcome == "CALIBRATION_OUTCOME_TOO_NOISY")
      << v.dump(1);
  const bool calibrated = outcome == "CALIBRATION_OUTCOME_FITTED" ||
                          outcome == "CALIBRATION_OUTCOME_SHRUNK";
  EXPECT_EQ(v.contains("calibration"), calibrated) << v.dump(1);
  EXPECT_TRUE(absl::StrContains(ReadFile(svg), "<circle")) << svg;

  // The next plan of the same job on the same nodes is the verified one.
  nlohmann::json plan =
      Ctl({"plan", "--job=" + job, "--node_names=node-0,node-1"});
  EXPECT_EQ(plan["evidence"]["origin"], "EVIDENCE_SOURCE_VERIFIED")
      << plan.dump(1);
  EXPECT_EQ(plan["evidence"]["verified"]["task_id"], v["task"]["task_id"]);
  if (calibrated) {
    EXPECT_EQ(plan["evidence"]["calibration"]["task_id"], v["task"]["task_id"]);
  }

  // Exported for dashboards (the planner's /metrics inside the hub).
  const CommandResult metrics = cluster_.Script(
      "exec", {"hub", "--", "curl", "-sS", "http://10.213.0.1:7401/metrics"},
      absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(metrics.out, "monta_plan_regret_ratio"))
      << metrics.out << metrics.err;
  EXPECT_TRUE(absl::StrContains(
      metrics.out,
      "monta_prediction_error_ratio{scope=\"layer\",strategy=\"flat\"}"))
      << metrics.out;
  EXPECT_TRUE(absl::StrContains(
      metrics.out, "monta_verify_runs_total{result=\"ok\",scope=\"layer\"} 1"))
      << metrics.out;
}

TEST_F(EmulatedClusterTest, TwoNodesBenchmarkAcrossTheShapedLink) {
  std::string skip;
  const CommandResult up =
      cluster_.Up({absl::StrCat("--nodes=", kNodes),
                   absl::StrCat("--ranks_per_node=", kRanksPerNode),
                   absl::StrCat("--rate=", kRate), "--timeout=80"},
                  absl::Seconds(100), &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err << Logs();

  // Both agents registered from their own namespaces and addresses.
  nlohmann::json nodes = Ctl({"nodes"});
  ASSERT_EQ(nodes["nodes"].size(), static_cast<size_t>(kNodes))
      << nodes.dump(1);
  for (const auto& node : nodes["nodes"]) {
    EXPECT_EQ(node["state"], "NODE_STATE_ALIVE") << node.dump(1);
    const std::string name = node["name"];
    EXPECT_EQ(node["bench_address"],
              absl::StrCat("10.213.1.", std::stoi(name.substr(5)) + 1));
  }

  // One AllToAll sweep across the link, driven from the hub; its ranks per
  // node come from the cluster's --ranks_per_node (the planner's default).
  nlohmann::json bench =
      Ctl({"bench", "--nodes=node-0,node-1", "--bench_timeout_seconds=90"},
          absl::Seconds(110));
  ASSERT_EQ(bench["status"]["state"], "TASK_STATE_SUCCEEDED")
      << bench.dump(1) << Logs();
  const std::string task_id = bench["status"]["task_id"];

  for (const char* name : {"node-0", "node-1"}) {
    nlohmann::json node = Ctl({"node", name});
    bool found = false;
    for (const auto& curve : node["curves"]) {
      if (curve["task_id"] != task_id) continue;
      found = true;
      EXPECT_EQ(curve["scope"], "SCOPE_INTER_NODE");
      EXPECT_EQ(curve["nranks"], kNodes * kRanksPerNode);
      EXPECT_EQ(curve["n_nodes"], kNodes);
      ASSERT_GE(curve["points"].size(), 3u) << curve.dump(1);
      for (const auto& p : curve["points"]) {
        EXPECT_EQ(std::stoull(p["wrong_bytes"].get<std::string>()), 0u);
        EXPECT_GT(p["algbw_bytes_per_second"].get<double>(), 0);
      }
      // Half of what each rank sends leaves its node, so a node pushes
      // message_bytes per direction through its link: the shaping bounds
      // algbw by the rate (10% for tbf's burst), which shows traffic between
      // nodes really crossed the shaped link.
      const auto& largest = curve["points"].back();
      EXPECT_LE(largest["algbw_bytes_per_second"].get<double>(),
                1.1 * kRateBytesPerSecond)
          << largest.dump(1);
    }
    EXPECT_TRUE(found) << name << ": " << node["curves"].dump(1);
  }
  VerifySmallDispatch();
}

}  // namespace
}  // namespace monta::testing
