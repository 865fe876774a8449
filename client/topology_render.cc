#include "client/topology_render.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/table.h"
#include "common/nic_state.h"

namespace monta::client {
namespace {

using monta::v1::PathType;

// nvidia-smi pads the self cell with spaces so "X" sits mid-column.
constexpr char kSelfCell[] = " X ";

std::string PathCell(PathType path, int nvlink_count) {
  switch (path) {
    case monta::v1::PATH_TYPE_SELF:
      return kSelfCell;
    case monta::v1::PATH_TYPE_NVLINK:
      return absl::StrCat("NV", nvlink_count);
    case monta::v1::PATH_TYPE_PIX:
      return "PIX";
    case monta::v1::PATH_TYPE_PXB:
      return "PXB";
    case monta::v1::PATH_TYPE_PHB:
      return "PHB";
    case monta::v1::PATH_TYPE_NODE:
      return "NODE";
    case monta::v1::PATH_TYPE_SYS:
      return "SYS";
    default:
      return "N/A";
  }
}

std::string NumaClass(int numa_a, int numa_b) {
  return numa_a >= 0 && numa_a == numa_b ? "NODE" : "SYS";
}

// One column per NIC device (ports of one device share a column, as in
// nvidia-smi), in the topology's (name, port) order.
struct NicColumn {
  std::string name;
  int numa_node = -1;
  // "0000:1a:00" without the function: ports of a multi-function HCA (e.g. a
  // dual-port CX-7 as mlx5_1/mlx5_2) share one PCI device and so one place.
  std::string pci_device;
};

std::string PciDevice(const std::string& pci_address) {
  const size_t dot = pci_address.rfind('.');
  return dot == std::string::npos ? pci_address : pci_address.substr(0, dot);
}

std::vector<NicColumn> NicColumns(const monta::v1::NodeTopology& topology) {
  std::vector<NicColumn> columns;
  for (const monta::v1::Nic& nic : topology.nics()) {
    if (!columns.empty() && columns.back().name == nic.name()) continue;
    columns.push_back(
        {nic.name(), nic.numa_node(), PciDevice(nic.pci_address())});
  }
  return columns;
}

constexpr char kLegend[] =
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
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

// The node's GPUs, links, NUMA CPU lists and NIC columns indexed the way the
// matrix reads them; each row of `nvidia-smi topo -m` is one method.
class TopoMatrix {
 public:
  explicit TopoMatrix(const monta::v1::NodeTopology& topology)
      : nics_(NicColumns(topology)) {
    for (const monta::v1::Gpu& gpu : topology.gpus()) gpus_.push_back(&gpu);
    std::sort(gpus_.begin(), gpus_.end(),
              [](const monta::v1::Gpu* a, const monta::v1::Gpu* b) {
                return a->index() < b->index();
              });
    for (const monta::v1::GpuLink& link : topology.gpu_links()) {
      links_[{link.gpu_a(), link.gpu_b()}] = &link;
    }
    for (const monta::v1::NumaNode& node : topology.numa_nodes()) {
      cpus_of_numa_[node.id()] = node.cpu_list();
    }
    for (const NicColumn& nic : nics_) {
      pci_device_of_nic_[nic.name] = nic.pci_device;
    }
  }

  std::string Render() const {
    std::string out = Header();
    for (const monta::v1::Gpu* gpu : gpus_) absl::StrAppend(&out, GpuRow(*gpu));
    for (size_t k = 0; k < nics_.size(); ++k) absl::StrAppend(&out, NicRow(k));
    absl::StrAppend(&out, "\n", kLegend);
    if (!nics_.empty()) {
      absl::StrAppend(&out, "\nNIC Legend:\n\n");
      for (size_t k = 0; k < nics_.size(); ++k) {
        absl::StrAppend(&out, "  NIC", k, ": ", nics_[k].name, "\n");
      }
    }
    return out;
  }

 private:
  std::string Header() const {
    std::vector<std::string> header;
    for (const monta::v1::Gpu* gpu : gpus_) {
      header.push_back(absl::StrCat("GPU", gpu->index()));
    }
    for (size_t k = 0; k < nics_.size(); ++k) {
      header.push_back(absl::StrCat("NIC", k));
    }
    return absl::StrCat("\t", absl::StrJoin(header, "\t"),
                        header.empty() ? "" : "\t",
                        "CPU Affinity\tNUMA Affinity\tGPU NUMA ID\n");
  }

  bool SameDevice(const std::string& nic_name, const NicColumn& nic) const {
    auto it = pci_device_of_nic_.find(nic_name);
    return it != pci_device_of_nic_.end() && !nic.pci_device.empty() &&
           it->second == nic.pci_device;
  }

  std::string GpuNicCell(const monta::v1::Gpu& gpu,
                         const NicColumn& nic) const {
    if (gpu.nearest_nic() == nic.name || SameDevice(gpu.nearest_nic(), nic)) {
      return PathCell(gpu.nearest_nic_path(), 0);
    }
    return NumaClass(gpu.numa_node(), nic.numa_node);
  }

  std::string GpuRow(const monta::v1::Gpu& gpu) const {
    std::vector<std::string> cells;
    for (const monta::v1::Gpu* peer : gpus_) {
      if (peer == &gpu) {
        cells.push_back(kSelfCell);
        continue;
      }
      auto it = links_.find({std::min(gpu.index(), peer->index()),
                             std::max(gpu.index(), peer->index())});
      cells.push_back(
          it == links_.end()
              ? "N/A"
              : PathCell(it->second->path(), it->second->nvlink_count()));
    }
    for (const NicColumn& nic : nics_) cells.push_back(GpuNicCell(gpu, nic));
    auto cpus = cpus_of_numa_.find(gpu.numa_node());
    const std::string cpu_affinity =
        cpus != cpus_of_numa_.end() && !cpus->second.empty() ? cpus->second
                                                             : "N/A";
    const std::string numa_affinity =
        gpu.numa_node() >= 0 ? absl::StrCat(gpu.numa_node()) : "N/A";
    // Two tabs before GPU NUMA ID: nvidia-smi aligns under its wide header.
    return absl::StrCat("GPU", gpu.index(), "\t", absl::StrJoin(cells, "\t"),
                        "\t", cpu_affinity, "\t", numa_affinity, "\t\tN/A\n");
  }

  std::string NicRow(size_t k) const {
    std::vector<std::string> cells;
    for (const monta::v1::Gpu* gpu : gpus_) {
      cells.push_back(GpuNicCell(*gpu, nics_[k]));
    }
    for (size_t l = 0; l < nics_.size(); ++l) {
      if (l == k) {
        cells.push_back(kSelfCell);
      } else if (SameDevice(nics_[k].name, nics_[l])) {
        cells.push_back("PIX");
      } else {
        cells.push_back(NumaClass(nics_[k].numa_node, nics_[l].numa_node));
      }
    }
    return absl::StrCat("NIC", k, "\t", absl::StrJoin(cells, "\t"), "\n");
  }

  std::vector<const monta::v1::Gpu*> gpus_;
  std::map<std::pair<int, int>, const monta::v1::GpuLink*> links_;
  std::map<int, std::string> cpus_of_numa_;
  const std::vector<NicColumn> nics_;
  std::map<std::string, std::string> pci_device_of_nic_;
};

}  // namespace

std::string RenderTopoMatrix(const monta::v1::NodeTopology& topology) {
  return TopoMatrix(topology).Render();
}

std::string RenderNicTable(const monta::v1::NodeTopology& topology) {
  Table table({"NIC", "PORT", "LINK LAYER", "RATE (Gb/s)", "STATE",
               "PHYS STATE", "PCI", "NUMA", "PROVENANCE"});
  auto or_dash = [](const std::string& text) {
    return text.empty() ? std::string("-") : text;
  };
  for (const monta::v1::Nic& nic : topology.nics()) {
    std::ostringstream rate;
    // The wire carries bytes per second; the table shows Gb/s as ibstat does.
    const double gbps = nic.rate_bytes_per_second() * 8 / 1e9;
    rate << gbps;
    std::string provenance = "-";
    if (nic.provenance() == monta::v1::PROVENANCE_DISCOVERED) {
      provenance = "discovered";
    } else if (nic.provenance() == monta::v1::PROVENANCE_DECLARED) {
      provenance = "declared";
    }
    table.AddRow(
        {nic.name(), absl::StrCat(nic.port()),
         or_dash(nic_state::LinkLayerText(nic)), gbps > 0 ? rate.str() : "-",
         or_dash(nic_state::PortStateText(nic)),
         or_dash(nic_state::PhysStateText(nic)), or_dash(nic.pci_address()),
         nic.numa_node() >= 0 ? absl::StrCat(nic.numa_node()) : "-",
         provenance});
  }
  return table.Render();
}

}  // namespace monta::client
