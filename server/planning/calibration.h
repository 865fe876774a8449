// What verify runs teach the model (docs/MODEL.md §11): a fit of the model's
// calibration to measured dispatch times on a set of nodes, and the planner's
// memory of fits and verified runs, which later decisions on the same nodes
// use.
#ifndef MONTA_SERVER_PLANNING_CALIBRATION_H_
#define MONTA_SERVER_PLANNING_CALIBRATION_H_

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/strategy/strategy.h"
#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/planning/strategy_planner.h"

namespace monta::planning {

// One measured candidate: the job on its nodes (the request's placement
// names them), the strategy and K it ran, and the median time of what `scope`
// measured (one dispatch op, or one MoE layer in the job's layout).
struct Observation {
  monta::v1::StrategyRequest request;
  strategy::StrategyKind kind = strategy::StrategyKind::kFlat;
  int chunks = 1;
  double measured_seconds = 0;
  MeasuredScope scope = MeasuredScope::kDispatchOp;
};

struct CalibrationFit {
  model::ModelCalibration model;
  double contention_factor = 1;
  // Median |predicted / measured - 1| over the observations, before (the
  // uncalibrated model) and after the fit.
  double error_before_ratio = 0;
  double error_after_ratio = 0;
  int points = 0;
};

// Least relative squared error over grids of network and local scales
// (0.25..4) and contention factors (1..3), by coordinate descent, the
// per-chunk overhead solved in closed form at each point (>= 0).
// INVALID_ARGUMENT without usable observations (none measured, or none the
// model can predict).
absl::StatusOr<CalibrationFit> FitCalibration(
    const std::vector<Observation>& observations, const NodeLookup* lookup);

// Where a fit may take the node set's calibration (docs/MODEL.md §11): no
// observation of the run being fitted may see its |predicted / measured - 1|
// grow by more than `max_growth_ratio` from `previous` (nullptr: none). The
// fit is tried whole, then 3/4, 1/2 and 1/4 of the way from the previous
// calibration (scales geometric, overhead and gamma linear).
struct GuardedFit {
  enum class Outcome { kFitted, kShrunk, kRefused };
  Outcome outcome = Outcome::kRefused;
  // What to store (fitted or shrunk); unset when refused.
  std::optional<PlanCalibration> calibration;
  // The share of the way taken (1 fitted, 0 refused).
  double step = 0;
  // For people: the observation whose |error| the whole fit grew most, and
  // by how much; empty when none grew.
  std::string worst;
};
GuardedFit GuardFit(const std::vector<Observation>& run,
                    const PlanCalibration* previous, const CalibrationFit& fit,
                    const NodeLookup* lookup, double max_growth_ratio = 0.05);

// Canonical key of a node set (sorted names) and of a job on its nodes (the
// request without the job's name).
std::string NodeSetKey(const monta::v1::StrategyRequest& request);
std::string JobKey(const monta::v1::StrategyRequest& request);

// The planner's memory of verify runs: observations and the calibration
// fitted on them per node set, and the latest verify reply per job on its
// nodes. In memory, bounded; thread-safe.
class PlanKnowledge {
 public:
  struct Options {
    // Verified times answer GetStrategy for this long after their run.
    absl::Duration verified_ttl = absl::Hours(1);
    // Verify runs whose observations a node set keeps (oldest dropped).
    int max_runs_per_node_set = 8;
    // Node sets and jobs remembered (oldest dropped).
    int max_entries = 256;
  };
  PlanKnowledge() : PlanKnowledge(Options()) {}
  explicit PlanKnowledge(Options options) : options_(options) {}

  // Adds one verify run's observations to its node set; returns all the
  // node set's observations (this run's included), for a refit.
  std::vector<Observation> AddRun(std::vector<Observation> run);
  void SetCalibration(const std::string& node_set, PlanCalibration fit,
                      absl::Time fitted_at);
  // The node set's calibration with its age at `now` in the evidence.
  std::optional<PlanCalibration> Calibration(const std::string& node_set,
                                             absl::Time now) const;

  void SetVerified(const monta::v1::StrategyRequest& request,
                   const monta::v1::VerifyReply& reply, absl::Time at);
  // The job's last verify reply and when it ran, while fresh.
  struct Verified {
    monta::v1::VerifyReply reply;
    absl::Time at;
  };
  std::optional<Verified> FreshVerified(
      const monta::v1::StrategyRequest& request, absl::Time now) const;

 private:
  struct NodeSet {
    std::deque<std::vector<Observation>> runs;
    std::optional<PlanCalibration> calibration;
    absl::Time fitted_at;
  };

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, NodeSet> node_sets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Verified> verified_ ABSL_GUARDED_BY(mu_);
  // Insertion order of both maps' keys, for the bound.
  std::deque<std::string> node_set_order_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> verified_order_ ABSL_GUARDED_BY(mu_);
};

// Replaces the times of the reply's candidates with the verify run's
// measurements (each strategy at its fastest measured K), re-ranks them,
// and marks the evidence VERIFIED with the run's task and age.
void ApplyVerified(const PlanKnowledge::Verified& verified, absl::Time now,
                   monta::v1::StrategyReply* reply);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_CALIBRATION_H_
