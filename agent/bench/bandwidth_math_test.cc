#include "agent/bench/bandwidth_math.h"

#include <cstdint>
#include <vector>

#include "agent/bench/data_pattern.h"
#include "gtest/gtest.h"

namespace monta::bench {
namespace {

TEST(BandwidthMathTest, FollowsNcclTests) {
  // 1 GB in 0.5 s is 2 GB/s algbw; with 4 ranks an AllToAll moves 3/4 of it
  // over the bus.
  EXPECT_DOUBLE_EQ(AlgBwBytesPerSecond(1000000000, 0.5), 2e9);
  EXPECT_DOUBLE_EQ(
      BusBwBytesPerSecond(Collective::kAllToAll, 1000000000, 0.5, 4), 1.5e9);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kCopy, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllToAll, 1), 0.0);
  EXPECT_DOUBLE_EQ(AlgBwBytesPerSecond(1, 0), 0.0);
}

TEST(BandwidthMathTest, Median) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

TEST(DataPatternTest, DetectsEveryKindOfMisplacedByte) {
  std::vector<uint8_t> row(37);
  FillRow(row.data(), 1, 2, 5, row.size());
  EXPECT_EQ(CountWrongInRow(row.data(), 1, 2, 5, row.size()), 0u);
  // Wrong source, destination or row: almost every byte differs.
  EXPECT_GT(CountWrongInRow(row.data(), 0, 2, 5, row.size()), 30u);
  EXPECT_GT(CountWrongInRow(row.data(), 1, 3, 5, row.size()), 30u);
  EXPECT_GT(CountWrongInRow(row.data(), 1, 2, 6, row.size()), 30u);
  row[36] ^= 1;
  EXPECT_EQ(CountWrongInRow(row.data(), 1, 2, 5, row.size()), 1u);
}

}  // namespace
}  // namespace monta::bench
