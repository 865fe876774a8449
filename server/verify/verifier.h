// montactl verify's engine (docs/ARCHITECTURE.md, "life of a verify"): plans a
// job on named nodes, runs what one MoE layer of it communicates (forward and
// backward in the job's expert layout; or, scope OP, one dispatch op) there
// under every feasible strategy and a K sweep (one benchmark task of
// job-shaped workloads), and scores the plan against the measurements: error
// of every prediction, each candidate's spread over its iterations, regret of
// the choice and whether it is inside the noise. The run calibrates the model
// for those nodes on its quiet candidates, guarded so no candidate's error
// grows by more than 5 points, and is remembered as verified evidence for
// later decisions (planning::PlanKnowledge); nodes whose benchmark traffic
// never crosses a link (loopback, one shared host) are measured only.
#ifndef MONTA_SERVER_VERIFY_VERIFIER_H_
#define MONTA_SERVER_VERIFY_VERIFIER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/monta/v1/planner.pb.h"
#include "server/bench/coordinator.h"
#include "server/metrics/planner_metrics.h"
#include "server/planning/calibration.h"
#include "server/planning/decide_strategy.h"
#include "server/registry/registry.h"
#include "server/store/decision_log.h"

namespace monta::verify {

struct VerifierOptions {
  // K values run for tp_dedup_pipelined when the request names none (the
  // chosen K is always added).
  std::vector<int> default_chunks = {1, 2, 4, 8, 16, 32};
  int default_iterations = 7;
  int default_warmup_iterations = 1;
  absl::Duration default_timeout = absl::Seconds(300);
  // Largest dispatch a verify may run, per rank (the buffers are allocated
  // on every rank, several times over).
  uint64_t max_dispatch_bytes = uint64_t{1} << 30;
  // A candidate whose p90 - p10 over its timed iterations (the slowest rank
  // per iteration) exceeds this share of its median is noisy: shown, not
  // fitted (--verify_max_spread_ratio).
  double max_spread_ratio = 0.25;
  // A calibration may not grow any candidate's |error| by more than this
  // (docs/MODEL.md §11).
  double max_calibration_error_growth_ratio = 0.05;
  // The planner's fabric tree (unset: none). The plan, its predictions and
  // the calibration fits price it exactly as GetStrategy does for the same
  // nodes in the same order (docs/MODEL.md §12): one tree per run.
  planning::FabricTreeSource fabric_tree;
};

class Verifier {
 public:
  // Pointers are not owned and must outlive the verifier; `metrics` and
  // `log` may be null.
  Verifier(registry::Registry* registry, coordination::Coordinator* coordinator,
           planning::PlanKnowledge* knowledge, metrics::PlannerMetrics* metrics,
           store::DecisionLog* log, VerifierOptions options = {});

  // Blocks until the run finished or `max_wait` passed. Errors:
  // INVALID_ARGUMENT naming the field; the planner's errors for the job;
  // ABORTED with the task's reason when the run failed; DEADLINE_EXCEEDED.
  absl::StatusOr<monta::v1::VerifyReply> Verify(
      const monta::v1::VerifyRequest& request, absl::Duration max_wait);

 private:
  registry::Registry* const registry_;
  coordination::Coordinator* const coordinator_;
  planning::PlanKnowledge* const knowledge_;
  metrics::PlannerMetrics* const metrics_;
  store::DecisionLog* const log_;
  const VerifierOptions options_;
};

}  // namespace monta::verify

#endif  // MONTA_SERVER_VERIFY_VERIFIER_H_
