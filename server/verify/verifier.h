// montactl verify's engine (docs/ARCHITECTURE.md, "life of a verify"): plans a
// job on named nodes, runs the job's own dispatch there under every feasible
// strategy and a K sweep (one benchmark task of job-shaped dispatches), and
// scores the plan against the measurements: error of every prediction, regret
// of the choice. The run calibrates the model for those nodes and is
// remembered as verified evidence for later decisions
// (planning::PlanKnowledge).
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
