// Edge validation of a topology an agent reports (Register, Heartbeat): bounded
// sizes, sane numbers and consistent references, so one broken or hostile agent
// cannot store garbage the planner later plans with.
#ifndef MONTA_SERVER_REGISTRY_TOPOLOGY_VALIDATION_H_
#define MONTA_SERVER_REGISTRY_TOPOLOGY_VALIDATION_H_

#include "absl/status/status.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::registry {

// INVALID_ARGUMENT naming the field (under `prefix`, e.g. "topology") and what
// was expected.
absl::Status ValidateTopology(const monta::v1::NodeTopology& topology,
                              const char* prefix = "topology");

}  // namespace monta::registry

#endif  // MONTA_SERVER_REGISTRY_TOPOLOGY_VALIDATION_H_
