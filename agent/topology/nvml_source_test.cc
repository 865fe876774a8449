#include "agent/topology/nvml_source.h"

#include <string>
#include <vector>

#include "agent/topology/gpu_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<NvmlGpuRecord> ThreeGpus() {
  return {{0, "GPU-a", "0000:18:00.0"},
          {1, "GPU-b", "0000:2a:00.0"},
          {2, "GPU-c", "0000:3a:00.0"}};
}

std::vector<NvmlPairRecord> AllPairs(int n) {
  std::vector<NvmlPairRecord> pairs;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) pairs.push_back({a, b, 0, 0, 50});
  }
  return pairs;
}

void AddLinks(std::vector<NvLinkObservation>& links, int gpu, int first,
              int count, bool active, const std::string& remote) {
  for (int link = first; link < first + count; ++link) {
    links.push_back({gpu, link, active, remote});
  }
}

TEST(AggregateNvLinks, SwitchLinksConnectEveryPairWithTheSmallerSide) {
  std::vector<NvLinkObservation> links;
  for (int gpu = 0; gpu < 3; ++gpu) {
    AddLinks(links, gpu, 0, gpu == 2 ? 17 : 18, true, "0000:05:00.0");
  }
  AddLinks(links, 2, 17, 1, false, "");  // down link: NVML cannot name its peer
  std::vector<NvmlPairRecord> pairs = AllPairs(3);
  AggregateNvLinks(ThreeGpus(), links, pairs);
  EXPECT_EQ(pairs[0].nvlink_active, 18);  // 0-1
  EXPECT_EQ(pairs[0].nvlink_inactive, 0);
  EXPECT_EQ(pairs[1].nvlink_active, 17);  // 0-2
  EXPECT_EQ(pairs[1].nvlink_inactive, 1);
  EXPECT_EQ(pairs[2].nvlink_active, 17);  // 1-2
  EXPECT_EQ(pairs[2].nvlink_inactive, 1);
}

TEST(AggregateNvLinks, DirectLinksCountOncePerPair) {
  std::vector<NvLinkObservation> links;
  // GPU0 <-> GPU1 over 4 links, seen from both ends; one of them down.
  AddLinks(links, 0, 0, 3, true, "0000:2a:00.0");
  AddLinks(links, 0, 3, 1, false, "0000:2a:00.0");
  AddLinks(links, 1, 0, 3, true, "0000:18:00.0");
  AddLinks(links, 1, 3, 1, false, "0000:18:00.0");
  std::vector<NvmlPairRecord> pairs = AllPairs(3);
  AggregateNvLinks(ThreeGpus(), links, pairs);
  EXPECT_EQ(pairs[0].nvlink_active, 3);
  EXPECT_EQ(pairs[0].nvlink_inactive, 1);
  EXPECT_EQ(pairs[1].nvlink_active, 0);  // GPU2 has no NVLink
  EXPECT_EQ(pairs[2].nvlink_active, 0);
}

TEST(PathTypeFromNvmlLevel, MapsEveryLevel) {
  EXPECT_EQ(PathTypeFromNvmlLevel(0), monta::v1::PATH_TYPE_PIX);
  EXPECT_EQ(PathTypeFromNvmlLevel(10), monta::v1::PATH_TYPE_PIX);
  EXPECT_EQ(PathTypeFromNvmlLevel(20), monta::v1::PATH_TYPE_PXB);
  EXPECT_EQ(PathTypeFromNvmlLevel(30), monta::v1::PATH_TYPE_PHB);
  EXPECT_EQ(PathTypeFromNvmlLevel(40), monta::v1::PATH_TYPE_NODE);
  EXPECT_EQ(PathTypeFromNvmlLevel(50), monta::v1::PATH_TYPE_SYS);
  EXPECT_EQ(PathTypeFromNvmlLevel(7), monta::v1::PATH_TYPE_UNSPECIFIED);
}

// The real library, on whatever machine runs the tests: one of the two tests
// below runs and the other is a counted skip saying why.

// Without NVML (no driver, as on CI): a status that explains, never an empty
// one or a crash.
TEST(NvmlLibrarySource, AbsentNvmlIsExplained) {
  absl::StatusOr<NvmlSnapshot> nvml = MakeNvmlLibrarySource()->Read();
  if (nvml.ok()) {
    GTEST_SKIP() << "NVML works here (" << nvml->gpus.size()
                 << " GPUs): ReadsEveryGpu covers it";
  }
  EXPECT_THAT(nvml.status().code(), AnyOf(absl::StatusCode::kUnavailable,
                                          absl::StatusCode::kInternal));
  // Each failure names the library or the call that failed.
  EXPECT_THAT(std::string(nvml.status().message()),
              AnyOf(HasSubstr("NVML not loadable (libnvidia-ml.so.1"),
                    HasSubstr("libnvidia-ml.so.1 lacks a required symbol"),
                    HasSubstr("nvmlInit_v2 failed: "),
                    HasSubstr("nvmlDeviceGetCount_v2 failed: "),
                    HasSubstr("nvmlDeviceGetHandleByIndex_v2(")));
}

// With NVML: every GPU it lists is described, and every pair once.
TEST(NvmlLibrarySource, ReadsEveryGpu) {
  absl::StatusOr<NvmlSnapshot> nvml = MakeNvmlLibrarySource()->Read();
  if (!nvml.ok()) {
    GTEST_SKIP() << "no NVML here: " << nvml.status().message();
  }
  EXPECT_EQ(nvml->origin, "libnvidia-ml.so.1");
  const int n = static_cast<int>(nvml->gpus.size());
  for (int i = 0; i < n; ++i) {
    const NvmlGpuRecord& gpu = nvml->gpus[i];
    EXPECT_EQ(gpu.index, i);
    EXPECT_THAT(gpu.uuid, StartsWith("GPU-"));
    EXPECT_EQ(gpu.pci_bus_id, NormalizePciBusId(gpu.pci_bus_id));
    EXPECT_EQ(gpu.pci_bus_id.size(), 12u) << gpu.pci_bus_id;
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.memory_bytes, 0u);
  }
  ASSERT_EQ(nvml->pairs.size(), static_cast<size_t>(n * (n - 1) / 2));
  for (const NvmlPairRecord& pair : nvml->pairs) {
    EXPECT_LT(pair.gpu_a, pair.gpu_b);
    EXPECT_LT(pair.gpu_b, n);
    EXPECT_GE(pair.nvlink_active, 0);
    EXPECT_GE(pair.nvlink_inactive, 0);
    EXPECT_NE(PathTypeFromNvmlLevel(pair.common_ancestor_level),
              monta::v1::PATH_TYPE_UNSPECIFIED)
        << pair.common_ancestor_level;
  }
}

}  // namespace
}  // namespace monta::topology
