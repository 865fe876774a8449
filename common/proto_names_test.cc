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

TEST(ProtoNamesTest, FromSpellingIgnoresCaseSpacesAndSeparators) {
  EXPECT_EQ(FromSpelling<v1::NicPhysState>("LinkUp"),
            v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(FromSpelling<v1::NicPhysState>("Phy Test"),
            v1::NIC_PHYS_STATE_PHY_TEST);
  EXPECT_EQ(FromSpelling<v1::NicPhysState>("port-configuration-training"),
            v1::NIC_PHYS_STATE_PORT_CONFIGURATION_TRAINING);
  EXPECT_EQ(FromSpelling<v1::NicLinkLayer>("InfiniBand"),
            v1::NIC_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(FromSpelling<v1::NicPortState>("ACTIVE_DEFER"),
            v1::NIC_PORT_STATE_ACTIVE_DEFER);
  EXPECT_EQ(FromSpelling<v1::NicPortState>("ACTIVE"),
            v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(FromSpelling<v1::NicPortState>("LinkUp"), std::nullopt);
  EXPECT_EQ(FromSpelling<v1::NicPortState>(" _ "), std::nullopt);
  EXPECT_EQ(FromSpelling<v1::NicPortState>(""), std::nullopt);
}

}  // namespace
}  // namespace monta
