// What verify runs teach the model (docs/MODEL.md §11): a fit of the model's
// calibration to measured dispatch times on a set of nodes, and the planner's
// memory of fits and verified runs, which later decisions on the same nodes
// use.
#ifndef MONTA_SERVER_PLANNING_CALIBRATION_H_
#define MONTA_SERVER_PLANNING_CALIBRATION_H_

#include <deque>
#include <functional>
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
#include "server/store/knowledge_store.h"

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

// The calibration to store, with its evidence: its parameters, the verify
// task it was fitted on and the fit's errors over every observation it was
// fitted on.
PlanCalibration WithEvidence(PlanCalibration c, const CalibrationFit& fit,
                             const std::string& task_id);

// Median |predicted / measured - 1| of `observations` under `c`; nullopt when
// the model predicts none of them.
std::optional<double> MedianErrorRatio(
    const std::vector<Observation>& observations, const PlanCalibration& c,
    const NodeLookup* lookup);

class PlanKnowledge;

// One verify run's step of its node set's calibration (docs/MODEL.md §11):
// the run's quiet observations join the node set's kept runs
// (PlanKnowledge::AddRun), the fit over all of them (FitCalibration) is
// guarded on every observation of the run against `previous` (GuardFit),
// and what passes is stored with its evidence (WithEvidence; a shrunk
// calibration's error after is its own over the fitted observations, not the
// whole fit's). `quiet` must not be empty.
struct RunCalibration {
  absl::Status status;  // FitCalibration's error; OK otherwise
  CalibrationFit fit;
  // guarded.calibration, when set, is what was stored, with its evidence.
  GuardedFit guarded;
};
RunCalibration CalibrateRun(const std::vector<Observation>& run,
                            std::vector<Observation> quiet,
                            const PlanCalibration* previous,
                            const NodeLookup* lookup,
                            const std::string& task_id, absl::Time now,
                            double max_growth_ratio, PlanKnowledge* knowledge);

// Canonical key of a node set (sorted names) and of a job on its nodes (the
// request without the job's name).
std::string NodeSetKey(const monta::v1::StrategyRequest& request);
std::string JobKey(const monta::v1::StrategyRequest& request);

// What the planner knows of one node set (stored as one record,
// knowledge_record.h).
struct NodeSetRecord {
  std::string node_set;  // NodeSetKey
  // When the node set last changed (a run added, a calibration set): the
  // order the bound on node sets drops the oldest by, on every replica.
  absl::Time updated_at;
  // The runs kept for the next refit, oldest first.
  std::deque<std::vector<Observation>> runs;
  std::optional<PlanCalibration> calibration;
  absl::Time fitted_at;
};

// The newest verify reply of one job on its nodes (one record).
struct JobRecord {
  // The job on its nodes, without its name (JobKey's request).
  monta::v1::StrategyRequest request;
  monta::v1::VerifyReply reply;
  absl::Time at;
};

// The planner's memory of verify runs: observations and the calibration
// fitted on them per node set, and the latest verify reply per job on its
// nodes. Bounded; thread-safe.
//
// Kept in the store (issue 20 item 3; docs/MODEL.md §11): with a writer set
// (SetWriter: the single replica's --db, or the leader's etcd under its
// term's fence) every change writes its node set's or job's record, and the
// deletes of those the bounds dropped, one change at a time in the order they
// were made. A planner that starts (or a replica that starts leading) loads
// the stored records (Replace); a follower replica applies the store's
// changes as its watch sees them (Apply), so every replica answers
// GetStrategy with the same calibration and verified evidence. Records that
// do not decode are skipped and counted by the caller.
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
  std::vector<Observation> AddRun(std::vector<Observation> run)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  void SetCalibration(const std::string& node_set, PlanCalibration fit,
                      absl::Time fitted_at) ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  // The node set's calibration with its age at `now` in the evidence.
  std::optional<PlanCalibration> Calibration(const std::string& node_set,
                                             absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);

  void SetVerified(const monta::v1::StrategyRequest& request,
                   const monta::v1::VerifyReply& reply, absl::Time at)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  // The job's last verify reply and when it ran, while fresh.
  struct Verified {
    monta::v1::VerifyReply reply;
    absl::Time at;
  };
  std::optional<Verified> FreshVerified(
      const monta::v1::StrategyRequest& request, absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Where every change goes from now on (null: memory only). Called with
  // the store's writes (an id -> its record, or nullopt: delete), outside
  // the memory's lock, one change at a time; a failed write is the
  // writer's to report (the next change of that record writes it whole).
  using Writer = std::function<void(const store::KnowledgeWrites&)>;
  void SetWriter(Writer writer) ABSL_LOCKS_EXCLUDED(write_mu_);

  // Replaces everything with `records` (a store's list), the newest within
  // the bounds; records that do not decode are skipped and counted.
  struct Loaded {
    int node_sets = 0;
    int jobs = 0;
    int malformed = 0;
  };
  Loaded Replace(const std::vector<store::KnowledgeRecord>& records)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One change of the store (a follower's watch): a put decoded and kept,
  // a delete forgotten. False for a record that does not decode (skipped,
  // nothing changed).
  bool Apply(const store::KnowledgeChange& change) ABSL_LOCKS_EXCLUDED(mu_);

  // How many node sets and jobs it holds.
  size_t node_sets() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t jobs() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Keeps `record` (replacing the node set's or job's) as the newest entry;
  // the keys the bound dropped.
  std::vector<std::string> KeepNodeSetLocked(NodeSetRecord record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> KeepJobLocked(const std::string& key,
                                         JobRecord record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writes of a change of node set `key` (its record) and of the
  // entries the bound dropped.
  store::KnowledgeWrites NodeSetWritesLocked(
      const std::string& key, const std::vector<std::string>& dropped_sets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Changes node set `key` (created empty when absent) by `change`, under
  // the memory's lock, keeps it as the newest and writes its record.
  void ChangeNodeSet(const std::string& key,
                     const std::function<void(NodeSetRecord&)>& change)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  // Hands `writes` to the writer, if any.
  void Write(const store::KnowledgeWrites& writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  const Options options_;
  // Serializes changes and their writes, so the store sees them in order.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Writer writer_ ABSL_GUARDED_BY(write_mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, NodeSetRecord> node_sets_ ABSL_GUARDED_BY(mu_);
  // By JobKey.
  std::map<std::string, JobRecord> verified_ ABSL_GUARDED_BY(mu_);
  // Keys of both maps, oldest first, for the bound.
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
