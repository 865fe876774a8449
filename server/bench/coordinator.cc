#include "server/bench/coordinator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/status_proto.h"
#include "google/protobuf/util/time_util.h"
#include "server/bench/task_record.h"

namespace monta::coordination {
namespace {

// The value stored under `task_id` in `tasks` (const or not), or NOT_FOUND
// naming it.
template <typename Map>
auto FindIn(Map& tasks, const std::string& task_id)
    -> absl::StatusOr<decltype(&tasks.begin()->second)> {
  auto it = tasks.find(task_id);
  if (it == tasks.end()) {
    return absl::NotFoundError(
        absl::StrCat("task_id: unknown task ", EchoInput(task_id)));
  }
  return &it->second;
}

using google::protobuf::util::TimeUtil;
using monta::v1::BenchmarkTaskStatus;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

bool IsFinished(const BenchmarkTaskStatus& s) {
  return s.state() == monta::v1::TASK_STATE_SUCCEEDED ||
         s.state() == monta::v1::TASK_STATE_FAILED;
}

constexpr uint64_t kMaxBenchBytes = uint64_t{8} << 30;
// Job-shaped dispatches in one verify task (the proto's bound).
constexpr size_t kMaxDispatchesPerTask = 64;

}  // namespace

std::string Coordinator::JoinKey(int rank) {
  return absl::StrCat("join/", rank);
}

namespace {

RendezvousLimits LimitsOf(const CoordinatorOptions& options) {
  RendezvousLimits limits;
  limits.max_keys_per_task = options.max_rendezvous_keys_per_task;
  limits.max_value_bytes = options.max_rendezvous_value_bytes;
  limits.max_bytes_per_task = options.max_rendezvous_bytes_per_task;
  limits.max_bytes = options.max_rendezvous_bytes;
  limits.max_bytes_per_node = options.max_rendezvous_bytes_per_node;
  return limits;
}

}  // namespace

Coordinator::Coordinator(registry::Registry* registry,
                         CoordinatorOptions options)
    : registry_(registry), options_(options), rendezvous_(LimitsOf(options)) {}

class Coordinator::WakeOnExit {
 public:
  // `flush`: the method may have queued task record writes.
  explicit WakeOnExit(Coordinator* coordinator, bool flush = true)
      : coordinator_(coordinator), flush_(flush) {}
  ~WakeOnExit() {
    if (flush_) coordinator_->FlushTaskWrites();
    coordinator_->DeliverWakes();
  }

 private:
  Coordinator* const coordinator_;
  const bool flush_;
};

void Coordinator::SetTaskFinishedCallback(TaskFinishedCallback callback) {
  absl::MutexLock lock(&mu_);
  on_finished_ = std::move(callback);
}

namespace {

// A benchmark request checked against the limits and the registry, with the
// defaults filled in.
struct SweepPlan {
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;
  int min_gpus = -1;  // fewest GPUs on any of the nodes
  int ranks_per_node = 0;
};

// Rank, timeout and byte-range limits; fills the byte range of `plan`.
absl::Status CheckLimits(const monta::v1::RunBenchmarkRequest& request,
                         const CoordinatorOptions& options, SweepPlan* plan) {
  if (request.ranks_per_node() < 0 || request.ranks_per_node() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks_per_node: expected 0 (default) or 1..64, got ",
                     request.ranks_per_node()));
  }
  if (request.timeout_seconds() < 0 || request.timeout_seconds() > 3600) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeout_seconds: expected 0 (default) or up to 3600, got ",
        request.timeout_seconds()));
  }
  const uint64_t min_bytes = request.min_bytes() == 0
                                 ? options.default_min_bytes
                                 : request.min_bytes();
  const uint64_t max_bytes =
      request.max_bytes() == 0 ? std::max(options.default_max_bytes, min_bytes)
                               : request.max_bytes();
  if (min_bytes > max_bytes || max_bytes > kMaxBenchBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_bytes/max_bytes: expected min <= max <= ", kMaxBenchBytes,
        ", got ", min_bytes, " and ", max_bytes));
  }
  plan->min_bytes = min_bytes;
  plan->max_bytes = max_bytes;
  return absl::OkStatus();
}

// Every node listed once, known and alive; returns the fewest GPUs on any.
absl::StatusOr<int> MinGpusOfAliveNodes(
    registry::Registry* registry, const monta::v1::RunBenchmarkRequest& request,
    Instant now) {
  std::set<std::string> seen;
  int min_gpus = -1;
  for (const std::string& node : request.nodes()) {
    if (!seen.insert(node).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("nodes: ", EchoInput(node), " listed twice"));
    }
    absl::StatusOr<monta::v1::NodeInfo> info = registry->Get(node, now);
    if (!info.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("nodes: ", info.status().message()));
    }
    if (info->state() != monta::v1::NODE_STATE_ALIVE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nodes: \"", node, "\" is ", registry::NodeStateName(info->state()),
          "; only alive nodes can be measured"));
    }
    const int gpus = info->topology().gpus_size();
    min_gpus = min_gpus < 0 ? gpus : std::min(min_gpus, gpus);
  }
  return min_gpus;
}

absl::StatusOr<SweepPlan> PlanSweep(
    registry::Registry* registry, const monta::v1::RunBenchmarkRequest& request,
    const CoordinatorOptions& options, Instant now) {
  if (request.nodes().empty()) {
    return absl::InvalidArgumentError("nodes: expected at least one node name");
  }
  if (request.nodes_size() > kMaxBenchmarkNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: at most ", kMaxBenchmarkNodes, " nodes, got ",
                     request.nodes_size()));
  }
  SweepPlan plan;
  if (absl::Status s = CheckLimits(request, options, &plan); !s.ok()) return s;
  absl::StatusOr<int> min_gpus = MinGpusOfAliveNodes(registry, request, now);
  if (!min_gpus.ok()) return min_gpus.status();
  plan.min_gpus = *min_gpus;
  plan.ranks_per_node = request.ranks_per_node();
  if (plan.ranks_per_node == 0) {
    plan.ranks_per_node =
        plan.min_gpus > 0 ? plan.min_gpus : options.default_cpu_ranks_per_node;
  }
  if (request.nodes_size() * plan.ranks_per_node < 2) {
    return absl::InvalidArgumentError(
        "ranks_per_node: a benchmark needs at least 2 ranks in all");
  }
  return plan;
}

absl::Duration TimeoutOf(const monta::v1::RunBenchmarkRequest& request,
                         const CoordinatorOptions& options) {
  return request.timeout_seconds() > 0
             ? absl::Seconds(request.timeout_seconds())
             : options.default_timeout;
}

// The task the agents run, without its id and deadline.
void FillSpec(const monta::v1::RunBenchmarkRequest& request,
              const SweepPlan& plan, const CoordinatorOptions& options,
              monta::v1::BenchmarkTask* spec) {
  // Without GPU information the agents fall back to Gloo; an agent with GPUs
  // and NCCL chooses NCCL itself when the backend is unspecified.
  spec->set_backend(plan.min_gpus > 0 ? monta::v1::BACKEND_NCCL
                                      : monta::v1::BACKEND_GLOO);
  spec->set_scope(request.nodes_size() > 1 ? monta::v1::SCOPE_INTER_NODE
                                           : monta::v1::SCOPE_INTRA_NODE);
  *spec->mutable_nodes() = request.nodes();
  spec->set_ranks_per_node(plan.ranks_per_node);
  spec->add_collectives(monta::v1::COLLECTIVE_ALLTOALL);
  if (request.nodes_size() == 1) {
    spec->add_collectives(monta::v1::COLLECTIVE_ALLGATHER);
    spec->add_collectives(monta::v1::COLLECTIVE_COPY);
  }
  spec->set_min_bytes(plan.min_bytes);
  spec->set_max_bytes(plan.max_bytes);
  spec->set_step_factor(options.step_factor);
  spec->set_warmup_iterations(options.warmup_iterations);
  spec->set_iterations(options.iterations);
}

}  // namespace

absl::StatusOr<BenchmarkTaskStatus> Coordinator::Schedule(
    const monta::v1::RunBenchmarkRequest& request, Instant now) {
  absl::StatusOr<SweepPlan> plan = PlanSweep(registry_, request, options_, now);
  if (!plan.ok()) return plan.status();
  monta::v1::BenchmarkTask spec;
  FillSpec(request, *plan, options_, &spec);
  return Enqueue(std::move(spec), TimeoutOf(request, options_), now);
}

absl::StatusOr<BenchmarkTaskStatus> Coordinator::ScheduleDispatches(
    const monta::v1::RunBenchmarkRequest& request,
    const std::vector<monta::v1::DispatchWorkload>& dispatches, int iterations,
    int warmup_iterations, Instant now, DispatchResultsCallback on_results) {
  if (dispatches.empty() || dispatches.size() > kMaxDispatchesPerTask) {
    return absl::InvalidArgumentError(
        absl::StrCat("dispatches: expected 1..", kMaxDispatchesPerTask,
                     ", got ", dispatches.size()));
  }
  absl::StatusOr<SweepPlan> plan = PlanSweep(registry_, request, options_, now);
  if (!plan.ok()) return plan.status();
  monta::v1::BenchmarkTask spec;
  FillSpec(request, *plan, options_, &spec);
  spec.clear_collectives();
  for (const auto& d : dispatches) *spec.add_dispatches() = d;
  spec.set_iterations(std::clamp(iterations, 1, 100));
  spec.set_warmup_iterations(std::clamp(warmup_iterations, 0, 100));
  return Enqueue(std::move(spec), TimeoutOf(request, options_), now,
                 std::move(on_results));
}

absl::StatusOr<BenchmarkTaskStatus> Coordinator::Enqueue(
    monta::v1::BenchmarkTask spec, absl::Duration timeout, Instant now,
    DispatchResultsCallback on_results) {
  if (options_.fabric_span) {
    *spec.mutable_fabric() = options_.fabric_span(
        std::vector<std::string>(spec.nodes().begin(), spec.nodes().end()));
  }
  WakeOnExit wake(this);
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("planner is shutting down");
  if (!leading_) return NotLeadingLocked();
  if (absl::Status s = CheckPendingBounds(spec.nodes()); !s.ok()) return s;
  spec.set_leader_epoch(epoch_);
  // The whole timeout (TryNextTask hands out the time left): a leader that
  // hands the task out again starts it afresh.
  spec.set_timeout_seconds(absl::ToDoubleSeconds(timeout));
  Task task;
  const std::string id = NewTaskIdLocked(now);
  spec.set_task_id(id);
  task.spec = std::move(spec);
  task.deadline = MonoAfter(now.mono, timeout);
  *task.spec.mutable_deadline() = ToProto(now.wall + timeout);
  task.status.set_task_id(id);
  task.status.set_state(monta::v1::TASK_STATE_PENDING);
  *task.status.mutable_nodes() = task.spec.nodes();
  if (task.spec.has_fabric()) {
    *task.status.mutable_fabric() = task.spec.fabric();
  }
  *task.status.mutable_created_at() = ToProto(now.wall);
  task.on_results = std::move(on_results);
  task.stored = task.on_results == nullptr;
  for (const std::string& node : task.spec.nodes()) {
    queues_[node].push_back(id);
    changed_nodes_.insert(node);
  }
  BenchmarkTaskStatus status = task.status;
  PersistLocked(task);
  tasks_.emplace(id, std::move(task));
  return status;
}

std::string Coordinator::NewTaskIdLocked(Instant now) {
  std::string id;
  do {
    id = absl::StrCat("bench-", absl::ToUnixMillis(now.wall), "-", next_id_++);
  } while (tasks_.count(id) > 0);
  return id;
}

void Coordinator::PersistLocked(const Task& task, bool erase) {
  if (!task.stored || task_writer_ == nullptr) return;
  if (erase) {
    task_writes_[task.spec.task_id()] = std::nullopt;
    return;
  }
  TaskRecord record;
  record.spec = task.spec;
  record.status = task.status;
  record.attempts = task.attempts;
  task_writes_[task.spec.task_id()] = EncodeTaskRecord(record);
}

void Coordinator::FlushTaskWrites() {
  absl::MutexLock flush(&flush_mu_);
  std::map<std::string, std::optional<std::string>> writes;
  TaskRecordWriter writer;
  {
    absl::MutexLock lock(&mu_);
    writes.swap(task_writes_);
    writer = task_writer_;
  }
  if (writes.empty() || writer == nullptr) return;
  if (absl::Status written = writer(writes); !written.ok()) {
    std::cerr << "monta-planner: " << writes.size()
              << " benchmark task record(s) not written (the tasks run from "
                 "memory; a new leader would not know them): "
              << written << std::endl;
    absl::MutexLock lock(&mu_);
    ++task_write_errors_;
  }
}

int64_t Coordinator::task_write_errors() const {
  absl::ReaderMutexLock lock(&mu_);
  return task_write_errors_;
}

size_t Coordinator::held_report_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return held_report_bytes_;
}

namespace {

// The blocking calls' waiter: a flag the caller's thread waits on, through
// WaitUntil (common/clock.h), not absl's Mutex::AwaitWithDeadline: its timed
// waits follow the wall clock.
class BlockingWaiter : public Waiter {
 public:
  void Wake() override {
    {
      absl::MutexLock lock(&mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }
  // True when woken before `deadline` on the monotonic clock (and resets the
  // flag).
  bool Await(MonoTime deadline) {
    absl::MutexLock lock(&mu_);
    while (!woken_ && !WaitUntil(mu_, cv_, deadline)) {
    }
    const bool woken = woken_;
    woken_ = false;
    return woken;
  }

 private:
  absl::Mutex mu_;
  std::condition_variable_any cv_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

template <typename Ready>
void Coordinator::WaitFor(bool is_node, const std::string& key,
                          absl::Duration max_wait, Ready ready) {
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), max_wait);
  BlockingWaiter waiter;
  if (is_node) {
    AddNodeWaiter(key, &waiter);
  } else {
    AddTaskWaiter(key, &waiter);
  }
  while (!ready() && waiter.Await(deadline)) {
  }
  if (is_node) {
    RemoveNodeWaiter(key, &waiter);
  } else {
    RemoveTaskWaiter(key, &waiter);
  }
}

std::optional<monta::v1::BenchmarkTask> Coordinator::NextTask(
    const std::string& node_name, absl::Duration max_wait) {
  std::optional<monta::v1::BenchmarkTask> task;
  WaitFor(/*is_node=*/true, node_name, max_wait, [&] {
    task = TryNextTask(node_name);
    return task.has_value() || ShuttingDown();
  });
  FlushTaskWrites();  // TryNextTask's RUNNING record
  return task;
}

std::optional<monta::v1::BenchmarkTask> Coordinator::TryNextTask(
    const std::string& node_name) {
  absl::MutexLock lock(&mu_);
  if (shutdown_ || !leading_) return std::nullopt;
  auto queue = queues_.find(node_name);
  if (queue == queues_.end()) return std::nullopt;
  std::optional<monta::v1::BenchmarkTask> next;
  while (!next.has_value() && !queue->second.empty()) {
    const std::string id = queue->second.front();
    queue->second.pop_front();
    auto it = tasks_.find(id);
    if (it == tasks_.end() || IsFinished(it->second.status)) continue;
    if (it->second.status.state() != monta::v1::TASK_STATE_RUNNING) {
      // The first node of this hand-out: a new leader and GetBenchmarkTask
      // see it running once the caller flushes.
      it->second.status.set_state(monta::v1::TASK_STATE_RUNNING);
      *it->second.status.mutable_started_at() = ToProto(absl::Now());
      PersistLocked(it->second);
    }
    it->second.taken_by.insert(node_name);
    next = it->second.spec;
    // The time left, counted down on the agent's own monotonic clock.
    next->set_timeout_seconds(std::max(
        0.0, absl::ToDoubleSeconds(MonoSince(std::chrono::steady_clock::now(),
                                             it->second.deadline))));
  }
  if (queue->second.empty()) queues_.erase(queue);
  return next;
}

void Coordinator::AddNodeWaiter(const std::string& node_name, Waiter* waiter) {
  absl::MutexLock lock(&waiters_mu_);
  node_waiters_[node_name].insert(waiter);
}

void Coordinator::RemoveNodeWaiter(const std::string& node_name,
                                   Waiter* waiter) {
  absl::MutexLock lock(&waiters_mu_);
  auto it = node_waiters_.find(node_name);
  if (it == node_waiters_.end()) return;
  it->second.erase(waiter);
  if (it->second.empty()) node_waiters_.erase(it);
}

void Coordinator::AddTaskWaiter(const std::string& task_id, Waiter* waiter) {
  absl::MutexLock lock(&waiters_mu_);
  task_waiters_[task_id].insert(waiter);
}

void Coordinator::RemoveTaskWaiter(const std::string& task_id, Waiter* waiter) {
  absl::MutexLock lock(&waiters_mu_);
  auto it = task_waiters_.find(task_id);
  if (it == task_waiters_.end()) return;
  it->second.erase(waiter);
  if (it->second.empty()) task_waiters_.erase(it);
}

size_t Coordinator::waiter_count() const {
  absl::MutexLock lock(&waiters_mu_);
  size_t n = 0;
  for (const auto& [node, set] : node_waiters_) n += set.size();
  for (const auto& [task, set] : task_waiters_) n += set.size();
  return n;
}

void Coordinator::DeliverWakes() {
  std::set<std::string> nodes;
  std::set<std::string> tasks;
  bool everyone;
  {
    absl::MutexLock lock(&mu_);
    nodes.swap(changed_nodes_);
    tasks.swap(changed_tasks_);
    everyone = wake_everyone_;
    wake_everyone_ = false;
  }
  if (nodes.empty() && tasks.empty() && !everyone) return;
  // Held while waking, so that a Remove*Waiter returns only after any Wake()
  // of its waiter finished.
  absl::MutexLock lock(&waiters_mu_);
  const auto wake = [everyone](const auto& waiters,
                               const std::set<std::string>& keys) {
    for (const auto& [key, set] : waiters) {
      if (!everyone && keys.count(key) == 0) continue;
      for (Waiter* waiter : set) waiter->Wake();
    }
  };
  wake(node_waiters_, nodes);
  wake(task_waiters_, tasks);
}

absl::Status Coordinator::Set(const monta::v1::RendezvousSetRequest& request,
                              const std::string& setter) {
  WakeOnExit wake(this, /*flush=*/false);
  absl::MutexLock lock(&mu_);
  if (absl::Status s =
          rendezvous_.CheckKeyValue(request.key(), request.value());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<Task*> found = FindTask(request.task_id());
  if (!found.ok()) return found.status();
  Task& task = **found;
  if (IsFinished(task.status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", request.task_id(),
                     " already finished: ", task.status.reason()));
  }
  if (absl::Status s = rendezvous_.Set(request.task_id(), request.key(),
                                       request.value(), setter);
      !s.ok()) {
    return s;
  }
  const std::string prefix = "join/";
  if (request.key().rfind(prefix, 0) == 0) {
    int rank = -1;
    if (absl::SimpleAtoi(request.key().substr(prefix.size()), &rank)) {
      task.joined_ranks.insert(rank);
    }
  }
  changed_tasks_.insert(request.task_id());
  return absl::OkStatus();
}

size_t Coordinator::rendezvous_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return rendezvous_.bytes();
}

size_t Coordinator::rendezvous_bytes_of(const std::string& setter) const {
  absl::ReaderMutexLock lock(&mu_);
  return rendezvous_.bytes_of(setter);
}

absl::StatusOr<absl::Duration> Coordinator::GetWait(
    const monta::v1::RendezvousGetRequest& request) {
  if (request.wait_seconds() < 0 || request.wait_seconds() > 3600) {
    return absl::InvalidArgumentError("wait_seconds: expected 0..3600");
  }
  return absl::Seconds(request.wait_seconds());
}

absl::Status Coordinator::GetTimedOut(
    const monta::v1::RendezvousGetRequest& request) {
  return absl::DeadlineExceededError(
      absl::StrCat("key ", EchoInput(request.key()), " of task ",
                   EchoInput(request.task_id()), " not set within ",
                   request.wait_seconds(), " s"));
}

absl::StatusOr<std::string> Coordinator::Get(
    const monta::v1::RendezvousGetRequest& request) {
  absl::StatusOr<absl::Duration> wait = GetWait(request);
  if (!wait.ok()) return wait.status();
  absl::StatusOr<std::string> result = GetTimedOut(request);
  WaitFor(/*is_node=*/false, request.task_id(), *wait, [&] {
    absl::StatusOr<std::optional<std::string>> now = TryGet(request);
    if (!now.ok()) {
      result = now.status();
      return true;
    }
    if (!now->has_value()) return false;
    result = **std::move(now);
    return true;
  });
  return result;
}

absl::StatusOr<std::optional<std::string>> Coordinator::TryGet(
    const monta::v1::RendezvousGetRequest& request) {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<const Task*> found = FindTask(request.task_id());
  if (!found.ok()) return found.status();
  const Task& task = **found;
  if (task.status.state() == monta::v1::TASK_STATE_FAILED) {
    return absl::AbortedError(absl::StrCat("task ", request.task_id(),
                                           " failed: ", task.status.reason()));
  }
  std::optional<std::string> value =
      rendezvous_.Get(request.task_id(), request.key());
  if (value.has_value()) return value;
  if (shutdown_) return absl::UnavailableError("planner is shutting down");
  return std::optional<std::string>();
}

absl::Status Coordinator::Report(
    const monta::v1::ReportBenchmarkRequest& request, Instant now) {
  // INVALID_ARGUMENT, not RESOURCE_EXHAUSTED: the same report never passes,
  // and the agent sends a report refused RESOURCE_EXHAUSTED (the store
  // behind, below) again until the task's deadline.
  if (request.series_size() > options_.max_curves_per_report) {
    return absl::InvalidArgumentError(absl::StrCat(
        "series: ", request.series_size(), " series, at most ",
        options_.max_curves_per_report, " (--max_curves_per_report)"));
  }
  for (int i = 0; i < request.series_size(); ++i) {
    if (request.series(i).sizes_size() > options_.max_points_per_curve) {
      return absl::InvalidArgumentError(absl::StrCat(
          "series[", i, "].sizes: ", request.series(i).sizes_size(),
          " sizes, at most ", options_.max_points_per_curve,
          " (--max_points_per_curve)"));
    }
  }
  WakeOnExit wake(this);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Task*> found = FindTask(request.task_id());
  if (!found.ok()) return found.status();
  Task& task = **found;
  if (absl::Status s = CheckReporter(task.spec, request); !s.ok()) return s;
  if (task.reported_nodes.count(request.node_name()) > 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "node ", request.node_name(), " already reported for task ",
        task.spec.task_id(), "; a node reports once per task"));
  }
  if (IsFinished(task.status)) {
    task.reported_nodes.insert(request.node_name());
    return absl::OkStatus();  // late report after a failure
  }
  if (const absl::Status outcome = StatusFromProto(request.status());
      !outcome.ok()) {
    // The reporter's error is often a symptom (a peer's connection reset); the
    // ranks that never reported are the likely cause, so name them too.
    task.reported_nodes.insert(request.node_name());
    constexpr size_t kMaxReasonBytes = 1024;
    std::string reason =
        absl::StrCat("node ", request.node_name(), ": ",
                     outcome.message().empty()
                         ? std::string("failed without a reason")
                         : outcome.ToString().substr(0, kMaxReasonBytes));
    if (task.reported_nodes.size() <
        static_cast<size_t>(task.spec.nodes_size())) {
      absl::StrAppend(&reason, "; ", MissingRanks(task));
    }
    Finish(task, monta::v1::TASK_STATE_FAILED, reason, now);
    return absl::OkStatus();
  }
  return Accept(task, request, now);
}

absl::Status Coordinator::Accept(
    Task& task, const monta::v1::ReportBenchmarkRequest& report, Instant now) {
  if (absl::Status valid = ValidateReport(task.spec, report); !valid.ok()) {
    return valid;
  }
  task.reported_nodes.insert(report.node_name());
  const size_t bytes = report.SpaceUsedLong();
  task.reports.emplace(report.node_name(), report);
  task.report_bytes += bytes;
  held_report_bytes_ += bytes;
  if (task.reports.size() < static_cast<size_t>(task.spec.nodes_size())) {
    return absl::OkStatus();
  }
  absl::Status completed = Complete(task, now);
  if (completed.ok()) return completed;
  // The registry's store is too far behind to take the curves: as if this
  // report never came, so the agent's retry completes the task.
  task.reported_nodes.erase(report.node_name());
  task.reports.erase(report.node_name());
  task.report_bytes -= bytes;
  held_report_bytes_ -= bytes;
  return absl::Status(
      completed.code(),
      absl::StrCat(completed.message(), " (the curves of task ",
                   task.spec.task_id(), " were not stored; the task waits for ",
                   "this node's report until its deadline)"));
}

CurveChecks Coordinator::ChecksFor(const monta::v1::BenchmarkTask& spec,
                                   Instant now) const {
  CurveChecks checks;
  checks.agreement_factor = options_.node_agreement_factor;
  checks.agreement_slack_seconds = options_.node_agreement_slack_seconds;
  for (const std::string& node : spec.nodes()) {
    absl::StatusOr<monta::v1::NodeInfo> info = registry_->Get(node, now);
    if (!info.ok()) continue;
    NodeLinks& links = checks.links[node];
    links.nic_bytes_per_second = registry::NicLineRate(info->topology());
    links.loopback = registry::IsLoopbackAddress(info->bench_address());
  }
  return checks;
}

absl::Status Coordinator::Complete(Task& task, Instant now) {
  FormedCurves formed =
      FormCurves(task.spec, task.reports, ChecksFor(task.spec, now), now.wall);
  std::string store_error;
  if (task.on_results) {
    // A job's dispatches are that job's measurements, not node curves.
    task.dispatch_curves = std::move(formed.kept);
  } else {
    std::vector<absl::Status> errors;
    if (absl::Status s =
            registry_->AddCurves(formed.kept, "ReportBenchmark", &errors);
        !s.ok()) {
      return s;  // none added: the last report is refused, to be retried
    }
    if (!errors.empty()) store_error = std::string(errors.back().message());
    for (const auto& excluded : formed.excluded) {
      registry_->AddExcluded(excluded);
    }
  }
  for (auto& excluded : formed.excluded) {
    *task.status.add_excluded() = std::move(excluded);
  }
  if (!store_error.empty()) {
    Finish(task, monta::v1::TASK_STATE_FAILED,
           absl::StrCat("results could not be stored: ", store_error), now);
  } else if (formed.kept.empty() && task.dispatch_curves.empty() &&
             task.status.excluded_size() > 0) {
    Finish(task, monta::v1::TASK_STATE_FAILED,
           absl::StrCat("every curve was excluded; the first: ",
                        task.status.excluded(0).detail()),
           now);
  } else {
    Finish(task, monta::v1::TASK_STATE_SUCCEEDED, "", now);
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchmarkTaskStatus> Coordinator::Status(
    const std::string& task_id) const {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<const Task*> found = FindTask(task_id);
  if (!found.ok()) return found.status();
  return (*found)->status;
}

absl::StatusOr<monta::v1::BenchmarkTask> Coordinator::Spec(
    const std::string& task_id) const {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<const Task*> found = FindTask(task_id);
  if (!found.ok()) return found.status();
  return (*found)->spec;
}

void Coordinator::SetTaskRecordReader(TaskRecordReader reader) {
  absl::MutexLock lock(&mu_);
  task_reader_ = std::move(reader);
}

absl::StatusOr<TaskView> Coordinator::Describe(
    const std::string& task_id) const {
  TaskView view;
  view.max_attempts = options_.max_task_attempts;
  TaskRecordReader reader;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (leading_) {
      absl::StatusOr<const Task*> found = FindTask(task_id);
      if (!found.ok()) return found.status();
      view.spec = (*found)->spec;
      view.status = (*found)->status;
      view.attempts = (*found)->attempts;
      return view;
    }
    if (task_reader_ == nullptr) return NotLeadingLocked();
    reader = task_reader_;
  }
  absl::StatusOr<std::optional<std::string>> data = reader(task_id);
  if (!data.ok()) return data.status();
  if (!data->has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "task_id: unknown task ", EchoInput(task_id),
        " (not on the store; a verify task is known to the leader only)"));
  }
  absl::StatusOr<TaskRecord> record = DecodeTaskRecord(**data);
  if (!record.ok()) return record.status();
  view.spec = std::move(record->spec);
  view.status = std::move(record->status);
  view.attempts = record->attempts;
  view.from_store = true;
  return view;
}

absl::StatusOr<BenchmarkTaskStatus> Coordinator::WaitFinished(
    const std::string& task_id, absl::Duration max_wait) {
  absl::StatusOr<BenchmarkTaskStatus> status;
  WaitFor(/*is_node=*/false, task_id, max_wait, [&] {
    status = Status(task_id);
    return !status.ok() || IsFinished(*status) || ShuttingDown();
  });
  return status;
}

absl::StatusOr<const Coordinator::Task*> Coordinator::FindTask(
    const std::string& task_id) const {
  return FindIn(tasks_, task_id);
}

absl::StatusOr<Coordinator::Task*> Coordinator::FindTask(
    const std::string& task_id) {
  return FindIn(tasks_, task_id);
}

void Coordinator::ExpireOverdue(Instant now) {
  WakeOnExit wake(this);
  absl::MutexLock lock(&mu_);
  for (auto& [id, task] : tasks_) {
    if (IsFinished(task.status) || now.mono < task.deadline) continue;
    Finish(task, monta::v1::TASK_STATE_FAILED,
           absl::StrCat("deadline exceeded; ", MissingRanks(task)), now);
  }
}

void Coordinator::FailTasksOfNode(const std::string& node_name,
                                  const std::string& why, Instant now) {
  WakeOnExit wake(this);
  absl::MutexLock lock(&mu_);
  for (auto& [id, task] : tasks_) {
    if (IsFinished(task.status)) continue;
    // Handed out again by this leader and not taken by this node yet: its
    // agent is still finding this leader (a restored node is stale until it
    // heartbeats here); the task's deadline bounds the wait.
    if (task.attempts > 1 && task.taken_by.count(node_name) == 0) continue;
    const auto& nodes = task.spec.nodes();
    const auto it = std::find(nodes.begin(), nodes.end(), node_name);
    if (it == nodes.end()) continue;
    const int index = static_cast<int>(it - nodes.begin());
    const int rpn = task.spec.ranks_per_node();
    Finish(task, monta::v1::TASK_STATE_FAILED,
           absl::StrCat("node ", node_name, " ", why, ": its rank(s) ",
                        index * rpn, "-", (index + 1) * rpn - 1,
                        " never reported"),
           now);
  }
}

absl::Status Coordinator::CheckPendingBounds(
    const google::protobuf::RepeatedPtrField<std::string>& nodes) const {
  int pending = 0;
  std::map<std::string, int> pending_of_node;
  for (const std::string& node : nodes) pending_of_node[node] = 0;
  for (const auto& [id, task] : tasks_) {
    if (IsFinished(task.status)) continue;
    ++pending;
    for (const std::string& node : task.spec.nodes()) {
      auto it = pending_of_node.find(node);
      if (it != pending_of_node.end()) ++it->second;
    }
  }
  if (pending >= options_.max_pending_tasks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        pending, " benchmark tasks are pending or running, at most ",
        options_.max_pending_tasks, " (--max_pending_tasks)"));
  }
  for (const auto& [node, count] : pending_of_node) {
    if (count >= options_.max_pending_tasks_per_node) {
      return absl::ResourceExhaustedError(
          absl::StrCat("node \"", node, "\" has ", count,
                       " benchmark tasks pending or running, at most ",
                       options_.max_pending_tasks_per_node,
                       " (--max_pending_tasks_per_node)"));
    }
  }
  return absl::OkStatus();
}

bool Coordinator::Busy(const std::string& node_name) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [id, task] : tasks_) {
    if (IsFinished(task.status)) continue;
    const auto& nodes = task.spec.nodes();
    if (std::find(nodes.begin(), nodes.end(), node_name) != nodes.end())
      return true;
  }
  return false;
}

void Coordinator::Shutdown() {
  const Instant now = Instant::Now();
  // Writes nothing (below), and may be called from a failed write's listener.
  WakeOnExit wake(this, /*flush=*/false);
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  wake_everyone_ = true;
  // What the store holds stays unfinished: a restarted planner (or the next
  // leader) decides.
  task_writer_ = nullptr;
  task_writes_.clear();
  for (auto& [id, task] : tasks_) {
    if (!IsFinished(task.status)) {
      Finish(task, monta::v1::TASK_STATE_FAILED, "planner shutting down", now);
    }
  }
}

bool Coordinator::ShuttingDown() const {
  absl::ReaderMutexLock lock(&mu_);
  return shutdown_;
}

void Coordinator::Lead(int64_t epoch) {
  WakeOnExit wake(this);
  absl::MutexLock lock(&mu_);
  leading_ = true;
  epoch_ = epoch;
  wake_everyone_ = true;
}

void Coordinator::Follow(const std::string& why, Instant now) {
  // Writes nothing (below): the store's write listener calls it when a task
  // write was fenced, inside FlushTaskWrites.
  WakeOnExit wake(this, /*flush=*/false);
  absl::MutexLock lock(&mu_);
  leading_ = false;
  wake_everyone_ = true;
  // The tasks failed here stay unfinished on the store, for the next leader
  // (this replica's writes would be fenced anyway).
  task_writer_ = nullptr;
  task_writes_.clear();
  const std::string reason = absl::StrCat("leader changed: ", why);
  for (auto& [id, task] : tasks_) {
    if (!IsFinished(task.status)) {
      Finish(task, monta::v1::TASK_STATE_FAILED, reason, now);
    }
  }
  // The queues name only finished tasks now: a later term starts empty.
  queues_.clear();
}

RestoredTasks Coordinator::Lead(int64_t epoch, TaskRecordWriter writer,
                                const std::vector<std::string>& records,
                                Instant now) {
  RestoredTasks counts;
  std::vector<Task> restored;
  for (const std::string& data : records) {
    absl::StatusOr<TaskRecord> record = DecodeTaskRecord(data);
    if (!record.ok()) {
      std::cerr << "monta-planner: a stored benchmark task is skipped: "
                << record.status() << std::endl;
      ++counts.malformed;
      continue;
    }
    Task task;
    task.spec = std::move(record->spec);
    task.status = std::move(record->status);
    task.attempts = record->attempts;
    task.stored = true;
    restored.push_back(std::move(task));
  }
  // Finished ones in the order they finished (the oldest evicted first).
  std::stable_sort(
      restored.begin(), restored.end(), [](const Task& a, const Task& b) {
        return TimeUtil::TimestampToNanoseconds(a.status.finished_at()) <
               TimeUtil::TimestampToNanoseconds(b.status.finished_at());
      });
  WakeOnExit wake(this);
  absl::MutexLock lock(&mu_);
  leading_ = true;
  epoch_ = epoch;
  wake_everyone_ = true;
  // The store's view replaces this replica's: its own tasks of an earlier
  // term are there too (or were never written).
  for (const auto& [id, task] : tasks_) changed_tasks_.insert(id);
  tasks_.clear();
  finished_order_.clear();
  queues_.clear();
  task_writer_ = std::move(writer);
  task_writes_.clear();
  for (Task& task : restored) RestoreLocked(std::move(task), now, counts);
  return counts;
}

void Coordinator::RestoreLocked(Task task, Instant now, RestoredTasks& counts) {
  const std::string id = task.spec.task_id();
  changed_tasks_.insert(id);
  if (IsFinished(task.status)) {
    ++counts.finished;
    finished_order_.push_back(id);
    tasks_.emplace(id, std::move(task));
    while (finished_order_.size() >
           static_cast<size_t>(std::max(1, options_.max_finished_tasks))) {
      auto evicted = tasks_.find(finished_order_.front());
      if (evicted != tasks_.end()) PersistLocked(evicted->second, true);
      tasks_.erase(finished_order_.front());
      finished_order_.pop_front();
    }
    return;
  }
  const int64_t ran_under = task.spec.leader_epoch();
  Task& t = tasks_.emplace(id, std::move(task)).first->second;
  if (ran_under >= epoch_) {
    ++counts.failed;
    Finish(t, monta::v1::TASK_STATE_FAILED,
           absl::StrCat("planner restarted: the task ran under the previous "
                        "planner process (leader epoch ",
                        ran_under, ") and is not handed out again"),
           now);
    return;
  }
  if (t.attempts >= options_.max_task_attempts) {
    ++counts.failed;
    Finish(t, monta::v1::TASK_STATE_FAILED,
           absl::StrCat("leader changed: handed out ", t.attempts,
                        " times, at most ", options_.max_task_attempts,
                        " (the last under leader epoch ", ran_under, ")"),
           now);
    return;
  }
  ++counts.reissued;
  ++t.attempts;
  t.spec.set_leader_epoch(epoch_);
  const absl::Duration timeout = t.spec.timeout_seconds() > 0
                                     ? absl::Seconds(t.spec.timeout_seconds())
                                     : options_.default_timeout;
  // The old run's agents keep at it until its deadline at most (they talk to
  // the old leader) and take this attempt after: its timeout runs from then
  // at the latest.
  const absl::Duration old_run_left = std::clamp(
      absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t.spec.deadline())) -
          now.wall,
      absl::ZeroDuration(), timeout);
  t.deadline = MonoAfter(now.mono, old_run_left + timeout);
  *t.spec.mutable_deadline() = ToProto(now.wall + old_run_left + timeout);
  t.status.set_state(monta::v1::TASK_STATE_PENDING);
  t.status.clear_started_at();
  t.status.set_reason(absl::StrCat(
      "leader changed: handed out again under leader epoch ", epoch_,
      " (its run under epoch ", ran_under, " did not finish; attempt ",
      t.attempts, " of ", options_.max_task_attempts, ")"));
  for (const std::string& node : t.spec.nodes()) {
    queues_[node].push_back(id);
    changed_nodes_.insert(node);
  }
  PersistLocked(t);
  std::cerr << "monta-planner: task " << id << ": " << t.status.reason()
            << std::endl;
}

void Coordinator::SetLeader(const std::string& leader) {
  absl::MutexLock lock(&mu_);
  leader_ = leader;
}

absl::Status Coordinator::NotLeadingLocked() const {
  return absl::UnavailableError(absl::StrCat(
      "not the leader (leader: ", leader_.empty() ? "unknown" : leader_, ")"));
}

absl::Status Coordinator::CheckLeading() const {
  absl::ReaderMutexLock lock(&mu_);
  if (leading_) return absl::OkStatus();
  return NotLeadingLocked();
}

absl::Status Coordinator::CheckEpoch(int64_t epoch) const {
  absl::ReaderMutexLock lock(&mu_);
  if (epoch == 0 || (leading_ && epoch == epoch_)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "leader changed: the task's leader_epoch is ", epoch,
      ", this planner leads with ", leading_ ? absl::StrCat(epoch_) : "none"));
}

int64_t Coordinator::epoch() const {
  absl::ReaderMutexLock lock(&mu_);
  return epoch_;
}

std::string Coordinator::MissingRanks(const Task& task) const {
  const int rpn = task.spec.ranks_per_node();
  std::vector<std::string> never_joined;
  std::vector<std::string> not_reported;
  for (int n = 0; n < task.spec.nodes_size(); ++n) {
    const std::string& node = task.spec.nodes(n);
    for (int r = n * rpn; r < (n + 1) * rpn; ++r) {
      if (task.joined_ranks.count(r) == 0) {
        never_joined.push_back(absl::StrCat("rank ", r, " (node ", node, ")"));
      }
    }
    if (task.reported_nodes.count(node) == 0) {
      not_reported.push_back(absl::StrCat(
          "rank(s) ", n * rpn, "-", (n + 1) * rpn - 1, " (node ", node, ")"));
    }
  }
  if (!never_joined.empty()) {
    return absl::StrCat("never joined: ", absl::StrJoin(never_joined, ", "));
  }
  return absl::StrCat("no result from ", absl::StrJoin(not_reported, ", "));
}

void Coordinator::Finish(Task& task, monta::v1::TaskState state,
                         const std::string& reason, Instant now) {
  task.status.set_state(state);
  task.status.set_reason(reason);
  *task.status.mutable_finished_at() = ToProto(now.wall);
  rendezvous_.Drop(task.spec.task_id());
  held_report_bytes_ -= task.report_bytes;
  task.report_bytes = 0;
  task.reports.clear();
  if (task.on_results) {
    DispatchResultsCallback on_results = std::move(task.on_results);
    task.on_results = nullptr;
    on_results(task.status, std::move(task.dispatch_curves));
    task.dispatch_curves.clear();
  }
  // A node that never watches keeps no ids of finished tasks queued: its queue
  // stays within --max_pending_tasks_per_node.
  for (const std::string& node : task.spec.nodes()) {
    auto queue = queues_.find(node);
    if (queue == queues_.end()) continue;
    auto& ids = queue->second;
    ids.erase(std::remove(ids.begin(), ids.end(), task.spec.task_id()),
              ids.end());
    if (ids.empty()) queues_.erase(queue);
  }
  changed_tasks_.insert(task.spec.task_id());
  finished_order_.push_back(task.spec.task_id());
  PersistLocked(task);
  if (on_finished_) on_finished_(task.status);
  // Never evicts the task just finished: the caller still holds it.
  while (finished_order_.size() >
         static_cast<size_t>(std::max(1, options_.max_finished_tasks))) {
    changed_tasks_.insert(finished_order_.front());  // now NOT_FOUND
    auto evicted = tasks_.find(finished_order_.front());
    if (evicted != tasks_.end()) PersistLocked(evicted->second, true);
    tasks_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

}  // namespace monta::coordination
