#include "server/bench/coordinator.h"

#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_proto.h"
#include "gtest/gtest.h"
#include "server/bench/test_reports.h"

namespace monta::coordination {
namespace {

// `t` moved by `d` on both clocks.
Instant Later(Instant t, absl::Duration d) {
  return Instant{t.wall + d, MonoAfter(t.mono, d)};
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b"}) {
      monta::v1::RegisterRequest r;
      r.set_node_name(name);
      r.set_instance_id(std::string("i-") + name);
      ASSERT_TRUE(registry_.Register(r, now_).ok());
    }
  }
  monta::v1::RunBenchmarkRequest Pair() { return PairForTesting(); }
  // `node`'s honest report of `task` (every rank `seconds` at every size).
  monta::v1::ReportBenchmarkRequest Ok(const std::string& task,
                                       const std::string& node,
                                       double seconds = 1e-3) {
    return Ok(coordinator_, task, node, seconds);
  }
  static monta::v1::ReportBenchmarkRequest Ok(const Coordinator& coordinator,
                                              const std::string& task,
                                              const std::string& node,
                                              double seconds = 1e-3) {
    absl::StatusOr<monta::v1::BenchmarkTask> spec = coordinator.Spec(task);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return ReportForTesting(*spec, node, seconds);
  }

  Instant now_ = Instant::Now();
  registry::Registry registry_{registry::RegistryOptions{}};
  Coordinator coordinator_{&registry_, CoordinatorOptions{}};
};

TEST_F(CoordinatorTest, TheFabricSpanGoesOnTheTaskItsStatusAndItsCurves) {
  CoordinatorOptions options;
  std::vector<std::string> asked;
  options.fabric_span = [&asked](const std::vector<std::string>& nodes) {
    asked = nodes;
    monta::v1::FabricSpan span;
    span.set_level(monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
    span.set_concurrent_nodes(static_cast<int>(nodes.size()));
    for (const std::string& node : nodes) {
      auto* side = span.add_racks();
      side->set_rack("rack-" + node);
      side->set_nodes(1);
    }
    return span;
  };
  Coordinator coordinator(&registry_, options);
  monta::v1::RunBenchmarkRequest request = Pair();
  request.mutable_nodes()->SwapElements(0, 1);  // rank order b, a
  auto status = coordinator.Schedule(request, now_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(asked, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(status->fabric().level(), monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  auto task = coordinator.NextTask("a", absl::Seconds(1));
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->fabric().racks(0).rack(), "rack-b");
  for (const char* node : {"a", "b"}) {
    ASSERT_TRUE(
        coordinator.Report(Ok(coordinator, task->task_id(), node), now_).ok());
  }
  auto node = registry_.Get("a", now_);
  ASSERT_EQ(node->curves_size(), 1);
  EXPECT_EQ(node->curves(0).fabric().level(),
            monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  EXPECT_EQ(node->curves(0).fabric().concurrent_nodes(), 2);
  EXPECT_EQ(node->curves(0).fabric().racks_size(), 2);
}

TEST_F(CoordinatorTest, WithoutAFabricTasksCarryNoSpan) {
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(status->has_fabric());
  EXPECT_FALSE(coordinator_.Spec(status->task_id())->has_fabric());
}

TEST_F(CoordinatorTest, TaskGoesToEveryNodeAndSucceedsWithCurves) {
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok()) << status.status();
  auto ta = coordinator_.NextTask("a", absl::Seconds(1));
  auto tb = coordinator_.NextTask("b", absl::Seconds(1));
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->task_id(), status->task_id());
  EXPECT_EQ(ta->scope(), monta::v1::SCOPE_INTER_NODE);
  EXPECT_EQ(ta->ranks_per_node(), 2);  // CPU nodes: the default
  ASSERT_TRUE(coordinator_.Report(Ok(ta->task_id(), "a", 1e-3), now_).ok());
  EXPECT_EQ(coordinator_.Status(ta->task_id())->state(),
            monta::v1::TASK_STATE_RUNNING);
  EXPECT_EQ(registry_.Get("a", now_)->curves_size(), 0);  // not before b's
  ASSERT_TRUE(coordinator_.Report(Ok(ta->task_id(), "b", 2e-3), now_).ok());
  EXPECT_EQ(coordinator_.Status(ta->task_id())->state(),
            monta::v1::TASK_STATE_SUCCEEDED);
  auto node = registry_.Get("b", now_);
  ASSERT_EQ(node->curves_size(), 1);
  const monta::v1::BandwidthCurve& curve = node->curves(0);
  EXPECT_EQ(curve.task_id(), ta->task_id());
  EXPECT_EQ(curve.nranks(), 4);
  EXPECT_GT(curve.sequence(), 0u);
  // The slower node's time bounds every point; both nodes agree within 2x.
  EXPECT_DOUBLE_EQ(curve.points(0).time_seconds(), 2e-3);
  EXPECT_DOUBLE_EQ(curve.node_spread_ratio(), 2);
  EXPECT_EQ(registry_.Get("a", now_)->curves(0).sequence(), curve.sequence());
}

// A store that holds its first write until released.
class StuckStore : public registry::RegistryObserver {
 public:
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<registry::Change>& changes) override {
    if (!entered.HasBeenNotified()) entered.Notify();
    release.WaitForNotification();
    return {};
  }
  absl::Notification entered;
  absl::Notification release;
};

// The last report of a task while the registry's store is behind
// (--max_pending_registry_changes): refused RESOURCE_EXHAUSTED, saying the
// curves were not stored, as if it never came (the task runs on, no curve is
// added); the agent's retry once the store caught up completes the task.
TEST_F(CoordinatorTest, TheLastReportIsRefusedWhileTheStoreIsBehind) {
  registry::RegistryOptions options;
  options.max_pending_changes = 1;
  registry::Registry registry(options);
  for (const char* name : {"a", "b"}) {
    monta::v1::RegisterRequest r;
    r.set_node_name(name);
    r.set_instance_id(std::string("i-") + name);
    ASSERT_TRUE(registry.Register(r, now_).ok());
  }
  Coordinator coordinator(&registry, CoordinatorOptions{});
  StuckStore store;
  registry.SetObserver(&store);
  monta::v1::RegisterRequest c;  // one change for the stuck store
  c.set_node_name("c");
  c.set_instance_id("i-c");
  absl::Notification c_stored;
  registry.RegisterThen(c, now_, [&](absl::Status) { c_stored.Notify(); });
  store.entered.WaitForNotification();
  auto task = coordinator.Schedule(Pair(), now_);
  ASSERT_TRUE(task.ok()) << task.status();
  const std::string id = task->task_id();
  ASSERT_TRUE(coordinator.NextTask("a", absl::Seconds(1)));
  ASSERT_TRUE(coordinator.NextTask("b", absl::Seconds(1)));
  ASSERT_TRUE(coordinator.Report(Ok(coordinator, id, "a"), now_).ok());
  const monta::v1::ReportBenchmarkRequest last = Ok(coordinator, id, "b");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const absl::Status refused = coordinator.Report(last, now_);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
    EXPECT_NE(refused.message().find("ReportBenchmark refused"),
              std::string::npos)
        << refused;
    EXPECT_NE(refused.message().find("were not stored"), std::string::npos)
        << refused;
  }
  EXPECT_EQ(coordinator.Status(id)->state(), monta::v1::TASK_STATE_RUNNING);
  EXPECT_EQ(registry.Get("a", now_)->curves_size(), 0);
  store.release.Notify();
  c_stored.WaitForNotification();
  ASSERT_TRUE(coordinator.Report(last, now_).ok());
  EXPECT_EQ(coordinator.Status(id)->state(), monta::v1::TASK_STATE_SUCCEEDED);
  EXPECT_EQ(registry.Get("a", now_)->curves_size(), 1);
}

TEST_F(CoordinatorTest, ANodeReportsOncePerTask) {
  auto task = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(task.ok());
  const std::string id = task->task_id();
  // A report that does not match the task is refused and does not count.
  monta::v1::ReportBenchmarkRequest wrong = Ok(id, "b");
  wrong.set_ranks(0, 0);  // a's rank
  EXPECT_EQ(coordinator_.Report(wrong, now_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_.held_report_bytes(), 0u);
  // 157 reports of node b: the first is taken, the other 156 refused.
  int accepted = 0, refused = 0;
  for (int i = 0; i < 157; ++i) {
    const absl::Status s = coordinator_.Report(Ok(id, "b"), now_);
    if (s.ok()) ++accepted;
    if (s.code() == absl::StatusCode::kAlreadyExists) ++refused;
  }
  EXPECT_EQ(accepted, 1);
  EXPECT_EQ(refused, 156);
  const size_t one_report = coordinator_.held_report_bytes();
  EXPECT_GT(one_report, 0u);
  EXPECT_LT(one_report, 64u << 10);
  // The task ends with a's report; the reports are freed, and a report after
  // the end is refused as well.
  ASSERT_TRUE(coordinator_.Report(Ok(id, "a"), now_).ok());
  EXPECT_EQ(coordinator_.Status(id)->state(), monta::v1::TASK_STATE_SUCCEEDED);
  EXPECT_EQ(coordinator_.held_report_bytes(), 0u);
  const absl::Status again = coordinator_.Report(Ok(id, "a"), now_);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(again.message().find("node a already reported"), std::string::npos)
      << again;
}

TEST_F(CoordinatorTest, HeldReportsAreFreedWhenATaskFails) {
  auto task = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(task.ok());
  ASSERT_TRUE(coordinator_.Report(Ok(task->task_id(), "a"), now_).ok());
  EXPECT_GT(coordinator_.held_report_bytes(), 0u);
  coordinator_.ExpireOverdue(Later(now_, absl::Seconds(31)));
  EXPECT_EQ(coordinator_.Status(task->task_id())->state(),
            monta::v1::TASK_STATE_FAILED);
  EXPECT_EQ(coordinator_.held_report_bytes(), 0u);
  // A node that had not reported may still report late (ignored), once.
  EXPECT_TRUE(coordinator_.Report(Ok(task->task_id(), "b"), now_).ok());
  EXPECT_EQ(coordinator_.held_report_bytes(), 0u);
  EXPECT_EQ(coordinator_.Report(Ok(task->task_id(), "b"), now_).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(CoordinatorTest, NodesThatDisagreeLeaveNoCurve) {
  // An honest pair first: its curve is the evidence.
  auto first = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(coordinator_.Report(Ok(first->task_id(), "a"), now_).ok());
  ASSERT_TRUE(coordinator_.Report(Ok(first->task_id(), "b"), now_).ok());
  // Then b claims 10 s where a saw 1 ms.
  auto forged = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(forged.ok());
  ASSERT_TRUE(coordinator_.Report(Ok(forged->task_id(), "b", 10), now_).ok());
  ASSERT_TRUE(coordinator_.Report(Ok(forged->task_id(), "a"), now_).ok());
  auto status = coordinator_.Status(forged->task_id());
  EXPECT_EQ(status->state(), monta::v1::TASK_STATE_FAILED);
  EXPECT_NE(status->reason().find("every curve was excluded"),
            std::string::npos)
      << status->reason();
  ASSERT_EQ(status->excluded_size(), 1);
  EXPECT_EQ(status->excluded(0).reason(),
            monta::v1::EXCLUSION_REASON_NODES_DISAGREE);
  EXPECT_NE(status->excluded(0).detail().find("node b's"), std::string::npos)
      << status->excluded(0).detail();
  auto a = registry_.Get("a", now_);
  ASSERT_EQ(a->curves_size(), 1);
  EXPECT_EQ(a->curves(0).task_id(), first->task_id());
  ASSERT_EQ(registry_.Excluded("a").size(), 1u);
  EXPECT_EQ(registry_.Excluded("b")[0].curve().task_id(), forged->task_id());
  EXPECT_EQ(coordinator_.held_report_bytes(), 0u);
}

TEST_F(CoordinatorTest, AVerifyTaskHandsItsCurvesOverAndKeepsNone) {
  monta::v1::DispatchWorkload w;
  w.set_strategy_kind(monta::v1::STRATEGY_KIND_FLAT);
  w.set_chunks(1);
  w.set_rows(4);
  w.set_row_bytes(64);
  w.set_tensor_parallel_size(1);
  int calls = 0;
  std::vector<monta::v1::BandwidthCurve> handed;
  auto task = coordinator_.ScheduleDispatches(
      Pair(), {w, w}, 3, 1, now_,
      [&](const monta::v1::BenchmarkTaskStatus& status,
          std::vector<monta::v1::BandwidthCurve> curves) {
        ++calls;
        EXPECT_EQ(status.state(), monta::v1::TASK_STATE_SUCCEEDED);
        handed = std::move(curves);
      });
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_TRUE(coordinator_.Report(Ok(task->task_id(), "a"), now_).ok());
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(coordinator_.Report(Ok(task->task_id(), "b"), now_).ok());
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(handed.size(), 2u);
  EXPECT_EQ(handed[0].strategy_kind(), monta::v1::STRATEGY_KIND_FLAT);
  EXPECT_EQ(handed[0].points(0).message_bytes(), 4u * 4 * 64);  // e=4
  // A job's dispatches are not node curves.
  EXPECT_EQ(registry_.Get("a", now_)->curves_size(), 0);
  EXPECT_EQ(coordinator_.held_report_bytes(), 0u);
  // A verify task that fails hands over nothing but its end.
  auto failing = coordinator_.ScheduleDispatches(
      Pair(), {w}, 3, 1, now_,
      [&](const monta::v1::BenchmarkTaskStatus& status,
          std::vector<monta::v1::BandwidthCurve> curves) {
        ++calls;
        EXPECT_EQ(status.state(), monta::v1::TASK_STATE_FAILED);
        EXPECT_TRUE(curves.empty());
      });
  ASSERT_TRUE(failing.ok());
  coordinator_.FailTasksOfNode("a", "went away", now_);
  EXPECT_EQ(calls, 2);
}

TEST_F(CoordinatorTest, BusyWhileATaskIsUnfinished) {
  EXPECT_FALSE(coordinator_.Busy("a"));
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(coordinator_.Busy("a"));
  EXPECT_TRUE(coordinator_.Busy("b"));
  coordinator_.ExpireOverdue(Later(now_, absl::Hours(1)));
  EXPECT_FALSE(coordinator_.Busy("a"));
}

TEST_F(CoordinatorTest, RendezvousGetWaitsForSet) {
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    monta::v1::RendezvousSetRequest set;
    set.set_task_id(status->task_id());
    set.set_key("nccl/id");
    set.set_value("xyz");
    ASSERT_TRUE(coordinator_.Set(set, "node a").ok());
  });
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(status->task_id());
  get.set_key("nccl/id");
  get.set_wait_seconds(10);
  auto value = coordinator_.Get(get);
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "xyz");
  get.set_key("never");
  get.set_wait_seconds(0.05);
  EXPECT_EQ(coordinator_.Get(get).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinatorTest, OverdueTaskNamesMissingRanksAndAbortsWaiters) {
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok());
  for (int rank : {0, 1}) {
    monta::v1::RendezvousSetRequest set;
    set.set_task_id(status->task_id());
    set.set_key(Coordinator::JoinKey(rank));
    ASSERT_TRUE(coordinator_.Set(set, "node a").ok());
  }
  coordinator_.ExpireOverdue(Later(now_, absl::Seconds(31)));
  auto final_status = coordinator_.Status(status->task_id());
  EXPECT_EQ(final_status->state(), monta::v1::TASK_STATE_FAILED);
  EXPECT_NE(final_status->reason().find("rank 2 (node b)"), std::string::npos)
      << final_status->reason();
  EXPECT_EQ(final_status->reason().find("rank 0"), std::string::npos);
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(status->task_id());
  get.set_key("anything");
  get.set_wait_seconds(5);
  EXPECT_EQ(coordinator_.Get(get).status().code(), absl::StatusCode::kAborted);
}

TEST_F(CoordinatorTest, FailureReportFailsTaskWithReason) {
  auto status = coordinator_.Schedule(Pair(), now_);
  auto report = Ok(status->task_id(), "b");
  report.clear_series();
  *report.mutable_status() = StatusToProto(
      absl::UnavailableError("rank 2: connection reset by rank 0"));
  ASSERT_TRUE(coordinator_.Report(report, now_).ok());
  auto s = coordinator_.Status(status->task_id());
  EXPECT_EQ(s->state(), monta::v1::TASK_STATE_FAILED);
  EXPECT_NE(s->reason().find("node b: UNAVAILABLE: rank 2: connection reset"),
            std::string::npos)
      << s->reason();
  // Node a never reported: its ranks are named as the likely cause.
  EXPECT_NE(s->reason().find("rank 0 (node a)"), std::string::npos)
      << s->reason();
}

TEST_F(CoordinatorTest, ScheduleValidatesNodesAndSizes) {
  monta::v1::RunBenchmarkRequest req;
  EXPECT_EQ(coordinator_.Schedule(req, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  req.add_nodes("a");
  req.add_nodes("a");
  EXPECT_NE(coordinator_.Schedule(req, now_).status().message().find("twice"),
            std::string::npos);
  req.clear_nodes();
  req.add_nodes("nope");
  EXPECT_NE(coordinator_.Schedule(req, now_).status().message().find("nope"),
            std::string::npos);
  req = Pair();
  req.set_min_bytes(1 << 20);
  req.set_max_bytes(1 << 10);
  EXPECT_EQ(coordinator_.Schedule(req, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A stale node cannot be measured.
  EXPECT_EQ(coordinator_.Schedule(Pair(), Later(now_, absl::Hours(1)))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

// Counts its wake-ups.
class CountingWaiter : public Waiter {
 public:
  void Wake() override { ++wakes; }
  int wakes = 0;
};

TEST_F(CoordinatorTest, WakesOnlyTheWaitersOfTheChangedNodeOrTask) {
  CountingWaiter on_a, on_c, on_task, removed;
  coordinator_.AddNodeWaiter("a", &on_a);
  coordinator_.AddNodeWaiter("c", &on_c);  // not in the pair
  coordinator_.AddNodeWaiter("b", &removed);
  coordinator_.RemoveNodeWaiter("b", &removed);
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(on_a.wakes, 1);
  EXPECT_EQ(on_c.wakes, 0);
  EXPECT_EQ(removed.wakes, 0);
  ASSERT_TRUE(coordinator_.TryNextTask("a").has_value());
  EXPECT_FALSE(coordinator_.TryNextTask("a").has_value());

  coordinator_.AddTaskWaiter(status->task_id(), &on_task);
  monta::v1::RendezvousSetRequest set;
  set.set_task_id(status->task_id());
  set.set_key("k");
  set.set_value("v");
  ASSERT_TRUE(coordinator_.Set(set, "node a").ok());
  EXPECT_EQ(on_task.wakes, 1);
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(status->task_id());
  get.set_key("k");
  auto value = coordinator_.TryGet(get);
  ASSERT_TRUE(value.ok() && value->has_value()) << value.status();
  EXPECT_EQ(**value, "v");
  get.set_key("missing");
  value = coordinator_.TryGet(get);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_FALSE(value->has_value());
  EXPECT_EQ(on_a.wakes, 1);  // a key of the task is no change of a's queue

  // The task failing wakes its waiters; Get then reports why.
  coordinator_.FailTasksOfNode("b", "went away", now_);
  EXPECT_EQ(on_task.wakes, 2);
  EXPECT_EQ(coordinator_.TryGet(get).status().code(),
            absl::StatusCode::kAborted);
  coordinator_.RemoveTaskWaiter(status->task_id(), &on_task);

  coordinator_.Shutdown();  // everyone still registered
  EXPECT_EQ(on_a.wakes, 2);
  EXPECT_EQ(on_c.wakes, 1);
  EXPECT_EQ(on_task.wakes, 2);
  coordinator_.RemoveNodeWaiter("a", &on_a);
  coordinator_.RemoveNodeWaiter("c", &on_c);
}

TEST_F(CoordinatorTest, ShutdownWakesWatchers) {
  // The watcher would wait kWatchTimeout for a task that never comes; Shutdown
  // must end the wait long before that. The bound is half the timeout, so the
  // test fails when only the timeout ends the wait, never because a loaded
  // machine is slow.
  constexpr absl::Duration kWatchTimeout = absl::Seconds(60);
  absl::Duration waited = absl::InfiniteDuration();
  std::thread watcher([&] {
    const absl::Time start = absl::Now();
    EXPECT_FALSE(coordinator_.NextTask("a", kWatchTimeout));
    waited = absl::Now() - start;
  });
  // Best effort to let the watcher block first; when it has not yet, the
  // contract still holds (waits after Shutdown return at once), so the result
  // does not depend on this pause.
  absl::SleepFor(absl::Milliseconds(20));
  coordinator_.Shutdown();
  watcher.join();
  EXPECT_LT(waited, kWatchTimeout / 2) << "Shutdown did not wake the watcher";
}

TEST_F(CoordinatorTest, WaitsAfterShutdownReturnAtOnce) {
  coordinator_.Shutdown();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(coordinator_.NextTask("a", absl::Seconds(60)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// Deadlines run on the monotonic clock: a wall clock stepped 10 minutes either
// way fails no task, and the task still fails at its real deadline.
TEST_F(CoordinatorTest, WallClockStepsFailNoTask) {
  auto status = coordinator_.Schedule(Pair(), now_);  // 30 s deadline
  ASSERT_TRUE(status.ok());
  for (const absl::Duration step : {absl::Minutes(10), -absl::Minutes(10)}) {
    const Instant stepped{now_.wall + step,
                          MonoAfter(now_.mono, absl::Seconds(29))};
    coordinator_.ExpireOverdue(stepped);
    EXPECT_EQ(coordinator_.Status(status->task_id())->state(),
              monta::v1::TASK_STATE_PENDING)
        << absl::FormatDuration(step);
  }
  coordinator_.ExpireOverdue(Instant{now_.wall - absl::Minutes(10),
                                     MonoAfter(now_.mono, absl::Seconds(30))});
  EXPECT_EQ(coordinator_.Status(status->task_id())->state(),
            monta::v1::TASK_STATE_FAILED);
}

// An agent gets the time left, not only the planner's wall clock deadline.
TEST_F(CoordinatorTest, HandedOutTaskCarriesTheTimeLeft) {
  ASSERT_TRUE(coordinator_.Schedule(Pair(), now_).ok());
  auto task = coordinator_.NextTask("a", absl::Seconds(1));
  ASSERT_TRUE(task);
  EXPECT_GT(task->timeout_seconds(), 0);
  EXPECT_LE(task->timeout_seconds(), 30);
  EXPECT_TRUE(task->has_deadline());
}

TEST_F(CoordinatorTest, ShutdownFailsUnfinishedTasksAndRefusesNewOnes) {
  auto status = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(status.ok());
  ASSERT_TRUE(coordinator_.NextTask("a", absl::Seconds(1)));  // running on a
  EXPECT_FALSE(coordinator_.ShuttingDown());
  coordinator_.Shutdown();
  EXPECT_TRUE(coordinator_.ShuttingDown());
  auto final_status = coordinator_.Status(status->task_id());
  EXPECT_EQ(final_status->state(), monta::v1::TASK_STATE_FAILED);
  EXPECT_EQ(final_status->reason(), "planner shutting down");
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(status->task_id());
  get.set_key("join/3");
  get.set_wait_seconds(60);
  const absl::Status aborted = coordinator_.Get(get).status();
  EXPECT_EQ(aborted.code(), absl::StatusCode::kAborted);
  EXPECT_NE(aborted.message().find("planner shutting down"), std::string::npos);
  EXPECT_EQ(coordinator_.Schedule(Pair(), now_).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(CoordinatorTest, AFollowerFailsItsTasksLeaderChangedAndHandsOutNone) {
  // Without an election: leading, epoch 0, any epoch 0 call accepted.
  EXPECT_TRUE(coordinator_.CheckLeading().ok());
  EXPECT_TRUE(coordinator_.CheckEpoch(0).ok());
  coordinator_.Lead(7);
  auto running = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(running.ok());
  auto pending = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(pending.ok());
  std::optional<monta::v1::BenchmarkTask> task =
      coordinator_.NextTask("a", absl::Seconds(1));
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->leader_epoch(), 7);
  EXPECT_TRUE(coordinator_.CheckEpoch(7).ok());
  EXPECT_EQ(coordinator_.CheckEpoch(6).code(),
            absl::StatusCode::kFailedPrecondition);

  coordinator_.SetLeader("10.0.0.2:7400");
  coordinator_.Follow("lease lost", now_);
  for (const auto& id : {running->task_id(), pending->task_id()}) {
    auto status = coordinator_.Status(id);
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->state(), monta::v1::TASK_STATE_FAILED);
    EXPECT_EQ(status->reason(), "leader changed: lease lost");
  }
  const absl::Status refused = coordinator_.CheckLeading();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("not the leader (leader: 10.0.0.2:7400)"),
            std::string::npos)
      << refused;
  EXPECT_EQ(coordinator_.CheckEpoch(7).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_.Schedule(Pair(), now_).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(coordinator_.TryNextTask("b").has_value());
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(running->task_id());
  get.set_key("join/3");
  EXPECT_EQ(coordinator_.TryGet(get).status().code(),
            absl::StatusCode::kAborted);

  // Leading again (a later epoch): nothing of the old term comes back.
  coordinator_.Lead(9);
  EXPECT_FALSE(coordinator_.TryNextTask("b").has_value());
  auto next = coordinator_.Schedule(Pair(), now_);
  ASSERT_TRUE(next.ok());
  task = coordinator_.TryNextTask("b");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->task_id(), next->task_id());
  EXPECT_EQ(task->leader_epoch(), 9);
}

void ExpectExhausted(const absl::Status& s, const std::string& flag) {
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(flag), std::string::npos) << s;
}

TEST_F(CoordinatorTest, PendingTasksAreBoundedPerNodeAndInAll) {
  CoordinatorOptions options;
  options.max_pending_tasks_per_node = 2;
  options.max_pending_tasks = 3;
  Coordinator coordinator(&registry_, options);
  monta::v1::RunBenchmarkRequest only_a;
  only_a.add_nodes("a");
  std::string first;
  for (int i = 0; i < 2; ++i) {
    auto scheduled = coordinator.Schedule(only_a, now_);
    ASSERT_TRUE(scheduled.ok()) << scheduled.status();
    if (i == 0) first = scheduled->task_id();
  }
  ExpectExhausted(coordinator.Schedule(only_a, now_).status(),
                  "--max_pending_tasks_per_node");
  ExpectExhausted(coordinator.Schedule(Pair(), now_).status(),
                  "--max_pending_tasks_per_node");
  monta::v1::RunBenchmarkRequest only_b;
  only_b.add_nodes("b");
  ASSERT_TRUE(coordinator.Schedule(only_b, now_).ok());
  ExpectExhausted(coordinator.Schedule(only_b, now_).status(),
                  "--max_pending_tasks");
  // A finished task frees its place.
  coordinator.FailTasksOfNode("a", "test", now_);
  EXPECT_TRUE(coordinator.Schedule(only_a, now_).ok());
}

TEST_F(CoordinatorTest, RendezvousKeysAndBytesAreBoundedPerTask) {
  CoordinatorOptions options;
  options.max_rendezvous_keys_per_task = 3;
  options.max_rendezvous_value_bytes = 100;
  options.max_rendezvous_bytes_per_task = 250;
  Coordinator coordinator(&registry_, options);
  auto task = coordinator.Schedule(Pair(), now_);
  ASSERT_TRUE(task.ok());
  monta::v1::RendezvousSetRequest set;
  set.set_task_id(task->task_id());
  set.set_key("k0");
  set.set_value(std::string(101, 'v'));
  ExpectExhausted(coordinator.Set(set, "node a"),
                  "--max_rendezvous_value_bytes");
  set.set_value(std::string(98, 'v'));  // 100 bytes with its key
  ASSERT_TRUE(coordinator.Set(set, "node a").ok());
  set.set_key("k1");
  ASSERT_TRUE(coordinator.Set(set, "node a").ok());
  set.set_key("k2");
  ExpectExhausted(coordinator.Set(set, "node a"),
                  "--max_rendezvous_bytes_per_task");
  set.set_value("small");
  ASSERT_TRUE(coordinator.Set(set, "node a").ok());
  set.set_key("k3");
  ExpectExhausted(coordinator.Set(set, "node a"),
                  "--max_rendezvous_keys_per_task");
  // Overwriting a key counts its new size only.
  set.set_key("k1");
  set.set_value(std::string(40, 'w'));
  EXPECT_TRUE(coordinator.Set(set, "node a").ok());
  set.set_key("k2");
  set.set_value(std::string(50, 'w'));
  EXPECT_TRUE(coordinator.Set(set, "node a").ok());
}

// Rendezvous bytes have a planner-wide cap and a per-setter share of it: one
// node setting keys in 16 tasks stops at its share while another node still
// sets its keys, and all together stop at the cap. Ending tasks frees them.
TEST_F(CoordinatorTest, RendezvousBytesAreBoundedPerNodeAndInAll) {
  CoordinatorOptions options;
  options.max_rendezvous_value_bytes = 100;
  options.max_rendezvous_bytes_per_task = 1000;
  options.max_rendezvous_bytes_per_node = 300;
  options.max_rendezvous_bytes = 700;
  Coordinator coordinator(&registry_, options);
  std::vector<std::string> tasks;
  for (int i = 0; i < 16; ++i) {
    auto task = coordinator.Schedule(Pair(), now_);
    ASSERT_TRUE(task.ok()) << task.status();
    tasks.push_back(task->task_id());
  }
  // Sets a 100-byte entry (key and value) for `setter` in task `i`.
  const auto set = [&](const std::string& setter, int i,
                       const std::string& key) {
    monta::v1::RendezvousSetRequest request;
    request.set_task_id(tasks[i]);
    request.set_key(key);
    request.set_value(std::string(100 - key.size(), 'v'));
    return coordinator.Set(request, setter);
  };
  int taken = 0;
  absl::Status refused;
  for (int i = 0; i < 16 && refused.ok(); ++i) {
    refused = set("node a", i, "k");
    if (refused.ok()) ++taken;
  }
  EXPECT_EQ(taken, 3);
  ExpectExhausted(refused, "--max_rendezvous_bytes_per_node");
  EXPECT_NE(refused.message().find("node a would hold 400 bytes"),
            std::string::npos)
      << refused;
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node a"), 300u);
  // Node b is not starved by node a.
  ASSERT_TRUE(set("node b", 0, "k1").ok());
  ASSERT_TRUE(set("node b", 1, "k1").ok());
  ASSERT_TRUE(set("node b", 2, "k1").ok());
  // Overwriting its own key counts the new size only.
  ASSERT_TRUE(set("node b", 2, "k1").ok());
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node b"), 300u);
  // A third setter reaches the planner-wide cap.
  ASSERT_TRUE(set("node c", 5, "k").ok());
  const absl::Status capped = set("node c", 6, "k");
  ExpectExhausted(capped, "--max_rendezvous_bytes");
  EXPECT_EQ(capped.message().find("per_node"), std::string::npos) << capped;
  EXPECT_EQ(coordinator.rendezvous_bytes(), 700u);
  // A key overwritten by another setter leaves its first setter's share.
  ASSERT_TRUE(set("node c", 0, "k").ok());
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node a"), 200u);
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node c"), 200u);
  EXPECT_EQ(coordinator.rendezvous_bytes(), 700u);
  // Finished tasks give their bytes back, to every setter.
  coordinator.FailTasksOfNode("a", "test", now_);
  EXPECT_EQ(coordinator.rendezvous_bytes(), 0u);
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node a"), 0u);
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node b"), 0u);
  EXPECT_EQ(coordinator.rendezvous_bytes_of("node c"), 0u);
}

TEST_F(CoordinatorTest, ReportCurvesAndPointsAreBounded) {
  CoordinatorOptions options;
  options.max_curves_per_report = 2;
  options.max_points_per_curve = 5;  // the pair's sweep: 64 KiB .. 16 MiB
  Coordinator coordinator(&registry_, options);
  auto task = coordinator.Schedule(Pair(), now_);
  ASSERT_TRUE(task.ok());
  auto report = Ok(coordinator, task->task_id(), "a");
  for (int i = 0; i < 2; ++i) *report.add_series() = report.series(0);
  // INVALID_ARGUMENT: the agent sends a report again only when refused
  // RESOURCE_EXHAUSTED (the store behind), and this one never passes.
  const absl::Status curves = coordinator.Report(report, now_);
  EXPECT_EQ(curves.code(), absl::StatusCode::kInvalidArgument) << curves;
  EXPECT_NE(curves.message().find("--max_curves_per_report"), std::string::npos)
      << curves;
  report.mutable_series()->RemoveLast();
  report.mutable_series(1)->add_sizes()->set_message_bytes(1 << 30);
  const absl::Status s = coordinator.Report(report, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--max_points_per_curve"), std::string::npos) << s;
  EXPECT_NE(s.message().find("series[1].sizes"), std::string::npos);
  EXPECT_EQ(coordinator.Status(task->task_id())->state(),
            monta::v1::TASK_STATE_PENDING);
}

}  // namespace
}  // namespace monta::coordination
