// The cluster view a hardware profile implies when nothing is measured.

#ifndef MONTA_SERVER_MODEL_PROFILE_VIEW_H_
#define MONTA_SERVER_MODEL_PROFILE_VIEW_H_

#include "absl/status/statusor.h"
#include "server/model/cost_model.h"
#include "server/model/hardware_profile.h"

namespace monta::model {

// Alpha-beta curves for nodes of `gpus_per_node` ranks of `profile`: NVLink
// (x efficiency) inside a node, the node's NICs shared by its GPUs across
// nodes (a curve over 2 nodes), memory bandwidth for copies. The AllToAll
// alpha is the profile's 8-rank latency moved by the per-peer latency to the
// curve's rank count. `nodes` is only checked: no curve depends on the
// cluster's size (each op's latency follows its own group).
// INVALID_ARGUMENT for sizes < 1 or a profile with missing rates.
absl::StatusOr<ClusterView> ProfileClusterView(const HardwareProfile& profile,
                                               int nodes, int gpus_per_node);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_PROFILE_VIEW_H_
