#include "server/model/hardware_profile.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "server/model/profile_view.h"

namespace monta::model {
namespace {

TEST(HardwareProfile, BuiltinsCoverTheDesign) {
  std::set<std::string> names;
  for (const HardwareProfile& p : BuiltinProfiles()) names.insert(p.name);
  for (const char* want : {"a800-hgx", "a800-hgx-8nic", "a100-hgx", "h800-hgx",
                           "h100-hgx", "h200-hgx", "cpu-gloo"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
}

TEST(HardwareProfile, EveryConstantHasUnitAndSource) {
  for (const HardwareProfile& p : BuiltinProfiles()) {
    EXPECT_FALSE(p.version.empty()) << p.name;
    EXPECT_GE(p.constants.size(), 12u) << p.name;
    for (const ProfileConstant& c : p.constants) {
      EXPECT_FALSE(c.unit.empty()) << p.name << " " << c.name;
      EXPECT_FALSE(c.source.empty()) << p.name << " " << c.name;
      EXPECT_GT(c.value, 0) << p.name << " " << c.name;
    }
  }
}

TEST(HardwareProfile, A800RatiosMatchThePaper) {
  auto a800 = FindProfile("a800-hgx");
  ASSERT_TRUE(a800.ok());
  // 4 x 200 Gb/s over 8 GPUs = 12.5 GB/s line rate per GPU: 16:1 to NVLink.
  EXPECT_DOUBLE_EQ(a800->nvlink_bytes_per_second / (4 * 200e9 / 8 / 8), 16);
  EXPECT_NEAR(a800->InterNodeLinkBytesPerSecond(), 12.5e9 * 0.95, 1);
  auto eight = FindProfile("a800-hgx-8nic");
  ASSERT_TRUE(eight.ok());
  EXPECT_DOUBLE_EQ(eight->InterNodeLinkBytesPerSecond(),
                   2 * a800->InterNodeLinkBytesPerSecond());
  auto h200 = FindProfile("h200-hgx");
  ASSERT_TRUE(h200.ok());
  EXPECT_DOUBLE_EQ(h200->nvlink_bytes_per_second, 450e9);
  EXPECT_EQ(h200->nics_per_node, 8);
  EXPECT_DOUBLE_EQ(h200->nic_bytes_per_second, 400e9 / 8);
}

TEST(HardwareProfile, UnknownNamesAreNotFound) {
  auto p = FindProfile("b300-nvl72");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("a800-hgx"), std::string::npos);
}

TEST(HardwareProfile, GpuNamesMapToProfiles) {
  EXPECT_EQ(*ProfileNameForGpu("NVIDIA A800-SXM4-80GB"), "a800-hgx");
  EXPECT_EQ(*ProfileNameForGpu("NVIDIA H100 80GB HBM3"), "h100-hgx");
  EXPECT_EQ(*ProfileNameForGpu("NVIDIA H200"), "h200-hgx");
  EXPECT_EQ(*ProfileNameForGpu(""), "cpu-gloo");
  EXPECT_FALSE(ProfileNameForGpu("Tesla T4").ok());
}

TEST(ProfileView, CurvesCarryTheProfileRates) {
  auto p = FindProfile("h100-hgx");
  ASSERT_TRUE(p.ok());
  auto view = ProfileClusterView(*p, 4, 8);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_DOUBLE_EQ(view->alltoall_intra.LinkRateAt(1e6).bytes_per_second,
                   450e9 * 0.82);
  EXPECT_DOUBLE_EQ(view->alltoall_inter.LinkRateAt(1e6).bytes_per_second,
                   50e9 * 0.95);
  EXPECT_DOUBLE_EQ(view->copy.LinkRateAt(1e6).bytes_per_second,
                   3350e9 / 2 * 0.8);
  // Two nodes, whatever the cluster's size: no curve grows with it.
  EXPECT_EQ(view->alltoall_inter.nranks(), 16);
  auto large = ProfileClusterView(*p, 4096, 8);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(large->alltoall_inter.nranks(), 16);
  EXPECT_DOUBLE_EQ(large->alltoall_inter.alpha_seconds(),
                   view->alltoall_inter.alpha_seconds());
  EXPECT_EQ(view->alltoall_latency_source.min_ranks, 8);
  EXPECT_EQ(view->alltoall_latency_source.max_ranks, 32);
  // More ranks, more peers, more launch latency.
  EXPECT_GT(view->alltoall_inter.alpha_seconds(),
            view->alltoall_intra.alpha_seconds());
  EXPECT_FALSE(ProfileClusterView(*p, 0, 8).ok());
}

}  // namespace
}  // namespace monta::model
