#include "agent/topology/discovery.h"

#include <fstream>
#include <memory>
#include <string>

#include "agent/topology/recorded_sources.h"
#include "agent/topology/sysfs_fixture.h"
#include "common/topology_diff.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTestdata[] = "agent/topology/testdata/";

std::unique_ptr<GpuSource> RecordedCuda(const std::string& name) {
  absl::StatusOr<std::unique_ptr<GpuSource>> source =
      LoadRecordedGpuSource(RunfilePath(kTestdata + name));
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

std::unique_ptr<NvmlSource> RecordedNvml(const std::string& name) {
  absl::StatusOr<std::unique_ptr<NvmlSource>> source =
      LoadRecordedNvmlSource(RunfilePath(kTestdata + name));
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

// A node without CUDA and NVML, as on a CPU-only machine.
struct Absent {
  std::unique_ptr<GpuSource> cuda = MakeFixedGpuSource(
      absl::UnavailableError("no CUDA device (cudaGetDeviceCount: 35)"));
  std::unique_ptr<NvmlSource> nvml = MakeFixedNvmlSource(absl::UnavailableError(
      "NVML not loadable (libnvidia-ml.so.1: cannot open shared object file)"));
};

class DgxH100 : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> root =
        MaterializeTestdataSysfs("dgx_h100/sysfs");
    ASSERT_TRUE(root.ok()) << root.status();
    sysfs_root_ = *root;
    cuda_ = RecordedCuda("dgx_h100/cuda.yaml");
    nvml_ = RecordedNvml("dgx_h100/nvml.yaml");
    options_.sysfs_root = sysfs_root_;
    options_.gpu_source = cuda_.get();
    options_.nvml_source = nvml_.get();
    options_.hostname = "dgx-h100-017";
    options_.kubernetes_node_name = "node-017";
  }

  std::string sysfs_root_;
  std::unique_ptr<GpuSource> cuda_;
  std::unique_ptr<NvmlSource> nvml_;
  DiscoveryOptions options_;
};

TEST_F(DgxH100, DiscoversGpusNvLinksNicsAndNuma) {
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options_);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->hostname(), "dgx-h100-017");
  EXPECT_EQ(topo->kubernetes_node_name(), "node-017");
  EXPECT_EQ(topo->cuda_status(), "ok: 8 GPUs via recorded DGX H100");
  EXPECT_EQ(topo->nvml_status(), "ok: 8 GPUs via recorded DGX H100");
  EXPECT_EQ(topo->nic_status(), "ok: 8 ports on 8 devices");
  EXPECT_EQ(topo->cpu_sockets(), 2);
  EXPECT_EQ(topo->cpu_logical_count(), 224);
  ASSERT_EQ(topo->numa_nodes_size(), 2);

  ASSERT_EQ(topo->gpus_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const monta::v1::Gpu& gpu = topo->gpus(i);
    EXPECT_EQ(gpu.index(), i);
    EXPECT_EQ(gpu.name(), "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpu.sm_count(), 132);
    EXPECT_EQ(gpu.memory_bytes(), 85520809984u);
    EXPECT_THAT(gpu.uuid(), StartsWith("GPU-"));
    EXPECT_EQ(gpu.numa_node(), i < 4 ? 0 : 1);
    EXPECT_EQ(gpu.nearest_nic(), "mlx5_" + std::to_string(i));
    EXPECT_EQ(gpu.nearest_nic_path(), monta::v1::PATH_TYPE_PXB);
    EXPECT_EQ(gpu.provenance(), monta::v1::PROVENANCE_DISCOVERED);
  }
  EXPECT_EQ(topo->gpus(3).pci_bus_id(), "0000:5d:00.0");

  ASSERT_EQ(topo->gpu_links_size(), 28);
  for (const auto& link : topo->gpu_links()) {
    EXPECT_LT(link.gpu_a(), link.gpu_b());
    EXPECT_EQ(link.path(), monta::v1::PATH_TYPE_NVLINK);
    EXPECT_EQ(link.nvlink_count(), 18);
    EXPECT_EQ(link.nvlink_inactive_count(), 0);
    EXPECT_TRUE(link.peer_access());
  }
  ASSERT_EQ(topo->nics_size(), 8);
  for (const auto& nic : topo->nics()) {
    EXPECT_EQ(nic.rate_bytes_per_second(), 400e9 / 8);
    EXPECT_EQ(nic.state(), "ACTIVE");
    EXPECT_EQ(nic.state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);
    EXPECT_EQ(nic.phys_state_kind(), monta::v1::NIC_PHYS_STATE_LINK_UP);
    EXPECT_EQ(nic.link_layer_kind(), monta::v1::NIC_LINK_LAYER_INFINIBAND);
  }
}

// The CUDA driver could not name the GPUs (libcuda.so.1 missing a symbol, a
// call failing): the runtime's facts stay, NVML names the same devices, and
// cuda_status says what happened.
TEST_F(DgxH100, NvmlNamesGpusTheCudaDriverCouldNot) {
  absl::StatusOr<CudaSnapshot> recorded = cuda_->Read();
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  CudaSnapshot unnamed = *recorded;
  for (CudaGpuRecord& gpu : unnamed.gpus) {
    gpu.name.clear();
    gpu.memory_bytes = 0;
  }
  unnamed.origin =
      "libcudart.so.13 (GPU names and memory unread: CUDA driver not loadable "
      "(libcuda.so.1: cannot open shared object file))";
  std::unique_ptr<GpuSource> cuda = MakeFixedGpuSource(unnamed);
  options_.gpu_source = cuda.get();
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options_);
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_EQ(topo->gpus_size(), 8);
  for (const monta::v1::Gpu& gpu : topo->gpus()) {
    EXPECT_EQ(gpu.name(), "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpu.memory_bytes(), 85520809984u);
    EXPECT_EQ(gpu.sm_count(), 132);  // still the runtime's
  }
  EXPECT_THAT(topo->cuda_status(),
              HasSubstr("ok: 8 GPUs via libcudart.so.13 (GPU names and "
                        "memory unread: CUDA driver not loadable"));

  // Without NVML either, the GPUs are reported unnamed rather than dropped.
  Absent absent;
  options_.nvml_source = absent.nvml.get();
  topo = DiscoverTopology(options_);
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_EQ(topo->gpus_size(), 8);
  EXPECT_EQ(topo->gpus(0).name(), "");
  EXPECT_EQ(topo->gpus(0).memory_bytes(), 0u);
  EXPECT_EQ(topo->gpus(0).pci_bus_id(), "0000:18:00.0");
}

TEST_F(DgxH100, WithoutNvmlPairsFallBackToPciClasses) {
  Absent absent;
  options_.nvml_source = absent.nvml.get();
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options_);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_THAT(topo->nvml_status(), HasSubstr("libnvidia-ml.so.1"));
  EXPECT_EQ(topo->gpus(0).uuid(), "");
  // 0-1 share a NUMA node but not a host bridge; 0-4 cross sockets.
  EXPECT_EQ(topo->gpu_links(0).path(), monta::v1::PATH_TYPE_NODE);
  EXPECT_EQ(topo->gpu_links(3).gpu_b(), 4);
  EXPECT_EQ(topo->gpu_links(3).path(), monta::v1::PATH_TYPE_SYS);
}

// An agent image without libcudart on a GPU node: NVML alone still names the
// GPUs and their NVLinks.
TEST_F(DgxH100, WithoutCudaGpusComeFromNvml) {
  Absent absent;
  options_.gpu_source = absent.cuda.get();
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options_);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->cuda_status(), "no CUDA device (cudaGetDeviceCount: 35)");
  ASSERT_EQ(topo->gpus_size(), 8);
  EXPECT_EQ(topo->gpus(5).name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(topo->gpus(5).memory_bytes(), 85520809984u);
  EXPECT_EQ(topo->gpus(5).pci_bus_id(), "0000:ab:00.0");
  EXPECT_EQ(topo->gpus(5).nearest_nic(), "mlx5_5");
  EXPECT_EQ(topo->gpus(5).sm_count(), 0);
  ASSERT_EQ(topo->gpu_links_size(), 28);
  EXPECT_EQ(topo->gpu_links(0).nvlink_count(), 18);
  EXPECT_FALSE(topo->gpu_links(0).peer_access());
}

TEST_F(DgxH100, NicRenegotiationAndNvLinkDownShowUpInTheDiff) {
  absl::StatusOr<monta::v1::NodeTopology> before = DiscoverTopology(options_);
  ASSERT_TRUE(before.ok()) << before.status();
  // mlx5_3 retrains at HDR speed and GPU3 loses one NVLink.
  {
    std::ofstream rate(sysfs_root_ + "/class/infiniband/mlx5_3/ports/1/rate");
    rate << "200 Gb/sec (4X HDR)\n";
  }
  std::unique_ptr<NvmlSource> degraded =
      RecordedNvml("dgx_h100/nvml_gpu3_link_down.yaml");
  options_.nvml_source = degraded.get();
  absl::StatusOr<monta::v1::NodeTopology> after = DiscoverTopology(options_);
  ASSERT_TRUE(after.ok()) << after.status();

  std::vector<topology_diff::TopologyChange> changes =
      topology_diff::DiffTopology(*before, *after);
  ASSERT_EQ(changes.size(), 8u);
  EXPECT_EQ(changes[0].kind, monta::v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED);
  EXPECT_EQ(changes[0].message, "mlx5_3 port 1: rate 400 -> 200 Gb/s");
  for (size_t i = 1; i < changes.size(); ++i) {
    EXPECT_EQ(changes[i].kind, monta::v1::TOPOLOGY_CHANGE_NVLINK_DOWN);
    EXPECT_THAT(changes[i].subject, HasSubstr("gpu3"));
    EXPECT_THAT(changes[i].message, HasSubstr("18 -> 17 (1 inactive)"));
  }
}

TEST(HgxA800, DiscoversNv8AndSharedHdrNics) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("hgx_a800/sysfs");
  ASSERT_TRUE(root.ok()) << root.status();
  std::unique_ptr<GpuSource> cuda = RecordedCuda("hgx_a800/cuda.yaml");
  std::unique_ptr<NvmlSource> nvml = RecordedNvml("hgx_a800/nvml.yaml");
  DiscoveryOptions options;
  options.sysfs_root = *root;
  options.gpu_source = cuda.get();
  options.nvml_source = nvml.get();
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->cpu_sockets(), 2);
  EXPECT_EQ(topo->cpu_logical_count(), 128);
  ASSERT_EQ(topo->gpus_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(topo->gpus(i).name(), "NVIDIA A800-SXM4-80GB");
    EXPECT_EQ(topo->gpus(i).numa_node(), i < 4 ? 0 : 1);
    EXPECT_EQ(topo->gpus(i).nearest_nic(), "mlx5_" + std::to_string(i / 2));
    EXPECT_EQ(topo->gpus(i).nearest_nic_path(), monta::v1::PATH_TYPE_PIX);
  }
  ASSERT_EQ(topo->gpu_links_size(), 28);
  for (const auto& link : topo->gpu_links()) {
    EXPECT_EQ(link.path(), monta::v1::PATH_TYPE_NVLINK);
    EXPECT_EQ(link.nvlink_count(), 8);
  }
  ASSERT_EQ(topo->nics_size(), 4);
  for (const auto& nic : topo->nics())
    EXPECT_EQ(nic.rate_bytes_per_second(), 200e9 / 8);
}

TEST(Discovery, NothingPresentStillSucceedsAndSaysWhy) {
  Absent absent;
  DiscoveryOptions options;
  options.sysfs_root = "/nonexistent/sysfs";
  options.gpu_source = absent.cuda.get();
  options.nvml_source = absent.nvml.get();
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->gpus_size(), 0);
  EXPECT_EQ(topo->gpu_links_size(), 0);
  EXPECT_EQ(topo->nics_size(), 0);
  EXPECT_EQ(topo->cuda_status(), "no CUDA device (cudaGetDeviceCount: 35)");
  EXPECT_THAT(topo->nvml_status(), HasSubstr("NVML not loadable"));
  EXPECT_EQ(topo->nic_status(),
            "no RDMA devices (/nonexistent/sysfs/class/infiniband absent)");
  EXPECT_FALSE(topo->hostname().empty());  // gethostname()
}

TEST(Discovery, BrokenNicsAreExplainedInNicStatus) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("broken/sysfs");
  ASSERT_TRUE(root.ok());
  Absent absent;
  DiscoveryOptions options;
  options.sysfs_root = *root;
  options.gpu_source = absent.cuda.get();
  options.nvml_source = absent.nvml.get();
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->nics_size(), 4);
  EXPECT_THAT(topo->nic_status(),
              StartsWith("ok: 4 ports on 4 devices; errors: "));
  EXPECT_THAT(topo->nic_status(), HasSubstr("mlx5_1 port 1: rate \"fast\""));
  EXPECT_THAT(topo->nic_status(), HasSubstr("rxe0: no PCI device"));
}

// The machine the tests run on, with the real libraries and /sys: whatever it
// has (here: CUDA without a GPU, no NVML, no RDMA NIC), discovery succeeds and
// every status says something.
TEST(Discovery, RealMachine) {
  DiscoveryOptions options;
  options.kubernetes_node_name = "ci";
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_FALSE(topo->cuda_status().empty());
  EXPECT_FALSE(topo->nvml_status().empty());
  EXPECT_FALSE(topo->nic_status().empty());
  EXPECT_GT(topo->cpu_logical_count(), 0);
  if (topo->gpus_size() == 0) {
    EXPECT_THAT(topo->cuda_status(),
                ::testing::AnyOf(HasSubstr("no CUDA device"),
                                 HasSubstr("not loadable")));
  }
  std::cout << "cuda_status: " << topo->cuda_status()
            << "\nnvml_status: " << topo->nvml_status()
            << "\nnic_status: " << topo->nic_status() << "\n";
}

TEST(Discovery, DeclaredFactsFillGapsAndDiscoveredOnesWin) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("dgx_h100/sysfs");
  ASSERT_TRUE(root.ok());
  Absent absent;
  DiscoveryOptions options;
  options.sysfs_root = *root;
  options.gpu_source = absent.cuda.get();
  options.nvml_source = absent.nvml.get();
  options.topology_file =
      RunfilePath(std::string(kTestdata) + "declared_h100.yaml");
  options.labels_file = RunfilePath(std::string(kTestdata) + "labels.txt");
  options.labels["topology.kubernetes.io/zone"] = "zone-b";
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options);
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ(topo->profile_name(), "h100-hgx");
  ASSERT_EQ(topo->gpus_size(), 8);
  EXPECT_EQ(topo->gpus(0).provenance(), monta::v1::PROVENANCE_DECLARED);
  EXPECT_EQ(topo->gpu_links_size(), 28);
  EXPECT_EQ(topo->gpu_links(5).provenance(), monta::v1::PROVENANCE_DECLARED);
  // sysfs found all 8 NICs, so the declared ones are not used.
  ASSERT_EQ(topo->nics_size(), 8);
  for (const auto& nic : topo->nics()) {
    EXPECT_EQ(nic.provenance(), monta::v1::PROVENANCE_DISCOVERED);
  }
  EXPECT_THAT(topo->cuda_status(), HasSubstr("declared in"));
  EXPECT_THAT(topo->cuda_status(),
              HasSubstr("GPUs 0,1,2,3,4,5,6,7 28 GPU pairs"));
  EXPECT_THAT(topo->nic_status(), HasSubstr("discovered NICs mlx5_0:1,"));
  // Labels: topology file < labels file < flags; non-topology keys dropped.
  EXPECT_EQ(topo->labels().at("network.topology.nvidia.com/leaf"), "leaf-09");
  EXPECT_EQ(topo->labels().at("network.topology.nvidia.com/spine"), "spine-1");
  EXPECT_EQ(topo->labels().at("network.topology.nvidia.com/accelerator"),
            "clique-3");
  EXPECT_EQ(topo->labels().at("topology.kubernetes.io/zone"), "zone-b");
  EXPECT_EQ(topo->labels().count("app"), 0u);
}

TEST(Discovery, InvalidTopologyFileFailsTheCall) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/bad.yaml";
  std::ofstream(path) << "nics: [{name: mlx5_0, rate_gbps: -1}]\n";
  DiscoveryOptions options;
  options.topology_file = path;
  absl::StatusOr<monta::v1::NodeTopology> topo = DiscoverTopology(options);
  ASSERT_FALSE(topo.ok());
  EXPECT_THAT(topo.status().message(), HasSubstr("nics[0].rate_gbps"));
}

TEST(Discovery, RecordedSourceErrorsBecomeStatuses) {
  absl::StatusOr<std::unique_ptr<GpuSource>> missing =
      LoadRecordedGpuSource("/nonexistent/cuda.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace monta::topology
