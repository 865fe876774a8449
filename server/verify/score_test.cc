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

}  // namespace
}  // namespace monta::verify
