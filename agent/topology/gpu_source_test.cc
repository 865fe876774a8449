#include "agent/topology/gpu_source.h"

#include <string>

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

// The real source, on whatever machine runs the tests: one of the two tests
// below runs and the other is a counted skip saying why.

// On this machine class (CUDA installed, no GPU) cudaGetDeviceCount fails with
// 35; without CUDA the library does not load. Either explains itself.
TEST(CudaRuntimeGpuSource, NoGpuIsExplained) {
  absl::StatusOr<CudaSnapshot> snapshot = MakeCudaRuntimeGpuSource()->Read();
  if (snapshot.ok()) {
    GTEST_SKIP() << "CUDA answers here (" << snapshot->gpus.size()
                 << " GPUs): ReadsEveryGpu covers it";
  }
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(snapshot.status().message()),
              ::testing::AnyOf(
                  ::testing::StartsWith("no CUDA device (cudaGetDeviceCount: "),
                  ::testing::StartsWith("CUDA runtime not loadable ("),
                  ::testing::HasSubstr(" lacks a required symbol (")));
}

// On a GPU node: every device with its name and memory from the driver API,
// its SMs and its PCI bus id.
TEST(CudaRuntimeGpuSource, ReadsEveryGpu) {
  absl::StatusOr<CudaSnapshot> snapshot = MakeCudaRuntimeGpuSource()->Read();
  if (!snapshot.ok()) {
    GTEST_SKIP() << "no CUDA device here: " << snapshot.status().message();
  }
  EXPECT_THAT(snapshot->origin, ::testing::HasSubstr("libcudart"));
  ASSERT_EQ(snapshot->peer_access.size(), snapshot->gpus.size());
  if (snapshot->gpus.empty()) GTEST_SKIP() << "CUDA reports no devices";
  EXPECT_THAT(snapshot->origin, ::testing::EndsWith(" and libcuda.so.1"));
  for (size_t i = 0; i < snapshot->gpus.size(); ++i) {
    const CudaGpuRecord& gpu = snapshot->gpus[i];
    EXPECT_EQ(gpu.index, static_cast<int>(i));
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.memory_bytes, 0u);
    EXPECT_GT(gpu.sm_count, 0);
    EXPECT_EQ(gpu.pci_bus_id.size(), 12u) << gpu.pci_bus_id;
    EXPECT_EQ(snapshot->peer_access[i].size(), snapshot->gpus.size());
  }
}

}  // namespace
}  // namespace monta::topology
