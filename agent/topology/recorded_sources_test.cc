#include "agent/topology/recorded_sources.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "agent/topology/sysfs_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(LoadRecordedGpuSource, ReplaysTheH100Recording) {
  auto source = LoadRecordedGpuSource(
      RunfilePath("agent/topology/testdata/dgx_h100/cuda.yaml"));
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<CudaSnapshot> snapshot = (*source)->Read();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_EQ(snapshot->gpus.size(), 8u);
  EXPECT_EQ(snapshot->gpus[7].pci_bus_id, "0000:db:00.0");
  EXPECT_TRUE(snapshot->peer_access[0][7]);
  EXPECT_FALSE(snapshot->peer_access[3][3]);
}

TEST(LoadRecordedGpuSource, PeerListAndRecordedError) {
  auto listed = LoadRecordedGpuSource(
      WriteTemp("peers.yaml",
                "gpus: [{index: 0}, {index: 1}]\npeer_access: [\"0->1\"]\n"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  absl::StatusOr<CudaSnapshot> snapshot = (*listed)->Read();
  EXPECT_TRUE(snapshot->peer_access[0][1]);
  EXPECT_FALSE(snapshot->peer_access[1][0]);

  auto failing = LoadRecordedGpuSource(WriteTemp(
      "error.yaml", "error: \"no CUDA device (cudaGetDeviceCount: 35)\"\n"));
  ASSERT_TRUE(failing.ok());
  absl::StatusOr<CudaSnapshot> answer = (*failing)->Read();
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answer.status().message(),
            "no CUDA device (cudaGetDeviceCount: 35)");
}

TEST(LoadRecordedGpuSource, BadFilesNameTheProblem) {
  auto gap = LoadRecordedGpuSource(
      WriteTemp("gap.yaml", "gpus: [{index: 0}, {index: 2}]\n"));
  ASSERT_FALSE(gap.ok());
  EXPECT_THAT(gap.status().message(), HasSubstr("gpus[1].index"));
  auto syntax =
      LoadRecordedGpuSource(WriteTemp("syntax.yaml", "gpus: [{index: \n"));
  ASSERT_FALSE(syntax.ok());
  EXPECT_THAT(syntax.status().message(), HasSubstr("syntax.yaml: line"));
  auto wrong_type =
      LoadRecordedGpuSource(WriteTemp("type.yaml", "gpus: [{index: zero}]\n"));
  EXPECT_FALSE(wrong_type.ok());
  auto bad_peer = LoadRecordedGpuSource(
      WriteTemp("peer.yaml", "gpus: [{index: 0}]\npeer_access: [\"0->4\"]\n"));
  EXPECT_THAT(bad_peer.status().message(), HasSubstr("peer_access"));
}

TEST(LoadRecordedNvmlSource, AggregatesRecordedLinks) {
  auto source = LoadRecordedNvmlSource(
      RunfilePath("agent/topology/testdata/dgx_h100/nvml_gpu3_link_down.yaml"));
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<NvmlSnapshot> snapshot = (*source)->Read();
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ(snapshot->gpus[0].pci_bus_id, "0000:18:00.0");
  ASSERT_EQ(snapshot->pairs.size(), 28u);
  for (const NvmlPairRecord& pair : snapshot->pairs) {
    const bool touches_gpu3 = pair.gpu_a == 3 || pair.gpu_b == 3;
    EXPECT_EQ(pair.nvlink_active, touches_gpu3 ? 17 : 18);
    EXPECT_EQ(pair.nvlink_inactive, touches_gpu3 ? 1 : 0);
    const bool same_socket = (pair.gpu_a < 4) == (pair.gpu_b < 4);
    EXPECT_EQ(pair.common_ancestor_level, same_socket ? 40 : 50);
  }
}

}  // namespace
}  // namespace monta::topology
