// What changed between two snapshots of one node's topology, as events the
// planner's registry can log, export and react to (re-plan, reject admissions).
#ifndef MONTA_COMMON_TOPOLOGY_DIFF_H_
#define MONTA_COMMON_TOPOLOGY_DIFF_H_

#include <string>
#include <vector>

#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::topology_diff {

struct TopologyChange {
  // What happened (never TOPOLOGY_CHANGE_UNSPECIFIED). People and metric
  // labels see its ShortName ("nic_rate_changed", common/proto_names.h).
  monta::v1::TopologyChange kind = monta::v1::TOPOLOGY_CHANGE_UNSPECIFIED;
  // What changed, stable for grouping: "mlx5_3:1" for a NIC port, "gpu3" for a
  // GPU, "gpu0-gpu3" for a GPU pair.
  std::string subject;
  // For people, e.g. "mlx5_3 port 1: rate 400 -> 200 Gb/s".
  std::string message;
};

// Changes from `before` to `after`, in a fixed order: GPUs by index, then NICs
// by (name, port), then GPU pairs. NICs are matched by (name, port), GPUs by
// index (a different UUID at the same index is a removal plus an addition), GPU
// pairs by (gpu_a, gpu_b). A pair whose GPU was added or removed reports only
// the GPU event. NVLink events compare active link counts (nvlink_count). NIC
// states compare what state and phys_state mean (common/nic_state.h), and
// the raw text only where that is UNKNOWN or not known, so "ACTIVE" and a
// declared "up" are the same state. Identical inputs give an empty list.
std::vector<TopologyChange> DiffTopology(const monta::v1::NodeTopology& before,
                                         const monta::v1::NodeTopology& after);

// DiffTopology as the registry records it: one event per change, with its
// change and message (the registry stamps the time).
std::vector<monta::v1::TopologyEvent> DiffTopologyEvents(
    const monta::v1::NodeTopology& before,
    const monta::v1::NodeTopology& after);

}  // namespace monta::topology_diff

#endif  // MONTA_COMMON_TOPOLOGY_DIFF_H_
