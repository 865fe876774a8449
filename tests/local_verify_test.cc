// montactl verify on the README's local cluster: the real planner and two
// agents on one host's loopback (scripts/local-cluster.sh). Their benchmark
// traffic never crosses a link, so verify measures and says so, but neither
// calibrates nor answers later plans from it (docs/MODEL.md §11), unless
// --calibrate_on_loopback; what such a run taught the planner outlives its
// restart on the same --db.
#include <signal.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace monta::testing {
namespace {

// A reply as JSON, or null with the failure in `why`.
nlohmann::json Json(const CommandResult& r, std::string* why) {
  if (r.exit_code != 0) {
    *why = r.out + r.err;
    return nullptr;
  }
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded()) *why = r.out;
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

// What a later plan decides, without how long deciding took.
nlohmann::json Decision(nlohmann::json plan) {
  plan.erase("decision_seconds");
  return plan;
}

class LocalVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartPlanner(PlannerFlags()).ok());
    for (const char* node : {"node-a", "node-b"}) {
      ASSERT_TRUE(cluster_.StartAgent(node).ok());
    }
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster_.AllAlive({"node-a", "node-b"});
        },
        absl::Seconds(20)));
  }

  nlohmann::json Plan() {
    std::string why;
    nlohmann::json j =
        Json(cluster_.Montactl({"--output=json", "plan", "--job=" + job_,
                                "--node_names=node-a,node-b"}),
             &why);
    EXPECT_FALSE(j.is_null()) << why;
    return j;
  }

  nlohmann::json Verify(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--output=json",
                                     "verify",
                                     "--job=" + job_,
                                     "--node_names=node-a,node-b",
                                     "--chunks=1,2",
                                     "--iterations=3",
                                     "--verify_timeout_seconds=120"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string why;
    nlohmann::json j = Json(cluster_.Montactl(args), &why);
    EXPECT_FALSE(j.is_null()) << why;
    return j;
  }

  // A restarted planner on the same --db prices with what the run taught it
  // (issue 20 item 3): the same verified evidence and calibration, the same
  // times.
  void ExpectARestartKeeps(const nlohmann::json& insisted,
                           const nlohmann::json& verified) {
    const int port = cluster_.grpc_port();
    cluster_.planner().Signal(SIGTERM);
    ASSERT_TRUE(cluster_.planner().Wait(absl::Seconds(15)).ok());
    ASSERT_TRUE(cluster_.StartPlanner(PlannerFlags(), port).ok());
    EXPECT_NE(ReadFile(cluster_.planner().log_path())
                  .find(" node sets (calibration and runs), 1 verified jobs"),
              std::string::npos)
        << ReadFile(cluster_.planner().log_path());
    const nlohmann::json restarted = Plan();
    ASSERT_FALSE(restarted.is_null());
    EXPECT_EQ(restarted["evidence"]["origin"], "EVIDENCE_SOURCE_VERIFIED");
    EXPECT_EQ(restarted["evidence"]["verified"]["task_id"],
              insisted["task"]["task_id"])
        << restarted.dump(1);
    EXPECT_EQ(restarted["evidence"].contains("calibration"),
              insisted.contains("calibration"))
        << restarted.dump(1);
    if (insisted.contains("calibration")) {
      nlohmann::json before = verified["evidence"]["calibration"];
      nlohmann::json after = restarted["evidence"]["calibration"];
      before.erase("age_seconds");
      after.erase("age_seconds");
      EXPECT_EQ(after, before);
    }
    EXPECT_EQ(restarted["chosen"]["kind"], verified["chosen"]["kind"]);
    EXPECT_EQ(restarted["chosen"]["total_seconds_per_layer"],
              verified["chosen"]["total_seconds_per_layer"]);
  }

  std::vector<std::string> PlannerFlags() const {
    return {"--bench_on_register=false", "--bench_interval_seconds=0",
            "--db=" + cluster_.dir() + "/planner.db"};
  }

  LocalCluster cluster_;
  const std::string job_ = Runfile("examples/cpu-dev.yaml");
};

// The reply names one uncalibrated pick, the smallest uncalibrated
// prediction, and scores it as the plan's choice is scored: where the two
// are one candidate, the two regrets are one number; the fastest has none.
void ExpectUncalibratedPick(const nlohmann::json& v) {
  const nlohmann::json* pick = nullptr;
  int picks = 0;
  double smallest = 0;
  for (const auto& c : v["candidates"]) {
    const double u = c.value("uncalibrated_seconds", 0.0);
    if (u > 0 && (smallest == 0 || u < smallest)) smallest = u;
    if (c.value("uncalibrated_chosen", false)) {
      ++picks;
      pick = &c;
    }
  }
  ASSERT_EQ(picks, 1) << v.dump(1);
  EXPECT_EQ((*pick)["uncalibrated_seconds"].get<double>(), smallest);
  const double regret = v.value("uncalibrated_regret_ratio", 0.0);
  EXPECT_GE(regret, 0);
  if (pick->value("chosen", false)) {
    EXPECT_EQ(regret, v.value("regret_ratio", 0.0)) << v.dump(1);
    EXPECT_EQ(v.value("uncalibrated_regret_within_noise", false),
              v.value("regret_within_noise", false));
  }
  if (pick->value("best", false)) {
    EXPECT_EQ(regret, 0) << v.dump(1);
  }
}

// Each schedule runs once (docs/MODEL.md §11): the sweep's
// tp_dedup_pipelined K=1 is tp_dedup's schedule (cpu-dev.yaml's experts are
// tensor-parallel), so only tp_dedup's row is there, and no (kind, K_eff)
// twice.
void ExpectOneRunPerSchedule(const nlohmann::json& v) {
  std::set<std::pair<std::string, int>> seen;
  bool dedup = false;
  for (const auto& c : v["candidates"]) {
    const std::string kind = c["kind"];
    const int k = c.value("chunks_effective", 1);
    EXPECT_TRUE(seen.insert({kind, k}).second) << v.dump(1);
    EXPECT_FALSE(kind == "STRATEGY_KIND_TP_DEDUP_PIPELINED" && k == 1)
        << v.dump(1);
    dedup = dedup || kind == "STRATEGY_KIND_TP_DEDUP";
  }
  EXPECT_TRUE(dedup) << v.dump(1);
}

TEST_F(LocalVerifyTest, LoopbackNodesAreMeasuredButTeachNothing) {
  const nlohmann::json before = Plan();
  ASSERT_FALSE(before.is_null());
  for (int run = 0; run < 3; ++run) {
    const nlohmann::json v = Verify();
    ASSERT_FALSE(v.is_null());
    ASSERT_EQ(v["task"]["state"], "TASK_STATE_SUCCEEDED") << v.dump(1);
    EXPECT_EQ(v["scope"], "VERIFY_SCOPE_LAYER") << v.dump(1);
    EXPECT_TRUE(v.value("loopback_only", false)) << v.dump(1);
    EXPECT_EQ(v["calibration_outcome"], "CALIBRATION_OUTCOME_LOOPBACK");
    EXPECT_NE(v["calibration_note"].get<std::string>().find(
                  "node-a (127.0.0.1), node-b (127.0.0.1) benchmark over "
                  "loopback"),
              std::string::npos)
        << v.dump(1);
    EXPECT_FALSE(v.contains("calibration")) << v.dump(1);
    ASSERT_GE(v["candidates"].size(), 3u) << v.dump(1);
    for (const auto& c : v["candidates"]) {
      // Measured and data-checked all the same, with the spread of its
      // iterations.
      EXPECT_EQ(c.value("wrong_bytes", "0"), "0") << c.dump(1);
      EXPECT_GT(c["measured_seconds"].get<double>(), 0) << c.dump(1);
      EXPECT_GT(c["p90_seconds"].get<double>(), 0) << c.dump(1);
      EXPECT_GE(c["p90_seconds"].get<double>(), c["p10_seconds"].get<double>())
          << c.dump(1);
      // montactl prints zeros too: no calibration, no calibrated time.
      EXPECT_EQ(c.value("calibrated_seconds", 0.0), 0.0) << c.dump(1);
    }
    ExpectUncalibratedPick(v);
    ExpectOneRunPerSchedule(v);
  }
  // Three runs later, the plan for these nodes is the one before them.
  const nlohmann::json after = Plan();
  EXPECT_EQ(Decision(after), Decision(before)) << "before:\n"
                                               << before.dump(1) << "\nafter:\n"
                                               << after.dump(1);
  EXPECT_FALSE(after["evidence"].contains("calibration"));
  EXPECT_NE(after["evidence"]["origin"], "EVIDENCE_SOURCE_VERIFIED");

  // The table says it too.
  const CommandResult table = cluster_.Montactl(
      {"verify", "--job=" + job_, "--node_names=node-a,node-b", "--chunks=1",
       "--iterations=2", "--scope=op"});
  ASSERT_EQ(table.exit_code, 0) << table.out << table.err;
  EXPECT_NE(table.out.find("one dispatch op per candidate"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("these nodes do not cross a link"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("same schedule, run and scored once: "
                           "tp_dedup_pipelined K=1 as tp_dedup"),
            std::string::npos)
      << table.out;

  // The operator may insist: the run then answers later plans.
  const nlohmann::json insisted = Verify({"--calibrate_on_loopback"});
  ASSERT_FALSE(insisted.is_null());
  EXPECT_TRUE(insisted.value("loopback_only", false));
  EXPECT_NE(insisted["calibration_outcome"], "CALIBRATION_OUTCOME_LOOPBACK")
      << insisted.dump(1);
  const nlohmann::json verified = Plan();
  EXPECT_EQ(verified["evidence"]["origin"], "EVIDENCE_SOURCE_VERIFIED");

  ExpectARestartKeeps(insisted, verified);
}

TEST_F(LocalVerifyTest, ABadScopeIsRefusedByTheClient) {
  const CommandResult r =
      cluster_.Montactl({"verify", "--job=" + job_,
                         "--node_names=node-a,node-b", "--scope=step"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--scope: expected layer or op"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace monta::testing
