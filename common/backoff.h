// Capped exponential backoff with "equal jitter", for every retry loop that
// waits between attempts (the agent's registration, heartbeat, task watch and
// report retries; the etcd client's watch and lease keepalive reconnects): the
// wait before retry n (0 for the first) is drawn uniformly from [d/2, d], d =
// min(max, initial * 2^n). Half fixed, so a retry never comes at once; half
// random, so a fleet refused together (a planner restart, a store that fell
// behind) does not come back in lockstep.
#ifndef MONTA_COMMON_BACKOFF_H_
#define MONTA_COMMON_BACKOFF_H_

#include <cstdint>
#include <functional>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace monta {

class Backoff {
 public:
  // A uniform draw in [0, 1); tests inject their own.
  using Uniform = std::function<double()>;

  // `initial` > 0 and `max` >= `initial` are expected (a wait is never
  // below zero nor above `max`). Null `uniform`: a generator of this
  // object's own, seeded from std::random_device.
  Backoff(absl::Duration initial, absl::Duration max,
          Uniform uniform = nullptr);
  Backoff(const Backoff&) = delete;
  Backoff& operator=(const Backoff&) = delete;

  // The wait before retry `attempt` (0: the first; negative counts as 0),
  // with d capped at `cap` too when that is lower than max (the agent's
  // heartbeat interval). Thread-safe; does not count an attempt.
  absl::Duration Delay(int attempt,
                       absl::Duration cap = absl::InfiniteDuration())
      ABSL_LOCKS_EXCLUDED(mu_);

  // For a loop that keeps no count of its own: Delay(attempts()), then one
  // attempt more.
  absl::Duration Next() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts over: the next Next() is Delay(0) (after a success).
  void Reset() ABSL_LOCKS_EXCLUDED(mu_);
  // Next() calls since construction or the last Reset().
  int attempts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Duration DelayLocked(int attempt, absl::Duration cap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration initial_;
  const absl::Duration max_;
  const Uniform uniform_;
  mutable absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace monta

#endif  // MONTA_COMMON_BACKOFF_H_
