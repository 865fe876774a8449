#include "server/planning/decide_strategy.h"

#include <chrono>

#include "absl/time/clock.h"
#include "server/store/record_done.h"

namespace monta::planning {

std::optional<NodeFacts> RegistryNodeLookup::Find(
    absl::string_view name) const {
  absl::StatusOr<monta::v1::NodeInfo> node = registry_->Get(name, now_);
  if (!node.ok() || node->state() == monta::v1::NODE_STATE_GONE)
    return std::nullopt;
  NodeFacts facts;
  facts.name = node->name();
  facts.gpu_count = node->topology().gpus_size();
  facts.gpu_name =
      node->topology().gpus().empty() ? "" : node->topology().gpus(0).name();
  facts.profile_name = node->topology().profile_name();
  facts.curves.assign(node->curves().begin(), node->curves().end());
  facts.excluded = registry_->Excluded(name);
  return facts;
}

absl::StatusOr<monta::v1::StrategyReply> DecideStrategy(
    const monta::v1::StrategyRequest& request,
    const registry::Registry* registry, metrics::PlannerMetrics* metrics,
    store::DecisionLog* decisions, const PlanKnowledge* knowledge,
    const monta::v1::FabricReply* fabric) {
  const auto start = std::chrono::steady_clock::now();
  const Instant now = Instant::Now();
  RegistryNodeLookup lookup(registry, now, fabric);
  std::optional<PlanCalibration> calibration;
  if (knowledge != nullptr && request.placement().node_names_size() > 0) {
    calibration = knowledge->Calibration(NodeSetKey(request), now.wall);
  }
  // Curve and verification ages are about stored records: wall time.
  absl::StatusOr<monta::v1::StrategyReply> reply = PlanStrategy(
      request, &lookup, now.wall, calibration ? &*calibration : nullptr);
  if (reply.ok() && knowledge != nullptr) {
    if (auto verified = knowledge->FreshVerified(request, now.wall)) {
      ApplyVerified(*verified, now.wall, &*reply);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (reply.ok()) reply->set_decision_seconds(seconds);
  if (metrics != nullptr) {
    metrics->RecordDecision(reply.status(), reply.ok() ? &*reply : nullptr,
                            seconds);
  }
  if (decisions != nullptr && reply.ok()) {
    // Answered only once its record is stored (store/record_done.h).
    store::RecordWait stored;
    decisions->RecordDecision(request, *reply, stored.done());
    if (absl::Status s = stored.Wait(); !s.ok()) return s;
  }
  return reply;
}

}  // namespace monta::planning
