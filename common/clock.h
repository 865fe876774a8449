// Two clocks, one job each. Wall time (absl::Time) is for display and storage
// only: it is what people and other machines read, and NTP or an operator may
// step it. Every decision (a lease, a deadline, how long to wait) is made on
// the monotonic clock (std::chrono::steady_clock), which never steps, so a
// stepped wall clock neither kills a live node nor keeps a dead one alive.
#ifndef MONTA_COMMON_CLOCK_H_
#define MONTA_COMMON_CLOCK_H_

#include <chrono>
#include <condition_variable>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace monta {

using MonoTime = std::chrono::steady_clock::time_point;

// One reading of both clocks. Code that decides takes `mono`; `wall` only goes
// into replies, logs and the database. Tests build them by hand to step one
// clock without the other.
struct Instant {
  absl::Time wall;
  MonoTime mono;

  // Both system clocks, read now.
  static Instant Now();
};

// `later - earlier` on the monotonic clock.
absl::Duration MonoSince(MonoTime earlier, MonoTime later);
MonoTime MonoAfter(MonoTime start, absl::Duration d);

// The deadline gRPC wants (a std::chrono::system_clock point) for a call that
// may take `remaining`: converted from the remaining duration at call time, so
// a wall clock step before the call does not move it.
std::chrono::system_clock::time_point GrpcDeadline(absl::Duration remaining);

// Waits on `cv` with `mu` held until notified or `deadline` on the monotonic
// clock; true when the deadline passed. absl::CondVar's timed waits are
// absolute CLOCK_REALTIME futex waits: a wall clock step back would stretch
// them by the step, so shared state guarded by an absl::Mutex waits here.
bool WaitUntil(absl::Mutex& mu, std::condition_variable_any& cv,
               MonoTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// absl::Notification with timed waits on the monotonic clock (see WaitUntil).
class MonoNotification {
 public:
  void Notify();
  bool HasBeenNotified() const;
  // Waits up to `timeout` (monotonic); true when notified.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  mutable std::condition_variable_any cv_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace monta

#endif  // MONTA_COMMON_CLOCK_H_
