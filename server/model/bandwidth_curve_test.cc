#include "server/model/bandwidth_curve.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace monta::model {
namespace {

using ::monta::bandwidth::Collective;

TEST(BandwidthCurve, ProfileCurveIsAlphaPlusLinkBytesOverRate) {
  // 16 ranks on 2 nodes: half of each rank's message leaves the node.
  auto c = BandwidthCurve::FromAlphaBeta(Collective::kAllToAll, 16, 8, 10e-6,
                                         12.5e9);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->link_share(), 0.5);
  const CurveTime t = c->TimeSeconds(1e9);
  EXPECT_FALSE(t.extrapolated);
  EXPECT_NEAR(t.seconds, 10e-6 + 0.5e9 / 12.5e9, 1e-12);
  EXPECT_DOUBLE_EQ(c->LinkRateAt(1e9).bytes_per_second, 12.5e9);
  EXPECT_FALSE(c->measured());
}

TEST(BandwidthCurve, IntraNodeLinkShareIsNMinusOneOverN) {
  auto c = BandwidthCurve::FromAlphaBeta(Collective::kAllToAll, 8, 8, 0, 1e9);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->link_share(), 7.0 / 8);
  // With n-1/n of the bytes on the link at the link rate, busbw is the link
  // rate: the nccl-tests definition was made for exactly that.
  EXPECT_NEAR(c->BusBandwidthAt(1e8), 1e9, 1e-3);
}

TEST(BandwidthCurve, InterpolatesInLogSizeAndHitsSamplesExactly) {
  // Time doubling per 4x size: a power law t ~ x^0.5 between the samples.
  auto c = BandwidthCurve::FromSamples(
      Collective::kAllToAll, 8, 8, {{1024, 1e-4}, {4096, 2e-4}, {16384, 4e-4}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->TimeSeconds(4096).seconds, 2e-4);
  const CurveTime mid = c->TimeSeconds(2048);
  EXPECT_FALSE(mid.extrapolated);
  EXPECT_NEAR(mid.seconds, 1e-4 * std::sqrt(2.0), 1e-12);
  EXPECT_DOUBLE_EQ(c->min_bytes(), 1024);
  EXPECT_DOUBLE_EQ(c->max_bytes(), 16384);
}

TEST(BandwidthCurve, ExtrapolatesWithAlphaBetaOfNearestTwoAndSaysSo) {
  // Samples on T = 5 us + x / 1 GB/s.
  auto at = [](double x) { return 5e-6 + x / 1e9; };
  auto c = BandwidthCurve::FromSamples(
      Collective::kAllToAll, 8, 8,
      {{1e3, at(1e3)}, {1e4, at(1e4)}, {1e5, at(1e5)}, {1e6, at(1e6)}});
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->alpha_seconds(), 5e-6, 1e-12);
  const CurveTime above = c->TimeSeconds(1e8);
  EXPECT_TRUE(above.extrapolated);
  EXPECT_NEAR(above.seconds, at(1e8), 1e-9);
  const CurveTime below = c->TimeSeconds(100);
  EXPECT_TRUE(below.extrapolated);
  EXPECT_NEAR(below.seconds, at(100), 1e-12);
  EXPECT_FALSE(c->TimeSeconds(5e4).extrapolated);
  // The link rate beyond alpha recovers the 1 GB/s slope (x link share).
  EXPECT_NEAR(c->LinkRateAt(1e6).bytes_per_second, 1e9 * 7 / 8, 1e3);
}

TEST(BandwidthCurve, FallingTailNeverMakesBiggerMessagesCheaper) {
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8,
                                       {{1e6, 2e-3}, {2e6, 1.9e-3}});
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->TimeSeconds(4e6).seconds, c->TimeSeconds(2e6).seconds);
}

TEST(BandwidthCurve, SmallMessagesAreNeverFasterThanTheLargest) {
  // The fitted alpha (0.5 ms) leaves the 256 KB sample little time beyond
  // it: without the cap that size would move faster on the link than the
  // largest, most bandwidth-bound one.
  auto c = BandwidthCurve::FromSamples(
      Collective::kAllToAll, 4, 2,
      {{64e3, 0.9e-3}, {256e3, 1.05e-3}, {1e6, 3e-3}, {16e6, 40e-3}});
  ASSERT_TRUE(c.ok()) << c.status();
  const double alpha = c->alpha_seconds();
  ASSERT_GT(256e3 / (1.05e-3 - alpha), 16e6 / (40e-3 - alpha));  // the premise
  const double largest = c->LinkRateAt(16e6).bytes_per_second;
  for (double x : {32e3, 64e3, 128e3, 256e3, 1e6}) {
    EXPECT_LE(c->LinkRateAt(x).bytes_per_second, largest * (1 + 1e-12)) << x;
  }
}

// Measured on the emulated cluster at 1 Gbit/s: the 64 KiB point stalled
// (3.8 ms; 0.4 ms in the next run). Taken as is, it set the curve's latency
// and every small pipeline chunk cost 4 ms.
TEST(BandwidthCurve, DropsAStalledSmallSample) {
  const std::vector<CurveSample> samples = {{65536, 3.835e-3},
                                            {262144, 2.211e-3},
                                            {1048576, 8.820e-3},
                                            {4194304, 35.673e-3},
                                            {16777216, 142.884e-3}};
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 4, 2, samples);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->min_bytes(), 262144);
  EXPECT_LT(c->alpha_seconds(), 0.1e-3);
  // Below the kept samples: the line through them, about 0.55 ms.
  EXPECT_NEAR(c->TimeSeconds(65536).seconds, 0.55e-3, 0.05e-3);
  // The stall is still what a 64 KiB launch measured: its time less the
  // line's bytes part there (65536 * (142.884 - 35.673) ms / 12 MiB).
  EXPECT_NEAR(c->launch_floor_seconds(),
              3.835e-3 - 65536 * (142.884e-3 - 35.673e-3) / 12582912, 1e-9);
}

// docs/MODEL.md §5, the chunk bound: the launch floor is what the smallest
// swept size took beyond its bytes, never below the fitted alpha; a clean
// curve's floor is its alpha, a profile's its alpha, one sample's 0.
TEST(BandwidthCurve, LaunchFloorIsTheSmallestSweptLaunch) {
  // 30 us + 1 ns per byte, 1 KB .. 1 MB.
  std::vector<CurveSample> clean = {
      {1e3, 31e-6}, {1e4, 40e-6}, {1e5, 130e-6}, {1e6, 1030e-6}};
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, clean);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->launch_floor_seconds(), 30e-6, 1e-9);
  EXPECT_NEAR(c->launch_floor_seconds(), c->alpha_seconds(), 1e-12);
  clean.front().time_seconds = 2e-3;  // a slow first launch: a stall
  auto slow = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, clean);
  ASSERT_TRUE(slow.ok());
  EXPECT_DOUBLE_EQ(slow->min_bytes(), 1e4);  // dropped from the curve ...
  EXPECT_NEAR(slow->launch_floor_seconds(), 2e-3 - 1e3 / 1e9, 1e-9);  // kept
  auto profile =
      BandwidthCurve::FromAlphaBeta(Collective::kAllToAll, 8, 8, 30e-6, 1e9);
  ASSERT_TRUE(profile.ok());
  EXPECT_DOUBLE_EQ(profile->launch_floor_seconds(), 30e-6);
  auto one =
      BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, {{1e6, 1e-3}});
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->launch_floor_seconds(), 0);
}

TEST(BandwidthCurve, KeepsCleanSamplesAndTheLargest) {
  auto at = [](double x) { return 20e-6 + x / 1e9; };
  std::vector<CurveSample> clean;
  for (double x : {1e3, 1e4, 1e5, 1e6}) clean.push_back({x, at(x)});
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, clean);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->min_bytes(), 1e3);
  EXPECT_NEAR(c->alpha_seconds(), 20e-6, 1e-12);
  // A slow largest sample is the link's own answer, never dropped.
  clean.back().time_seconds *= 3;
  auto d = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, clean);
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d->max_bytes(), 1e6);
}

// Measured on 4 nodes x 2 ranks at 400 Mbit/s: the 64 KiB point, 1.7x the
// line, gave an intercept of 3.1 ms, paid by every pipeline chunk.
TEST(BandwidthCurve, DropsAMilderStallToo) {
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 2,
                                       {{65536, 4.448e-3},
                                        {262144, 8.463e-3},
                                        {1048576, 33.080e-3},
                                        {4194304, 148.331e-3},
                                        {16777216, 643.764e-3}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->min_bytes(), 262144);
  EXPECT_LT(c->alpha_seconds(), 0.5e-3);
}

// One robust line finds the stalls and gives the curve's latency: a bump at
// the smallest size (1.3x, no stall) moved the two-point intercept of the
// two smallest samples to 27 us; the line's median latency stays at 20 us.
TEST(BandwidthCurve, AlphaIsTheStallFiltersRobustLine) {
  std::vector<CurveSample> samples;
  for (double x = 1e3; x <= 1e7; x *= 10)
    samples.push_back({x, 20e-6 + x / 1e9});
  samples[0].time_seconds *= 1.3;
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, samples);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->min_bytes(), 1e3);  // kept: not a stall
  const auto line = schedule::RobustAlphaBeta(samples);
  ASSERT_TRUE(line.has_value());
  EXPECT_DOUBLE_EQ(c->alpha_seconds(), line->alpha_seconds);
  EXPECT_NEAR(c->alpha_seconds(), 20e-6, 1e-12);
}

TEST(BandwidthCurve, RejectsBadInput) {
  EXPECT_FALSE(
      BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, {}).ok());
  EXPECT_FALSE(BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8,
                                           {{2048, 1e-4}, {1024, 2e-4}})
                   .ok());
  EXPECT_FALSE(
      BandwidthCurve::FromSamples(Collective::kAllToAll, 8, 8, {{1024, 0}})
          .ok());
  EXPECT_FALSE(
      BandwidthCurve::FromSamples(Collective::kAllToAll, 1, 1, {{1024, 1e-4}})
          .ok());
  EXPECT_FALSE(
      BandwidthCurve::FromSamples(Collective::kAllToAll, 12, 8, {{1024, 1e-4}})
          .ok());
  EXPECT_FALSE(
      BandwidthCurve::FromAlphaBeta(Collective::kCopy, 1, 1, -1, 1e9).ok());
  EXPECT_FALSE(
      BandwidthCurve::FromAlphaBeta(Collective::kCopy, 1, 1, 0, 0).ok());
  EXPECT_TRUE(
      BandwidthCurve::FromAlphaBeta(Collective::kCopy, 1, 1, 0, 1e9).ok());
  EXPECT_FALSE(BandwidthCurve().valid());
}

// Rule (e) (docs/MODEL.md §4, a chunk's price): a sweep's two statistics at
// 400 Mbit/s (the quiet verify runs' shape: the median's 64 KiB stalled at
// 4.19 ms, the chain's at 1.25 ms). The curve's times and link rates are the
// chain's, its alpha the smaller fit's, its launch floor the larger;
// perf/layer_pipe_replay.py --both_from computes the same numbers (printed
// by its Curve and Hybrid for these samples).
TEST(BandwidthCurve,
     BothStatisticsTakeTheChainsRatesTheLeastAlphaTheMostFloor) {
  const double kib = 1024;
  const std::vector<CurveSample> median = {{64 * kib, 4.19e-3},
                                           {256 * kib, 6.5e-3},
                                           {1024 * kib, 25e-3},
                                           {4096 * kib, 98.95e-3}};
  const std::vector<CurveSample> chain = {{64 * kib, 1.25e-3},
                                          {256 * kib, 5.0e-3},
                                          {1024 * kib, 22.5e-3},
                                          {4096 * kib, 89.5e-3}};
  auto m = BandwidthCurve::FromSamples(Collective::kAllToAll, 4, 2, median);
  auto c = BandwidthCurve::FromSamples(Collective::kAllToAll, 4, 2, chain);
  auto both = BandwidthCurve::FromBothStatistics(Collective::kAllToAll, 4, 2,
                                                 median, chain);
  ASSERT_TRUE(m.ok() && c.ok() && both.ok()) << both.status();
  // The replay's numbers.
  EXPECT_NEAR(m->alpha_seconds(), 0.00035, 1e-12);
  EXPECT_NEAR(m->launch_floor_seconds(), 0.0026493750000000007, 1e-12);
  EXPECT_NEAR(c->alpha_seconds(), 1.0416666666664435e-05, 1e-12);
  EXPECT_NEAR(both->alpha_seconds(), 1.0416666666664435e-05, 1e-12);
  EXPECT_NEAR(both->launch_floor_seconds(), 0.0026493750000000007, 1e-12);
  for (double x : {64 * kib, 512 * kib, 4096 * kib}) {
    EXPECT_NEAR(both->LinkRateAt(x).bytes_per_second, 23434593.41170993, 1e-3)
        << x;
    EXPECT_DOUBLE_EQ(both->LinkRateAt(x).bytes_per_second,
                     c->LinkRateAt(x).bytes_per_second);
    EXPECT_DOUBLE_EQ(both->TimeSeconds(x).seconds, c->TimeSeconds(x).seconds);
  }
  EXPECT_NEAR(m->LinkRateAt(512 * kib).bytes_per_second, 21144825.043051966,
              1e-3);
  // The other way round: the median's alpha the smaller, the chain's floor
  // the larger; the rates stay the chain's, beyond its own alpha.
  auto swapped = BandwidthCurve::FromBothStatistics(Collective::kAllToAll, 4, 2,
                                                    chain, median);
  ASSERT_TRUE(swapped.ok());
  EXPECT_DOUBLE_EQ(swapped->alpha_seconds(), c->alpha_seconds());
  EXPECT_DOUBLE_EQ(swapped->launch_floor_seconds(), m->launch_floor_seconds());
  EXPECT_DOUBLE_EQ(swapped->LinkRateAt(512 * kib).bytes_per_second,
                   m->LinkRateAt(512 * kib).bytes_per_second);
  // The chain must have the median's sizes.
  std::vector<CurveSample> short_chain = chain;
  short_chain.pop_back();
  EXPECT_FALSE(BandwidthCurve::FromBothStatistics(Collective::kAllToAll, 4, 2,
                                                  median, short_chain)
                   .ok());
  std::vector<CurveSample> other_sizes = chain;
  other_sizes[1].message_bytes = 300 * kib;
  EXPECT_FALSE(BandwidthCurve::FromBothStatistics(Collective::kAllToAll, 4, 2,
                                                  median, other_sizes)
                   .ok());
}

}  // namespace
}  // namespace monta::model
