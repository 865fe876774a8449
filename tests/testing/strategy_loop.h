// A client of every planner replica for multi-process tests and perf/ha_bench:
// GetStrategy in a loop on its own thread, each call trying the replicas in
// turn from the one that answered last and moving on at UNAVAILABLE (a
// replica down, or not readable). A call fails when every replica refused it
// (or one refused it otherwise). Counts and each call's latency (all tries
// together) are read after Stop.
#ifndef MONTA_TESTS_TESTING_STRATEGY_LOOP_H_
#define MONTA_TESTS_TESTING_STRATEGY_LOOP_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "proto/monta/v1/strategy.pb.h"

namespace monta::testing {

class StrategyLoop {
 public:
  // kPauseBetween: the loop waits `pause` after each call; kStartEvery: a
  // call starts every `pause` (a fixed rate; at once when the last one took
  // longer).
  enum class Pace { kPauseBetween, kStartEvery };
  // `call(i, reply)` asks replica i (0 <= i < replicas).
  StrategyLoop(
      std::function<grpc::Status(size_t, monta::v1::StrategyReply*)> call,
      size_t replicas, absl::Duration pause = absl::Milliseconds(20),
      Pace pace = Pace::kPauseBetween);
  ~StrategyLoop() { Stop(); }
  StrategyLoop(const StrategyLoop&) = delete;
  StrategyLoop& operator=(const StrategyLoop&) = delete;

  void Stop();

  // Valid after Stop.
  int calls() const { return calls_; }
  int failed() const { return failed_; }
  int moved() const { return moved_; }
  double max_seconds() const { return max_seconds_; }
  // The q-quantile (0..1) of the calls' latencies in seconds; 0 without calls.
  double QuantileSeconds(double q) const;
  std::string last_error() const { return last_error_; }

 private:
  void Run();

  const std::function<grpc::Status(size_t, monta::v1::StrategyReply*)> call_;
  const size_t replicas_;
  const absl::Duration pause_;
  const Pace pace_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // The loop's thread's until Stop joined it.
  int calls_ = 0;
  int failed_ = 0;
  int moved_ = 0;
  double max_seconds_ = 0;
  std::vector<double> seconds_;
  std::string last_error_;
};

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_STRATEGY_LOOP_H_
