#include "agent/topology/discovery.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "agent/topology/sysfs.h"
#include "agent/topology/topology_file.h"

namespace monta::topology {
namespace {

using monta::v1::Gpu;
using monta::v1::GpuLink;
using monta::v1::Nic;
using monta::v1::NodeTopology;

std::string LocalHostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

// Reads `key=value` / `key="value"` lines; blank lines and '#' comments
// skipped.
absl::StatusOr<std::map<std::string, std::string>> ReadLabelsFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("labels file ", path, ": cannot read"));
  }
  std::map<std::string, std::string> labels;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels file ", path, ": line ", line_number,
          ": expected key=value or key=\"value\", got \"", text, "\""));
    }
    std::string key(absl::StripAsciiWhitespace(text.substr(0, eq)));
    absl::string_view value = absl::StripAsciiWhitespace(text.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (IsTopologyLabel(key)) labels[key] = std::string(value);
  }
  return labels;
}

// Closest NIC to a GPU by PCI path (PIX < PXB < PHB < NODE < SYS; PathType's
// numbering follows that order). Ties go to the first NIC by (name, port).
void AssignNearestNic(
    const PciLocation& gpu_location,
    const std::vector<std::pair<std::string, PciLocation>>& nics, Gpu& gpu) {
  monta::v1::PathType best = monta::v1::PATH_TYPE_UNSPECIFIED;
  for (const auto& [name, location] : nics) {
    const monta::v1::PathType path = ClassifyPciPath(gpu_location, location);
    if (best == monta::v1::PATH_TYPE_UNSPECIFIED || path < best) {
      best = path;
      gpu.set_nearest_nic(name);
      gpu.set_nearest_nic_path(path);
    }
  }
}

std::string DescribeList(const std::vector<std::string>& items) {
  return absl::StrJoin(items, "; ");
}

// Applies the declared topology on top of the discovered one (see the merge
// rules in discovery.h) and appends what happened to the status strings.
void MergeDeclared(const NodeTopology& declared, const std::string& file,
                   NodeTopology& topo) {
  std::set<int> gpu_indices;
  for (const Gpu& gpu : topo.gpus()) gpu_indices.insert(gpu.index());
  std::vector<std::string> gpus_added;
  std::vector<std::string> gpus_overridden;
  for (const Gpu& gpu : declared.gpus()) {
    if (gpu_indices.count(gpu.index()) != 0) {
      gpus_overridden.push_back(absl::StrCat(gpu.index()));
      continue;
    }
    *topo.add_gpus() = gpu;
    gpus_added.push_back(absl::StrCat(gpu.index()));
  }
  std::sort(topo.mutable_gpus()->begin(), topo.mutable_gpus()->end(),
            [](const Gpu& a, const Gpu& b) { return a.index() < b.index(); });

  std::set<std::pair<int, int>> pairs;
  for (const GpuLink& link : topo.gpu_links()) {
    pairs.insert({link.gpu_a(), link.gpu_b()});
  }
  int links_added = 0;
  for (const GpuLink& link : declared.gpu_links()) {
    if (pairs.count({link.gpu_a(), link.gpu_b()}) != 0) continue;
    *topo.add_gpu_links() = link;
    ++links_added;
  }
  std::sort(topo.mutable_gpu_links()->begin(), topo.mutable_gpu_links()->end(),
            [](const GpuLink& a, const GpuLink& b) {
              return std::make_pair(a.gpu_a(), a.gpu_b()) <
                     std::make_pair(b.gpu_a(), b.gpu_b());
            });

  std::set<std::pair<std::string, int>> ports;
  for (const Nic& nic : topo.nics()) ports.insert({nic.name(), nic.port()});
  std::vector<std::string> nics_added;
  std::vector<std::string> nics_overridden;
  for (const Nic& nic : declared.nics()) {
    const std::string name = absl::StrCat(nic.name(), ":", nic.port());
    if (ports.count({nic.name(), nic.port()}) != 0) {
      nics_overridden.push_back(name);
      continue;
    }
    *topo.add_nics() = nic;
    nics_added.push_back(name);
  }
  std::sort(topo.mutable_nics()->begin(), topo.mutable_nics()->end(),
            [](const Nic& a, const Nic& b) {
              return std::make_pair(a.name(), a.port()) <
                     std::make_pair(b.name(), b.port());
            });

  auto note = [&](std::string* status, const std::vector<std::string>& added,
                  const std::vector<std::string>& overridden, const char* what,
                  int extra_links) {
    if (!added.empty() || extra_links > 0) {
      absl::StrAppend(status, "; declared in ", file, ":");
      if (!added.empty()) {
        absl::StrAppend(status, " ", what, " ", absl::StrJoin(added, ","));
      }
      if (extra_links > 0)
        absl::StrAppend(status, " ", extra_links, " GPU pairs");
    }
    if (!overridden.empty()) {
      absl::StrAppend(status, "; discovered ", what, " ",
                      absl::StrJoin(overridden, ","), " override ", file);
    }
  };
  note(topo.mutable_cuda_status(), gpus_added, gpus_overridden, "GPUs",
       links_added);
  note(topo.mutable_nic_status(), nics_added, nics_overridden, "NICs", 0);
  if (!declared.profile_name().empty()) {
    topo.set_profile_name(declared.profile_name());
  }
}

// The operator's inputs: the declared topology file and the labels file.
struct OperatorInputs {
  std::optional<NodeTopology> declared;
  std::map<std::string, std::string> file_labels;
};

absl::StatusOr<OperatorInputs> ReadOperatorInputs(
    const DiscoveryOptions& options) {
  OperatorInputs inputs;
  if (!options.topology_file.empty()) {
    absl::StatusOr<NodeTopology> file = LoadTopologyFile(options.topology_file);
    if (!file.ok()) return file.status();
    inputs.declared = *std::move(file);
  }
  if (!options.labels_file.empty()) {
    absl::StatusOr<std::map<std::string, std::string>> labels =
        ReadLabelsFile(options.labels_file);
    if (!labels.ok()) return labels.status();
    inputs.file_labels = *std::move(labels);
  }
  return inputs;
}

void AddCpus(const SysfsTree& sysfs, NodeTopology& topo) {
  CpuScan cpus = ScanCpus(sysfs);
  topo.set_cpu_sockets(cpus.sockets);
  topo.set_cpu_logical_count(cpus.logical_cpus);
  for (auto& node : cpus.numa_nodes) *topo.add_numa_nodes() = std::move(node);
}

// RDMA ports from sysfs, and nic_status saying what was (not) found.
void AddNics(const SysfsTree& sysfs, NodeTopology& topo) {
  NicScan nic_scan = ScanNics(sysfs);
  std::set<std::string> nic_devices;
  for (auto& nic : nic_scan.nics) {
    nic_devices.insert(nic.name());
    *topo.add_nics() = std::move(nic);
  }
  if (!nic_scan.class_dir_present) {
    topo.set_nic_status(absl::StrCat("no RDMA devices (", sysfs.root(),
                                     "/class/infiniband absent)"));
  } else if (topo.nics().empty() && nic_scan.errors.empty()) {
    topo.set_nic_status(absl::StrCat("no RDMA devices under ", sysfs.root(),
                                     "/class/infiniband"));
  } else {
    topo.set_nic_status(absl::StrCat("ok: ", topo.nics_size(), " ports on ",
                                     nic_devices.size(), " devices"));
    if (!nic_scan.errors.empty()) {
      absl::StrAppend(topo.mutable_nic_status(),
                      "; errors: ", DescribeList(nic_scan.errors));
    }
  }
}

// One PCI location per NIC device (ports of one HCA share it).
std::vector<std::pair<std::string, PciLocation>> NicLocations(
    const SysfsTree& sysfs, const NodeTopology& topo) {
  std::vector<std::pair<std::string, PciLocation>> nic_locations;
  for (const Nic& nic : topo.nics()) {
    if (nic.pci_address().empty() ||
        (!nic_locations.empty() && nic_locations.back().first == nic.name())) {
      continue;
    }
    absl::StatusOr<PciLocation> location =
        LocatePciDevice(sysfs, nic.pci_address());
    if (location.ok()) nic_locations.emplace_back(nic.name(), *location);
  }
  return nic_locations;
}

// What CUDA and NVML answered (options' sources, else the real libraries).
struct GpuReadings {
  absl::StatusOr<CudaSnapshot> cuda;
  absl::StatusOr<NvmlSnapshot> nvml;
};

GpuReadings ReadGpuSources(const DiscoveryOptions& options) {
  std::unique_ptr<GpuSource> default_gpu_source;
  GpuSource* gpu_source = options.gpu_source;
  if (gpu_source == nullptr) {
    default_gpu_source = MakeCudaRuntimeGpuSource();
    gpu_source = default_gpu_source.get();
  }
  std::unique_ptr<NvmlSource> default_nvml_source;
  NvmlSource* nvml_source = options.nvml_source;
  if (nvml_source == nullptr) {
    default_nvml_source = MakeNvmlLibrarySource();
    nvml_source = default_nvml_source.get();
  }
  // CUDA first, NVML second.
  absl::StatusOr<CudaSnapshot> cuda = gpu_source->Read();
  return GpuReadings{std::move(cuda), nvml_source->Read()};
}

// A discovered GPU with what CUDA and NVML records both carry.
template <typename Record>
Gpu* AddDiscoveredGpu(const Record& record, NodeTopology& topo) {
  Gpu* gpu = topo.add_gpus();
  gpu->set_index(record.index);
  gpu->set_name(record.name);
  gpu->set_pci_bus_id(record.pci_bus_id);
  gpu->set_memory_bytes(record.memory_bytes);
  gpu->set_provenance(monta::v1::PROVENANCE_DISCOVERED);
  return gpu;
}

// GPUs from CUDA (NVML adds the UUID by PCI bus id, and the name and memory
// where CUDA's driver could not give them), else from NVML; sets
// cuda_status. Returns nvml_of: nvml_of[i] is the NVML index of topology GPU
// i, or -1.
std::vector<int> AddGpus(const GpuReadings& readings, NodeTopology& topo) {
  const absl::StatusOr<CudaSnapshot>& cuda = readings.cuda;
  const absl::StatusOr<NvmlSnapshot>& nvml = readings.nvml;
  std::vector<int> nvml_of;
  if (!cuda.ok()) {
    topo.set_cuda_status(std::string(cuda.status().message()));
    if (!nvml.ok()) return nvml_of;
    for (const NvmlGpuRecord& record : nvml->gpus) {
      AddDiscoveredGpu(record, topo)->set_uuid(record.uuid);
      nvml_of.push_back(record.index);
    }
    return nvml_of;
  }
  std::map<std::string, const NvmlGpuRecord*> nvml_by_pci;
  if (nvml.ok()) {
    for (const NvmlGpuRecord& gpu : nvml->gpus)
      nvml_by_pci[gpu.pci_bus_id] = &gpu;
  }
  topo.set_cuda_status(
      absl::StrCat("ok: ", cuda->gpus.size(), " GPUs via ", cuda->origin));
  for (const CudaGpuRecord& record : cuda->gpus) {
    Gpu* gpu = AddDiscoveredGpu(record, topo);
    gpu->set_sm_count(record.sm_count);
    auto it = nvml_by_pci.find(record.pci_bus_id);
    if (it != nvml_by_pci.end()) {
      gpu->set_uuid(it->second->uuid);
      // The CUDA driver could not say (CudaSnapshot.origin tells why): NVML's
      // nvmlDeviceGetName / nvmlDeviceGetMemoryInfo describe the same device.
      if (gpu->name().empty()) gpu->set_name(it->second->name);
      if (gpu->memory_bytes() == 0) {
        gpu->set_memory_bytes(it->second->memory_bytes);
      }
      nvml_of.push_back(it->second->index);
    } else {
      nvml_of.push_back(-1);
    }
  }
  return nvml_of;
}

void SetNvmlStatus(const absl::StatusOr<NvmlSnapshot>& nvml,
                   const std::vector<int>& nvml_of, NodeTopology& topo) {
  if (!nvml.ok()) {
    topo.set_nvml_status(std::string(nvml.status().message()));
    return;
  }
  topo.set_nvml_status(
      absl::StrCat("ok: ", nvml->gpus.size(), " GPUs via ", nvml->origin));
  const int unmatched =
      static_cast<int>(std::count(nvml_of.begin(), nvml_of.end(), -1));
  if (unmatched > 0) {
    absl::StrAppend(topo.mutable_nvml_status(), "; ", unmatched,
                    " CUDA GPUs have no NVML device with the same PCI bus id");
  }
}

// PCI placement of each GPU, for NUMA, nearest NIC and PCIe-only pairs; sets
// the first two. Returns the locations in topo.gpus() order.
std::vector<std::optional<PciLocation>> PlaceGpus(
    const SysfsTree& sysfs,
    const std::vector<std::pair<std::string, PciLocation>>& nic_locations,
    NodeTopology& topo) {
  std::vector<std::optional<PciLocation>> gpu_locations;
  for (Gpu& gpu : *topo.mutable_gpus()) {
    gpu.set_numa_node(-1);
    std::optional<PciLocation> location;
    if (!gpu.pci_bus_id().empty()) {
      absl::StatusOr<PciLocation> found =
          LocatePciDevice(sysfs, gpu.pci_bus_id());
      if (found.ok()) location = *std::move(found);
    }
    if (location.has_value()) {
      gpu.set_numa_node(location->numa_node);
      AssignNearestNic(*location, nic_locations, gpu);
    }
    gpu_locations.push_back(std::move(location));
  }
  return gpu_locations;
}

// One link per GPU pair: NVML's NVLink or common ancestor when both GPUs are
// NVML devices, else the PCI paths' class; peer access from CUDA.
void AddGpuPairs(const GpuReadings& readings, const std::vector<int>& nvml_of,
                 const std::vector<std::optional<PciLocation>>& gpu_locations,
                 NodeTopology& topo) {
  std::map<std::pair<int, int>, const NvmlPairRecord*> nvml_pairs;
  if (readings.nvml.ok()) {
    for (const NvmlPairRecord& pair : readings.nvml->pairs) {
      nvml_pairs[{pair.gpu_a, pair.gpu_b}] = &pair;
    }
  }
  const absl::StatusOr<CudaSnapshot>& cuda = readings.cuda;
  const int gpu_count = topo.gpus_size();
  for (int i = 0; i < gpu_count; ++i) {
    for (int j = i + 1; j < gpu_count; ++j) {
      GpuLink* link = topo.add_gpu_links();
      link->set_gpu_a(topo.gpus(i).index());
      link->set_gpu_b(topo.gpus(j).index());
      link->set_provenance(monta::v1::PROVENANCE_DISCOVERED);
      const NvmlPairRecord* pair = nullptr;
      if (nvml_of[i] >= 0 && nvml_of[j] >= 0) {
        auto it = nvml_pairs.find({std::min(nvml_of[i], nvml_of[j]),
                                   std::max(nvml_of[i], nvml_of[j])});
        if (it != nvml_pairs.end()) pair = it->second;
      }
      if (pair != nullptr) {
        link->set_nvlink_count(pair->nvlink_active);
        link->set_nvlink_inactive_count(pair->nvlink_inactive);
        link->set_path(
            pair->nvlink_active > 0
                ? monta::v1::PATH_TYPE_NVLINK
                : PathTypeFromNvmlLevel(pair->common_ancestor_level));
      } else if (gpu_locations[i].has_value() && gpu_locations[j].has_value()) {
        link->set_path(ClassifyPciPath(*gpu_locations[i], *gpu_locations[j]));
      }
      if (cuda.ok() && i < static_cast<int>(cuda->peer_access.size()) &&
          j < static_cast<int>(cuda->peer_access[i].size())) {
        link->set_peer_access(cuda->peer_access[i][j] &&
                              cuda->peer_access[j][i]);
      }
    }
  }
}

// The declared topology under what was discovered, then the labels:
// topology file < labels file < options.labels.
void ApplyOperatorInputs(const OperatorInputs& inputs,
                         const DiscoveryOptions& options, NodeTopology& topo) {
  auto& labels = *topo.mutable_labels();
  if (inputs.declared.has_value()) {
    MergeDeclared(*inputs.declared, options.topology_file, topo);
    for (const auto& [key, value] : inputs.declared->labels()) {
      labels[key] = value;
    }
  }
  for (const auto& [key, value] : inputs.file_labels) labels[key] = value;
  for (const auto& [key, value] : options.labels) labels[key] = value;
}

}  // namespace

bool IsTopologyLabel(const std::string& key) {
  return absl::StartsWith(key, "network.topology.nvidia.com/") ||
         absl::StartsWith(key, "network.topology.kubernetes.io/") ||
         absl::StartsWith(key, "topology.kubernetes.io/") ||
         key == "nvidia.com/gpu.clique";
}

absl::StatusOr<NodeTopology> DiscoverTopology(const DiscoveryOptions& options) {
  // Parse the operator's inputs first: a broken declaration fails fast, before
  // any driver library is touched.
  absl::StatusOr<OperatorInputs> inputs = ReadOperatorInputs(options);
  if (!inputs.ok()) return inputs.status();

  NodeTopology topo;
  topo.set_hostname(options.hostname.empty() ? LocalHostname()
                                             : options.hostname);
  topo.set_kubernetes_node_name(options.kubernetes_node_name);
  const SysfsTree sysfs(options.sysfs_root);
  AddCpus(sysfs, topo);
  AddNics(sysfs, topo);
  const std::vector<std::pair<std::string, PciLocation>> nic_locations =
      NicLocations(sysfs, topo);

  const GpuReadings readings = ReadGpuSources(options);
  const std::vector<int> nvml_of = AddGpus(readings, topo);
  SetNvmlStatus(readings.nvml, nvml_of, topo);
  const std::vector<std::optional<PciLocation>> gpu_locations =
      PlaceGpus(sysfs, nic_locations, topo);
  AddGpuPairs(readings, nvml_of, gpu_locations, topo);

  ApplyOperatorInputs(*inputs, options, topo);
  return topo;
}

}  // namespace monta::topology
