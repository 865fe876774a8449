#include "common/proto_names.h"

#include "gtest/gtest.h"

namespace monta {
namespace {

TEST(ProtoNamesTest, ShortNamesAreTheUserFacingStrings) {
  // These strings are in annotations, env vars and metric labels: fixed.
  EXPECT_EQ(ShortName(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED),
            "tp_dedup_pipelined");
  EXPECT_EQ(ShortName(v1::STRATEGY_KIND_FLAT), "flat");
  EXPECT_EQ(ShortName(v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED),
            "nic_rate_changed");
  EXPECT_EQ(ShortName(v1::BOTTLENECK_LAUNCH_LATENCY), "launch_latency");
  EXPECT_EQ(ShortName(v1::CURVE_ROLE_ALLTOALL_INTER), "alltoall_inter");
  EXPECT_EQ(ShortName(v1::EVIDENCE_SOURCE_MIXED), "mixed");
  EXPECT_EQ(ShortName(v1::STRATEGY_KIND_UNSPECIFIED), "unspecified");
  EXPECT_EQ(ShortName(static_cast<v1::StrategyKind>(99)), "99");
  EXPECT_EQ(CurveStrategyName(v1::STRATEGY_KIND_UNSPECIFIED), "");
  EXPECT_EQ(CurveStrategyName(v1::STRATEGY_KIND_FLAT), "flat");
  EXPECT_EQ(NodeStateName(v1::NODE_STATE_STALE), "stale");
  EXPECT_EQ(NodeStateName(v1::NODE_STATE_UNSPECIFIED), "unknown");
}

TEST(ProtoNamesTest, FromShortNameInvertsShortName) {
  EXPECT_EQ(FromShortName<v1::StrategyKind>("tp_dedup"),
            v1::STRATEGY_KIND_TP_DEDUP);
  EXPECT_EQ(FromShortName<v1::TopologyChange>("nvlink_up"),
            v1::TOPOLOGY_CHANGE_NVLINK_UP);
  EXPECT_EQ(FromShortName<v1::StrategyKind>("TP_DEDUP"),
            v1::STRATEGY_KIND_TP_DEDUP);
  EXPECT_EQ(FromShortName<v1::StrategyKind>("s2"), std::nullopt);
  EXPECT_EQ(FromShortName<v1::StrategyKind>(""), std::nullopt);
}

}  // namespace
}  // namespace monta
