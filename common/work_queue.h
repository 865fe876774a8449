// A few threads of its own running jobs handed to them, oldest first, with a
// bound on the jobs waiting: work that may block (a store read, a store
// write) off threads that must not block (gRPC's callback threads, the
// registry's delivery thread).
#ifndef MONTA_COMMON_WORK_QUEUE_H_
#define MONTA_COMMON_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace monta {

struct WorkQueueOptions {
  // What the jobs are, for a refusal: "GetBenchmarkTask store reads".
  std::string name;
  // Threads running jobs (at least 1).
  int threads = 1;
  // Jobs waiting for a thread at most (running ones not counted); Submit
  // refuses one more. 0: no bound.
  int max_queued = 64;
};

// Thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options);
  // Runs every job still queued, then joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job` for the next free thread. RESOURCE_EXHAUSTED (naming the
  // queue and its bound; `job` is not run) when max_queued jobs wait already.
  absl::Status Submit(std::function<void()> job) ABSL_LOCKS_EXCLUDED(mu_);

  // Jobs waiting for a thread now.
  int queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  bool Due() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !jobs_.empty();
  }

  const WorkQueueOptions options_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace monta

#endif  // MONTA_COMMON_WORK_QUEUE_H_
