#include "common/work_queue.h"

#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace monta {
namespace {

TEST(WorkQueueTest, RunsJobsInOrderOffTheCallersThread) {
  std::vector<int> ran;
  absl::Mutex mu;
  absl::Notification release;
  {
    WorkQueue queue({"jobs", 1, 0});
    // The first job blocks its thread; Submit does not wait for it.
    ASSERT_TRUE(queue.Submit([&] { release.WaitForNotification(); }).ok());
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(queue
                      .Submit([&, i] {
                        absl::MutexLock lock(&mu);
                        ran.push_back(i);
                      })
                      .ok());
    }
    {
      absl::MutexLock lock(&mu);
      EXPECT_TRUE(ran.empty());
    }
    release.Notify();
  }  // the destructor runs what is queued
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
}

TEST(WorkQueueTest, RefusesPastTheBoundNamingItAndRunsNothingRefused) {
  absl::Notification started;
  absl::Notification release;
  int ran = 0;  // only the queue's one thread writes it
  auto queue = std::make_unique<WorkQueue>(
      WorkQueueOptions{"GetBenchmarkTask store reads", 1, 2});
  ASSERT_TRUE(queue
                  ->Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();  // running: not queued any more
  ASSERT_TRUE(queue->Submit([&] { ++ran; }).ok());
  ASSERT_TRUE(queue->Submit([&] { ++ran; }).ok());
  EXPECT_EQ(queue->queued(), 2);
  const absl::Status refused = queue->Submit([&] { ran += 100; });
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("GetBenchmarkTask store reads"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("at most 2 queued"), std::string::npos)
      << refused;
  release.Notify();
  queue.reset();
  EXPECT_EQ(ran, 2);
}

TEST(WorkQueueTest, SeveralThreadsRunJobsAtOnce) {
  // Two jobs that each wait for the other finish only on two threads.
  absl::Notification a_running, b_running;
  {
    WorkQueue queue({"pair", 2, 0});
    ASSERT_TRUE(queue
                    .Submit([&] {
                      a_running.Notify();
                      b_running.WaitForNotification();
                    })
                    .ok());
    ASSERT_TRUE(queue
                    .Submit([&] {
                      b_running.Notify();
                      a_running.WaitForNotification();
                    })
                    .ok());
  }
  EXPECT_TRUE(a_running.HasBeenNotified());
  EXPECT_TRUE(b_running.HasBeenNotified());
}

}  // namespace
}  // namespace monta
