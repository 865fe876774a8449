#include "agent/topology/gpu_source.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology {
namespace {

TEST(NormalizePciBusId, AgreesAcrossCudaNvmlAndSysfs) {
  EXPECT_EQ(NormalizePciBusId("0000:18:00.0"), "0000:18:00.0");
  EXPECT_EQ(NormalizePciBusId("00000000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(NormalizePciBusId(" 0000:DB:00.0\n"), "0000:db:00.0");
  EXPECT_EQ(NormalizePciBusId("18:00.0"), "0000:18:00.0");
  EXPECT_EQ(NormalizePciBusId("Not-A-Bus"), "not-a-bus");
  EXPECT_EQ(NormalizePciBusId(""), "");
}

// On this machine class (CUDA installed, no GPU) cudaGetDeviceCount fails with
// 35; without CUDA the library does not load; on a GPU node it answers. Each
// is fine as long as a failure explains itself.
TEST(CudaRuntimeGpuSource, AnswersOrExplains) {
  absl::StatusOr<CudaSnapshot> snapshot = MakeCudaRuntimeGpuSource()->Read();
  if (snapshot.ok()) {
    EXPECT_THAT(snapshot->origin, ::testing::HasSubstr("libcudart"));
    // With a GPU, names and memory come from the driver API.
    if (!snapshot->gpus.empty()) {
      EXPECT_THAT(snapshot->origin, ::testing::HasSubstr("and libcuda.so.1"));
    }
    EXPECT_EQ(snapshot->peer_access.size(), snapshot->gpus.size());
    for (const CudaGpuRecord& gpu : snapshot->gpus) {
      EXPECT_FALSE(gpu.name.empty());
      EXPECT_GT(gpu.memory_bytes, 0u);
      EXPECT_GT(gpu.sm_count, 0);
    }
  } else {
    EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(snapshot.status().message(),
                ::testing::AnyOf(::testing::HasSubstr("cudaGetDeviceCount"),
                                 ::testing::HasSubstr("not loadable")));
  }
}

}  // namespace
}  // namespace monta::topology
