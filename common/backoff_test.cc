#include "common/backoff.h"

#include <set>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace monta {
namespace {

constexpr double kJustBelowOne = 0.999999999;

// A backoff whose draws are all `draw`.
Backoff Fixed(double draw, absl::Duration initial = absl::Milliseconds(200),
              absl::Duration max = absl::Seconds(5)) {
  return Backoff(initial, max, [draw] { return draw; });
}

TEST(BackoffTest, EachWaitLiesBetweenHalfAndAllOfTheDoubledInitialWait) {
  // The lowest draw gives half, the highest (almost) all of
  // min(max, initial * 2^attempt).
  Backoff low(absl::Milliseconds(200), absl::Seconds(5), [] { return 0.0; });
  Backoff high(absl::Milliseconds(200), absl::Seconds(5),
               [] { return kJustBelowOne; });
  const std::vector<absl::Duration> full = {
      absl::Milliseconds(200),  absl::Milliseconds(400),
      absl::Milliseconds(800),  absl::Milliseconds(1600),
      absl::Milliseconds(3200), absl::Seconds(5),
      absl::Seconds(5)};
  for (int attempt = 0; attempt < static_cast<int>(full.size()); ++attempt) {
    EXPECT_EQ(low.Delay(attempt), full[attempt] / 2) << attempt;
    EXPECT_LE(high.Delay(attempt), full[attempt]) << attempt;
    EXPECT_GT(high.Delay(attempt), full[attempt] * 0.999) << attempt;
  }
  Backoff middle(absl::Milliseconds(200), absl::Seconds(5), [] { return 0.5; });
  EXPECT_EQ(middle.Delay(1), absl::Milliseconds(300));
}

TEST(BackoffTest, TheCapHoldsAtEveryAttemptAndALowerCapWins) {
  Backoff high(absl::Milliseconds(200), absl::Seconds(5),
               [] { return kJustBelowOne; });
  for (int attempt : {5, 6, 20, 30, 31, 1000, 1 << 30}) {
    EXPECT_LE(high.Delay(attempt), absl::Seconds(5)) << attempt;
    EXPECT_GE(high.Delay(attempt), absl::Milliseconds(2500)) << attempt;
  }
  // A lower cap for this wait (the agent's heartbeat interval).
  EXPECT_LE(high.Delay(10, absl::Seconds(1)), absl::Seconds(1));
  EXPECT_GE(high.Delay(10, absl::Seconds(1)), absl::Milliseconds(500));
  // A higher one changes nothing.
  EXPECT_LE(high.Delay(10, absl::Seconds(60)), absl::Seconds(5));
  // A negative attempt counts as the first.
  EXPECT_LE(high.Delay(-3), absl::Milliseconds(200));
}

TEST(BackoffTest, NextCountsAttemptsAndResetStartsOver) {
  Backoff backoff = Fixed(0.0);
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(200));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(400));
  EXPECT_EQ(backoff.attempts(), 3);
  // Delay neither counts nor depends on the count.
  EXPECT_EQ(backoff.Delay(0), absl::Milliseconds(100));
  EXPECT_EQ(backoff.attempts(), 3);
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
}

TEST(BackoffTest, DrawsOutsideTheUnitIntervalAreClamped) {
  EXPECT_EQ(Fixed(-1.0).Delay(0), absl::Milliseconds(100));
  EXPECT_EQ(Fixed(7.0).Delay(0), absl::Milliseconds(200));
}

TEST(BackoffTest, ANonPositiveInitialWaitNeverWaitsBelowZero) {
  EXPECT_EQ(Fixed(0.5, absl::ZeroDuration()).Delay(3), absl::ZeroDuration());
  EXPECT_EQ(Fixed(0.5, absl::Milliseconds(-5)).Delay(3), absl::ZeroDuration());
}

// Without an injected source the draws vary (a fleet does not retry in
// lockstep) and stay within the bounds.
TEST(BackoffTest, TheOwnGeneratorSpreadsTheWaitsWithinTheBounds) {
  Backoff backoff(absl::Milliseconds(200), absl::Seconds(5));
  std::set<absl::Duration> seen;
  for (int i = 0; i < 100; ++i) {
    const absl::Duration wait = backoff.Delay(2);
    EXPECT_GE(wait, absl::Milliseconds(400));
    EXPECT_LE(wait, absl::Milliseconds(800));
    seen.insert(wait);
  }
  EXPECT_GT(seen.size(), 50u);
}

}  // namespace
}  // namespace monta
