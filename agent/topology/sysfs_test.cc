#include "agent/topology/sysfs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_join.h"
#include "agent/topology/sysfs_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace monta::topology {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseIbRateGbps, ReadsTheKernelFormats) {
  EXPECT_EQ(*ParseIbRateGbps("400 Gb/sec (4X NDR)"), 400);
  EXPECT_EQ(*ParseIbRateGbps("200 Gb/sec (4X HDR)"), 200);
  EXPECT_EQ(*ParseIbRateGbps("100 Gb/sec (4X EDR)"), 100);
  EXPECT_EQ(*ParseIbRateGbps("25 Gb/sec (1X EDR)"), 25);
  EXPECT_EQ(*ParseIbRateGbps("2.5 Gb/sec (1X SDR)\n"), 2.5);
}

TEST(ParseIbRateGbps, RejectsGarbageWithTheText) {
  for (const char* bad :
       {"", "fast", "400", "400 Mb/sec", "-5 Gb/sec (1X)", "four Gb/sec"}) {
    absl::StatusOr<double> rate = ParseIbRateGbps(bad);
    ASSERT_FALSE(rate.ok()) << bad;
    EXPECT_THAT(rate.status().message(), HasSubstr("400 Gb/sec (4X NDR)"));
  }
}

TEST(ParseIbState, TakesTheCodeAndTheNameAfterIt) {
  EXPECT_EQ(ParseIbState("4: ACTIVE")->name, "ACTIVE");
  EXPECT_EQ(ParseIbState("4: ACTIVE")->code, 4);
  EXPECT_EQ(ParseIbState("5: LinkUp\n")->name, "LinkUp");
  EXPECT_EQ(ParseIbState("7: Phy Test")->name, "Phy Test");
  EXPECT_EQ(ParseIbState("7: Phy Test")->code, 7);
  EXPECT_EQ(ParseIbState("1: DOWN")->name, "DOWN");
  EXPECT_FALSE(ParseIbState("ACTIVE").ok());
  EXPECT_FALSE(ParseIbState("4:").ok());
  EXPECT_FALSE(ParseIbState("x: ACTIVE").ok());
}

TEST(CountCpuList, CountsRanges) {
  EXPECT_EQ(*CountCpuList("0-55,112-167"), 112);
  EXPECT_EQ(*CountCpuList("0"), 1);
  EXPECT_EQ(*CountCpuList("0-3,8,10-11\n"), 7);
  EXPECT_EQ(*CountCpuList(""), 0);
  EXPECT_FALSE(CountCpuList("5-2").ok());
  EXPECT_FALSE(CountCpuList("a-b").ok());
}

// Found by //fuzz:sysfs_fuzz: the count overflowed int (undefined behaviour).
TEST(CountCpuList, RefusesCountsBeyondInt) {
  EXPECT_EQ(*CountCpuList("0-2147483646"), 2147483647);
  absl::StatusOr<int> count = CountCpuList("0-2147483647,5");
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(count.status().message().find("0-2147483647,5"), std::string::npos)
      << count.status();
  EXPECT_FALSE(CountCpuList("1-2147483647,0-1").ok());
}

TEST(SysfsTree, ResolvesRelativeAndAbsoluteSymlinksInsideTheRoot) {
  namespace fs = std::filesystem;
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/links";
  fs::remove_all(root);
  fs::create_directories(root + "/devices/pci0000:00/0000:00:01.0");
  fs::create_directories(root + "/class/net");
  fs::create_directories(root + "/bus");
  fs::create_symlink("../../devices/pci0000:00/0000:00:01.0",
                     root + "/class/net/eth0");
  fs::create_symlink(root + "/devices", root + "/bus/abs");
  SysfsTree tree(root + "/");
  EXPECT_EQ(*tree.Resolve("class/net/eth0"), "devices/pci0000:00/0000:00:01.0");
  EXPECT_EQ(*tree.Resolve("bus/abs/pci0000:00"), "devices/pci0000:00");
  EXPECT_EQ(*tree.Resolve("class/net/eth0/.."), "devices/pci0000:00");
  EXPECT_FALSE(tree.Resolve("class/net/eth1").ok());
  fs::create_symlink("loop", root + "/loop");
  EXPECT_FALSE(tree.Resolve("loop").ok());
}

TEST(ScanNics, ReadsEveryPortOfTheH100Fixture) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("dgx_h100/sysfs");
  ASSERT_TRUE(root.ok()) << root.status();
  NicScan scan = ScanNics(SysfsTree(*root));
  EXPECT_TRUE(scan.errors.empty()) << absl::StrJoin(scan.errors, "\n");
  ASSERT_EQ(scan.nics.size(), 8u);
  const monta::v1::Nic& nic = scan.nics[0];
  EXPECT_EQ(nic.name(), "mlx5_0");
  EXPECT_EQ(nic.port(), 1);
  EXPECT_EQ(nic.rate_bytes_per_second(), 400e9 / 8);
  EXPECT_EQ(nic.state(), "ACTIVE");
  EXPECT_EQ(nic.state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(nic.phys_state(), "LinkUp");
  EXPECT_EQ(nic.phys_state_kind(), monta::v1::NIC_PHYS_STATE_LINK_UP);
  EXPECT_EQ(nic.link_layer(), "InfiniBand");
  EXPECT_EQ(nic.link_layer_kind(), monta::v1::NIC_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(nic.pci_address(), "0000:19:00.0");
  EXPECT_EQ(nic.numa_node(), 0);
  EXPECT_EQ(nic.provenance(), monta::v1::PROVENANCE_DISCOVERED);
  EXPECT_EQ(scan.nics[7].name(), "mlx5_7");
  EXPECT_EQ(scan.nics[7].numa_node(), 1);
}

TEST(ScanNics, BrokenInputsAreReportedPerNicAndNeverHideOthers) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("broken/sysfs");
  ASSERT_TRUE(root.ok()) << root.status();
  NicScan scan = ScanNics(SysfsTree(*root));
  std::vector<std::string> names;
  for (const auto& nic : scan.nics) names.push_back(nic.name());
  // mlx5_9 has no ports, so it has nothing to report; the rest are there.
  EXPECT_THAT(names, ElementsAre("mlx5_0", "mlx5_1", "mlx5_2", "rxe0"));
  EXPECT_EQ(scan.nics[0].rate_bytes_per_second(), 400e9 / 8);
  EXPECT_EQ(scan.nics[1].rate_bytes_per_second(), 0);  // garbage rate: unknown
  EXPECT_EQ(scan.nics[1].state(), "ACTIVE");
  EXPECT_EQ(scan.nics[2].state(), "");
  EXPECT_EQ(scan.nics[2].state_kind(), monta::v1::NIC_PORT_STATE_UNSPECIFIED);
  EXPECT_EQ(scan.nics[2].phys_state_kind(),
            monta::v1::NIC_PHYS_STATE_UNSPECIFIED);
  EXPECT_EQ(scan.nics[2].rate_bytes_per_second(), 100e9 / 8);
  EXPECT_EQ(scan.nics[3].pci_address(), "");
  EXPECT_EQ(scan.nics[3].numa_node(), -1);
  EXPECT_EQ(scan.nics[3].rate_bytes_per_second(), 25e9 / 8);
  // Soft-RoCE over a network device that is down.
  EXPECT_EQ(scan.nics[3].link_layer_kind(), monta::v1::NIC_LINK_LAYER_ETHERNET);
  EXPECT_EQ(scan.nics[3].state(), "DOWN");
  EXPECT_EQ(scan.nics[3].state_kind(), monta::v1::NIC_PORT_STATE_DOWN);
  EXPECT_EQ(scan.nics[3].phys_state(), "Disabled");
  EXPECT_EQ(scan.nics[3].phys_state_kind(), monta::v1::NIC_PHYS_STATE_DISABLED);
  const std::string errors = absl::StrJoin(scan.errors, "\n");
  EXPECT_THAT(errors, HasSubstr("mlx5_1 port 1: rate \"fast\""));
  EXPECT_THAT(errors, HasSubstr("mlx5_2 port 1: state:"));
  EXPECT_THAT(errors, HasSubstr("mlx5_2 port 1: phys_state: \"LinkUp\""));
  EXPECT_THAT(errors, HasSubstr("rxe0: no PCI device"));
  EXPECT_THAT(errors, HasSubstr("mlx5_9: no ports"));
  EXPECT_EQ(scan.errors.size(), 5u) << errors;
}

// What the kernel prints for codes outside its tables, a name it never prints
// with a code it does, and a link layer it cannot name.
TEST(ScanNics, StatesMontaCannotNameKeepTheirText) {
  const std::string root =
      std::string(std::getenv("TEST_TMPDIR")) + "/odd-states";
  auto write = [&](const std::string& port, const char* file,
                   const char* text) {
    const std::string dir = root + "/class/infiniband/mlx5_0/ports/" + port;
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/" + file) << text << "\n";
  };
  write("1", "state", "0: NOP");
  write("1", "phys_state", "0: <unknown>");
  write("1", "link_layer", "Unknown");
  write("2", "state", "4: Active-ish");
  write("2", "phys_state", "7: Phy Test");
  NicScan scan = ScanNics(SysfsTree(root));
  ASSERT_EQ(scan.nics.size(), 2u);
  const monta::v1::Nic& nop = scan.nics[0];
  EXPECT_EQ(nop.state(), "NOP");
  EXPECT_EQ(nop.state_kind(), monta::v1::NIC_PORT_STATE_UNKNOWN);
  EXPECT_EQ(nop.phys_state(), "<unknown>");
  EXPECT_EQ(nop.phys_state_kind(), monta::v1::NIC_PHYS_STATE_UNKNOWN);
  EXPECT_EQ(nop.link_layer(), "Unknown");
  EXPECT_EQ(nop.link_layer_kind(), monta::v1::NIC_LINK_LAYER_UNKNOWN);
  // A name Monta cannot read falls back to the kernel's code.
  EXPECT_EQ(scan.nics[1].state(), "Active-ish");
  EXPECT_EQ(scan.nics[1].state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);
  EXPECT_EQ(scan.nics[1].phys_state_kind(), monta::v1::NIC_PHYS_STATE_PHY_TEST);
  EXPECT_EQ(scan.nics[1].link_layer_kind(),
            monta::v1::NIC_LINK_LAYER_UNSPECIFIED);  // no link_layer file
}

TEST(ScanNics, MissingClassDirectoryIsEmpty) {
  NicScan scan = ScanNics(SysfsTree("/nonexistent/sysfs"));
  EXPECT_FALSE(scan.class_dir_present);
  EXPECT_TRUE(scan.nics.empty());
  EXPECT_TRUE(scan.errors.empty());
}

TEST(ClassifyPciPath, FollowsTopoMClassesOnTheFixtures) {
  absl::StatusOr<std::string> h100 = MaterializeTestdataSysfs("dgx_h100/sysfs");
  absl::StatusOr<std::string> a800 = MaterializeTestdataSysfs("hgx_a800/sysfs");
  ASSERT_TRUE(h100.ok() && a800.ok());
  SysfsTree h(*h100);
  SysfsTree a(*a800);
  auto at = [](const SysfsTree& tree, const char* pci) {
    absl::StatusOr<PciLocation> location = LocatePciDevice(tree, pci);
    EXPECT_TRUE(location.ok()) << pci << ": " << location.status();
    return location.ok() ? *location : PciLocation();
  };
  const PciLocation gpu0 = at(h, "0000:18:00.0");
  EXPECT_EQ(gpu0.host_bridge, "pci0000:13");
  EXPECT_EQ(gpu0.numa_node, 0);
  // GPU and its NIC share a PCIe switch, the GPU behind a second one: PXB.
  EXPECT_EQ(ClassifyPciPath(gpu0, at(h, "0000:19:00.0")),
            monta::v1::PATH_TYPE_PXB);
  EXPECT_EQ(ClassifyPciPath(gpu0, at(h, "0000:2b:00.0")),
            monta::v1::PATH_TYPE_NODE);
  EXPECT_EQ(ClassifyPciPath(gpu0, at(h, "0000:9b:00.0")),
            monta::v1::PATH_TYPE_SYS);
  EXPECT_EQ(ClassifyPciPath(gpu0, gpu0), monta::v1::PATH_TYPE_SELF);
  // A800: two GPUs and a NIC on one switch: PIX.
  const PciLocation a800_gpu0 = at(a, "0000:07:00.0");
  EXPECT_EQ(ClassifyPciPath(a800_gpu0, at(a, "0000:09:00.0")),
            monta::v1::PATH_TYPE_PIX);
  EXPECT_EQ(ClassifyPciPath(a800_gpu0, at(a, "0000:0f:00.0")),
            monta::v1::PATH_TYPE_PIX);
  // Same host bridge, different root ports: PHB.
  PciLocation x{
      "0000:01:00.0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0"}, 0};
  PciLocation y{
      "0000:02:00.0", "pci0000:00", {"0000:00:02.0", "0000:02:00.0"}, 0};
  EXPECT_EQ(ClassifyPciPath(x, y), monta::v1::PATH_TYPE_PHB);
  y.host_bridge = "pci0000:80";
  y.numa_node = -1;
  EXPECT_EQ(ClassifyPciPath(x, y), monta::v1::PATH_TYPE_SYS);
  EXPECT_FALSE(LocatePciDevice(h, "0000:ff:00.0").ok());
}

TEST(ScanCpus, CountsSocketsCpusAndNumaNodes) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("dgx_h100/sysfs");
  ASSERT_TRUE(root.ok());
  CpuScan scan = ScanCpus(SysfsTree(*root));
  EXPECT_TRUE(scan.errors.empty()) << absl::StrJoin(scan.errors, "\n");
  EXPECT_EQ(scan.sockets, 2);
  EXPECT_EQ(scan.logical_cpus, 224);
  ASSERT_EQ(scan.numa_nodes.size(), 2u);
  EXPECT_EQ(scan.numa_nodes[0].cpu_list(), "0-55,112-167");
  EXPECT_EQ(scan.numa_nodes[1].cpu_list(), "56-111,168-223");
  EXPECT_EQ(scan.numa_nodes[1].memory_bytes(), 1056545156ull * 1024);
}

TEST(ScanCpus, BrokenTreeStillCountsWhatItCan) {
  absl::StatusOr<std::string> root = MaterializeTestdataSysfs("broken/sysfs");
  ASSERT_TRUE(root.ok());
  CpuScan scan = ScanCpus(SysfsTree(*root));
  EXPECT_EQ(scan.logical_cpus, 4);
  EXPECT_EQ(scan.sockets, 0);
  EXPECT_TRUE(scan.numa_nodes.empty());
  EXPECT_FALSE(scan.errors.empty());
}

}  // namespace
}  // namespace monta::topology
