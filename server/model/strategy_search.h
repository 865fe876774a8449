// The choice (docs/MODEL.md §5-6): every allowed strategy, its best chunk
// count, ranked, with speedups and the end-to-end gain.

#ifndef MONTA_SERVER_MODEL_STRATEGY_SEARCH_H_
#define MONTA_SERVER_MODEL_STRATEGY_SEARCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/strategy/strategy.h"
#include "server/model/cost_model.h"
#include "server/model/traffic.h"

namespace monta::model {

// S0..S4 and their names ("flat", "tp_dedup", ...), shared with the planner
// and the agent's schedules.
using ::monta::strategy::StrategyKind;
using ::monta::strategy::StrategyName;

struct SearchOptions {
  // Strategies to consider; empty = all.
  std::vector<StrategyKind> allowed;
  // Largest K searched (further bounded by the rows a split can cut).
  int max_chunks = 64;
  // > 0: evaluate exactly this K for the chunked strategies (its K_eff when
  // the split yields fewer pieces) instead of searching; a what-if.
  int fixed_chunks = 0;
  // gamma >= 1 for the pipelined steady state.
  double contention_factor = 1.0;
  // Whether the reorder copy shares the GPU with the pipeline's NVLink
  // stages (docs/MODEL.md §8.3); not on the wire until measured.
  PipelineResources pipeline = PipelineResources::kCopySharesGpu;
};

struct Candidate {
  StrategyKind kind = StrategyKind::kFlat;
  std::string name;
  int chunks_requested = 1;  // K
  int chunks_effective = 1;  // K_eff
  // The chunk bound (docs/MODEL.md §5): the largest K searched when a chunk
  // of more would fall below CostModel::kChunkLaunchFloorMultiple times the
  // curve's launch floor; 0 when the bound did not cut the search (or the
  // kind is not chunked). A fixed K (SearchOptions.fixed_chunks) is priced
  // as asked; this still says where the bound lies.
  int chunks_resolved_max = 0;
  bool feasible = false;
  std::string infeasible_reason;
  double forward_seconds_per_layer = 0;
  double backward_seconds_per_layer = 0;
  double total_seconds_per_layer = 0;
  // The layer's four ops (forward_seconds_per_layer is the first two,
  // backward the last two) and the collectives they run.
  LayerOps ops;
  int alltoalls_per_layer = 0;
  int allgathers_per_layer = 0;
  double step_seconds = 0;  // L * m * total
  double intra_node_bytes_per_rank = 0;
  double inter_node_bytes_per_rank = 0;
  // The resource that bounds the candidate: for a pipeline (K > 1) the one
  // that sets its steady-state interval, else the largest summed busy time.
  std::string bottleneck;
  // What the layer's AllToAlls keep the node's own link busy (the
  // inter-node curve) and the fabric's slowest uplink (docs/MODEL.md §12);
  // the network time is the larger of the two, per op. The uplink part is 0
  // without a fabric.
  double node_link_seconds_per_layer = 0;
  double uplink_seconds_per_layer = 0;
  // tp_dedup / tp_dedup_pipelined when the split axis (C or k*S) is not a
  // multiple of t: the rows added to pad it up to one (0 = not padded) and
  // the bytes per rank per AllToAll they add to D. Times are costed with the
  // padded D; the unpadded version's reason is in Decision.notes.
  int64_t padded_rows = 0;
  double padding_bytes_per_rank = 0;
  // Over the layout's flat (docs/MODEL.md §4): what that layout runs
  // without Monta.
  double speedup_over_flat = 0;      // 0 when undefined
  double speedup_over_tp_dedup = 0;  // 0 when undefined
  double predicted_step_gain_ratio = 0;
  int rank = 0;  // 1 = best; 0 when infeasible
};

struct Decision {
  Traffic traffic;
  // The expert layout every candidate was priced in, and whether the job
  // left it to kDefaultExpertLayout (then the notes say so).
  ExpertLayout layout = kDefaultExpertLayout;
  bool layout_defaulted = false;
  // Feasible candidates ranked by total time (ties: simpler strategy
  // first), then the infeasible ones with their reasons.
  std::vector<Candidate> candidates;
  // Index of the chosen candidate, 0 when any is feasible, -1 otherwise.
  int chosen = -1;
  // Curves used outside their measured range by the ranked candidates.
  ExtrapolationFlags extrapolated;
  // AllToAll groups of feasible candidates outside the range the per-peer
  // latency was sourced on: the largest above it and the smallest below it
  // (0 = none, or the range is unknown).
  int latency_group_above_source = 0;
  int latency_group_below_source = 0;
  std::vector<std::string> notes;
};

// Full decision. INVALID_ARGUMENT for an inconsistent job/shape, a cluster
// view without curves, or bad options. Deterministic; no clock, no I/O.
absl::StatusOr<Decision> Decide(const MoeJobShape& job, const NodeShape& shape,
                                const ClusterView& cluster,
                                const SearchOptions& options);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_STRATEGY_SEARCH_H_
