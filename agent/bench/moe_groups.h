// Which ranks talk to which in an MoE layer: the rank layout of docs/MODEL.md
// §1 (TP innermost, then EP at stride t; nodes hold consecutive global ranks)
// and the sub-communicators the schedules need.
#ifndef MONTA_AGENT_BENCH_MOE_GROUPS_H_
#define MONTA_AGENT_BENCH_MOE_GROUPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/comm/communicator.h"

namespace monta::bench {

struct MoeLayout {
  // Tensor-parallel size t; the world is t * e ranks.
  int tp_size = 1;
  // Ranks per node G (consecutive global ranks); 0 = the whole world is one
  // node. Must be a multiple of tp_size and divide the world size.
  int ranks_per_node = 0;
};

// One rank's view. Global rank r has tp_rank r % t and ep_rank r / t; on its
// node sit ep_per_node = G/t members of its EP group, with local index
// ep_rank % ep_per_node, on node ep_rank / ep_per_node.
struct MoeGroups {
  comm::Communicator* world = nullptr;  // not owned
  MoeLayout layout;
  int tp_rank = 0;
  int ep_rank = 0;
  int ep_per_node = 1;  // n_s
  int nodes = 1;        // EP group's node count, e / n_s
  int local_index = 0;
  int node_index = 0;
  std::unique_ptr<comm::Communicator> ep;  // same tp_rank, ranked by ep_rank
  std::unique_ptr<comm::Communicator> tp;  // same ep_rank, ranked by tp_rank
  // EP members on this node, ranked by local index.
  std::unique_ptr<comm::Communicator> intra;
  // EP members with this local index on every node, ranked by node.
  std::unique_ptr<comm::Communicator> inter;
};

// Collective over `world`: splits it into the four groups above. Every member
// must pass the same layout.
absl::StatusOr<MoeGroups> MakeMoeGroups(comm::Communicator& world,
                                        const MoeLayout& layout,
                                        absl::Time deadline);

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_MOE_GROUPS_H_
