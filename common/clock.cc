#include "common/clock.h"

namespace monta {
namespace {

// std::condition_variable_any needs lock()/unlock(); absl::Mutex spells them
// Lock()/Unlock(). The caller holds the mutex around the wait, as the analysis
// sees it; inside, the condition variable releases and retakes it.
class AbslLockable {
 public:
  explicit AbslLockable(absl::Mutex& mu) : mu_(mu) {}
  void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.Lock(); }
  void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.Unlock(); }

 private:
  absl::Mutex& mu_;
};

}  // namespace

Instant Instant::Now() {
  return Instant{absl::Now(), std::chrono::steady_clock::now()};
}

absl::Duration MonoSince(MonoTime earlier, MonoTime later) {
  return absl::FromChrono(later - earlier);
}

MonoTime MonoAfter(MonoTime start, absl::Duration d) {
  if (d == absl::InfiniteDuration()) return MonoTime::max();
  return start + std::chrono::duration_cast<MonoTime::duration>(
                     absl::ToChronoNanoseconds(d));
}

std::chrono::system_clock::time_point GrpcDeadline(absl::Duration remaining) {
  // system_clock::now(), not absl::Now(): gRPC converts the point back with
  // the system clock, and absl::Now() may lag a step by its calibration
  // interval.
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             absl::ToChronoNanoseconds(remaining));
}

bool WaitUntil(absl::Mutex& mu, std::condition_variable_any& cv,
               MonoTime deadline) {
  AbslLockable lockable(mu);
  if (deadline ==
      MonoTime::max()) {  // no deadline: the clockwait would overflow
    cv.wait(lockable);
    return false;
  }
  return cv.wait_until(lockable, deadline) == std::cv_status::timeout;
}

void MonoNotification::Notify() {
  {
    absl::MutexLock lock(&mu_);
    notified_ = true;
  }
  cv_.notify_all();
}

bool MonoNotification::HasBeenNotified() const {
  absl::MutexLock lock(&mu_);
  return notified_;
}

bool MonoNotification::WaitForNotificationWithTimeout(
    absl::Duration timeout) const {
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), timeout);
  absl::MutexLock lock(&mu_);
  while (!notified_) {
    if (WaitUntil(mu_, cv_, deadline)) return notified_;
  }
  return true;
}

}  // namespace monta
