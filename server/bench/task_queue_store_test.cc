// The task queue on a real SQLite store (issue 20 item 3): what a leader
// writes, a new leader (another Coordinator on the same file) lists, finishes
// and hands out again.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/bench/coordinator.h"
#include "server/bench/task_record.h"
#include "server/bench/test_reports.h"
#include "server/store/sqlite_store.h"

namespace monta::coordination {
namespace {

using monta::v1::TASK_STATE_FAILED;
using monta::v1::TASK_STATE_PENDING;
using monta::v1::TASK_STATE_RUNNING;
using monta::v1::TASK_STATE_SUCCEEDED;

class TaskQueueStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/task-queue-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() +
            ".db";
    std::remove(path_.c_str());
    auto store = store::SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    for (const char* name : {"a", "b"}) {
      monta::v1::RegisterRequest r;
      r.set_node_name(name);
      r.set_instance_id(std::string("i-") + name);
      ASSERT_TRUE(registry_.Register(r, now_).ok());
    }
  }

  // A coordinator that leads `epoch` with its queue on the store (a fresh
  // fence, as a new leader takes), with what the store holds now.
  std::unique_ptr<Coordinator> Leader(int64_t epoch,
                                      CoordinatorOptions options = {},
                                      RestoredTasks* restored = nullptr) {
    auto coordinator = std::make_unique<Coordinator>(&registry_, options);
    auto fence = store_->Lead();
    EXPECT_TRUE(fence.ok()) << fence.status();
    auto records = store_->ListTasks();
    EXPECT_TRUE(records.ok()) << records.status();
    store::SqliteStore* s = store_.get();
    const store::Fence f = *fence;
    RestoredTasks counts = coordinator->Lead(
        epoch,
        [s, f](const store::TaskWrites& writes) {
          return s->WriteTasks(f, writes);
        },
        *records, now_);
    if (restored != nullptr) *restored = counts;
    return coordinator;
  }

  monta::v1::RunBenchmarkRequest Pair() { return PairForTesting(); }

  // A leader of `epoch` schedules a pair and dies without a word (SIGKILL):
  // the task's id.
  std::string ScheduledByALeaderThatDies(int64_t epoch,
                                         CoordinatorOptions options = {}) {
    std::unique_ptr<Coordinator> leader = Leader(epoch, options);
    auto scheduled = leader->Schedule(Pair(), now_);
    EXPECT_TRUE(scheduled.ok()) << scheduled.status();
    return scheduled.ok() ? scheduled->task_id() : "";
  }

  // The stored records, decoded, by task id.
  std::map<std::string, TaskRecord> Stored() {
    std::map<std::string, TaskRecord> out;
    auto records = store_->ListTasks();
    EXPECT_TRUE(records.ok()) << records.status();
    for (const std::string& data : *records) {
      auto record = DecodeTaskRecord(data);
      EXPECT_TRUE(record.ok()) << record.status();
      if (record.ok()) out[record->spec.task_id()] = *record;
    }
    return out;
  }

  // Both nodes report `task` as handed out.
  void Finish(Coordinator& c, const monta::v1::BenchmarkTask& task) {
    for (const char* node : {"a", "b"}) {
      ASSERT_TRUE(c.Report(ReportForTesting(task, node, 1e-3), now_).ok());
    }
  }

  std::string path_;
  Instant now_ = Instant::Now();
  std::unique_ptr<store::SqliteStore> store_;
  registry::Registry registry_{registry::RegistryOptions{}};
};

TEST_F(TaskQueueStoreTest, ANewLeaderListsTheTasksAndFinishesTheRunningOne) {
  std::string done_id;
  std::string running_id;
  {
    std::unique_ptr<Coordinator> old_leader = Leader(3);
    auto done = old_leader->Schedule(Pair(), now_);
    ASSERT_TRUE(done.ok()) << done.status();
    auto task = old_leader->TryNextTask("a");
    ASSERT_TRUE(task.has_value());
    ASSERT_TRUE(old_leader->TryNextTask("b").has_value());
    Finish(*old_leader, *task);
    auto running = old_leader->Schedule(Pair(), now_);
    ASSERT_TRUE(running.ok());
    ASSERT_TRUE(old_leader->TryNextTask("a").has_value());
    // Handed out: written RUNNING once the caller (WatchTasks) flushes.
    old_leader->FlushTaskWrites();
    done_id = done->task_id();
    running_id = running->task_id();
    std::map<std::string, TaskRecord> stored = Stored();
    ASSERT_EQ(stored.size(), 2u);
    EXPECT_EQ(stored[done_id].status.state(), TASK_STATE_SUCCEEDED);
    EXPECT_EQ(stored[running_id].status.state(), TASK_STATE_RUNNING);
    EXPECT_TRUE(stored[running_id].status.has_started_at());
    EXPECT_EQ(stored[running_id].spec.leader_epoch(), 3);
    // The old leader is gone without a word (SIGKILL): nothing more written.
  }
  RestoredTasks restored;
  std::unique_ptr<Coordinator> leader = Leader(4, {}, &restored);
  EXPECT_EQ(restored.finished, 1);
  EXPECT_EQ(restored.reissued, 1);
  EXPECT_EQ(restored.failed, 0);
  EXPECT_EQ(restored.malformed, 0);
  EXPECT_EQ(leader->Status(done_id)->state(), TASK_STATE_SUCCEEDED);
  auto pending = leader->Status(running_id);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->state(), TASK_STATE_PENDING);
  EXPECT_TRUE(absl::StrContains(pending->reason(), "leader changed"))
      << pending->reason();
  EXPECT_TRUE(absl::StrContains(pending->reason(), "attempt 2 of 3"))
      << pending->reason();
  EXPECT_FALSE(pending->has_started_at());  // this attempt has not started
  // A restored node is stale until its agent heartbeats here: the re-issued
  // task waits for it instead of failing, also once another node took it.
  leader->FailTasksOfNode("a", "lost its lease", now_);
  EXPECT_EQ(leader->Status(running_id)->state(), TASK_STATE_PENDING);
  // Handed out again under the new epoch, with its whole timeout.
  auto a = leader->TryNextTask("a");
  leader->FailTasksOfNode("b", "lost its lease", now_);
  EXPECT_EQ(leader->Status(running_id)->state(), TASK_STATE_RUNNING);
  auto b = leader->TryNextTask("b");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->task_id(), running_id);
  EXPECT_EQ(a->leader_epoch(), 4);
  // Its 30 s afresh, from the old run's deadline (30 s away: its agents may
  // hold on to the old run until then).
  EXPECT_GT(a->timeout_seconds(), 55);
  EXPECT_LE(a->timeout_seconds(), 60);
  EXPECT_EQ(Stored()[running_id].attempts, 2);
  EXPECT_EQ(Stored()[running_id].spec.leader_epoch(), 4);
  Finish(*leader, *a);
  EXPECT_EQ(leader->Status(running_id)->state(), TASK_STATE_SUCCEEDED);
  EXPECT_EQ(Stored()[running_id].status.state(), TASK_STATE_SUCCEEDED);
  // Its curves carry the task's id.
  bool found = false;
  const absl::StatusOr<monta::v1::NodeInfo> node_a = registry_.Get("a", now_);
  ASSERT_TRUE(node_a.ok());
  for (const auto& curve : node_a->curves()) {
    found = found || curve.task_id() == running_id;
  }
  EXPECT_TRUE(found);
}

// A node that took the re-issued task and then lost its lease fails it, as
// on a first attempt.
TEST_F(TaskQueueStoreTest, AReissuedTaskFailsWhenANodeThatTookItGoesAway) {
  const std::string id = ScheduledByALeaderThatDies(1);
  std::unique_ptr<Coordinator> second = Leader(2);
  ASSERT_TRUE(second->TryNextTask("a").has_value());
  second->FailTasksOfNode("a", "lost its lease", now_);
  auto status = second->Status(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), TASK_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(status->reason(), "node a lost its lease"))
      << status->reason();
  EXPECT_EQ(Stored()[id].status.state(), TASK_STATE_FAILED);
}

TEST_F(TaskQueueStoreTest, AttemptsAreBounded) {
  CoordinatorOptions options;
  options.max_task_attempts = 2;
  const std::string id = ScheduledByALeaderThatDies(1, options);
  {
    RestoredTasks restored;
    std::unique_ptr<Coordinator> second = Leader(2, options, &restored);
    EXPECT_EQ(restored.reissued, 1);
    EXPECT_EQ(second->Status(id)->state(), TASK_STATE_PENDING);
  }
  RestoredTasks restored;
  std::unique_ptr<Coordinator> third = Leader(3, options, &restored);
  EXPECT_EQ(restored.reissued, 0);
  EXPECT_EQ(restored.failed, 1);
  auto status = third->Status(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), TASK_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(
      status->reason(), "leader changed: handed out 2 times, at most 2"))
      << status->reason();
  EXPECT_FALSE(third->TryNextTask("a").has_value());
  EXPECT_EQ(Stored()[id].status.state(), TASK_STATE_FAILED);
}

TEST_F(TaskQueueStoreTest, ARestartWithoutElectionFailsTheUnfinishedTasks) {
  std::string id;
  {
    std::unique_ptr<Coordinator> before = Leader(0);
    auto scheduled = before->Schedule(Pair(), now_);
    ASSERT_TRUE(scheduled.ok());
    id = scheduled->task_id();
    ASSERT_TRUE(before->TryNextTask("a").has_value());
    // SIGTERM: the shutdown's failure is not written.
    before->Shutdown();
    EXPECT_EQ(Stored()[id].status.state(), TASK_STATE_PENDING);
  }
  RestoredTasks restored;
  std::unique_ptr<Coordinator> after = Leader(0, {}, &restored);
  EXPECT_EQ(restored.failed, 1);
  auto status = after->Status(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), TASK_STATE_FAILED);
  EXPECT_TRUE(absl::StartsWith(status->reason(), "planner restarted"))
      << status->reason();
  EXPECT_EQ(Stored()[id].status.state(), TASK_STATE_FAILED);
  EXPECT_FALSE(after->TryNextTask("a").has_value());
}

TEST_F(TaskQueueStoreTest, FinishedTasksOnTheStoreAreBounded) {
  CoordinatorOptions options;
  options.max_finished_tasks = 2;
  std::unique_ptr<Coordinator> leader = Leader(1, options);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto scheduled = leader->Schedule(Pair(), now_);
    ASSERT_TRUE(scheduled.ok());
    ids.push_back(scheduled->task_id());
    auto task = leader->TryNextTask("a");
    ASSERT_TRUE(leader->TryNextTask("b").has_value());
    Finish(*leader, *task);
  }
  std::map<std::string, TaskRecord> stored = Stored();
  EXPECT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored.count(ids[0]), 0u);  // evicted: deleted from the store
  EXPECT_EQ(stored.count(ids[2]), 1u);
  // A new leader keeps as many (the oldest evicted first).
  options.max_finished_tasks = 1;
  std::unique_ptr<Coordinator> next = Leader(2, options);
  EXPECT_EQ(next->Status(ids[1]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(next->Status(ids[2])->state(), TASK_STATE_SUCCEEDED);
  EXPECT_EQ(Stored().size(), 1u);
}

TEST_F(TaskQueueStoreTest, AFollowerWritesNothingAndAFencedLeaderCountsErrors) {
  std::unique_ptr<Coordinator> old_leader = Leader(1);
  auto scheduled = old_leader->Schedule(Pair(), now_);
  ASSERT_TRUE(scheduled.ok());
  old_leader->Follow("lease lost", now_);
  EXPECT_EQ(old_leader->Status(scheduled->task_id())->state(),
            TASK_STATE_FAILED);
  // The store still holds it unfinished, for the next leader.
  EXPECT_EQ(Stored()[scheduled->task_id()].status.state(), TASK_STATE_PENDING);

  std::unique_ptr<Coordinator> stale = Leader(2);
  std::unique_ptr<Coordinator> newer = Leader(3);  // fences `stale` off
  EXPECT_EQ(stale->task_write_errors(), 0);
  auto lost = stale->Schedule(Pair(), now_);
  ASSERT_TRUE(lost.ok());  // runs from memory
  EXPECT_EQ(stale->task_write_errors(), 1);
  EXPECT_EQ(Stored().count(lost->task_id()), 0u);
  EXPECT_EQ(newer->task_write_errors(), 0);
}

// The planner's write listener stops the coordinator when a write is fenced:
// from inside the task write itself, which must not deadlock.
TEST_F(TaskQueueStoreTest, AFencedTaskWriteMayStopTheCoordinatorFromWithin) {
  Coordinator coordinator(&registry_, CoordinatorOptions{});
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok());
  store::SqliteStore* s = store_.get();
  const store::Fence f = *fence;
  Coordinator* c = &coordinator;
  const Instant now = now_;
  coordinator.Lead(
      5,
      [s, f, c, now](const store::TaskWrites& writes) {
        absl::Status written = s->WriteTasks(f, writes);
        if (!written.ok()) c->Follow(std::string(written.message()), now);
        return written;
      },
      {}, now_);
  ASSERT_TRUE(store_->Lead().ok());  // another writer: `f` is fenced
  auto scheduled = coordinator.Schedule(Pair(), now_);
  ASSERT_TRUE(scheduled.ok());
  EXPECT_EQ(coordinator.CheckLeading().code(), absl::StatusCode::kUnavailable);
  auto status = coordinator.Status(scheduled->task_id());
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), TASK_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(status->reason(), "leader changed"))
      << status->reason();
}

// A task's store writes: queued, handed out (the first node's take: one
// write, the second node's: none), finished. Three in all.
TEST_F(TaskQueueStoreTest, HandingATaskOutWritesItRunningOnce) {
  std::vector<std::map<std::string, std::string>> writes;
  Coordinator leader(&registry_, CoordinatorOptions{});
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok());
  store::SqliteStore* s = store_.get();
  const store::Fence f = *fence;
  leader.Lead(
      2,
      [&writes, s, f](const store::TaskWrites& batch) {
        std::map<std::string, std::string> states;
        for (const auto& [id, record] : batch) {
          auto decoded = DecodeTaskRecord(record.value_or(""));
          states[id] = decoded.ok()
                           ? monta::v1::TaskState_Name(decoded->status.state())
                           : "deleted";
        }
        writes.push_back(states);
        return s->WriteTasks(f, batch);
      },
      {}, now_);
  auto scheduled = leader.Schedule(Pair(), now_);
  ASSERT_TRUE(scheduled.ok());
  const std::string id = scheduled->task_id();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0][id], "TASK_STATE_PENDING");
  // NextTask flushes the record TryNextTask queued.
  auto a = leader.NextTask("a", absl::ZeroDuration());
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[1][id], "TASK_STATE_RUNNING");
  EXPECT_TRUE(Stored()[id].status.has_started_at());
  EXPECT_TRUE(leader.Status(id)->has_started_at());
  ASSERT_TRUE(leader.NextTask("b", absl::ZeroDuration()).has_value());
  leader.FlushTaskWrites();
  EXPECT_EQ(writes.size(), 2u);  // b found it RUNNING: nothing to write
  Finish(leader, *a);
  ASSERT_EQ(writes.size(), 3u);
  EXPECT_EQ(writes[2][id], "TASK_STATE_SUCCEEDED");
}

// GetBenchmarkTask's source (Coordinator::Describe): the leader answers from
// memory; a follower (a replica not leading) from the store through its
// reader, never from its own memory, also across a failover; unknown ids are
// NOT_FOUND, and a follower without a store names the leader.
TEST_F(TaskQueueStoreTest, AFollowerDescribesATaskFromTheStore) {
  std::unique_ptr<Coordinator> leader = Leader(3);
  auto scheduled = leader->Schedule(Pair(), now_);
  ASSERT_TRUE(scheduled.ok());
  const std::string id = scheduled->task_id();
  ASSERT_TRUE(leader->NextTask("a", absl::ZeroDuration()).has_value());

  Coordinator follower(&registry_, CoordinatorOptions{});
  follower.Follow("campaigning", now_);
  follower.SetLeader("10.0.0.1:7400");
  EXPECT_EQ(follower.Describe(id).status().code(),
            absl::StatusCode::kUnavailable);
  store::SqliteStore* s = store_.get();
  follower.SetTaskRecordReader(
      [s](const std::string& task_id) { return s->GetTask(task_id); });

  auto led = leader->Describe(id);
  ASSERT_TRUE(led.ok()) << led.status();
  EXPECT_FALSE(led->from_store);
  EXPECT_EQ(led->status.state(), TASK_STATE_RUNNING);
  auto read = follower.Describe(id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->from_store);
  EXPECT_EQ(read->status.state(), TASK_STATE_RUNNING);
  EXPECT_TRUE(read->status.has_started_at());
  EXPECT_EQ(read->attempts, 1);
  EXPECT_EQ(read->max_attempts, 3);
  EXPECT_EQ(read->spec.leader_epoch(), 3);
  EXPECT_EQ(std::vector<std::string>(read->status.nodes().begin(),
                                     read->status.nodes().end()),
            (std::vector<std::string>{"a", "b"}));
  const auto unknown = follower.Describe("bench-0-0");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "bench-0-0"))
      << unknown.status();
  EXPECT_EQ(leader->Describe("bench-0-0").status().code(),
            absl::StatusCode::kNotFound);

  // The leader dies (SIGKILL); the next one hands the task out again. The
  // follower tells its second attempt under epoch 4, pending.
  leader.reset();
  std::unique_ptr<Coordinator> next = Leader(4);
  read = follower.Describe(id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->status.state(), TASK_STATE_PENDING);
  EXPECT_FALSE(read->status.has_started_at());
  EXPECT_EQ(read->attempts, 2);
  EXPECT_EQ(read->spec.leader_epoch(), 4);
  EXPECT_TRUE(absl::StrContains(read->status.reason(), "attempt 2 of 3"))
      << read->status.reason();
  // A replica that stopped leading answers from the store too, not from the
  // memory where it failed its tasks "leader changed".
  next->SetTaskRecordReader(
      [s](const std::string& task_id) { return s->GetTask(task_id); });
  next->Follow("lease lost", now_);
  EXPECT_EQ(next->Status(id)->state(), TASK_STATE_FAILED);
  read = next->Describe(id);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->from_store);
  EXPECT_EQ(read->status.state(), TASK_STATE_PENDING);
}

TEST(TaskRecordTest, RoundTripsAndRefusesGarbage) {
  TaskRecord record;
  record.spec.set_task_id("bench-1-1");
  record.spec.add_nodes("a");
  record.spec.set_leader_epoch(7);
  record.status.set_task_id("bench-1-1");
  record.status.set_state(TASK_STATE_PENDING);
  record.attempts = 2;
  auto back = DecodeTaskRecord(EncodeTaskRecord(record));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec.leader_epoch(), 7);
  EXPECT_EQ(back->status.state(), TASK_STATE_PENDING);
  EXPECT_EQ(back->attempts, 2);
  EXPECT_EQ(DecodeTaskRecord("not a record").status().code(),
            absl::StatusCode::kDataLoss);
  TaskRecord other_id = record;
  other_id.status.set_task_id("bench-2-2");
  EXPECT_EQ(DecodeTaskRecord(EncodeTaskRecord(other_id)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(TaskRecordTest, ALargeRecordDropsItsExcludedCurvesPoints) {
  TaskRecord record;
  record.spec.set_task_id("bench-1-1");
  record.status.set_task_id("bench-1-1");
  for (int c = 0; c < 64; ++c) {
    auto* excluded = record.status.add_excluded();
    excluded->set_detail("too slow");
    for (int p = 0; p < 1024; ++p) {
      auto* point = excluded->mutable_curve()->add_points();
      point->set_message_bytes(p + 1);
      point->set_time_seconds(1.0);
    }
  }
  const std::string data = EncodeTaskRecord(record);
  EXPECT_LE(data.size(), kMaxTaskRecordBytes);
  auto back = DecodeTaskRecord(data);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->status.excluded_size(), 64);
  EXPECT_EQ(back->status.excluded(0).detail(), "too slow");
  EXPECT_EQ(back->status.excluded(0).curve().points_size(), 0);
}

}  // namespace
}  // namespace monta::coordination
