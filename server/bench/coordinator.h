// Coordinates benchmarks that span nodes: creates tasks, hands them to the
// agents of the nodes involved (WatchTasks), serves the per-task rendezvous
// key-value store (NCCL unique ids, Gloo store keys), collects one report per
// node (its ranks' own times), forms the task's curves once every node
// reported (curve_forming.h) and fails a task whose ranks do not all arrive
// before its deadline.
//
// The task queue (tasks, their states, who runs what, deadlines, the finished
// ones kept) can live on the planner's store (Lead with a TaskRecordWriter and
// the stored records): every task RunBenchmark or the periodic schedule
// creates is written when it is queued and when it finishes, so a new leader
// (or a restarted planner) lists them and hands the unfinished ones out again.
// The rendezvous keys, the reports held for the last node and a verify task's
// results are leader memory only: a re-issued task starts them afresh.
#ifndef MONTA_SERVER_BENCH_COORDINATOR_H_
#define MONTA_SERVER_BENCH_COORDINATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "server/bench/curve_forming.h"
#include "server/bench/rendezvous.h"
#include "server/registry/registry.h"

namespace monta::coordination {

// Nodes of one benchmark (RunBenchmarkRequest.nodes, as its proto comment
// says): 1024 nodes of up to 64 ranks is the model's largest world.
inline constexpr int kMaxBenchmarkNodes = 1024;

struct CoordinatorOptions {
  absl::Duration default_timeout = absl::Seconds(120);
  // Ranks per node when the request says 0 and the node has no GPUs.
  int default_cpu_ranks_per_node = 2;
  uint64_t default_min_bytes = 64 << 10;
  uint64_t default_max_bytes = 16 << 20;
  int step_factor = 4;
  int warmup_iterations = 2;
  int iterations = 5;
  // Finished tasks kept for status queries (and on the store).
  int max_finished_tasks = 1024;
  // Times one task is handed out at most: a task an earlier leader handed out
  // and did not finish is handed out again by the next one until then, and
  // fails "leader changed" after.
  int max_task_attempts = 3;
  // Bounds a client cannot exceed (RESOURCE_EXHAUSTED naming the planner flag;
  // see the planner's --help).
  // Unfinished (pending or running) tasks that involve one node, and in all.
  int max_pending_tasks_per_node = 16;
  int max_pending_tasks = 1024;
  // Rendezvous keys of one task, bytes of one value, and bytes of all its keys
  // and values together.
  int max_rendezvous_keys_per_task = 4096;
  size_t max_rendezvous_value_bytes = 1 << 20;
  size_t max_rendezvous_bytes_per_task = 64 << 20;
  // Bytes of rendezvous keys and values of all unfinished tasks together (the
  // planner-wide cap), and the share of it one setter (a node, by the
  // identity of its certificate) may hold across all its tasks: with the
  // defaults no node holds more than a quarter, so one node in many tasks
  // cannot starve the others.
  size_t max_rendezvous_bytes = size_t{256} << 20;
  size_t max_rendezvous_bytes_per_node = size_t{64} << 20;
  // Series in one ReportBenchmark and sizes in each of them (a report must
  // match its task exactly; these bound what is parsed before that check).
  int max_curves_per_report = 64;
  int max_points_per_curve = 1024;
  // A curve is excluded when one node's median rank time at some size is more
  // than this many times another node's (docs/ARCHITECTURE.md).
  double node_agreement_factor = 4;
  // ... and by more than this many seconds.
  double node_agreement_slack_seconds = 0.005;
  // Where a task over these nodes (in rank order) runs in the fabric: set on
  // every task (BenchmarkTask.fabric, its status and its curves). The planner
  // passes its fabric's (server/fabric); unset: tasks carry no span.
  std::function<monta::v1::FabricSpan(const std::vector<std::string>& nodes)>
      fabric_span;
};

// Called once per finished task (metrics, logs), under the coordinator's lock:
// it must not call back into the coordinator.
using TaskFinishedCallback =
    std::function<void(const monta::v1::BenchmarkTaskStatus&)>;

// A verify task's results, handed over once when it finishes (succeeded or
// not) so the coordinator keeps nothing of them: the kept curves in dispatch
// order (status.excluded has the others). Called under the coordinator's lock.
using DispatchResultsCallback =
    std::function<void(const monta::v1::BenchmarkTaskStatus& status,
                       std::vector<monta::v1::BandwidthCurve> curves)>;

// Writes the task queue's records (task id -> its record, task_record.h; or
// nullopt: delete it) where the next leader lists them: called in order, one
// call at a time, outside the coordinator's state lock, before the change is
// visible to waiters.
using TaskRecordWriter = std::function<absl::Status(
    const std::map<std::string, std::optional<std::string>>& writes)>;

// Reads one task's record (task_record.h) from the task queue's store, or
// nullopt when none is stored under the id: how a replica that does not lead
// answers for a task (the store answers on every replica).
using TaskRecordReader =
    std::function<absl::StatusOr<std::optional<std::string>>(
        const std::string& task_id)>;

// One task as GetBenchmarkTask shows it (Coordinator::Describe).
struct TaskView {
  monta::v1::BenchmarkTask spec;
  monta::v1::BenchmarkTaskStatus status;
  int attempts = 1;
  int max_attempts = 1;
  // Read from the store (this replica does not lead), not the leader's memory.
  bool from_store = false;
};

// What Lead found on the store.
struct RestoredTasks {
  int finished = 0;   // kept for status queries
  int reissued = 0;   // of an earlier leader, handed out again
  int failed = 0;     // unfinished but not handed out again (attempts, epoch)
  int malformed = 0;  // records that did not decode (skipped, logged)
};

// Something waiting, without a thread of its own, for one node's task queue or
// one task (a gRPC reactor): woken when that node's queue or that task changed
// and at Shutdown. Wake() runs without the coordinator's state lock, so it may
// call TryNextTask / TryGet / Status to see what changed; wake-ups can be
// spurious. It must not add or remove waiters itself.
class Waiter {
 public:
  virtual ~Waiter() = default;
  virtual void Wake() = 0;
};

class Coordinator {
 public:
  // `registry` is not owned and must outlive the coordinator.
  Coordinator(registry::Registry* registry, CoordinatorOptions options);

  void SetTaskFinishedCallback(TaskFinishedCallback callback);

  // Validates the request (nodes registered and alive, no duplicates, sizes
  // sane) and queues one task for every node in it. Its deadline runs on
  // `now.mono`; `now.wall` only dates it.
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> Schedule(
      const monta::v1::RunBenchmarkRequest& request, Instant now);

  // A task of job-shaped dispatches (montactl verify) on the request's nodes
  // (its byte range is ignored): each workload once, `iterations` timed runs
  // after `warmup_iterations`. Its curves go to `on_results` when it finishes,
  // never to the registry: they are one job's measurements, not the nodes'
  // curves.
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> ScheduleDispatches(
      const monta::v1::RunBenchmarkRequest& request,
      const std::vector<monta::v1::DispatchWorkload>& dispatches,
      int iterations, int warmup_iterations, Instant now,
      DispatchResultsCallback on_results);

  // Waits up to `max_wait` (every wait here is on the monotonic clock) for the
  // next task of `node_name`, and sets its timeout_seconds to the time left.
  // Returns nullopt when none came, or when Shutdown() was called.
  std::optional<monta::v1::BenchmarkTask> NextTask(const std::string& node_name,
                                                   absl::Duration max_wait);
  // The next task of `node_name` (now running), nullopt when none is queued or
  // after Shutdown(). Never waits, and writes nothing: the first node that
  // takes a task of this term marks it RUNNING (started_at now) and queues
  // its record for the next FlushTaskWrites, which the caller runs once the
  // task reached the agent (one extra write per hand-out: the other nodes
  // find it RUNNING). NextTask flushes itself.
  std::optional<monta::v1::BenchmarkTask> TryNextTask(
      const std::string& node_name);

  // Per-node and per-task wake-ups (see Waiter). A waiter added before its
  // first Try* call misses no change. After Remove* returns, `waiter` is not
  // woken again and no Wake() of it is running, so it may be destroyed.
  void AddNodeWaiter(const std::string& node_name, Waiter* waiter);
  void RemoveNodeWaiter(const std::string& node_name, Waiter* waiter);
  void AddTaskWaiter(const std::string& task_id, Waiter* waiter);
  void RemoveTaskWaiter(const std::string& task_id, Waiter* waiter);
  // Waiters registered now (node and task), for tests and gauges.
  size_t waiter_count() const;

  // Rendezvous store. Set on a finished task is FAILED_PRECONDITION. The
  // key's bytes (key and value) count against `setter`'s share (who set them:
  // the API passes the caller's identity, e.g. "node node-a"), the task's
  // bound and the planner-wide cap until the task finishes or another setter
  // overwrites the key; RESOURCE_EXHAUSTED naming the flag beyond any of them.
  absl::Status Set(const monta::v1::RendezvousSetRequest& request,
                   const std::string& setter);
  // Bytes of rendezvous keys and values held now: in all, and set by `setter`.
  size_t rendezvous_bytes() const;
  size_t rendezvous_bytes_of(const std::string& setter) const;
  // Waits up to `wait_seconds` for the key; ABORTED (with the task's failure
  // reason) when the task fails meanwhile, DEADLINE_EXCEEDED when the key never
  // comes.
  absl::StatusOr<std::string> Get(
      const monta::v1::RendezvousGetRequest& request);
  // Get without waiting: nullopt while the key is not set and the task has not
  // failed (wait_seconds is not checked here).
  absl::StatusOr<std::optional<std::string>> TryGet(
      const monta::v1::RendezvousGetRequest& request);
  // wait_seconds of a RendezvousGet, INVALID_ARGUMENT when out of range.
  static absl::StatusOr<absl::Duration> GetWait(
      const monta::v1::RendezvousGetRequest& request);
  // The error of a Get whose key never came within wait_seconds.
  static absl::Status GetTimedOut(
      const monta::v1::RendezvousGetRequest& request);

  // One node's result, once per node and task: a second one is
  // ALREADY_EXISTS. An OK report must match its task (ValidateReport,
  // INVALID_ARGUMENT) and is held until every node reported; then the task's
  // curves are formed, the trusted ones go to the registry (a verify task's to
  // its DispatchResultsCallback), the others are listed in the status's
  // `excluded` (and the registry's exclusions), and the reports are freed. A
  // failure report fails the task for everyone. The last report is refused
  // RESOURCE_EXHAUSTED, as if it never came, while the registry's store is
  // too far behind to take the curves (--max_pending_registry_changes): the
  // agent retries it after a backoff.
  absl::Status Report(const monta::v1::ReportBenchmarkRequest& request,
                      Instant now);

  // Bytes of the reports held for unfinished tasks (their nodes' numbers,
  // waiting for the last node): monta_planner_held_bytes{kind="task_reports"}.
  size_t held_report_bytes() const;

  absl::StatusOr<monta::v1::BenchmarkTaskStatus> Status(
      const std::string& task_id) const;

  // The task as handed to its nodes (nodes in rank order, ranks per node):
  // what the API's authorization checks a caller's membership against.
  absl::StatusOr<monta::v1::BenchmarkTask> Spec(
      const std::string& task_id) const;

  // The store a replica that does not lead reads tasks from (Describe); set
  // once before serving (the planner sets it with --store=etcd).
  void SetTaskRecordReader(TaskRecordReader reader);
  // One task as this replica can tell: while it leads, from memory (a verify
  // task's too); otherwise from the store through the reader, never from its
  // own memory (the tasks it failed "leader changed" when it stopped leading
  // are unfinished there, for the next leader). NOT_FOUND naming the id when
  // neither has it; UNAVAILABLE naming the leader on a replica that does not
  // lead and has no reader (a task queue in memory only); the reader's error
  // (DATA_LOSS for a record that does not decode) otherwise. Reads the store
  // outside the state lock.
  absl::StatusOr<TaskView> Describe(const std::string& task_id) const;

  // Waits until the task finished or `max_wait` passed; returns its status
  // either way.
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> WaitFinished(
      const std::string& task_id, absl::Duration max_wait);

  // Fails tasks past their deadline, naming the ranks that never joined or
  // reported.
  void ExpireOverdue(Instant now);

  // Fails the unfinished tasks of a node whose agent went away (stale or gone).
  void FailTasksOfNode(const std::string& node_name, const std::string& why,
                       Instant now);

  // True while a task that involves `node_name` is pending or running.
  bool Busy(const std::string& node_name) const;

  // Fails every unfinished task ("planner shutting down": its agents' waits on
  // the rendezvous store end with ABORTED, so they stop their sweeps) and
  // wakes every waiter; later waits return at once, later tasks are refused.
  void Shutdown();
  bool ShuttingDown() const;

  // Leadership among planner replicas (issue 20 item 5; the planner drives
  // it from server/election). A coordinator leads from construction with
  // epoch 0 (one replica, no election). Follow() stops it at once: every
  // unfinished task fails with "leader changed: <why>" (its agents' waits
  // end ABORTED), no task is handed out, scheduled or accepted until
  // Lead(epoch), which starts with no tasks of an older term.
  void Lead(int64_t epoch);
  // Leads with `epoch` and the task queue on a store: `records` are what it
  // holds (every task of earlier terms), `writer` writes this term's changes
  // (the leader's fenced store). The tasks in memory are replaced by the
  // records: finished ones answer Status as before (the newest
  // max_finished_tasks); an unfinished one of an older epoch is handed out
  // again under `epoch` with its timeout afresh, counted from the old run's
  // deadline when that is later (its agents may hold on to the old run until
  // then) (its status PENDING, its
  // reason "leader changed: ... attempt N of M"), or fails "leader changed"
  // past max_task_attempts; an unfinished one of `epoch` itself (a planner
  // without an election restarted: epoch 0 cannot tell the old run's agents
  // from the new) fails "planner restarted". Follow and Shutdown stop the
  // writes first (the tasks they fail stay unfinished on the store, for the
  // next leader).
  RestoredTasks Lead(int64_t epoch, TaskRecordWriter writer,
                     const std::vector<std::string>& records, Instant now);
  // Task record writes that failed (logged; the task runs from memory).
  int64_t task_write_errors() const;
  // Writes the queued task records (in order, one batch at a time) on the
  // caller's thread; a no-op without any. Every method that changes a task
  // calls it before waking anyone; TryNextTask leaves its RUNNING write to
  // its caller, which must hold no waiter's lock (a Wake() may not call it).
  void FlushTaskWrites() ABSL_LOCKS_EXCLUDED(mu_, waiters_mu_);
  void Follow(const std::string& why, Instant now);
  // Who leads now as far as this replica knows (an address; empty: unknown),
  // named in CheckLeading's refusal.
  void SetLeader(const std::string& leader);
  // OK while leading; UNAVAILABLE "not the leader (leader: <address>)"
  // otherwise.
  absl::Status CheckLeading() const;
  // OK for 0 (an agent that names no epoch) and the epoch this coordinator
  // leads with; FAILED_PRECONDITION "leader changed" otherwise.
  absl::Status CheckEpoch(int64_t epoch) const;
  // The epoch tasks are handed out under (0: no election).
  int64_t epoch() const;

  // Key an agent sets when one of its ranks starts working on a task:
  // "join/<rank>".
  static std::string JoinKey(int rank);

 private:
  struct Task {
    monta::v1::BenchmarkTask spec;
    monta::v1::BenchmarkTaskStatus status;
    MonoTime deadline;
    std::set<int> joined_ranks;
    // Nodes that reported (kept after the task finished: a second report is
    // refused).
    std::set<std::string> reported_nodes;
    // OK reports by node, until the last node's arrives; freed by Finish.
    std::map<std::string, monta::v1::ReportBenchmarkRequest> reports;
    size_t report_bytes = 0;
    // A verify task's: where its curves go when it finishes.
    DispatchResultsCallback on_results;
    std::vector<monta::v1::BandwidthCurve> dispatch_curves;
    int attempts = 1;
    // Nodes that took it (TryNextTask) in this term.
    std::set<std::string> taken_by;
    // Written to the store (not a verify task's: its caller waits on this
    // leader).
    bool stored = false;
  };

  // Queues a task with `spec` (id and deadline filled here) for its nodes.
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> Enqueue(
      monta::v1::BenchmarkTask spec, absl::Duration timeout, Instant now,
      DispatchResultsCallback on_results = nullptr);
  // Holds an OK report of a node that has not reported yet; forms the curves
  // and finishes the task when it was the last.
  absl::Status Accept(Task& task,
                      const monta::v1::ReportBenchmarkRequest& report,
                      Instant now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every node reported: forms the curves, files them, finishes the task.
  // RESOURCE_EXHAUSTED, the task unchanged, when the registry refused the
  // curves (its store too far behind: Registry::AddCurves).
  absl::Status Complete(Task& task, Instant now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the registry knows of the task's nodes' links (line-rate check).
  CurveChecks ChecksFor(const monta::v1::BenchmarkTask& spec,
                        Instant now) const;
  void Finish(Task& task, monta::v1::TaskState state, const std::string& reason,
              Instant now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the write of `task`'s record (or, `erase`, its deletion) for
  // FlushTaskWrites, when the queue is on a store and the task is stored.
  void PersistLocked(const Task& task, bool erase = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lead's restore of one stored task (its record decoded).
  void RestoreLocked(Task task, Instant now, RestoredTasks& counts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fresh task id.
  std::string NewTaskIdLocked(Instant now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when `nodes` would exceed the pending-task bounds.
  absl::Status CheckPendingBounds(
      const google::protobuf::RepeatedPtrField<std::string>& nodes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status NotLeadingLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string MissingRanks(const Task& task) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The task named `task_id`, or NOT_FOUND naming it. The pointer lives while
  // mu_ is held.
  absl::StatusOr<const Task*> FindTask(const std::string& task_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Task*> FindTask(const std::string& task_id)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Calls DeliverWakes() when it goes out of scope: declared before a method's
  // MutexLock, it runs after the lock is released.
  class WakeOnExit;
  // Wakes the waiters of every node and task changed since the last call.
  // Called by each method that changes state, after releasing mu_.
  void DeliverWakes() ABSL_LOCKS_EXCLUDED(mu_, waiters_mu_);
  // Waits (a thread of the caller's) until `ready` says the wait is over or
  // `max_wait` passed, re-checking on every wake-up of the node's or task's
  // waiters. For the blocking NextTask / Get / WaitFinished.
  template <typename Ready>
  void WaitFor(bool is_node, const std::string& key, absl::Duration max_wait,
               Ready ready);

  registry::Registry* const registry_;
  const CoordinatorOptions options_;

  // Held while writing task records, so that batches land in order.
  absl::Mutex flush_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Acquired before mu_ (a Wake() calls Try* methods, which take mu_).
  mutable absl::Mutex waiters_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<std::string, std::set<Waiter*>> node_waiters_
      ABSL_GUARDED_BY(waiters_mu_);
  std::map<std::string, std::set<Waiter*>> task_waiters_
      ABSL_GUARDED_BY(waiters_mu_);

  mutable absl::Mutex mu_;
  // Nodes whose queue and tasks whose state changed, not yet woken.
  std::set<std::string> changed_nodes_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> changed_tasks_ ABSL_GUARDED_BY(mu_);
  bool wake_everyone_ ABSL_GUARDED_BY(mu_) = false;
  TaskFinishedCallback on_finished_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> finished_order_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::deque<std::string>> queues_ ABSL_GUARDED_BY(mu_);
  // Sum of the tasks' report_bytes.
  size_t held_report_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The keys and values of the unfinished tasks (leader memory only).
  RendezvousStore rendezvous_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = true;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  // The task queue on a store: the writer (null: memory only) and the writes
  // not flushed yet (task id -> record or deletion, the newest per id).
  TaskRecordWriter task_writer_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::optional<std::string>> task_writes_
      ABSL_GUARDED_BY(mu_);
  int64_t task_write_errors_ ABSL_GUARDED_BY(mu_) = 0;
  // Where Describe reads while this replica does not lead (null: nowhere).
  TaskRecordReader task_reader_ ABSL_GUARDED_BY(mu_);
};

}  // namespace monta::coordination

#endif  // MONTA_SERVER_BENCH_COORDINATOR_H_
