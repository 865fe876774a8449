#include "common/bandwidth/bandwidth.h"

#include "gtest/gtest.h"

namespace monta::bandwidth {
namespace {

TEST(BandwidthTest, FollowsNcclTests) {
  // 1 GB in 0.5 s is 2 GB/s algbw; with 4 ranks an AllToAll moves 3/4 of it
  // over the bus.
  EXPECT_DOUBLE_EQ(AlgBwBytesPerSecond(1e9, 0.5), 2e9);
  EXPECT_DOUBLE_EQ(BusBwBytesPerSecond(Collective::kAllToAll, 4, 1e9, 0.5),
                   1.5e9);
  EXPECT_DOUBLE_EQ(BusBwBytesPerSecond(Collective::kAllGather, 8, 1e9, 0.01),
                   87.5e9);
  EXPECT_DOUBLE_EQ(BusBwBytesPerSecond(Collective::kCopy, 1, 1e9, 0.01), 1e11);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kCopy, 8), 1.0);
}

TEST(BandwidthTest, SweepSizes) {
  EXPECT_EQ(SweepSizes(1024, 8192, 2),
            (std::vector<uint64_t>{1024, 2048, 4096, 8192}));
  EXPECT_EQ(SweepSizes(1000, 9000, 3),
            (std::vector<uint64_t>{1000, 3000, 9000}));
  EXPECT_EQ(SweepSizes(0, 4, 1), (std::vector<uint64_t>{1, 2, 4}));
  // No overflow at the top of the range.
  EXPECT_EQ(SweepSizes(uint64_t{1} << 62, ~uint64_t{0}, 2).size(), 2u);
}

TEST(BandwidthTest, SweepMessageBytesRoundsToWholeBlocks) {
  // 3 ranks: 1000 bytes is 333 per peer, 999 in all.
  const CollectiveBuffers a2a = BuffersFor(Collective::kAllToAll, 3, 1000);
  EXPECT_EQ(a2a.in_bytes, 999u);
  EXPECT_EQ(a2a.out_bytes, 999u);
  EXPECT_EQ(a2a.message_bytes, 999u);
  const CollectiveBuffers ag = BuffersFor(Collective::kAllGather, 3, 1000);
  EXPECT_EQ(ag.in_bytes, 333u);
  EXPECT_EQ(ag.message_bytes, 999u);
  EXPECT_EQ(BuffersFor(Collective::kCopy, 3, 1000).message_bytes, 1000u);
  // 4 ranks, sizes 1, 2, 4, 8: the first three are one byte per rank (4 in
  // all) and are measured once.
  EXPECT_EQ(SweepMessageBytes(Collective::kAllToAll, 4, 1, 8, 2),
            (std::vector<uint64_t>{4, 8}));
  EXPECT_EQ(SweepMessageBytes(Collective::kCopy, 4, 1, 8, 2),
            (std::vector<uint64_t>{1, 2, 4, 8}));
}

TEST(BandwidthTest, NoTimeMeansNoBandwidth) {
  EXPECT_DOUBLE_EQ(AlgBwBytesPerSecond(1, 0), 0.0);
  EXPECT_DOUBLE_EQ(AlgBwBytesPerSecond(1, -1), 0.0);
  EXPECT_DOUBLE_EQ(BusBwBytesPerSecond(Collective::kAllToAll, 8, 1, 0), 0.0);
}

TEST(BandwidthTest, OneRankMovesNothingOverTheBus) {
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllToAll, 1), 0.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, 1), 0.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllToAll, 0), 0.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kCopy, 1), 1.0);
  EXPECT_DOUBLE_EQ(BusBwBytesPerSecond(Collective::kAllToAll, 1, 1e9, 0.5),
                   0.0);
  // A busbw of 0 implies no time; the inverse says "unknown", never inf.
  EXPECT_DOUBLE_EQ(TimeFromBusBwSeconds(Collective::kAllToAll, 1, 1e9, 1e9),
                   0.0);
}

TEST(BandwidthTest, TimeFromBusBwInvertsBusBw) {
  EXPECT_DOUBLE_EQ(TimeFromBusBwSeconds(Collective::kAllToAll, 8, 1e9, 87.5e9),
                   0.01);
  EXPECT_DOUBLE_EQ(TimeFromBusBwSeconds(Collective::kCopy, 1, 1e9, 1e11), 0.01);
  for (Collective c :
       {Collective::kAllToAll, Collective::kAllGather, Collective::kCopy}) {
    const double busbw = BusBwBytesPerSecond(c, 16, 3e6, 2e-4);
    EXPECT_DOUBLE_EQ(TimeFromBusBwSeconds(c, 16, 3e6, busbw), 2e-4)
        << CollectiveName(c);
  }
  EXPECT_DOUBLE_EQ(TimeFromBusBwSeconds(Collective::kAllToAll, 8, 1e9, 0), 0.0);
}

TEST(BandwidthTest, Names) {
  EXPECT_STREQ(CollectiveName(Collective::kAllToAll), "alltoall");
  EXPECT_STREQ(CollectiveName(Collective::kAllGather), "allgather");
  EXPECT_STREQ(CollectiveName(Collective::kCopy), "copy");
}

TEST(BandwidthTest, Median) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({7}), 7);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

}  // namespace
}  // namespace monta::bandwidth
