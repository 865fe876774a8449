#include "server/api/reactors.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace monta::api {

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// ---------------------------------------------------------------- WatchList

void WatchList::Add(WatchTasksReactor* reactor) {
  absl::MutexLock lock(&mu_);
  // One stream per node gets its tasks: the newest. An older one would stay
  // open and silently get nothing, so it ends, saying why (its agent may have
  // reconnected without noticing the old stream was still open).
  std::set<WatchTasksReactor*>& of_node = by_node_[reactor->node_name()];
  for (WatchTasksReactor* older : of_node) {
    older->End(grpc::Status(
        grpc::StatusCode::ABORTED,
        older->instance_id() == reactor->instance_id()
            ? "superseded by a newer WatchTasks stream of this instance"
            : "superseded by a newer WatchTasks stream of this node (another "
              "agent instance)"));
  }
  if (of_node.insert(reactor).second) ++size_;
}

void WatchList::Remove(WatchTasksReactor* reactor) {
  absl::MutexLock lock(&mu_);
  auto of_node = by_node_.find(reactor->node_name());
  if (of_node == by_node_.end()) return;
  if (of_node->second.erase(reactor) != 0) --size_;
  if (of_node->second.empty()) by_node_.erase(of_node);
}

void WatchList::ExpireLeases(const registry::Registry& registry, Instant now) {
  // Held throughout: a reactor leaves the list (in OnDone) before it is
  // deleted, so every pointer here is alive.
  absl::MutexLock lock(&mu_);
  for (const auto& [node, reactors] : by_node_) {
    for (WatchTasksReactor* reactor : reactors) {
      if (!registry.IsAlive(node, reactor->instance_id(), now)) {
        reactor->End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                  "lease expired; register again"));
      }
    }
  }
}

void WatchList::EndIf(
    const std::function<std::optional<grpc::Status>(const WatchTasksReactor&)>&
        why) {
  // Held throughout, as in ExpireLeases.
  absl::MutexLock lock(&mu_);
  for (const auto& [node, reactors] : by_node_) {
    for (WatchTasksReactor* reactor : reactors) {
      if (std::optional<grpc::Status> status = why(*reactor)) {
        reactor->End(*status);
      }
    }
  }
}

size_t WatchList::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

// -------------------------------------------------------- WatchTasksReactor

WatchTasksReactor::WatchTasksReactor(coordination::Coordinator* coordinator,
                                     WatchList* watches,
                                     grpc::CallbackServerContext* context,
                                     std::string node_name,
                                     std::string instance_id)
    : coordinator_(coordinator),
      watches_(watches),
      context_(context),
      node_name_(std::move(node_name)),
      instance_id_(std::move(instance_id)) {}

WatchTasksReactor* WatchTasksReactor::Start(
    coordination::Coordinator* coordinator, WatchList* watches,
    grpc::CallbackServerContext* context, std::string node_name,
    std::string instance_id) {
  auto* reactor =
      new WatchTasksReactor(coordinator, watches, context, std::move(node_name),
                            std::move(instance_id));
  // Registered before the first look at the queue, so no task is missed.
  // OnDone (which unregisters) runs only after the handler returned.
  coordinator->AddNodeWaiter(reactor->node_name_, reactor);
  watches->Add(reactor);
  reactor->Pump();
  return reactor;
}

void WatchTasksReactor::Pump() {
  absl::MutexLock lock(&mu_);
  if (ended_ || writing_) return;
  if (coordinator_->ShuttingDown()) {
    EndLocked(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "planner shutting down"));
    return;
  }
  std::optional<monta::v1::BenchmarkTask> next =
      coordinator_->TryNextTask(node_name_);
  if (!next.has_value()) return;
  task_ = *std::move(next);
  writing_ = true;
  StartWrite(&task_);
}

void WatchTasksReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (finish_after_write_.has_value()) {
      Finish(*finish_after_write_);
      finish_after_write_.reset();
    }
  }
  if (!ok) {
    // The task just taken never reached the agent: it cannot run.
    coordinator_->FailTasksOfNode(node_name_, "dropped its task stream",
                                  Instant::Now());
    End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "task stream closed"));
    return;
  }
  // The task reached the agent: its RUNNING record (queued by TryNextTask,
  // which Pump may run under the coordinator's waiters' lock) is written here,
  // on a thread that holds none.
  coordinator_->FlushTaskWrites();
  Pump();  // does nothing once the stream ended
}

void WatchTasksReactor::End(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  EndLocked(status);
}

void WatchTasksReactor::EndLocked(const grpc::Status& status) {
  if (ended_) return;
  ended_ = true;
  if (writing_) {
    finish_after_write_ = status;
  } else {
    Finish(status);
  }
}

void WatchTasksReactor::OnCancel() {
  End(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
}

void WatchTasksReactor::OnDone() {
  // After these return nothing refers to this reactor any more.
  coordinator_->RemoveNodeWaiter(node_name_, this);
  watches_->Remove(this);
  delete this;
}

// ---------------------------------------------------------- TaskWaitReactor

TaskWaitReactor::TaskWaitReactor(coordination::Coordinator* coordinator,
                                 std::string task_id, Check check,
                                 TimedOut timed_out)
    : coordinator_(coordinator),
      task_id_(std::move(task_id)),
      check_(std::move(check)),
      timed_out_(std::move(timed_out)) {}

TaskWaitReactor* TaskWaitReactor::Start(coordination::Coordinator* coordinator,
                                        std::string task_id,
                                        absl::Duration max_wait, Check check,
                                        TimedOut timed_out) {
  auto* reactor = new TaskWaitReactor(coordinator, std::move(task_id),
                                      std::move(check), std::move(timed_out));
  // OnDone (which unregisters and cancels the alarm) runs only after the
  // handler returned, so this order is safe even when the alarm fires at once.
  coordinator->AddTaskWaiter(reactor->task_id_, reactor);
  // The alarm wants a system_clock point: derived from the time left, so a
  // wall clock step before this line does not stretch or cut the wait.
  reactor->alarm_.Set(GrpcDeadline(max_wait),
                      [reactor](bool fired) { reactor->OnAlarm(fired); });
  reactor->Evaluate();
  return reactor;
}

void TaskWaitReactor::Evaluate() {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  std::optional<grpc::Status> done = check_();
  if (!done.has_value()) return;
  ended_ = true;
  Finish(*done);
}

void TaskWaitReactor::OnAlarm(bool fired) {
  if (fired) {
    Evaluate();  // a change that raced with the deadline still counts
    absl::MutexLock lock(&mu_);
    if (!ended_) {
      ended_ = true;
      Finish(timed_out_());
    }
  }
  Unref();
}

void TaskWaitReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  Finish(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"));
}

void TaskWaitReactor::OnDone() {
  // The waiter registration goes now, not at the deadline; the alarm's
  // callback (run with fired=false on Cancel) drops the last reference.
  coordinator_->RemoveTaskWaiter(task_id_, this);
  alarm_.Cancel();
  Unref();
}

void TaskWaitReactor::Unref() {
  if (refs_.fetch_sub(1) == 1) delete this;
}

}  // namespace monta::api
