#include "common/strategy/strategy.h"

#include "common/proto_names.h"
#include "common/strategy/strategy_proto.h"
#include "gtest/gtest.h"

namespace monta::strategy {
namespace {

TEST(StrategyTest, NamesRoundTrip) {
  for (StrategyKind kind : kAllStrategyKinds) {
    EXPECT_EQ(StrategyFromName(StrategyName(kind)), kind);
  }
  EXPECT_STREQ(StrategyName(StrategyKind::kTpDedupPipelined),
               "tp_dedup_pipelined");
  EXPECT_EQ(StrategyFromName("none"), std::nullopt);
}

TEST(StrategyTest, EveryProtoValueConverts) {
  for (StrategyKind kind : kAllStrategyKinds) {
    EXPECT_EQ(StrategyFromProto(StrategyToProto(kind)), kind);
  }
  EXPECT_EQ(StrategyFromProto(monta::v1::STRATEGY_KIND_UNSPECIFIED),
            std::nullopt);
  EXPECT_EQ(StrategyFromProto(999), std::nullopt);
}

TEST(StrategyTest, NamesAreTheProtoShortNames) {
  for (StrategyKind kind : kAllStrategyKinds) {
    EXPECT_EQ(ShortName(StrategyToProto(kind)), StrategyName(kind));
  }
}

}  // namespace
}  // namespace monta::strategy
