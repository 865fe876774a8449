// Edge validation of a topology an agent reports (Register, Heartbeat): bounded
// sizes, sane numbers and consistent references, so one broken or hostile agent
// cannot store garbage the planner later plans with.
#ifndef MONTA_SERVER_REGISTRY_TOPOLOGY_VALIDATION_H_
#define MONTA_SERVER_REGISTRY_TOPOLOGY_VALIDATION_H_

#include <cstddef>

#include "absl/status/status.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::registry {

// Size limits of a reported topology, so one agent cannot make the planner
// hold (and store, and send to every ListNodes caller) megabytes per node. The
// planner sets them from its --max_topology_* flags.
struct TopologyLimits {
  // Bytes of each name, id or address: hostname, GPU name/uuid/pci_bus_id,
  // NIC name/link_layer/state/phys_state/pci_address, profile name, ...
  size_t max_string_bytes = 256;
  // Bytes of each free-text field: the *_status strings and a NUMA node's
  // cpu_list.
  size_t max_text_bytes = 4096;
  // Entries of each repeated field (GPUs, NIC ports, NUMA nodes, labels); GPU
  // indices are in 0..max_entries-1 and GPU links at most one per pair.
  int max_entries = 64;
};

// RESOURCE_EXHAUSTED naming the field (under `prefix`, e.g. "topology") and
// the flag to raise when a string or repeated field is over `limits`;
// INVALID_ARGUMENT naming the field and what was expected otherwise.
absl::Status ValidateTopology(const monta::v1::NodeTopology& topology,
                              const TopologyLimits& limits = {},
                              const char* prefix = "topology");

}  // namespace monta::registry

#endif  // MONTA_SERVER_REGISTRY_TOPOLOGY_VALIDATION_H_
