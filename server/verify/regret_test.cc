#include "server/verify/regret.h"

#include "gtest/gtest.h"

namespace monta::verify {
namespace {

void ExpectPaired(const MeasuredRun& chosen, const MeasuredRun& best,
                  double ratio, bool within_noise) {
  const Regret r = PlanRegret(chosen, best);
  EXPECT_TRUE(r.paired);
  EXPECT_NEAR(r.ratio, ratio, 1e-12);
  EXPECT_EQ(r.within_noise, within_noise);
}

// A slow period of the host lands on both candidates' same iterations: the
// pairs show the chosen one 2% slower in every iteration, not noise; the
// pairs decide, not the medians given (here 20% apart, as when the chosen
// candidate alone had run in a slow period).
TEST(RegretTest, PairsCancelWhatTheHostDidToBoth) {
  ExpectPaired({1.224, {1.02, 1.53, 1.224, 1.428, 1.02}},
               {1.02, {1.0, 1.5, 1.2, 1.4, 1.0}}, 0.02, false);
}

// Pairs that go either way: the median pair, within the noise (the ratios'
// p10 is below 1).
TEST(RegretTest, PairsThatGoEitherWayAreNoise) {
  const MeasuredRun best{1.0, {1, 1, 1, 1, 1}};
  ExpectPaired({1.0, {0.98, 1.01, 1.03, 1.05, 1.02}}, best, 0.02, true);
  // The chosen candidate faster in most pairs: no regret.
  ExpectPaired({1.0, {0.9, 0.95, 1.01, 1, 0.9}}, best, 0, true);
  // The same candidate: none, inside its own noise.
  ExpectPaired(best, best, 0, true);
}

// Without pairs (no iterations, or different counts, or a zero time): the
// medians, noise by overlapping p10..p90 ranges.
TEST(RegretTest, WithoutPairsTheMediansAndTheirRanges) {
  Regret r = PlanRegret({1.1, {}}, {1.0, {}});
  EXPECT_FALSE(r.paired);
  EXPECT_NEAR(r.ratio, 0.1, 1e-12);
  EXPECT_FALSE(r.within_noise);  // no ranges known
  r = PlanRegret({1.1, {1.05, 1.1, 1.15}}, {1.0, {0.95, 1.0, 1.06, 1.2}});
  EXPECT_FALSE(r.paired);
  EXPECT_NEAR(r.ratio, 0.1, 1e-12);
  EXPECT_TRUE(r.within_noise);  // 1.06..1.14 overlaps 0.965..1.158
  r = PlanRegret({1.1, {1.09, 1.1, 1.11}}, {1.0, {0.99, 1.0, 1.01, 1.0}});
  EXPECT_FALSE(r.within_noise);
  r = PlanRegret({1.1, {1.1, 1.1}}, {1.0, {1.0, 0}});
  EXPECT_FALSE(r.paired);
  EXPECT_NEAR(r.ratio, 0.1, 1e-12);
  EXPECT_EQ(PlanRegret({1.0, {}}, {0, {}}).ratio, 0);
}

TEST(RegretTest, QuantileInterpolates) {
  EXPECT_DOUBLE_EQ(Quantile({1, 2, 3, 4, 5}, 0.1), 1.4);
  EXPECT_DOUBLE_EQ(Quantile({1, 2, 3, 4, 5}, 0.9), 4.6);
  EXPECT_DOUBLE_EQ(Quantile({7}, 0.9), 7);
}

}  // namespace
}  // namespace monta::verify
