#include "common/clock.h"

#include <thread>

#include "gtest/gtest.h"

namespace monta {
namespace {

TEST(ClockTest, MonoArithmeticRoundTrips) {
  const MonoTime t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(MonoSince(t0, MonoAfter(t0, absl::Seconds(15))), absl::Seconds(15));
  EXPECT_EQ(MonoSince(MonoAfter(t0, absl::Seconds(15)), t0),
            -absl::Seconds(15));
  EXPECT_EQ(MonoAfter(t0, absl::InfiniteDuration()), MonoTime::max());
}

TEST(ClockTest, GrpcDeadlineIsNowPlusRemainingOnTheSystemClock) {
  const auto before = std::chrono::system_clock::now();
  const auto deadline = GrpcDeadline(absl::Hours(1));
  const auto after = std::chrono::system_clock::now();
  EXPECT_GE(deadline, before + std::chrono::hours(1));
  EXPECT_LE(deadline, after + std::chrono::hours(1));
}

TEST(ClockTest, WaitUntilAPassedDeadlineTimesOut) {
  absl::Mutex mu;
  std::condition_variable_any cv;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(WaitUntil(mu, cv, std::chrono::steady_clock::now()));
}

TEST(ClockTest, WaitUntilWakesOnNotifyAndHoldsTheMutexAgain) {
  absl::Mutex mu;
  std::condition_variable_any cv;
  bool ready = false;
  int waits = 0;
  std::thread setter;
  {
    absl::MutexLock lock(&mu);
    // Started under the lock: the setter can set `ready` only once the wait
    // below has released the mutex, so the wait always happens.
    setter = std::thread([&] {
      absl::MutexLock setter_lock(&mu);
      ready = true;
      cv.notify_all();
    });
    // A deadline no test run reaches: only the notification ends the wait.
    const MonoTime far =
        MonoAfter(std::chrono::steady_clock::now(), absl::Hours(24));
    while (!ready) {
      EXPECT_FALSE(WaitUntil(mu, cv, far));
      ++waits;
    }
    mu.AssertHeld();
  }
  setter.join();
  EXPECT_GE(waits, 1);
}

TEST(ClockTest, MonoNotification) {
  MonoNotification n;
  EXPECT_FALSE(n.HasBeenNotified());
  EXPECT_FALSE(n.WaitForNotificationWithTimeout(absl::ZeroDuration()));
  std::thread notifier([&] { n.Notify(); });
  EXPECT_TRUE(n.WaitForNotificationWithTimeout(absl::InfiniteDuration()));
  notifier.join();
  EXPECT_TRUE(n.HasBeenNotified());
  EXPECT_TRUE(n.WaitForNotificationWithTimeout(absl::ZeroDuration()));
}

}  // namespace
}  // namespace monta
