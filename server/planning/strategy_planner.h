// The edge between the wire contract and the model: validates a
// StrategyRequest, resolves where the job runs, picks the curves that bound
// it (measured ones win over profiles), runs the model and fills the reply
// with its evidence. No I/O of its own; the node registry comes in through
// NodeLookup.

#ifndef MONTA_SERVER_PLANNING_STRATEGY_PLANNER_H_
#define MONTA_SERVER_PLANNING_STRATEGY_PLANNER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/strategy/strategy.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/model/cost_model.h"
#include "server/model/strategy_search.h"
#include "server/model/traffic.h"

namespace monta::planning {

// What the registry knows about one registered node.
struct NodeFacts {
  std::string name;
  int gpu_count = 0;         // 0 = no GPUs (CPU/Gloo node)
  std::string profile_name;  // from topology; empty = infer from gpu_name
  std::string gpu_name;
  // Measured curves involving this node (may be empty). Inter-node curves
  // may appear under each of their nodes; they are deduplicated. Of two curves
  // for one role and node set the higher sequence (the planner's order) is the
  // newer.
  std::vector<monta::v1::BandwidthCurve> curves;
  // Curves of this node's tasks the planner excluded (never planned with;
  // an exclusion newer than the curve used is noted in the evidence).
  std::vector<monta::v1::ExcludedCurve> excluded;
};

class NodeLookup {
 public:
  virtual ~NodeLookup() = default;
  // The node's facts, or nullopt when no such node is registered.
  virtual std::optional<NodeFacts> Find(absl::string_view name) const = 0;
  // The planner's fabric tree (GetFabric's reply: where nodes sit, each
  // level's measured or declared capacity), or null without one. Every plan
  // on named nodes made through this lookup prices the tree
  // (docs/MODEL.md §12): GetStrategy, the admission webhook, verify's
  // predictions and the calibration fits on them.
  virtual const monta::v1::FabricReply* Fabric() const { return nullptr; }
};

// Plans one request. Errors:
// - INVALID_ARGUMENT naming the field and the expectation, e.g.
//   "job.tensor_parallel_size: must divide gpus per node (8), got 16";
// - NOT_FOUND for a node name the lookup does not know;
// - FAILED_PRECONDITION for node names without a lookup.
// A strategy that cannot run for the job is not an error: it is listed as an
// infeasible candidate with its reason. `lookup` may be null when the
// placement names a profile; `now` dates the measured curves' ages.
//
// `calibration` (nullable) is what verify runs on these nodes fitted
// (docs/MODEL.md §11): applied to the model's view, its gamma used when the
// request gives no contention factor, and reported in the evidence.
struct PlanCalibration {
  model::ModelCalibration model;
  double contention_factor = 1;
  monta::v1::Calibration evidence;  // age_seconds filled by the caller
};
//
// The fabric tree is the lookup's (NodeLookup::Fabric). When the request
// names its nodes and the tree places every one of them, the uplinks are
// priced for the given rank order (docs/MODEL.md §12): node links from
// inter-node curves inside a rack, each uplink from its level measurement or
// declaration (a curve across racks is a level measurement: it prices its
// uplink, never the job's nodes directly); every feasible candidate says
// which level bounds it (fabric_bound), the evidence lists the uplinks
// crossed, and the reply advises a rank order (rank_order).
absl::StatusOr<monta::v1::StrategyReply> PlanStrategy(
    const monta::v1::StrategyRequest& request, const NodeLookup* lookup,
    absl::Time now, const PlanCalibration* calibration = nullptr);

// The model's inputs for one request: what PlanStrategy decides on (the
// fabric tree priced for the given order the same way), for callers that
// evaluate the model many times (verify's predictions, calibration fits).
struct PreparedPlan {
  model::MoeJobShape job;
  model::NodeShape shape;
  model::ClusterView view;
  model::SearchOptions options;
};
absl::StatusOr<PreparedPlan> PreparePlan(
    const monta::v1::StrategyRequest& request, const NodeLookup* lookup);

// What a verify run measures of a candidate (monta.v1.VerifyScope): one
// dispatch op of the tensor-parallel layout (what the agents ran before the
// layer scope), or one MoE layer, forward and backward, in the job's layout.
enum class MeasuredScope { kDispatchOp, kLayer };

// The model's time for what `scope` measures under `kind` with exactly
// `chunks`, with `calibration` and `contention_factor` applied: kDispatchOp
// the candidate's ops.dispatch_forward_seconds priced in the tensor-parallel
// layout; kLayer its total_seconds_per_layer in the job's layout (the
// planner's default when the job does not say). nullopt when the strategy
// cannot run for the job.
std::optional<double> PredictMeasuredSeconds(
    const PreparedPlan& plan, MeasuredScope scope, strategy::StrategyKind kind,
    int chunks, const model::ModelCalibration& calibration,
    double contention_factor);

// The chunk bound of `kind` as `scope` prices it (model::Candidate::
// chunks_resolved_max, docs/MODEL.md §5): the largest K the planner offers,
// or 0 when the bound does not cut its search (or the kind is not chunked,
// or cannot run). Verify measures no K above it.
int ChunkBound(const PreparedPlan& plan, MeasuredScope scope,
               strategy::StrategyKind kind,
               const model::ModelCalibration& calibration,
               double contention_factor);

// The built-in hardware profiles, each constant with its source.
std::vector<monta::v1::HardwareProfile> ListProfiles();

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_STRATEGY_PLANNER_H_
