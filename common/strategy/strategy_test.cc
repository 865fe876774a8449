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

// The agents' schedules (agent/bench/schedule.cc) and the model
// (cost_model.cc: TpDedup is TpDedupPipelined(1), and whole experts' Flat is
// TpDedup) run and price these as one.
TEST(StrategyTest, SameScheduleAs) {
  using K = StrategyKind;
  EXPECT_EQ(SameScheduleAs(K::kTpDedupPipelined, 1, false), K::kTpDedup);
  EXPECT_EQ(SameScheduleAs(K::kTpDedupPipelined, 2, false),
            K::kTpDedupPipelined);
  EXPECT_EQ(SameScheduleAs(K::kTpDedup, 1, false), K::kTpDedup);
  EXPECT_EQ(SameScheduleAs(K::kFlat, 1, false), K::kFlat);
  // Whole experts: DeepSpeed's drop path is flat, tp_dedup and the
  // pipeline's K = 1.
  EXPECT_EQ(SameScheduleAs(K::kTpDedup, 1, true), K::kFlat);
  EXPECT_EQ(SameScheduleAs(K::kTpDedupPipelined, 1, true), K::kFlat);
  EXPECT_EQ(SameScheduleAs(K::kTpDedupPipelined, 4, true),
            K::kTpDedupPipelined);
  EXPECT_EQ(SameScheduleAs(K::kHierarchical, 1, true), K::kHierarchical);
  EXPECT_EQ(SameScheduleAs(K::kExpertOverlap, 1, false), K::kExpertOverlap);
}

}  // namespace
}  // namespace monta::strategy
