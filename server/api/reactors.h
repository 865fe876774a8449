// gRPC callback-API reactors for the calls that wait: a WatchTasks stream and
// a unary call that waits for one benchmark task (RendezvousGet, RunBenchmark
// with wait). None holds a thread while it waits: the coordinator wakes them
// (per node, per task, see coordination::Waiter), a grpc::Alarm ends a wait at
// its deadline, and a cancelled call gives its waiter registration back at
// once.
#ifndef MONTA_SERVER_API_REACTORS_H_
#define MONTA_SERVER_API_REACTORS_H_

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "server/bench/coordinator.h"
#include "server/registry/registry.h"

namespace monta::api {

// The default unary reactor of `context`, finished with `status`.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const grpc::Status& status);

// A server stream that ends at once with `status` (e.g. a refused watch).
template <typename Response>
class FinishedWriteReactor : public grpc::ServerWriteReactor<Response> {
 public:
  explicit FinishedWriteReactor(const grpc::Status& status) {
    this->Finish(status);
  }
  void OnDone() override { delete this; }
};

class WatchTasksReactor;

// The open WatchTasks streams, so that a sweep can end those whose lease
// expired, and a node has one stream at a time.
class WatchList {
 public:
  // Adds `reactor` and ends (ABORTED, "superseded by a newer WatchTasks
  // stream ...") every older stream of its node: only the newest would get
  // its tasks.
  void Add(WatchTasksReactor* reactor) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(WatchTasksReactor* reactor) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends (FAILED_PRECONDITION) each stream whose node's instance no longer
  // holds a live lease at `now`.
  void ExpireLeases(const registry::Registry& registry, Instant now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends each stream for which `why` returns a status, with that status
  // (`why` runs under the list's lock and must not add or remove streams).
  void EndIf(const std::function<std::optional<grpc::Status>(
                 const WatchTasksReactor&)>& why) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  // By node: Add and Remove touch that node's streams only (one, or an older
  // one ending), whatever the number of agents watching.
  std::map<std::string, std::set<WatchTasksReactor*>, std::less<>> by_node_
      ABSL_GUARDED_BY(mu_);
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

// One agent's WatchTasks stream: writes each task queued for its node, one at
// a time, woken by the coordinator when that node's queue changes. A failed
// write fails the node's tasks ("dropped its task stream"). Deletes itself
// when the call is done.
class WatchTasksReactor
    : public grpc::ServerWriteReactor<monta::v1::BenchmarkTask>,
      public coordination::Waiter {
 public:
  // Registers the stream (with `coordinator` and `watches`, neither owned)
  // and writes any task already queued.
  // `context` is the call's (alive until OnDone).
  static WatchTasksReactor* Start(coordination::Coordinator* coordinator,
                                  WatchList* watches,
                                  grpc::CallbackServerContext* context,
                                  std::string node_name,
                                  std::string instance_id);

  // The call's context, e.g. to authorize the caller again; valid while the
  // reactor is in its WatchList.
  const grpc::CallbackServerContext& context() const { return *context_; }
  const std::string& node_name() const { return node_name_; }
  const std::string& instance_id() const { return instance_id_; }

  // Ends the stream with `status` (once; later calls do nothing).
  void End(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  void Wake() override ABSL_LOCKS_EXCLUDED(mu_) { Pump(); }
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  WatchTasksReactor(coordination::Coordinator* coordinator, WatchList* watches,
                    grpc::CallbackServerContext* context, std::string node_name,
                    std::string instance_id);
  // Writes the next queued task unless a write is in flight or the stream
  // ended.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  void EndLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  coordination::Coordinator* const coordinator_;
  WatchList* const watches_;
  grpc::CallbackServerContext* const context_;
  const std::string node_name_;
  const std::string instance_id_;

  absl::Mutex mu_;
  monta::v1::BenchmarkTask task_ ABSL_GUARDED_BY(mu_);  // being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // Finish called or pending
  // End() during a write: Finish once the write completed.
  std::optional<grpc::Status> finish_after_write_ ABSL_GUARDED_BY(mu_);
};

// A unary call that waits for one benchmark task: finishes when `check`
// returns a status (re-checked on every wake-up of the task's waiters), or
// with `timed_out()` once `max_wait` passed. Both fill the call's reply
// themselves and run under the reactor's lock. Deletes itself when the call is
// done and its alarm has fired or been cancelled.
class TaskWaitReactor : public grpc::ServerUnaryReactor,
                        public coordination::Waiter {
 public:
  using Check = std::function<std::optional<grpc::Status>()>;
  using TimedOut = std::function<grpc::Status()>;

  static TaskWaitReactor* Start(coordination::Coordinator* coordinator,
                                std::string task_id, absl::Duration max_wait,
                                Check check, TimedOut timed_out);

  void Wake() override ABSL_LOCKS_EXCLUDED(mu_) { Evaluate(); }
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override;

 private:
  TaskWaitReactor(coordination::Coordinator* coordinator, std::string task_id,
                  Check check, TimedOut timed_out);
  void Evaluate() ABSL_LOCKS_EXCLUDED(mu_);
  void OnAlarm(bool fired) ABSL_LOCKS_EXCLUDED(mu_);
  void Unref();

  coordination::Coordinator* const coordinator_;
  const std::string task_id_;
  const Check check_;
  const TimedOut timed_out_;
  grpc::Alarm alarm_;
  // Held by OnDone and by the alarm's callback.
  std::atomic<int> refs_{2};

  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace monta::api

#endif  // MONTA_SERVER_API_REACTORS_H_
