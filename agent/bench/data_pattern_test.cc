#include "agent/bench/data_pattern.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace monta::bench {
namespace {

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
