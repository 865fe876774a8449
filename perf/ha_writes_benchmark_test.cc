// perf/ha_writes' benchmark checks against a real planner and two real agents
// (CPU, Gloo over loopback; tests/testing LocalCluster, mutual TLS): the loop
// keeps the SUCCEEDED answers and their tasks' curves; a later benchmark of
// the same nodes replaces a curve without losing it; a task the planner does
// not know and the curves of a task forgotten (ForgetCurves, as a store that
// lost them) count as lost; a call the planner refuses is counted by its
// code, not acknowledged.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "perf/ha_writes.h"
#include "tests/testing/cluster.h"
#include "tests/testing/grpc_clients.h"

namespace monta::perf {
namespace {

using monta::testing::LocalCluster;

class HaWritesBenchmarkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartPlanner({"--bench_on_register=false"}).ok());
    ASSERT_TRUE(cluster_.StartAgent("node-a").ok());
    ASSERT_TRUE(cluster_.StartAgent("node-b").ok());
    channel_ =
        monta::testing::PlannerChannel(cluster_, cluster_.OperatorTlsFlags());
    ASSERT_NE(channel_, nullptr);
    planner_ = monta::v1::Planner::NewStub(channel_);
    ASSERT_TRUE(monta::testing::WaitFor(
        [&] { return Alive("node-a") && Alive("node-b"); }, absl::Seconds(30)));
  }
  bool Alive(const std::string& node) {
    auto context = monta::testing::ContextWithDeadline(5);
    monta::v1::GetNodeRequest request;
    request.set_name(node);
    monta::v1::NodeInfo info;
    return planner_->GetNode(context.get(), request, &info).ok() &&
           info.state() == monta::v1::NODE_STATE_ALIVE;
  }
  BenchmarkLoopOptions Options(std::vector<std::string> nodes) {
    BenchmarkLoopOptions options;
    options.addresses = {cluster_.planner_address()};
    options.planners = {planner_.get()};
    options.nodes = std::move(nodes);
    options.every = absl::Seconds(1);
    return options;
  }

  LocalCluster cluster_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<monta::v1::Planner::Stub> planner_;
};

TEST_F(HaWritesBenchmarkTest, KeepsResultsAndCountsTheLost) {
  BenchmarkLoop loop(Options({"node-a", "node-b"}));
  ASSERT_TRUE(loop.WaitForAcknowledged(2, absl::Seconds(120)));
  loop.Stop();
  const std::vector<AcknowledgedBenchmark>& acked = loop.acknowledged();
  ASSERT_GE(acked.size(), 2u);
  EXPECT_EQ(loop.curves_acknowledged(), [&] {
    int64_t n = 0;
    for (const auto& a : acked) n += a.curves.size();
    return n;
  }());
  for (const AcknowledgedBenchmark& a : acked) {
    ASSERT_FALSE(a.curves.empty()) << a.task_id;
    for (const auto& curve : a.curves) {
      EXPECT_EQ(curve.task_id(), a.task_id);
      EXPECT_GT(curve.sequence(), 0u);
      EXPECT_EQ(curve.points_size(), 0);  // dropped
    }
  }
  // The later benchmarks replaced the first one's curves: held, not lost.
  EXPECT_EQ(LostBenchmarks(*planner_, acked), 0);
  EXPECT_EQ(LostCurves(*planner_, acked), 0);

  // A result the planner does not know is lost.
  EXPECT_EQ(
      LostBenchmarks(*planner_, {AcknowledgedBenchmark{"bench-never", {}}}), 1);
  // The newest task's curves dropped (as a store that lost them): each lost.
  const AcknowledgedBenchmark& newest = acked.back();
  auto context = monta::testing::ContextWithDeadline(10);
  monta::v1::ForgetCurvesRequest forget;
  forget.set_task_id(newest.task_id);
  monta::v1::ForgetCurvesReply forgotten;
  ASSERT_TRUE(planner_->ForgetCurves(context.get(), forget, &forgotten).ok());
  EXPECT_EQ(LostCurves(*planner_, {newest}),
            static_cast<int>(newest.curves.size()));
  EXPECT_EQ(LostBenchmarks(*planner_, {newest}), 0);  // the task stands
}

TEST_F(HaWritesBenchmarkTest, ARefusedCallIsCountedNotAcknowledged) {
  BenchmarkLoop loop(Options({"node-a", "node-zz"}));
  // The first call starts at once and is refused in milliseconds.
  absl::SleepFor(absl::Seconds(2));
  loop.Stop();
  EXPECT_TRUE(loop.acknowledged().empty());
  EXPECT_GE(loop.NotAcknowledged(), 1);
  ASSERT_FALSE(loop.not_acknowledged().empty());
  const std::string outcome = loop.not_acknowledged().begin()->first;
  EXPECT_TRUE(outcome == "INVALID_ARGUMENT" ||
              outcome == "FAILED_PRECONDITION" || outcome == "NOT_FOUND")
      << outcome << ": " << loop.last_error();
  EXPECT_NE(loop.last_error().find("node-zz"), std::string::npos)
      << loop.last_error();
}

}  // namespace
}  // namespace monta::perf
