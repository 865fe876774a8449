// Builds the node's monta::v1::NodeTopology from CUDA, NVML, sysfs and an
// optional declared topology file. This is what the agent registers with.
#ifndef MONTA_AGENT_TOPOLOGY_DISCOVERY_H_
#define MONTA_AGENT_TOPOLOGY_DISCOVERY_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "agent/topology/gpu_source.h"
#include "agent/topology/nvml_source.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::topology {

struct DiscoveryOptions {
  // Root of the sysfs tree (the agent's --sysfs-root).
  std::string sysfs_root = "/sys";
  // Sources of GPU facts; not owned, must outlive the call. nullptr means the
  // real libraries (dlopen of libcudart / libnvidia-ml.so.1).
  GpuSource* gpu_source = nullptr;
  NvmlSource* nvml_source = nullptr;
  // Empty: gethostname().
  std::string hostname;
  // NODE_NAME from the Kubernetes downward API; the caller reads the env.
  std::string kubernetes_node_name;
  // Topology labels from flags, e.g. {"network.topology.nvidia.com/leaf",
  // "leaf-07"}; they win over labels_file and the topology file.
  std::map<std::string, std::string> labels;
  // Optional labels file of `key=value` or `key="value"` lines (the downward
  // API format); only topology keys are kept (see IsTopologyLabel).
  std::string labels_file;
  // Optional declared topology (topology_file.h). A file that does not parse is
  // an error for the whole call: an operator's declaration must not be ignored.
  std::string topology_file;
};

// Runs every source and merges the results. Absent sources are not errors: with
// no GPU, no NVML and no NIC the topology is still returned, and cuda_status /
// nvml_status / nic_status say why each is empty. Errors: an unreadable or
// invalid topology_file or labels_file (InvalidArgument / NotFound).
//
// Merge rules, per fact, never mixing fields of one entity across provenances:
// - GPUs come from CUDA (ordinal, name, memory, SMs, PCI id); NVML adds the
//   UUID by matching PCI bus ids; sysfs adds NUMA node and the nearest NIC.
//   Without CUDA, GPUs come from NVML in NVML order (name and memory from
//   NVML; no SM count or peer access, which only CUDA can say).
// - GPU pairs: NVLINK when NVML reports an active NVLink, else NVML's common
//   ancestor class, else the class of the two PCI paths in sysfs.
// - Declared GPUs (by index), links (by pair) and NICs (by name and port)
//   fill in only what discovery did not find; a discovered entity always wins
//   over a declared one, and each entity keeps its own provenance. The
//   statuses list what the file supplied and what discovery overrode.
// - Labels: topology file < labels file < options.labels. profile_name comes
//   from the topology file.
absl::StatusOr<monta::v1::NodeTopology> DiscoverTopology(
    const DiscoveryOptions& options);

// True for keys topograph, Kueue and Volcano use for placement:
// network.topology.nvidia.com/*, network.topology.kubernetes.io/*,
// topology.kubernetes.io/*, nvidia.com/gpu.clique.
bool IsTopologyLabel(const std::string& key);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_DISCOVERY_H_
