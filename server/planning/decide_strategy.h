// One strategy decision against the live registry: what GetStrategy and the
// admission webhook both do. Lives in planning (not in the gRPC handlers) so
// the webhook can decide without depending on the gRPC service headers.
#ifndef MONTA_SERVER_PLANNING_DECIDE_STRATEGY_H_
#define MONTA_SERVER_PLANNING_DECIDE_STRATEGY_H_

#include <functional>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/metrics/planner_metrics.h"
#include "server/planning/calibration.h"
#include "server/planning/strategy_planner.h"
#include "server/registry/registry.h"
#include "server/store/decision_log.h"

namespace monta::planning {

// Resolves node names for the strategy planner from the registry (gone nodes
// are unknown), with the planner's fabric tree when it has one (nullable; not
// owned, must outlive the lookup).
class RegistryNodeLookup : public NodeLookup {
 public:
  RegistryNodeLookup(const registry::Registry* registry, Instant now,
                     const monta::v1::FabricReply* fabric = nullptr)
      : registry_(registry), now_(now), fabric_(fabric) {}
  std::optional<NodeFacts> Find(absl::string_view name) const override;
  const monta::v1::FabricReply* Fabric() const override { return fabric_; }

 private:
  const registry::Registry* registry_;
  Instant now_;
  const monta::v1::FabricReply* fabric_;
};

// The planner's fabric tree as it stands now (GetFabric's reply), for a plan
// on named nodes; unset (or returning nullopt): no fabric. GetStrategy, the
// admission webhook and verify take the same source, so they price the same
// tree through the same path (PlanStrategy, PreparePlan).
using FabricTreeSource = std::function<std::optional<monta::v1::FabricReply>()>;

// Plans one request against the registry, records the decision metrics and logs
// a successful decision (both optional); shared by GetStrategy and the webhook.
// With `decisions` it blocks until the decision's record is stored and
// returns the log's error (UNAVAILABLE: not stored) instead of the reply when
// it is not: for a thread that may block (the webhook's workers). GetStrategy,
// on a gRPC callback thread, passes no log and records the reply itself,
// finishing the call when the log tells it.
// `knowledge` (nullable): a calibration fitted on the placement's nodes is
// applied, and a fresh verify run of the same job on them answers with its
// measured times (evidence VERIFIED). `fabric` (nullable): the planner's
// fabric tree, which prices the uplinks and advises a rank order for a
// request on named nodes (PlanStrategy, through the lookup).
absl::StatusOr<monta::v1::StrategyReply> DecideStrategy(
    const monta::v1::StrategyRequest& request,
    const registry::Registry* registry, metrics::PlannerMetrics* metrics,
    store::DecisionLog* decisions = nullptr,
    const PlanKnowledge* knowledge = nullptr,
    const monta::v1::FabricReply* fabric = nullptr);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_DECIDE_STRATEGY_H_
