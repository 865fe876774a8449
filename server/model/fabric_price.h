// The fabric tree's uplinks priced for one job's rank placement
// (docs/MODEL.md §12): how many bytes each rack's and each block's uplink
// carries when every EP group runs its AllToAll at once, the slowest uplink,
// and the rank-to-node orders the job's parallel layout allows. Pure
// arithmetic: no I/O, no protobuf.

#ifndef MONTA_SERVER_MODEL_FABRIC_PRICE_H_
#define MONTA_SERVER_MODEL_FABRIC_PRICE_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace monta::model {

// Where the job's nodes sit and what each uplink above them carries per
// direction. Capacities are bytes per second; 0 = not known (that uplink is
// not priced).
struct JobFabric {
  struct Rack {
    std::string name;
    int block = -1;  // index into blocks; -1: in no block
    double uplink_bytes_per_second = 0;
    // The uplink's declared capacity (0 = none): what a pipeline's steady
    // state moves through it (docs/MODEL.md §12).
    double uplink_declared_bytes_per_second = 0;
  };
  struct Block {
    std::string name;
    double uplink_bytes_per_second = 0;
    double uplink_declared_bytes_per_second = 0;
  };
  // Per node of the job, in the order the job gave them: its rack (an index
  // into racks). Every node must sit in a rack.
  std::vector<int> node_rack;
  std::vector<Rack> racks;
  std::vector<Block> blocks;
};

// The job's ranks: rank r on node order[r / ranks_per_node]; TP innermost,
// EP groups of t * e consecutive ranks with members at stride t (one EP
// group per TP rank), data parallel across them (docs/MODEL.md §1).
struct RankLayout {
  int ranks_per_node = 0;   // G
  int tensor_parallel = 1;  // t
  int expert_parallel = 1;  // e
};

enum class UplinkLevel { kRack, kBlock };

// One uplink the job's AllToAlls cross.
struct UplinkLoad {
  UplinkLevel level = UplinkLevel::kRack;
  int index = 0;  // into JobFabric::racks or ::blocks
  // Bytes crossing the uplink in its busier direction per byte each rank
  // sends in one AllToAll over its EP group, every EP group at once.
  double bytes_per_rank_byte = 0;
  double bytes_per_second = 0;  // 0: not known, not priced
  // Declared capacity (0: none). A pipeline's chunks, back to back, move at
  // it (never slower than bytes_per_second, one AllToAll alone).
  double declared_bytes_per_second = 0;
  double seconds_per_rank_byte() const {
    return bytes_per_second > 0 ? bytes_per_rank_byte / bytes_per_second : 0;
  }
  double steady_seconds_per_rank_byte() const {
    return bytes_per_second > 0
               ? bytes_per_rank_byte /
                     std::max(bytes_per_second, declared_bytes_per_second)
               : 0;
  }
};

struct FabricPrice {
  // Every uplink the AllToAlls cross, slowest first (unpriced ones last).
  std::vector<UplinkLoad> uplinks;
  // Seconds per byte each rank sends that the slowest priced uplink needs:
  // an AllToAll of x bytes per rank cannot finish before x times this.
  // 0 when no priced uplink is crossed.
  double seconds_per_rank_byte() const {
    return uplinks.empty() ? 0 : uplinks.front().seconds_per_rank_byte();
  }
  // The same in a pipeline's steady state (docs/MODEL.md §12): the slowest
  // priced uplink at its declared capacity, each uplink never faster than
  // declared nor slower than measured; equals seconds_per_rank_byte() when
  // nothing is declared.
  double steady_seconds_per_rank_byte() const {
    double worst = 0;
    for (const UplinkLoad& u : uplinks) {
      worst = std::max(worst, u.steady_seconds_per_rank_byte());
    }
    return worst;
  }
};

// Counts each uplink's bytes for `order` (node indices into
// fabric.node_rack, a permutation of them). INVALID_ARGUMENT when the
// layout does not fit (G, t, e < 1; t not dividing G; t * e not dividing
// the world), the order is not a permutation, or a node has no rack.
absl::StatusOr<FabricPrice> PriceFabric(const JobFabric& fabric,
                                        const std::vector<int>& order,
                                        const RankLayout& layout);

// A rank-to-node order the layout allows, priced.
struct OrderAdvice {
  std::vector<int> order;  // node indices, rank r on order[r / G]
  FabricPrice given;
  FabricPrice advised;
  // The advised order differs from the given one.
  bool changed = false;
};

// The fastest of the given order and the rack-major orders (the job's nodes
// grouped by block, then by rack: racks in the order the job first names
// them, or the fullest first), so that EP groups (consecutive ranks) stay
// inside a rack where they fit and data parallelism crosses racks. Ties
// keep the given order. Errors as PriceFabric.
absl::StatusOr<OrderAdvice> AdviseOrder(const JobFabric& fabric,
                                        const RankLayout& layout);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_FABRIC_PRICE_H_
