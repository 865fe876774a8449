// Reading node facts from a sysfs tree: RDMA NICs, PCI placement of devices,
// and CPU/NUMA layout. The root is configurable (the agent's --sysfs-root) so
// tests run against recorded trees; see testdata/README.md.
#ifndef MONTA_AGENT_TOPOLOGY_SYSFS_H_
#define MONTA_AGENT_TOPOLOGY_SYSFS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::topology {

// A sysfs tree rooted at `root` ("/sys" on a real node). Paths passed in are
// relative to the root. Symbolic links are followed lexically and must stay
// inside the root, which is how sysfs links are built ("../../devices/...").
class SysfsTree {
 public:
  explicit SysfsTree(std::string root);

  const std::string& root() const { return root_; }

  // Follows every symlink along `relative_path` and returns the canonical path
  // relative to the root, e.g. "class/infiniband/mlx5_0" ->
  // "devices/pci0000:15/0000:15:01.0/.../infiniband/mlx5_0". NotFound when a
  // component does not exist.
  absl::StatusOr<std::string> Resolve(absl::string_view relative_path) const;

  // Returns the file's contents with surrounding whitespace removed.
  absl::StatusOr<std::string> ReadFile(absl::string_view relative_path) const;

  // Names of the entries of a directory, sorted; empty when it does not exist.
  std::vector<std::string> List(absl::string_view relative_path) const;

 private:
  std::string root_;  // without a trailing '/'; "" for "/"
};

// "400 Gb/sec (4X NDR)" -> 400. InvalidArgument names the text when it is not
// "<number> Gb/sec ..." or the number is negative.
absl::StatusOr<double> ParseIbRateGbps(absl::string_view text);

// A sysfs ports/N/state or phys_state line: the kernel prints the
// InfiniBand code and its name, "4: ACTIVE", "5: LinkUp", "7: Phy Test".
struct IbState {
  int code = 0;
  std::string name;
};
// "4: ACTIVE" -> {4, "ACTIVE"}. InvalidArgument otherwise.
absl::StatusOr<IbState> ParseIbState(absl::string_view text);

// All ports of all devices under class/infiniband. A port whose files are
// missing or unreadable is still reported when its device exists (unknown
// fields left empty/zero/UNSPECIFIED) and explained in `errors`; one bad NIC
// never hides the others. Each NIC carries the raw texts (state "ACTIVE") and
// what they mean (state_kind NIC_PORT_STATE_ACTIVE): read from the name, or
// from the code when the name is not one common/nic_state knows, so the two
// always agree.
struct NicScan {
  std::vector<monta::v1::Nic> nics;  // sorted by (name, port)
  std::vector<std::string> errors;   // one line per problem, naming NIC/port
  bool class_dir_present = false;    // class/infiniband exists at all
};
NicScan ScanNics(const SysfsTree& sysfs);

// Where a PCI device sits in the PCI hierarchy, from its path under devices/.
struct PciLocation {
  std::string pci_address;  // "0000:18:00.0"
  // "pci0000:15": the host bridge (root complex) the device hangs off.
  std::string host_bridge;
  // Bridges from the root port down to and including the device itself.
  std::vector<std::string> chain;
  int numa_node = -1;
};

// Locates bus/pci/devices/<pci_address>. NotFound when sysfs does not know it.
absl::StatusOr<PciLocation> LocatePciDevice(const SysfsTree& sysfs,
                                            const std::string& pci_address);

// `nvidia-smi topo -m` class of the path between two PCI devices:
//   PIX  both hang off the same switch/bridge (each <= 2 hops below the deepest
//        shared bridge: downstream port + upstream port count as one switch);
//   PXB  they share a bridge below the host bridge, but further up;
//   PHB  they share only the host bridge;
//   NODE different host bridges, same NUMA node;
//   SYS  anything else (different or unknown NUMA nodes).
monta::v1::PathType ClassifyPciPath(const PciLocation& a, const PciLocation& b);

// CPU packages, logical CPUs and NUMA nodes from devices/system/{cpu,node}.
struct CpuScan {
  int sockets = 0;
  int logical_cpus = 0;
  std::vector<monta::v1::NumaNode> numa_nodes;  // sorted by id
  std::vector<std::string> errors;
};
CpuScan ScanCpus(const SysfsTree& sysfs);

// Number of CPUs in a kernel cpulist such as "0-55,112-167". InvalidArgument
// on malformed lists.
absl::StatusOr<int> CountCpuList(absl::string_view cpu_list);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_SYSFS_H_
