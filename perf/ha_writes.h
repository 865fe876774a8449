// perf/ha_bench's acknowledged writes besides registrations (issue 20: "0
// acknowledged registrations, curves, decisions or benchmark results lost"):
// what the bench was told was done, kept as it was told, and the checks of
// what the store holds at the end.
//
// Decisions: every GetStrategy call carries a job name of its own
// (DecisionLedger); the names of the calls answered OK are the acknowledged
// decisions, and RecordedDecisionJobs reads the decision records from etcd
// directly (server/etcd_store/records.h, decoded there) for the names they
// hold.
//
// Benchmarks: BenchmarkLoop runs Planner.RunBenchmark (wait) on real nodes,
// one call at a time, on the replica that leads (a follower's "not the
// leader" refusal and an unreachable replica are routed on at once, as
// common/replicas moves a client); an answer SUCCEEDED is an acknowledged
// result, and the curves of its task the answering replica lists right after
// (ListCurves) are its acknowledged curves. Every other answer (FAILED
// "leader changed", UNAVAILABLE mid-call, no replica leading) is counted, not
// acknowledged. LostBenchmarks and LostCurves check a replica at the end.
#ifndef MONTA_PERF_HA_WRITES_H_
#define MONTA_PERF_HA_WRITES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/monta/v1/planner.grpc.pb.h"

namespace monta::perf {

// GetStrategy requests named one by one and the names answered OK.
// Thread-safe.
class DecisionLedger {
 public:
  explicit DecisionLedger(std::string prefix) : prefix_(std::move(prefix)) {}
  // `job` with its job name "<prefix>-<n>", n counting every call.
  monta::v1::StrategyRequest Next(const monta::v1::StrategyRequest& job);
  // The call of `request` was answered OK.
  void Acknowledge(const monta::v1::StrategyRequest& request);
  std::vector<std::string> Acknowledged() const;

 private:
  const std::string prefix_;
  mutable absl::Mutex mu_;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> acknowledged_ ABSL_GUARDED_BY(mu_);
};

// The job names of every decision record under the store prefix `prefix`
// (P records/decisions/), read from the etcd members `endpoints` (plaintext)
// at one revision. DATA_LOSS naming the key when a record does not decode.
absl::StatusOr<std::set<std::string>> RecordedDecisionJobs(
    const std::vector<std::string>& endpoints, const std::string& prefix);

// How many of `acknowledged` `present` does not hold.
int CountMissing(const std::vector<std::string>& acknowledged,
                 const std::set<std::string>& present);

struct BenchmarkLoopOptions {
  // The replicas, "host:port", and a stub of each (same order; they outlive
  // the loop).
  std::vector<std::string> addresses;
  std::vector<monta::v1::Planner::Stub*> planners;
  std::vector<std::string> nodes;  // measured together
  uint64_t min_bytes = 4096;
  uint64_t max_bytes = 65536;
  double timeout_seconds = 30;              // the task's deadline
  absl::Duration every = absl::Seconds(3);  // one call starts this often
};

struct AcknowledgedBenchmark {
  std::string task_id;
  // Its task's curves as the answering replica listed them right after the
  // answer (points dropped); empty when that replica no longer answered.
  std::vector<monta::v1::BandwidthCurve> curves;
};

class BenchmarkLoop {
 public:
  // Starts the loop's thread (the first call at once).
  explicit BenchmarkLoop(BenchmarkLoopOptions options);
  ~BenchmarkLoop() { Stop(); }
  BenchmarkLoop(const BenchmarkLoop&) = delete;
  BenchmarkLoop& operator=(const BenchmarkLoop&) = delete;

  // Cancels the call in flight (not counted) and joins the thread.
  void Stop();
  // Waits up to `timeout` until `count` results are acknowledged in all;
  // false when fewer are.
  bool WaitForAcknowledged(int count, absl::Duration timeout);
  int AcknowledgedSoFar();

  // Valid after Stop.
  const std::vector<AcknowledgedBenchmark>& acknowledged() const {
    return acknowledged_;
  }
  int64_t curves_acknowledged() const;
  // Calls that ended otherwise, by outcome ("FAILED: leader changed: ...",
  // "UNAVAILABLE", "no replica leads"), and their sum.
  const std::map<std::string, int>& not_acknowledged() const {
    return not_acknowledged_;
  }
  int NotAcknowledged() const;
  const std::string& last_error() const { return last_error_; }

 private:
  void Run();
  // One benchmark: RunBenchmark on the replica that leads, its outcome kept.
  void CallOnce();
  // The answer of a call sent to replica `at`; false when `at` refused it as
  // a follower or could not be reached (nothing scheduled: try the next).
  bool Answered(size_t at, const grpc::Status& status,
                const monta::v1::RunBenchmarkReply& reply);
  AcknowledgedBenchmark ListAcknowledged(size_t at, const std::string& task_id);
  void NotAcknowledged(const std::string& outcome, const std::string& error);

  const BenchmarkLoopOptions options_;
  size_t at_ = 0;  // the replica tried first; the loop's thread's
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t in_flight_at_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time in_flight_since_ ABSL_GUARDED_BY(mu_);
  int acknowledged_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar acknowledged_cv_;  // a result acknowledged, or Stop
  std::thread thread_;
  // The loop's thread's until Stop joined it.
  std::vector<AcknowledgedBenchmark> acknowledged_;
  std::map<std::string, int> not_acknowledged_;
  std::string last_error_;
};

// Acknowledged benchmarks whose task `planner` does not answer SUCCEEDED
// (GetBenchmarkTask: NOT_FOUND or another state); -1 when it answers
// otherwise (down, not in sync).
int LostBenchmarks(monta::v1::Planner::Stub& planner,
                   const std::vector<AcknowledgedBenchmark>& acknowledged);

// Acknowledged curves `planner` does not list (ListCurves of the curve's
// first node): one is held by a listed curve of the same measurement
// (registry::CurveKey) from the same task, or with a higher sequence (a later
// measurement replaced it). -1 when it answers otherwise than a list or
// NOT_FOUND.
int LostCurves(monta::v1::Planner::Stub& planner,
               const std::vector<AcknowledgedBenchmark>& acknowledged);

}  // namespace monta::perf

#endif  // MONTA_PERF_HA_WRITES_H_
