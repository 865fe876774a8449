// A small fixed cluster for the planner-side fuzz targets: an in-memory
// registry with two registered A800 nodes ("node-a", "node-b", 8 GPUs each,
// profile a800-hgx), measured intra-node AllToAll curves on both and an
// inter-node one for the pair, so fuzzed requests reach both the measured and
// the profile paths of the planner.
#ifndef MONTA_FUZZ_FIXED_CLUSTER_H_
#define MONTA_FUZZ_FIXED_CLUSTER_H_

#include "server/registry/registry.h"

namespace monta::fuzz {

// Built once, on first use; never destroyed (fuzz targets run until exit).
// Leases are long enough that the nodes stay alive for any run.
const registry::Registry& FixedCluster();

}  // namespace monta::fuzz

#endif  // MONTA_FUZZ_FIXED_CLUSTER_H_
