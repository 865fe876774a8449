#include "client/verify_render.h"

#include <string>

#include "gtest/gtest.h"

namespace monta::client {
namespace {

namespace v1 = ::monta::v1;

v1::VerifyReply Reply() {
  v1::VerifyReply r;
  r.add_nodes("node-0");
  r.add_nodes("node-1");
  r.set_ranks_per_node(2);
  r.mutable_task()->set_task_id("bench-1");
  auto add = [&](v1::StrategyKind kind, int k, double pred, double meas) {
    v1::VerifiedCandidate* c = r.add_candidates();
    c->set_kind(kind);
    c->set_chunks_requested(k);
    c->set_chunks_effective(k);
    c->set_predicted_seconds(pred);
    c->set_measured_seconds(meas);
    c->set_error_ratio(pred / meas - 1);
    return c;
  };
  add(v1::STRATEGY_KIND_FLAT, 1, 0.200, 0.180);
  add(v1::STRATEGY_KIND_TP_DEDUP, 1, 0.110, 0.100);
  add(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 1, 0.110, 0.100);
  add(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 4, 0.070, 0.080)->set_chosen(true);
  add(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 16, 0.060, 0.075)->set_best(true);
  r.set_regret_ratio(0.080 / 0.075 - 1);
  r.set_median_error_ratio(0.11);
  r.set_max_error_ratio(0.2);
  return r;
}

TEST(VerifyRenderTest, TableHasEveryCandidateAndTheScores) {
  const std::string t = VerifyTable(Reply());
  EXPECT_NE(t.find("verify task bench-1 on node-0,node-1 (2 ranks per node)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("tp_dedup_pipelined"), std::string::npos);
  EXPECT_NE(t.find("+11.1%"), std::string::npos) << t;  // flat 200 vs 180
  EXPECT_NE(t.find("regret of the plan: 6.7%"), std::string::npos) << t;
  EXPECT_EQ(t.find("calibration"), std::string::npos);
  EXPECT_EQ(t.find("uncalibrated"), std::string::npos) << t;
}

TEST(VerifyRenderTest, TableShowsTheUncalibratedPickAndItsRegret) {
  v1::VerifyReply r = Reply();
  r.mutable_candidates(2)->set_uncalibrated_chosen(
      true);  // tp_dedup_pipelined K=1
  r.set_uncalibrated_regret_ratio(0.184);
  std::string t = VerifyTable(r);
  EXPECT_NE(
      t.find("uncalibrated, the model picks tp_dedup_pipelined K=1: regret "
             "18.4%\n"),
      std::string::npos)
      << t;
  r.set_uncalibrated_regret_within_noise(true);
  t = VerifyTable(r);
  EXPECT_NE(t.find("regret 18.4% (inside the noise of the two runs)"),
            std::string::npos)
      << t;
}

// Verify runs a schedule once (docs/MODEL.md §11); the table names the
// plan's candidates it ran as a simpler one.
TEST(VerifyRenderTest, TableNamesCandidatesRunAsTheSameSchedule) {
  v1::VerifyReply r = Reply();
  r.set_scope(v1::VERIFY_SCOPE_LAYER);
  r.mutable_plan()->set_expert_layout(v1::EXPERT_LAYOUT_TENSOR_PARALLEL);
  for (v1::StrategyKind kind :
       {v1::STRATEGY_KIND_FLAT, v1::STRATEGY_KIND_TP_DEDUP,
        v1::STRATEGY_KIND_TP_DEDUP_PIPELINED}) {
    v1::Candidate* c = r.mutable_plan()->add_candidates();
    c->set_kind(kind);
    c->set_feasible(true);
  }
  EXPECT_NE(VerifyTable(r).find("same schedule, run and scored once: "
                                "tp_dedup_pipelined K=1 as tp_dedup\n"),
            std::string::npos)
      << VerifyTable(r);
  r.mutable_plan()->set_expert_layout(v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL);
  EXPECT_NE(VerifyTable(r).find("same schedule, run and scored once: "
                                "tp_dedup as flat, tp_dedup_pipelined K=1 as "
                                "flat\n"),
            std::string::npos)
      << VerifyTable(r);
  r.set_scope(v1::VERIFY_SCOPE_OP);  // one dispatch op: flat is its own
  EXPECT_NE(VerifyTable(r).find(": tp_dedup_pipelined K=1 as tp_dedup\n"),
            std::string::npos)
      << VerifyTable(r);
}

TEST(VerifyRenderTest, TableShowsScopeSpreadNoiseAndLoopback) {
  v1::VerifyReply r = Reply();
  r.set_scope(v1::VERIFY_SCOPE_LAYER);
  r.mutable_plan()->set_expert_layout(v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL);
  v1::VerifiedCandidate& chosen = *r.mutable_candidates(3);
  chosen.set_p10_seconds(0.070);
  chosen.set_p90_seconds(0.090);
  chosen.set_spread_ratio(0.25);
  chosen.set_noisy(true);
  r.set_regret_within_noise(true);
  r.set_loopback_only(true);
  r.set_calibration_outcome(v1::CALIBRATION_OUTCOME_LOOPBACK);
  r.set_calibration_note("nodes a (127.0.0.1), b (127.0.0.1)");
  const std::string t = VerifyTable(r);
  for (const char* want :
       {"one MoE layer per candidate (dispatch and combine, forward and "
        "backward, experts not tensor-parallel)",
        "70.00..90.00 ms 25% noisy",
        "regret of the plan: 6.7% (inside the noise",
        "these nodes do not cross a link",
        "calibration: not calibrated: no link crossed (nodes a (127.0.0.1)"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  }
  r.set_scope(v1::VERIFY_SCOPE_OP);
  EXPECT_NE(VerifyTable(r).find("one dispatch op per candidate"),
            std::string::npos);
  EXPECT_NE(VerifySvg(r).find("One dispatch op on"), std::string::npos);
}

TEST(VerifyRenderTest, SvgHasALinePerStrategyAndAPointPerRun) {
  const std::string svg = VerifySvg(Reply());
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = svg.find(needle); p != std::string::npos;
         p = svg.find(needle, p + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("<circle"), 5u);
  // Predicted lines for the three strategies (no calibrated ones here).
  EXPECT_EQ(count("<polyline"), 3u);
  EXPECT_EQ(count("r=\"7\""), 1u);  // the chosen run is ringed
  EXPECT_NE(svg.find("regret 6.7%"), std::string::npos);
}

TEST(VerifyRenderTest, CalibratedTimesAddDashedLines) {
  v1::VerifyReply r = Reply();
  for (auto& c : *r.mutable_candidates()) {
    c.set_calibrated_seconds(c.measured_seconds() * 1.01);
  }
  r.mutable_calibration()->set_per_chunk_overhead_seconds(0.002);
  r.mutable_calibration()->set_network_scale_ratio(1.1);
  EXPECT_NE(VerifyTable(r).find("2.000 ms per chunk"), std::string::npos);
  const std::string svg = VerifySvg(r);
  size_t dashed = 0;
  for (size_t p = svg.find("6,4"); p != std::string::npos;
       p = svg.find("6,4", p + 1)) {
    ++dashed;
  }
  EXPECT_EQ(dashed, 3u);
}

}  // namespace
}  // namespace monta::client
