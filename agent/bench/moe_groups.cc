#include "agent/bench/moe_groups.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace monta::bench {

absl::StatusOr<MoeGroups> MakeMoeGroups(comm::Communicator& world,
                                        const MoeLayout& layout,
                                        absl::Time deadline) {
  const int w = world.size();
  const int t = layout.tp_size;
  const int g = layout.ranks_per_node == 0 ? w : layout.ranks_per_node;
  if (t < 1 || w % t != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp_size ", t, " must be >= 1 and divide the world size ", w));
  }
  if (g < 1 || g % t != 0 || w % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks_per_node ", g, " must be a multiple of tp_size ", t,
                     " and divide the world size ", w));
  }
  MoeGroups groups;
  groups.world = &world;
  groups.layout = layout;
  const int r = world.rank();
  groups.tp_rank = r % t;
  groups.ep_rank = r / t;
  groups.ep_per_node = g / t;
  groups.nodes = (w / t) / groups.ep_per_node;
  groups.local_index = groups.ep_rank % groups.ep_per_node;
  groups.node_index = groups.ep_rank / groups.ep_per_node;

  struct SplitSpec {
    std::unique_ptr<comm::Communicator>* out;
    int color;
    int key;
  };
  const SplitSpec specs[] = {
      {&groups.ep, groups.tp_rank, groups.ep_rank},
      {&groups.tp, groups.ep_rank, groups.tp_rank},
      {&groups.intra, groups.node_index * t + groups.tp_rank,
       groups.local_index},
      {&groups.inter, groups.local_index * t + groups.tp_rank,
       groups.node_index},
  };
  for (const SplitSpec& spec : specs) {
    absl::StatusOr<std::unique_ptr<comm::Communicator>> sub =
        world.Split(spec.color, spec.key, deadline);
    if (!sub.ok()) return sub.status();
    *spec.out = std::move(*sub);
  }
  return groups;
}

}  // namespace monta::bench
