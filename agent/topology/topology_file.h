// The declared topology file (--topology-file): what an operator writes down
// for nodes where discovery is impossible or incomplete. Every fact read from
// it is marked PROVENANCE_DECLARED. Format (YAML; every key optional unless
// noted):
//
//   profile_name: h100-hgx
//   labels: {network.topology.nvidia.com/leaf: leaf-07}
//   gpus:                       # index required, unique, >= 0
//     - {index: 0, name: NVIDIA H100 80GB HBM3, uuid: GPU-..., pci_bus_id:
//        "0000:18:00.0", memory_bytes: 85520809984, sm_count: 132,
//        numa_node: 0, nearest_nic: mlx5_0, nearest_nic_path: PXB}
//   all_gpu_pairs: NV18         # default for every pair links does not list
//   links:                      # gpus must name two different declared GPUs
//     - {gpus: [0, 1], path: NV18, nvlink_inactive_count: 0, peer_access: true}
//   nics:                       # (name, port) unique; rate_gbps >= 0 (Gb/s,
//                               # as ibstat prints; stored as bytes per second)
//     - {name: mlx5_0, port: 1, link_layer: InfiniBand, rate_gbps: 400,
//        state: ACTIVE, phys_state: LinkUp, pci_address: "0000:1a:00.0",
//        numa_node: 0}
//
// A NIC's link_layer is InfiniBand or Ethernet; state an InfiniBand port state
// as sysfs prints it (DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER) or, for an
// Ethernet NIC, its operstate (up, down); phys_state an InfiniBand physical
// state (Sleep, Polling, Disabled, PortConfigurationTraining, LinkUp,
// LinkErrorRecovery, Phy Test) or an operstate. Case, spaces and '_' do not
// matter ("link_up"); anything else is an error. The text is kept as written
// and its meaning set in link_layer_kind, state_kind, phys_state_kind.
//
// Paths are written as `nvidia-smi topo -m` prints them: X, NV<n>, PIX, PXB,
// PHB, NODE, SYS. Unknown keys are errors (a typo must not silently drop a
// fact).
#ifndef MONTA_AGENT_TOPOLOGY_TOPOLOGY_FILE_H_
#define MONTA_AGENT_TOPOLOGY_TOPOLOGY_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::topology {

// Parses and validates a topology document. Errors are InvalidArgument and read
// "<source_name>: <field path>: <what was expected>", e.g.
// "node.yaml: gpus[1].index: duplicate GPU index 0 (also gpus[0])".
// Only gpus, gpu_links, nics, labels and profile_name are filled.
absl::StatusOr<monta::v1::NodeTopology> ParseTopologyYaml(
    absl::string_view yaml_text, absl::string_view source_name);

// Reads `path` and calls ParseTopologyYaml. NotFound when unreadable.
absl::StatusOr<monta::v1::NodeTopology> LoadTopologyFile(
    const std::string& path);

// A `topo -m` path token: "NV18" -> {PATH_TYPE_NVLINK, 18}, "PXB" ->
// {PATH_TYPE_PXB, 0}, "X" -> {PATH_TYPE_SELF, 0}.
struct PathToken {
  monta::v1::PathType path = monta::v1::PATH_TYPE_UNSPECIFIED;
  int nvlink_count = 0;
};
absl::StatusOr<PathToken> ParsePathToken(absl::string_view token);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_TOPOLOGY_FILE_H_
