#include "server/store/follower.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/store/forwarding_store.h"
#include "server/store/sqlite_store.h"
#include "server/store/test_mutations.h"

namespace monta::store {
namespace {

using test_mutations::CurveAdded;
using test_mutations::Node;
using test_mutations::NodeRemoved;

Mutation Curve(const std::string& task, uint64_t sequence) {
  return CurveAdded(test_mutations::Curve(task, sequence));
}

// The real store, whose next List waits, once held, until released: the
// moment a follower lists again, held still.
class HeldListStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void HoldNextList() { hold_ = true; }
  absl::Notification& listing() { return listing_; }
  absl::Notification& release() { return release_; }

  absl::StatusOr<Snapshot> List(int64_t revision) override {
    if (hold_.exchange(false)) {
      listing_.Notify();
      release_.WaitForNotification();
    }
    return ForwardingStore::List(revision);
  }

 private:
  std::atomic<bool> hold_{false};
  absl::Notification listing_;
  absl::Notification release_;
};

// Steps `follower` on a thread of its own (as the planner's follower
// thread does) until destroyed.
class SteppingThread {
 public:
  explicit SteppingThread(Follower* follower)
      : thread_([this, follower] {
          while (!stop_.load()) {
            const absl::Duration wait = follower->Step();
            if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
          }
        }) {}
  ~SteppingThread() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class FollowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    const std::string path =
        std::string(dir != nullptr ? dir : "/tmp") + "/follower-" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::remove(path.c_str());
    path_ = path;
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto fence = store_->Lead();
    ASSERT_TRUE(fence.ok()) << fence.status();
    fence_ = *fence;
    FollowerOptions options;
    options.poll = absl::Milliseconds(20);
    options.now = [this] { return clock_; };
    follower_ = std::make_unique<Follower>(store_.get(), &cache_, options);
  }

  int64_t Commit(const std::vector<Mutation>& mutations) {
    auto committed = store_->Commit(fence_, mutations);
    EXPECT_TRUE(committed.ok()) << committed.status();
    return committed.ok() ? committed->revision : -1;
  }

  // Steps until the cache holds `revision` (a bounded number of steps, not a
  // time).
  void StepTo(int64_t revision) {
    for (int i = 0; i < 200; ++i) {
      follower_->Step();
      if (follower_->in_sync() && follower_->revision() >= revision) return;
    }
    FAIL() << "the follower did not reach revision " << revision << " (at "
           << follower_->revision() << ")";
  }

  std::vector<std::string> CurveTasks(const std::string& node) {
    auto info = cache_.Get(node, Instant::Now());
    std::vector<std::string> out;
    if (!info.ok()) return out;
    for (const auto& c : info->curves()) out.push_back(c.task_id());
    return out;
  }

  std::string path_;
  // The follower's clock for lag(): moved by the tests, never read from a
  // real clock.
  MonoTime clock_ = std::chrono::steady_clock::now();
  std::unique_ptr<SqliteStore> store_;
  Fence fence_;
  registry::Registry cache_{registry::RegistryOptions{}};
  std::unique_ptr<Follower> follower_;
};

TEST_F(FollowerTest, ListsThenAppliesEachCommitInOrder) {
  Commit({Node("a"), Node("b"), Curve("t1", 1)});
  EXPECT_FALSE(follower_->in_sync());
  follower_->Step();  // the List
  ASSERT_TRUE(follower_->in_sync());
  EXPECT_EQ(CurveTasks("a"), std::vector<std::string>{"t1"});
  EXPECT_EQ(follower_->lists(), 1);

  // A newer curve of the same measurement replaces t1; a node's change keeps
  // the curves it holds; a new node appears.
  Commit({Curve("t2", 2)});
  const int64_t last = Commit({Node("a", "host-a"), Node("c")});
  StepTo(last);
  EXPECT_EQ(CurveTasks("a"), std::vector<std::string>{"t2"});
  EXPECT_EQ(CurveTasks("b"), std::vector<std::string>{"t2"});
  auto a = cache_.Get("a", Instant::Now());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->topology().hostname(), "host-a");
  EXPECT_TRUE(cache_.Get("c", Instant::Now()).ok());
  EXPECT_EQ(follower_->lists(), 1) << "no List after the first";
}

TEST_F(FollowerTest, NodeRemovedListsAgain) {
  Commit({Node("a"), Node("b"), Curve("t1", 1)});
  follower_->Step();
  const int64_t removed = Commit({NodeRemoved("b")});
  StepTo(removed);
  // The Step that saw the removal listed again at or after it.
  for (int i = 0; i < 10 && follower_->lists() < 2; ++i) follower_->Step();
  EXPECT_EQ(follower_->lists(), 2);
  EXPECT_TRUE(follower_->in_sync());
  EXPECT_FALSE(cache_.Get("b", Instant::Now()).ok());
  EXPECT_TRUE(CurveTasks("a").empty()) << "t1 named b: gone with it";
}

TEST_F(FollowerTest, PausedAppliesNothingAndListsOnResume) {
  Commit({Node("a"), Node("b")});
  follower_->Step();
  ASSERT_TRUE(follower_->in_sync());
  follower_->Pause();
  EXPECT_FALSE(follower_->in_sync());
  const int64_t last = Commit({Node("c")});
  for (int i = 0; i < 5; ++i) follower_->Step();
  EXPECT_FALSE(follower_->in_sync());
  EXPECT_FALSE(cache_.Get("c", Instant::Now()).ok());
  follower_->Resume();
  StepTo(last);
  EXPECT_TRUE(cache_.Get("c", Instant::Now()).ok());
  EXPECT_EQ(follower_->lists(), 2);
}

// While it lists again (after a pause, a removal, a watch that failed) the
// cache is out of sync, so new reads are refused; a read that was let in
// just before still finds the registry whole: the listed state replaces it
// at once when the List landed, never an emptied registry being refilled.
TEST_F(FollowerTest, ListingAgainKeepsTheRegistryWholeUntilTheListLanded) {
  HeldListStore held(store_.get());
  FollowerOptions options;
  options.poll = absl::Milliseconds(20);
  options.now = [this] { return clock_; };
  Follower follower(&held, &cache_, options);
  Commit({Node("a"), Node("b"), Curve("t1", 1)});
  follower.Step();
  ASSERT_TRUE(follower.in_sync());
  follower.Pause();
  follower.Step();  // drops the watch: the next Step lists
  follower.Resume();
  const int64_t last = Commit({Node("c")});
  held.HoldNextList();
  std::thread step([&follower] { follower.Step(); });
  {
    absl::Cleanup listed = [&] {
      held.release().Notify();
      step.join();
    };
    held.listing().WaitForNotification();
    ASSERT_TRUE(cache_.Get("a", Instant::Now()).ok())
        << "node a vanished while the follower listed again";
    EXPECT_EQ(CurveTasks("b"), std::vector<std::string>{"t1"});
    EXPECT_FALSE(follower.in_sync());
  }
  EXPECT_TRUE(follower.in_sync());
  EXPECT_EQ(follower.revision(), last);
  EXPECT_TRUE(cache_.Get("c", Instant::Now()).ok());
  EXPECT_EQ(CurveTasks("a"), std::vector<std::string>{"t1"});
  EXPECT_EQ(follower.lists(), 2);
}

TEST_F(FollowerTest, WatchFallenBehindTheStoreListsAgain) {
  Commit({Node("a"), Node("b")});
  follower_->Step();
  // More commits than the store keeps for watches while nobody steps.
  int64_t last = 0;
  for (size_t i = 0; i < SqliteStore::kWatchHistory + 10; ++i) {
    last = Commit({Curve("t" + std::to_string(i), i + 1)});
  }
  StepTo(last);
  EXPECT_EQ(follower_->lists(), 2) << "OUT_OF_RANGE: listed again";
  EXPECT_EQ(CurveTasks("a"),
            std::vector<std::string>{
                "t" + std::to_string(SqliteStore::kWatchHistory + 9)});
}

// Lag: the time since the cache last held every commit the store had, on
// the follower's own clock (stepped here), and the revisions it misses.
TEST_F(FollowerTest, LagIsTheTimeSinceTheCacheLastHeldTheNewestCommit) {
  const int64_t first = Commit({Node("a")});
  // Before the first List it counts from the start.
  clock_ += std::chrono::seconds(2);
  EXPECT_EQ(follower_->lag().seconds, absl::Seconds(2));
  follower_->Step();  // the List: caught up as of its start
  ASSERT_TRUE(follower_->in_sync());
  EXPECT_EQ(follower_->lag().seconds, absl::ZeroDuration());
  clock_ += std::chrono::seconds(3);
  EXPECT_EQ(follower_->lag().seconds, absl::Seconds(3));
  follower_->Step();  // a probe: the store's newest is applied
  EXPECT_EQ(follower_->lag().seconds, absl::ZeroDuration());
  EXPECT_EQ(follower_->lag().revisions, 0);

  // A commit this follower's watch never delivers: another process's (a
  // second handle on the file; SQLite's watch sees its own process's
  // commits), as a watch cut off from the store would miss it.
  auto other = SqliteStore::Open(path_);
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_fence = (*other)->Lead();
  ASSERT_TRUE(other_fence.ok()) << other_fence.status();
  auto missed = (*other)->Commit(*other_fence, {Node("b")});
  ASSERT_TRUE(missed.ok()) << missed.status();
  clock_ += std::chrono::seconds(2);
  follower_->Step();  // the probe sees it; the watch brings nothing
  EXPECT_EQ(follower_->revision(), first);
  EXPECT_EQ(follower_->lag().revisions, missed->revision - first);
  EXPECT_EQ(follower_->lag().seconds, absl::Seconds(2));
  clock_ += std::chrono::seconds(10);
  follower_->Step();
  EXPECT_EQ(follower_->lag().seconds, absl::Seconds(12));
  EXPECT_TRUE(follower_->in_sync());  // in sync, yet too far behind to read

  // A leader's registry is the store's writer: no lag while paused.
  follower_->Pause();
  EXPECT_EQ(follower_->lag().seconds, absl::ZeroDuration());
  EXPECT_EQ(follower_->lag().revisions, 0);
}

// A new leader leads from its cache once the cache holds the newest commit:
// PauseWhenApplied waits for the stepping thread to apply it, then pauses.
TEST_F(FollowerTest, PauseWhenAppliedWaitsForTheNewestCommitThenPauses) {
  Commit({Node("a"), Node("b")});
  follower_->Step();
  ASSERT_TRUE(follower_->in_sync());
  {
    SteppingThread stepping(follower_.get());
    // Committed a moment before the pause: the watch may not have brought
    // it yet.
    const int64_t newest = Commit({Node("c"), Curve("t1", 1)});
    ASSERT_TRUE(follower_->PauseWhenApplied(newest, absl::Minutes(1)));
    EXPECT_GE(follower_->revision(), newest);
    EXPECT_FALSE(follower_->in_sync()) << "paused";
    EXPECT_TRUE(cache_.Get("c", Instant::Now()).ok());
    EXPECT_EQ(CurveTasks("a"), std::vector<std::string>{"t1"});
  }
  // Paused: later commits are the leader's own, not applied here.
  Commit({Node("d")});
  for (int i = 0; i < 5; ++i) follower_->Step();
  EXPECT_FALSE(cache_.Get("d", Instant::Now()).ok());
  EXPECT_EQ(follower_->lists(), 1) << "kept, not listed again";
}

// A commit that needs a List (a node removed) is waited out: the pause
// comes once the List after it landed.
TEST_F(FollowerTest, PauseWhenAppliedWaitsOutAListAgain) {
  Commit({Node("a"), Node("b"), Curve("t1", 1)});
  follower_->Step();
  SteppingThread stepping(follower_.get());
  const int64_t removed = Commit({NodeRemoved("b")});
  ASSERT_TRUE(follower_->PauseWhenApplied(removed, absl::Minutes(1)));
  EXPECT_FALSE(cache_.Get("b", Instant::Now()).ok());
  EXPECT_TRUE(CurveTasks("a").empty()) << "t1 named b: gone with it";
  EXPECT_EQ(follower_->lists(), 2);
}

// etcd changed behind the cache's back (a commit its watch never delivers:
// another process's, as a watch cut off from the store would miss it): the
// wait runs out, PauseWhenApplied says so and pauses all the same, and the
// caller's reload (LoadInto) holds the commit the cache lacks.
TEST_F(FollowerTest, PauseWhenAppliedRefusesACacheThatMissedACommit) {
  Commit({Node("a")});
  follower_->Step();
  ASSERT_TRUE(follower_->in_sync());
  auto other = SqliteStore::Open(path_);
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_fence = (*other)->Lead();
  ASSERT_TRUE(other_fence.ok()) << other_fence.status();
  ASSERT_TRUE((*other)->Commit(*other_fence, {Node("b")}).ok());
  absl::StatusOr<int64_t> newest = store_->NewestRevision();
  ASSERT_TRUE(newest.ok()) << newest.status();
  {
    SteppingThread stepping(follower_.get());
    EXPECT_FALSE(follower_->PauseWhenApplied(*newest, absl::Milliseconds(300)));
  }
  EXPECT_FALSE(cache_.Get("b", Instant::Now()).ok()) << "missed by the watch";
  EXPECT_FALSE(follower_->in_sync());
  registry::Registry reloaded{registry::RegistryOptions{}};
  ASSERT_TRUE(LoadInto(*store_, reloaded).ok());
  EXPECT_TRUE(reloaded.Get("b", Instant::Now()).ok());
}

// Paused already (a leader's earlier attempt): not known in sync, no wait.
TEST_F(FollowerTest, PauseWhenAppliedOnAPausedFollowerSaysNotInSync) {
  const int64_t last = Commit({Node("a")});
  follower_->Step();
  follower_->Pause();
  EXPECT_FALSE(follower_->PauseWhenApplied(last, absl::Minutes(1)));
  EXPECT_FALSE(follower_->PauseWhenApplied(0, absl::Minutes(1)));
}

}  // namespace
}  // namespace monta::store
