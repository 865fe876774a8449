#include "common/work_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace monta {

WorkQueue::WorkQueue(WorkQueueOptions options) : options_(std::move(options)) {
  const int threads = std::max(1, options_.threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

absl::Status WorkQueue::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (options_.max_queued > 0 &&
      jobs_.size() >= static_cast<size_t>(options_.max_queued)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(options_.name, ": ", jobs_.size(), " wait for one of ",
                     threads_.size(), " threads (at most ", options_.max_queued,
                     " queued); retry after a backoff"));
  }
  jobs_.push_back(std::move(job));
  return absl::OkStatus();
}

int WorkQueue::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

void WorkQueue::Run() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkQueue::Due));
      // Stopping drains the queue first: a queued job may owe an answer.
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace monta
