#include "tests/testing/strategy_loop.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace monta::testing {

StrategyLoop::StrategyLoop(
    std::function<grpc::Status(size_t, monta::v1::StrategyReply*)> call,
    size_t replicas, absl::Duration pause, Pace pace)
    : call_(std::move(call)), replicas_(replicas), pause_(pause), pace_(pace) {
  thread_ = std::thread([this] { Run(); });
}

void StrategyLoop::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

double StrategyLoop::QuantileSeconds(double q) const {
  if (seconds_.empty()) return 0;
  std::vector<double> sorted = seconds_;
  std::sort(sorted.begin(), sorted.end());
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  return sorted[i];
}

void StrategyLoop::Run() {
  using Clock = std::chrono::steady_clock;
  const auto pause = std::chrono::duration_cast<Clock::duration>(
      absl::ToChronoNanoseconds(pause_));
  size_t at = 0;
  Clock::time_point next = Clock::now();
  while (!stop_) {
    const Clock::time_point start = Clock::now();
    bool ok = false;
    for (size_t tried = 0; tried < replicas_ && !ok; ++tried) {
      monta::v1::StrategyReply reply;
      const grpc::Status s = call_(at, &reply);
      ok = s.ok();
      if (ok) break;
      last_error_ = s.error_message();
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      at = (at + 1) % replicas_;
      ++moved_;
    }
    ++calls_;
    if (!ok) ++failed_;
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    seconds_.push_back(seconds);
    max_seconds_ = std::max(max_seconds_, seconds);
    if (pace_ == Pace::kPauseBetween) {
      std::this_thread::sleep_for(pause);
      continue;
    }
    next = std::max(next + pause, Clock::now());
    std::this_thread::sleep_until(next);
  }
}

}  // namespace monta::testing
