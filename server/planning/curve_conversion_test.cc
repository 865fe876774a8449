#include "server/planning/curve_conversion.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/model/hardware_profile.h"

namespace monta::planning {
namespace {

v1::BandwidthCurve InterCurve() {
  v1::BandwidthCurve c;
  c.set_collective(v1::COLLECTIVE_ALLTOALL);
  c.set_scope(v1::SCOPE_INTER_NODE);
  c.set_nranks(16);
  c.set_n_nodes(2);
  for (uint64_t x : {1ull << 20, 4ull << 20, 16ull << 20}) {
    v1::CurvePoint* p = c.add_points();
    p->set_message_bytes(x);
    p->set_time_seconds(20e-6 + 0.5 * x / 10e9);
  }
  return c;
}

TEST(CurveFromProto, KeepsShapeAndTimes) {
  auto curve = CurveFromProto(InterCurve());
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->nranks(), 16);
  EXPECT_EQ(curve->ranks_per_node(), 8);
  EXPECT_DOUBLE_EQ(curve->link_share(), 0.5);
  EXPECT_NEAR(curve->alpha_seconds(), 20e-6, 1e-12);
  EXPECT_NEAR(curve->LinkRateAt(4 << 20).bytes_per_second, 10e9, 1e3);
}

TEST(CurveFromProto, BusBandwidthOnlyPointsGiveTheSameTimes) {
  v1::BandwidthCurve busbw_only = InterCurve();
  for (v1::CurvePoint& p : *busbw_only.mutable_points()) {
    // nccl-tests: busbw = bytes / time * (n-1)/n.
    p.set_busbw_bytes_per_second(p.message_bytes() / p.time_seconds() * 15 /
                                 16);
    p.set_time_seconds(0);
  }
  auto a = CurveFromProto(InterCurve());
  auto b = CurveFromProto(busbw_only);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NEAR(a->TimeSeconds(8 << 20).seconds, b->TimeSeconds(8 << 20).seconds,
              1e-12);
}

TEST(CurveFromProto, RejectsBadCurves) {
  v1::BandwidthCurve c = InterCurve();
  c.mutable_points(0)->set_wrong_bytes(1);
  EXPECT_NE(CurveFromProto(c).status().message().find("data check"),
            std::string::npos);
  c = InterCurve();
  c.set_collective(v1::COLLECTIVE_UNSPECIFIED);
  EXPECT_FALSE(CurveFromProto(c).ok());
  c = InterCurve();
  c.set_nranks(15);
  EXPECT_FALSE(CurveFromProto(c).ok());
  c = InterCurve();
  c.mutable_points(2)->set_message_bytes(1);
  EXPECT_FALSE(CurveFromProto(c).ok());
}

// Rule (e): points that all carry a chain time price from both statistics
// (model::BandwidthCurve::FromBothStatistics); a curve without them, or with
// a chain at only some sizes, prices from the median exactly as before.
TEST(CurveFromProto, ChainTimesOnEveryPointPriceFromBothStatistics) {
  v1::BandwidthCurve both = InterCurve();
  std::vector<model::CurveSample> median, chain;
  for (v1::CurvePoint& p : *both.mutable_points()) {
    // The chain: a faster link (12.5 GB/s), no latency.
    p.set_chain_time_seconds(0.5 * p.message_bytes() / 12.5e9);
    median.push_back(
        {static_cast<double>(p.message_bytes()), p.time_seconds()});
    chain.push_back(
        {static_cast<double>(p.message_bytes()), p.chain_time_seconds()});
  }
  auto priced = CurveFromProto(both);
  ASSERT_TRUE(priced.ok()) << priced.status();
  auto expected = model::BandwidthCurve::FromBothStatistics(
      bandwidth::Collective::kAllToAll, 16, 8, median, chain);
  ASSERT_TRUE(expected.ok());
  EXPECT_NEAR(priced->LinkRateAt(4 << 20).bytes_per_second, 12.5e9, 1e3);
  EXPECT_DOUBLE_EQ(priced->alpha_seconds(), expected->alpha_seconds());
  EXPECT_DOUBLE_EQ(priced->launch_floor_seconds(),
                   expected->launch_floor_seconds());
  EXPECT_NEAR(priced->launch_floor_seconds(), 20e-6, 1e-12);  // the median's

  // A chain at only some sizes: the median alone, as without any.
  v1::BandwidthCurve partial = both;
  partial.mutable_points(1)->set_chain_time_seconds(0);
  auto plain = CurveFromProto(InterCurve());
  auto part = CurveFromProto(partial);
  ASSERT_TRUE(plain.ok() && part.ok());
  for (double x : {1 << 20, 3 << 20, 32 << 20}) {
    EXPECT_EQ(part->LinkRateAt(x).bytes_per_second,
              plain->LinkRateAt(x).bytes_per_second);
  }
  EXPECT_EQ(part->alpha_seconds(), plain->alpha_seconds());
  EXPECT_EQ(part->launch_floor_seconds(), plain->launch_floor_seconds());
}

TEST(CurveFromProto, RejectsANegativeOrNaNChainTimeNamingIt) {
  for (double bad : {-1e-3, std::nan("")}) {
    v1::BandwidthCurve c = InterCurve();
    c.mutable_points(1)->set_chain_time_seconds(bad);
    EXPECT_NE(CurveFromProto(c).status().message().find(
                  "curve points[1].chain_time_seconds: expected >= 0 and "
                  "finite"),
              std::string::npos)
        << CurveFromProto(c).status();
  }
}

TEST(ProfileToProto, CopiesEveryConstant) {
  for (const model::HardwareProfile& p : model::BuiltinProfiles()) {
    const v1::HardwareProfile out = ProfileToProto(p);
    EXPECT_EQ(out.name(), p.name);
    EXPECT_EQ(out.gpus_per_node(), p.gpus_per_node);
    ASSERT_EQ(out.constants_size(), static_cast<int>(p.constants.size()));
    EXPECT_EQ(out.constants(0).source(), p.constants[0].source);
  }
}

}  // namespace
}  // namespace monta::planning
