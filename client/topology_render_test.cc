#include "client/topology_render.h"

#include <memory>
#include <string>

#include "agent/topology/discovery.h"
#include "agent/topology/recorded_sources.h"
#include "agent/topology/sysfs_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::client {
namespace {

using ::testing::HasSubstr;

// The DGX H100 fixture as the agent discovers it (agent/topology/testdata).
monta::v1::NodeTopology DiscoveredH100() {
  namespace topo = monta::topology;
  absl::StatusOr<std::string> root =
      topo::MaterializeTestdataSysfs("dgx_h100/sysfs");
  EXPECT_TRUE(root.ok()) << root.status();
  auto cuda = topo::LoadRecordedGpuSource(
      topo::RunfilePath("agent/topology/testdata/dgx_h100/cuda.yaml"));
  auto nvml = topo::LoadRecordedNvmlSource(
      topo::RunfilePath("agent/topology/testdata/dgx_h100/nvml.yaml"));
  EXPECT_TRUE(cuda.ok() && nvml.ok());
  topo::DiscoveryOptions options;
  options.sysfs_root = *root;
  options.gpu_source = cuda->get();
  options.nvml_source = nvml->get();
  absl::StatusOr<monta::v1::NodeTopology> topology =
      topo::DiscoverTopology(options);
  EXPECT_TRUE(topology.ok()) << topology.status();
  return *topology;
}

// What `nvidia-smi topo -m` prints on a DGX H100 restricted to its eight
// compute NICs: tab-separated cells, NV18 between every GPU pair, PXB from each
// GPU to its own CX-7, NODE within a socket, SYS across; compare the published
// output in vllm-project/vllm#13855 and sgl-project/sglang#19687.
// clang-format off
constexpr char kDgxH100Matrix[] =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tNIC2\tNIC3\tNIC4\tNIC5\tNIC6\tNIC7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPXB\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNODE\tPXB\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNODE\tNODE\tPXB\tNODE\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNODE\tNODE\tNODE\tPXB\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU4\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\tPXB\tNODE\tNODE\tNODE\t56-111,168-223\t1\t\tN/A\n"
    "GPU5\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tSYS\tSYS\tSYS\tSYS\tNODE\tPXB\tNODE\tNODE\t56-111,168-223\t1\t\tN/A\n"
    "GPU6\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tPXB\tNODE\t56-111,168-223\t1\t\tN/A\n"
    "GPU7\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tNODE\tPXB\t56-111,168-223\t1\t\tN/A\n"
    "NIC0\tPXB\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t X \tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\n"
    "NIC1\tNODE\tPXB\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t X \tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\n"
    "NIC2\tNODE\tNODE\tPXB\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t X \tNODE\tSYS\tSYS\tSYS\tSYS\n"
    "NIC3\tNODE\tNODE\tNODE\tPXB\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tNODE\t X \tSYS\tSYS\tSYS\tSYS\n"
    "NIC4\tSYS\tSYS\tSYS\tSYS\tPXB\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t X \tNODE\tNODE\tNODE\n"
    "NIC5\tSYS\tSYS\tSYS\tSYS\tNODE\tPXB\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t X \tNODE\tNODE\n"
    "NIC6\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tPXB\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t X \tNODE\n"
    "NIC7\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tNODE\tPXB\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tNODE\t X \n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect "
    "between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between "
    "PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge "
    "(typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing "
    "the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
    "  NIC2: mlx5_2\n"
    "  NIC3: mlx5_3\n"
    "  NIC4: mlx5_4\n"
    "  NIC5: mlx5_5\n"
    "  NIC6: mlx5_6\n"
    "  NIC7: mlx5_7\n";
// clang-format on

TEST(RenderTopoMatrix, MatchesNvidiaSmiOnDgxH100) {
  EXPECT_EQ(RenderTopoMatrix(DiscoveredH100()), kDgxH100Matrix);
}

TEST(RenderTopoMatrix, DegradedNvLinkAndUnknownsShowUp) {
  monta::v1::NodeTopology topology = DiscoveredH100();
  topology.mutable_gpu_links(0)->set_nvlink_count(17);
  topology.mutable_gpus(1)->set_numa_node(-1);
  const std::string matrix = RenderTopoMatrix(topology);
  EXPECT_THAT(matrix, HasSubstr("GPU0\t X \tNV17\tNV18"));
  EXPECT_THAT(matrix, HasSubstr("\tN/A\tN/A\t\tN/A\nGPU2"));
}

TEST(RenderTopoMatrix, PortsOfOneHcaShareTheirPath) {
  monta::v1::NodeTopology topology = DiscoveredH100();
  // A dual-port storage HCA next to GPU0's NIC: functions .0/.1 of one device.
  topology.mutable_nics(0)->set_pci_address("0000:19:00.0");
  monta::v1::Nic* second = topology.add_nics();
  *second = topology.nics(0);
  second->set_name("mlx5_0b");
  second->set_pci_address("0000:19:00.1");
  const std::string matrix = RenderTopoMatrix(topology);
  // GPU0: PXB to both ports; the two ports are PIX to each other.
  EXPECT_THAT(matrix,
              HasSubstr("\tPXB\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tPXB\t"
                        "0-55,112-167"));
  EXPECT_THAT(matrix,
              HasSubstr("NIC0\tPXB\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t"
                        " X \tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tPIX\n"));
  EXPECT_THAT(matrix, HasSubstr("  NIC8: mlx5_0b\n"));
}

TEST(RenderTopoMatrix, EmptyTopologyHasHeaderAndLegendOnly) {
  const std::string matrix = RenderTopoMatrix(monta::v1::NodeTopology());
  EXPECT_THAT(matrix,
              ::testing::StartsWith(
                  "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n\nLegend:"));
  EXPECT_THAT(matrix, ::testing::Not(HasSubstr("NIC Legend")));
}

TEST(RenderNicTable, ListsEveryPort) {
  monta::v1::NodeTopology topology = DiscoveredH100();
  topology.mutable_nics(3)->set_rate_bytes_per_second(200e9 / 8);
  monta::v1::Nic* declared = topology.add_nics();
  declared->set_name("mlx5_8");
  declared->set_port(1);
  declared->set_numa_node(-1);
  declared->set_provenance(monta::v1::PROVENANCE_DECLARED);
  // A port in a state Monta has no name for, and one from an agent older than
  // the enums (text only).
  topology.mutable_nics(4)->set_state("NOP");
  topology.mutable_nics(4)->set_state_kind(monta::v1::NIC_PORT_STATE_UNKNOWN);
  topology.mutable_nics(5)->clear_phys_state_kind();
  topology.mutable_nics(5)->set_phys_state("Polling");
  const std::string table = RenderNicTable(topology);
  EXPECT_THAT(table, HasSubstr("NIC"));
  EXPECT_THAT(table, HasSubstr("RATE (Gb/s)"));
  EXPECT_THAT(table, HasSubstr("PROVENANCE"));
  EXPECT_THAT(table, ::testing::ContainsRegex(
                         "mlx5_0 +1 +infiniband +400 +active +link_up +"
                         "0000:19:00.0 +0 +discovered"));
  EXPECT_THAT(table, ::testing::ContainsRegex("mlx5_3 +1 +infiniband +200 "));
  EXPECT_THAT(table, ::testing::ContainsRegex(
                         "mlx5_4 +1 +infiniband +400 +unknown \\(NOP\\) "
                         "+link_up "));
  EXPECT_THAT(table, ::testing::ContainsRegex(
                         "mlx5_5 +1 +infiniband +400 +active +polling "));
  EXPECT_THAT(
      table, ::testing::ContainsRegex("mlx5_8 +1 +- +- +- +- +- +- +declared"));
}

}  // namespace
}  // namespace monta::client
