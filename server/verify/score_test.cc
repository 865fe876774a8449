#include "server/verify/score.h"

#include "gtest/gtest.h"

namespace monta::verify {
namespace {

namespace v1 = ::monta::v1;

void Add(v1::VerifyReply* reply, int chunks, double measured,
         double uncalibrated, bool chosen) {
  v1::VerifiedCandidate* c = reply->add_candidates();
  c->set_kind(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  c->set_chunks_requested(chunks);
  c->set_chunks_effective(chunks);
  c->set_measured_seconds(measured);
  c->set_uncalibrated_seconds(uncalibrated);
  c->set_chosen(chosen);
  c->set_error_ratio(uncalibrated / measured - 1);
}

// Three candidates timed round robin, a slow period on iterations 1 and 3 of
// all three. By the medians the plan's K = 2 ran 1.15 / 1.0 - 1 = 15% slower
// than K = 4 and the uncalibrated pick K = 1 20% slower; side by side they
// ran 2% and 10% slower, in every pair (not noise). The reply carries the
// paired numbers for both.
TEST(ScoreRunTest, FeedsPairedRegretsOfPlanAndUncalibratedPickIntoReply) {
  v1::VerifyReply reply;
  Add(&reply, 1, 1.20, 0.9, false);  // the uncalibrated pick
  Add(&reply, 2, 1.15, 1.1, true);   // the plan's choice
  Add(&reply, 4, 1.00, 1.3, false);  // fastest
  const std::vector<double> best = {1.0, 2.0, 1.0, 2.0, 1.0};
  std::vector<std::vector<double>> iterations(3);
  for (double b : best) {
    iterations[0].push_back(1.10 * b);
    iterations[1].push_back(1.02 * b);
    iterations[2].push_back(b);
  }
  ScoreRun(iterations, &reply);
  EXPECT_TRUE(reply.candidates(2).best());
  EXPECT_FALSE(reply.candidates(0).best() || reply.candidates(1).best());
  EXPECT_TRUE(reply.candidates(0).uncalibrated_chosen());
  EXPECT_FALSE(reply.candidates(1).uncalibrated_chosen() ||
               reply.candidates(2).uncalibrated_chosen());
  EXPECT_NEAR(reply.regret_ratio(), 0.02, 1e-12);
  EXPECT_FALSE(reply.regret_within_noise());
  EXPECT_NEAR(reply.uncalibrated_regret_ratio(), 0.10, 1e-12);
  EXPECT_FALSE(reply.uncalibrated_regret_within_noise());
  // |error|: 0.25, 0.0435, 0.3.
  EXPECT_NEAR(reply.median_error_ratio(), 0.25, 1e-12);
  EXPECT_NEAR(reply.max_error_ratio(), 0.3, 1e-12);
}

// Pairs that go either way are noise for the uncalibrated pick too.
TEST(ScoreRunTest, UncalibratedPickInsideTheNoise) {
  v1::VerifyReply reply;
  Add(&reply, 1, 1.0, 1.0, true);
  Add(&reply, 2, 1.01, 0.8, false);
  ScoreRun({{1, 1, 1, 1, 1}, {0.98, 1.01, 1.03, 1.05, 1.02}}, &reply);
  EXPECT_TRUE(reply.candidates(0).best());
  EXPECT_TRUE(reply.candidates(1).uncalibrated_chosen());
  EXPECT_EQ(reply.regret_ratio(), 0);
  EXPECT_NEAR(reply.uncalibrated_regret_ratio(), 0.02, 1e-12);
  EXPECT_TRUE(reply.uncalibrated_regret_within_noise());
}

// Agents that sent no iterations: both regrets from the medians; the
// uncalibrated pick on a tie is the earlier row, and the plan's choice can
// be it.
TEST(ScoreRunTest, WithoutIterationsFallsBackToMedians) {
  v1::VerifyReply reply;
  Add(&reply, 1, 1.0, 0.9, false);
  Add(&reply, 2, 1.1, 0.8, true);
  Add(&reply, 4, 1.2, 0.8, false);
  ScoreRun({}, &reply);
  EXPECT_TRUE(reply.candidates(1).uncalibrated_chosen());
  EXPECT_FALSE(reply.candidates(2).uncalibrated_chosen());
  EXPECT_NEAR(reply.regret_ratio(), 0.1, 1e-12);
  EXPECT_NEAR(reply.uncalibrated_regret_ratio(), 0.1, 1e-12);
  EXPECT_FALSE(reply.uncalibrated_regret_within_noise());
}

// No candidate with an uncalibrated prediction: no pick, no regret for it.
TEST(ScoreRunTest, NoUncalibratedPredictionNoPick) {
  v1::VerifyReply reply;
  Add(&reply, 1, 1.0, 0, true);
  Add(&reply, 2, 0.5, 0, false);
  ScoreRun({{1.0}, {0.5}}, &reply);
  for (const auto& c : reply.candidates()) {
    EXPECT_FALSE(c.uncalibrated_chosen());
  }
  EXPECT_EQ(reply.uncalibrated_regret_ratio(), 0);
  EXPECT_NEAR(reply.regret_ratio(), 1.0, 1e-12);
}

v1::VerifiedCandidate* AddKind(v1::VerifyReply* reply, v1::StrategyKind kind,
                               int chunks, double measured, bool chosen) {
  v1::VerifiedCandidate* c = reply->add_candidates();
  c->set_kind(kind);
  c->set_chunks_requested(chunks);
  c->set_chunks_effective(chunks);
  c->set_measured_seconds(measured);
  c->set_uncalibrated_seconds(0.0918);
  c->set_chosen(chosen);
  return c;
}

// Issue 18's quiet verify bench (2x1gbit, tensor-parallel experts, 4 MiB):
// the plan's tp_dedup and the sweep's tp_dedup_pipelined K = 1, one
// schedule priced 91.8 ms, measured 81.5 and 80.8 ms, and side by side the
// first 15.9% slower: noise between two runs of one schedule, not a regret.
// Both regrets are those of that schedule against flat, the other one: it is
// the fastest, so none.
TEST(ScoreRunTest, TwoRunsOfOneScheduleAreOneCandidate) {
  v1::VerifyReply reply;
  reply.set_scope(v1::VERIFY_SCOPE_LAYER);
  reply.mutable_plan()->set_expert_layout(v1::EXPERT_LAYOUT_TENSOR_PARALLEL);
  AddKind(&reply, v1::STRATEGY_KIND_TP_DEDUP, 1, 0.0815, true);
  AddKind(&reply, v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 1, 0.0808, false);
  AddKind(&reply, v1::STRATEGY_KIND_FLAT, 1, 0.1416, false)
      ->set_uncalibrated_seconds(0.1474);
  const std::vector<double> pipe = {0.080, 0.081, 0.079, 0.083, 0.080};
  std::vector<std::vector<double>> iterations(3);
  for (double p : pipe) {
    iterations[0].push_back(1.159 * p);
    iterations[1].push_back(p);
    iterations[2].push_back(1.75 * p);
  }
  ScoreRun(iterations, &reply);
  EXPECT_TRUE(reply.candidates(1).best());
  EXPECT_TRUE(reply.candidates(0).uncalibrated_chosen());
  EXPECT_EQ(reply.regret_ratio(), 0);
  EXPECT_FALSE(reply.regret_within_noise());
  EXPECT_EQ(reply.uncalibrated_regret_ratio(), 0);
  // Against another schedule the regret stands, from the pairs.
  reply.mutable_candidates(2)->set_measured_seconds(0.0700);
  iterations[2] = {0.070, 0.070, 0.070, 0.070, 0.070};
  ScoreRun(iterations, &reply);
  EXPECT_TRUE(reply.candidates(2).best());
  EXPECT_NEAR(reply.regret_ratio(), 1.159 * 0.080 / 0.070 - 1, 1e-9);
}

// Experts not tensor-parallel, one layer: flat is DeepSpeed's drop path,
// the schedule tp_dedup and the pipeline's K = 1 name too; a pipeline of
// 2 chunks, or one dispatch op (scope OP), is another schedule.
TEST(ScoreRunTest, WholeExpertsFlatAndTpDedupAreOneSchedule) {
  v1::VerifyReply reply;
  reply.set_scope(v1::VERIFY_SCOPE_LAYER);
  reply.mutable_plan()->set_expert_layout(
      v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL);
  AddKind(&reply, v1::STRATEGY_KIND_FLAT, 1, 0.0761, true);
  AddKind(&reply, v1::STRATEGY_KIND_TP_DEDUP, 1, 0.0765, false);
  AddKind(&reply, v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 1, 0.0740, false);
  AddKind(&reply, v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 2, 0.0790, false);
  ScoreRun({}, &reply);
  EXPECT_TRUE(reply.candidates(2).best());
  EXPECT_EQ(reply.regret_ratio(), 0);
  EXPECT_TRUE(SameSchedule(reply, reply.candidates(0), reply.candidates(1)));
  EXPECT_FALSE(SameSchedule(reply, reply.candidates(2), reply.candidates(3)));
  reply.set_scope(v1::VERIFY_SCOPE_OP);
  EXPECT_FALSE(SameSchedule(reply, reply.candidates(0), reply.candidates(1)));
  EXPECT_TRUE(SameSchedule(reply, reply.candidates(1), reply.candidates(2)));
  ScoreRun({}, &reply);
  EXPECT_NEAR(reply.regret_ratio(), 0.0761 / 0.0740 - 1, 1e-9);
}

}  // namespace
}  // namespace monta::verify
