// One strategy decision against the live registry: what GetStrategy and the
// admission webhook both do. Lives in planning (not in the gRPC handlers) so
// the webhook can decide without depending on the gRPC service headers.
#ifndef MONTA_SERVER_PLANNING_DECIDE_STRATEGY_H_
#define MONTA_SERVER_PLANNING_DECIDE_STRATEGY_H_

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
// are unknown).
class RegistryNodeLookup : public NodeLookup {
 public:
  RegistryNodeLookup(const registry::Registry* registry, Instant now)
      : registry_(registry), now_(now) {}
  std::optional<NodeFacts> Find(absl::string_view name) const override;

 private:
  const registry::Registry* registry_;
  Instant now_;
};

// Plans one request against the registry, records the decision metrics and logs
// a successful decision (both optional); shared by GetStrategy and the webhook.
// `knowledge` (nullable): a calibration fitted on the placement's nodes is
// applied, and a fresh verify run of the same job on them answers with its
// measured times (evidence VERIFIED). `fabric` (nullable): the planner's
// fabric tree, which prices the uplinks and advises a rank order for a
// request on named nodes (PlanStrategy).
absl::StatusOr<monta::v1::StrategyReply> DecideStrategy(
    const monta::v1::StrategyRequest& request,
    const registry::Registry* registry, metrics::PlannerMetrics* metrics,
    store::DecisionLog* decisions = nullptr,
    const PlanKnowledge* knowledge = nullptr,
    const monta::v1::FabricReply* fabric = nullptr);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_DECIDE_STRATEGY_H_
