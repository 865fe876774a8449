#include "common/schedule/schedule.h"

#include <vector>

#include "common/schedule/alpha_beta.h"
#include "gtest/gtest.h"

namespace monta::schedule {
namespace {

TEST(Chunks, EffectiveChunksCountThePiecesASplitYields) {
  EXPECT_EQ(EffectiveChunks(6, 4), 3);  // pieces of 2 rows
  EXPECT_EQ(EffectiveChunks(6, 6), 6);
  EXPECT_EQ(EffectiveChunks(8, 4), 4);
  EXPECT_EQ(EffectiveChunks(7, 3), 3);
  EXPECT_EQ(EffectiveChunks(512, 64), 64);
  EXPECT_EQ(EffectiveChunks(10, 64), 10);  // cannot exceed the rows
  EXPECT_EQ(EffectiveChunks(7, 1), 1);
  EXPECT_EQ(EffectiveChunks(100, 30), 25);  // ceil(100/30)=4 rows, 25 pieces
  EXPECT_EQ(EffectiveChunks(0, 8), 1);
  EXPECT_EQ(EffectiveChunks(5, 0), 1);  // K < 1 counts as 1
}

TEST(Chunks, RangesCoverTheRowsInOrder) {
  const std::vector<RowRange> r = ChunkRows(10, 4);  // pieces of 3
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], (RowRange{0, 3}));
  EXPECT_EQ(r[1], (RowRange{3, 3}));
  EXPECT_EQ(r[2], (RowRange{6, 3}));
  EXPECT_EQ(r[3], (RowRange{9, 1}));
  EXPECT_EQ(RowsPerChunk(10, 4), 3);
  EXPECT_TRUE(ChunkRows(0, 4).empty());
  EXPECT_EQ(ChunkRows(5, 1).size(), 1u);
}

TEST(Chunks, PaddingRoundsUpToAMultipleOfT) {
  EXPECT_EQ(RowsPerTpRank(4095, 8), 512);
  EXPECT_EQ(PaddedRows(4095, 8), 4096);
  EXPECT_EQ(PaddedRows(4096, 8), 4096);
  EXPECT_EQ(PaddedRows(11, 2), 12);
  EXPECT_EQ(PaddedRows(7, 1), 7);
  EXPECT_EQ(PaddedRows(0, 4), 0);
}

TEST(Links, ShareOfTheBottleneckLink) {
  EXPECT_DOUBLE_EQ(LinkShare(8, 8), 7.0 / 8);    // one node: NVLink
  EXPECT_DOUBLE_EQ(LinkShare(16, 8), 8.0 / 16);  // two nodes: the NIC
  EXPECT_DOUBLE_EQ(LinkShare(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(kCopyLinkShare, 1.0);
  EXPECT_EQ(LinkShare(0, 1), 0);
}

TEST(Latency, MovedByThePerPeerLatencyFlooredAtAQuarter) {
  // HGX: 12 us on 8 ranks, 0.8 us per peer.
  EXPECT_NEAR(LatencyForGroupSeconds(12e-6, 8, 2, 0.8e-6), 7.2e-6, 1e-15);
  EXPECT_NEAR(LatencyForGroupSeconds(12e-6, 8, 64, 0.8e-6), 56.8e-6, 1e-15);
  EXPECT_DOUBLE_EQ(LatencyForGroupSeconds(12e-6, 8, 8, 0.8e-6), 12e-6);
  // Fewer peers never make the launch free.
  EXPECT_DOUBLE_EQ(LatencyForGroupSeconds(12e-6, 8, 1, 5e-6), 3e-6);
}

TEST(Latency, SourceRangeFlagsGroupsOnEitherSide) {
  const LatencySourceRange hgx{8, 32};
  EXPECT_TRUE(hgx.known());
  EXPECT_TRUE(hgx.Below(2));
  EXPECT_FALSE(hgx.Below(8));
  EXPECT_FALSE(hgx.Above(32));
  EXPECT_TRUE(hgx.Above(64));
  const LatencySourceRange unknown;
  EXPECT_FALSE(unknown.known());
  EXPECT_FALSE(unknown.Below(1));
  EXPECT_FALSE(unknown.Above(1 << 20));
}

TEST(AlphaBeta, TwoPointLine) {
  const AlphaBetaLine l = LineThrough({1000, 3e-6}, {3000, 7e-6});
  EXPECT_DOUBLE_EQ(l.seconds_per_byte, 2e-9);
  EXPECT_NEAR(l.alpha_seconds, 1e-6, 1e-18);
  EXPECT_NEAR(l.SecondsAt(5000), 11e-6, 1e-18);
}

TEST(AlphaBeta, RobustLineIgnoresOneStall) {
  // T = 20 us + x / 1e9, with a 10x stall at the second size.
  std::vector<Sample> s;
  for (double x = 1024; x <= (1 << 24); x *= 4) {
    s.push_back({x, 20e-6 + x / 1e9});
  }
  s[1].time_seconds *= 10;
  const auto line = RobustAlphaBeta(s);
  ASSERT_TRUE(line.has_value());
  EXPECT_NEAR(line->seconds_per_byte, 1e-9, 1e-15);
  EXPECT_NEAR(line->alpha_seconds, 20e-6, 1e-12);
}

TEST(AlphaBeta, RobustLineNeedsARisingEnd) {
  EXPECT_FALSE(RobustAlphaBeta({}).has_value());
  EXPECT_FALSE(RobustAlphaBeta({{1, 1}}).has_value());
  EXPECT_FALSE(RobustAlphaBeta({{1, 1}, {2, 1}}).has_value());
  const auto two = RobustAlphaBeta({{1000, 3e-6}, {3000, 7e-6}});
  ASSERT_TRUE(two.has_value());
  EXPECT_NEAR(two->alpha_seconds, 1e-6, 1e-18);  // the two-point line's
  // A negative intercept is no latency.
  const auto negative = RobustAlphaBeta({{1000, 1e-6}, {3000, 7e-6}});
  ASSERT_TRUE(negative.has_value());
  EXPECT_EQ(negative->alpha_seconds, 0);
}

}  // namespace
}  // namespace monta::schedule
