// The cluster view a hardware profile implies when nothing is measured.

#ifndef MONTA_SERVER_MODEL_PROFILE_VIEW_H_
#define MONTA_SERVER_MODEL_PROFILE_VIEW_H_

#include "absl/status/statusor.h"
#include "server/model/cost_model.h"
#include "server/model/hardware_profile.h"

namespace monta::model {

// Alpha-beta curves for `nodes` x `gpus_per_node` ranks of `profile`: NVLink
// (x efficiency) inside a node, the node's NICs shared by its GPUs across
// nodes, memory bandwidth for copies. The AllToAll alpha is the profile's
// 8-rank latency moved by the per-peer latency to the curve's rank count.
// INVALID_ARGUMENT for sizes < 1 or a profile with missing rates.
absl::StatusOr<ClusterView> ProfileClusterView(const HardwareProfile& profile,
                                               int nodes, int gpus_per_node);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_PROFILE_VIEW_H_
