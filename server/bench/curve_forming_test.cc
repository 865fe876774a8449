#include "server/bench/curve_forming.h"

#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/bench/test_reports.h"

namespace monta::coordination {
namespace {

namespace v1 = ::monta::v1;

// node-a and node-b, 2 ranks each, an AllToAll sweep of 1..16 KiB (step 4).
v1::BenchmarkTask PairTask() {
  v1::BenchmarkTask task;
  task.set_task_id("bench-1-1");
  task.set_backend(v1::BACKEND_GLOO);
  task.set_scope(v1::SCOPE_INTER_NODE);
  task.add_nodes("node-b");  // rank order is not name order
  task.add_nodes("node-a");
  task.set_ranks_per_node(2);
  task.add_collectives(v1::COLLECTIVE_ALLTOALL);
  task.set_min_bytes(1024);
  task.set_max_bytes(16 * 1024);
  task.set_step_factor(4);
  return task;
}

v1::ReportBenchmarkRequest Report(const v1::BenchmarkTask& task,
                                  const std::string& node, double seconds,
                                  double rank_step = 0) {
  return ReportForTesting(task, node, seconds, rank_step);
}

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

TEST(CurveFormingTest, RanksOfANodeAreItsBlock) {
  const v1::BenchmarkTask task = PairTask();
  EXPECT_EQ(RanksOf(task, "node-b"), (std::vector<int>{0, 1}));
  EXPECT_EQ(RanksOf(task, "node-a"), (std::vector<int>{2, 3}));
  EXPECT_TRUE(RanksOf(task, "node-c").empty());
}

TEST(CurveFormingTest, AReportMustMatchItsTaskExactly) {
  const v1::BenchmarkTask task = PairTask();
  EXPECT_TRUE(ValidateReport(task, Report(task, "node-a", 1e-3)).ok());
  struct Case {
    std::string what;
    std::function<void(v1::ReportBenchmarkRequest&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"another node's rank", [](auto& r) { r.set_ranks(0, 0); }, "ranks"},
      {"a rank too few", [](auto& r) { r.mutable_ranks()->RemoveLast(); },
       "ranks"},
      {"a rank too many", [](auto& r) { r.add_ranks(4); }, "ranks"},
      {"not a node of the task", [](auto& r) { r.set_node_name("node-c"); },
       "node_name"},
      {"no series", [](auto& r) { r.clear_series(); }, "series"},
      {"another collective",
       [](auto& r) {
         r.mutable_series(0)->set_collective(v1::COLLECTIVE_ALLGATHER);
       },
       "series[0].collective"},
      {"a size missing",
       [](auto& r) { r.mutable_series(0)->mutable_sizes()->RemoveLast(); },
       "series[0].sizes"},
      {"another size",
       [](auto& r) {
         r.mutable_series(0)->mutable_sizes(1)->set_message_bytes(4097);
       },
       "series[0].sizes[1].message_bytes"},
      {"a rank's time missing",
       [](auto& r) {
         r.mutable_series(0)
             ->mutable_sizes(0)
             ->mutable_rank_seconds()
             ->RemoveLast();
       },
       "series[0].sizes[0]"},
      {"a negative time",
       [](auto& r) {
         r.mutable_series(0)->mutable_sizes(2)->set_rank_seconds(1, -1);
       },
       "series[0].sizes[2].rank_seconds[1]"},
      {"not a number",
       [](auto& r) {
         r.mutable_series(0)->mutable_sizes(0)->set_rank_seconds(
             0, std::numeric_limits<double>::quiet_NaN());
       },
       "rank_seconds[0]"},
      {"more than an hour",
       [](auto& r) {
         r.mutable_series(0)->mutable_sizes(0)->set_rank_seconds(0, 3601);
       },
       "rank_seconds[0]"},
  };
  for (const Case& c : cases) {
    v1::ReportBenchmarkRequest report = Report(task, "node-a", 1e-3);
    c.mutate(report);
    const absl::Status s = ValidateReport(task, report);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find(c.field), std::string::npos)
        << c.what << ": " << s;
  }
}

std::map<std::string, v1::ReportBenchmarkRequest> Both(
    const v1::BenchmarkTask& task, double a_seconds, double b_seconds) {
  return {{"node-a", Report(task, "node-a", a_seconds, a_seconds / 10)},
          {"node-b", Report(task, "node-b", b_seconds, b_seconds / 10)}};
}

TEST(CurveFormingTest, TheSlowestRankBoundsEveryPoint) {
  const v1::BenchmarkTask task = PairTask();
  const FormedCurves formed =
      FormCurves(task, Both(task, 1e-3, 2e-3), CurveChecks{}, kNow);
  ASSERT_EQ(formed.kept.size(), 1u);
  EXPECT_TRUE(formed.excluded.empty());
  const v1::BandwidthCurve& c = formed.kept[0];
  EXPECT_EQ(c.collective(), v1::COLLECTIVE_ALLTOALL);
  EXPECT_EQ(c.scope(), v1::SCOPE_INTER_NODE);
  EXPECT_EQ(c.nranks(), 4);
  EXPECT_EQ(c.n_nodes(), 2);
  ASSERT_EQ(c.nodes_size(), 2);
  EXPECT_EQ(c.nodes(0), "node-a");  // sorted
  EXPECT_EQ(c.task_id(), "bench-1-1");
  EXPECT_EQ(c.sequence(), 0u);  // the registry numbers it
  EXPECT_EQ(c.received_at().seconds(), 1'700'000'000);
  EXPECT_EQ(c.measured_at().seconds(), 4102444800);  // the claim, shown
  ASSERT_EQ(c.points_size(), 3);
  // node-b's second rank: 2 ms + 0.2 ms.
  EXPECT_DOUBLE_EQ(c.points(1).time_seconds(), 2.2e-3);
  EXPECT_EQ(c.points(1).message_bytes(), 4096u);
  EXPECT_DOUBLE_EQ(c.points(1).busbw_bytes_per_second(), 4096 / 2.2e-3 * 3 / 4);
  // Medians 1.05 ms and 2.1 ms: a factor of 2 apart.
  EXPECT_NEAR(c.node_spread_ratio(), 2.0, 1e-9);
}

TEST(CurveFormingTest, NodesThatDisagreeAreExcludedNamingTheSlowOne) {
  const v1::BenchmarkTask task = PairTask();
  // node-b claims 10 s where node-a saw 10 ms in the same collectives.
  const FormedCurves formed =
      FormCurves(task, Both(task, 10e-3, 10), CurveChecks{}, kNow);
  EXPECT_TRUE(formed.kept.empty());
  ASSERT_EQ(formed.excluded.size(), 1u);
  const v1::ExcludedCurve& e = formed.excluded[0];
  EXPECT_EQ(e.reason(), v1::EXCLUSION_REASON_NODES_DISAGREE);
  EXPECT_NE(e.detail().find("node node-b"), std::string::npos) << e.detail();
  EXPECT_NE(e.detail().find("1000.0x node node-a"), std::string::npos)
      << e.detail();
  EXPECT_EQ(e.curve().points_size(), 0);
  EXPECT_EQ(e.curve().task_id(), "bench-1-1");
  // Within the factor, kept.
  CurveChecks loose;
  loose.agreement_factor = 2000;
  EXPECT_EQ(FormCurves(task, Both(task, 10e-3, 10), loose, kNow).kept.size(),
            1u);
}

TEST(CurveFormingTest, ADifferenceWithinTheSlackIsScheduling) {
  const v1::BenchmarkTask task = PairTask();
  // 0.8 ms against 3.5 ms is 4.4x, but 2.7 ms apart: a rank descheduled on a
  // shared host (perf/trust_bench.sh saw it on loopback), kept.
  EXPECT_EQ(FormCurves(task, Both(task, 0.8e-3, 3.5e-3), CurveChecks{}, kNow)
                .kept.size(),
            1u);
  // Without the slack the same reports are excluded...
  CurveChecks strict;
  strict.agreement_slack_seconds = 0;
  const FormedCurves formed =
      FormCurves(task, Both(task, 0.8e-3, 3.5e-3), strict, kNow);
  ASSERT_EQ(formed.excluded.size(), 1u);
  EXPECT_EQ(formed.excluded[0].reason(), v1::EXCLUSION_REASON_NODES_DISAGREE);
  EXPECT_NE(formed.excluded[0].detail().find("within 4x or 0 s"),
            std::string::npos)
      << formed.excluded[0].detail();
  // ... and 10x beyond it is excluded with it: 0.8 ms against 8 ms.
  EXPECT_EQ(FormCurves(task, Both(task, 0.8e-3, 8e-3), CurveChecks{}, kNow)
                .excluded.size(),
            1u);
}

TEST(CurveFormingTest, ATimeBelowANanosecondIsNotAMeasurement) {
  const v1::BenchmarkTask task = PairTask();
  // Within the slack of node-b's 1 ms, so only the edge can refuse it: kept,
  // its spread over node-b would be infinite.
  const v1::ReportBenchmarkRequest tiny = Report(task, "node-a", 1e-320);
  const absl::Status s = ValidateReport(task, tiny);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rank_seconds[0]: expected a time in [1e-09, "
                             "3600] s, got 9.99989e-321"),
            std::string::npos)
      << s;
  EXPECT_TRUE(ValidateReport(task, Report(task, "node-a", 1e-9)).ok());
}

TEST(CurveFormingTest, ACurveFasterThanTheNicsIsExcluded) {
  const v1::BenchmarkTask task = PairTask();
  CurveChecks checks;
  // 1 GB/s of NICs per node, 0.5 GB/s per rank. At 16 KiB over 4 ranks half
  // of each rank's bytes cross nodes: 8 KiB in 1 us is 8 GB/s.
  checks.links["node-a"] = NodeLinks{1e9, false};
  checks.links["node-b"] = NodeLinks{1e9, false};
  FormedCurves formed = FormCurves(task, Both(task, 1e-6, 1e-6), checks, kNow);
  ASSERT_EQ(formed.excluded.size(), 1u);
  EXPECT_EQ(formed.excluded[0].reason(), v1::EXCLUSION_REASON_ABOVE_LINE_RATE);
  EXPECT_NE(formed.excluded[0].detail().find("0.5 GB/s per rank"),
            std::string::npos)
      << formed.excluded[0].detail();
  // At 1 ms per operation it is 8 MB/s: kept.
  EXPECT_EQ(FormCurves(task, Both(task, 1e-3, 1e-3), checks, kNow).kept.size(),
            1u);
  // Loopback traffic crosses no NIC, and an unknown rate checks nothing.
  checks.links["node-b"].loopback = true;
  EXPECT_EQ(FormCurves(task, Both(task, 1e-6, 1e-6), checks, kNow).kept.size(),
            1u);
  checks.links["node-b"] = NodeLinks{0, false};
  EXPECT_EQ(FormCurves(task, Both(task, 1e-6, 1e-6), checks, kNow).kept.size(),
            1u);
}

TEST(CurveFormingTest, WrongBytesExcludeTheCurve) {
  const v1::BenchmarkTask task = PairTask();
  auto reports = Both(task, 1e-3, 1e-3);
  reports["node-a"].mutable_series(0)->mutable_sizes(2)->set_rank_wrong_bytes(
      1, 7);
  const FormedCurves formed = FormCurves(task, reports, CurveChecks{}, kNow);
  ASSERT_EQ(formed.excluded.size(), 1u);
  EXPECT_EQ(formed.excluded[0].reason(), v1::EXCLUSION_REASON_DATA_CHECK);
  EXPECT_NE(formed.excluded[0].detail().find("7 wrong bytes at 16384"),
            std::string::npos)
      << formed.excluded[0].detail();
}

TEST(CurveFormingTest, OneNodeHasNothingToDisagreeWith) {
  v1::BenchmarkTask task = PairTask();
  task.mutable_nodes()->RemoveLast();
  task.set_scope(v1::SCOPE_INTRA_NODE);
  task.add_collectives(v1::COLLECTIVE_ALLGATHER);
  task.add_collectives(v1::COLLECTIVE_COPY);
  const FormedCurves formed =
      FormCurves(task, {{"node-b", Report(task, "node-b", 1e-3, 1e-3)}},
                 CurveChecks{}, kNow);
  ASSERT_EQ(formed.kept.size(), 3u);
  EXPECT_EQ(formed.kept[1].collective(), v1::COLLECTIVE_ALLGATHER);
  EXPECT_EQ(formed.kept[2].collective(), v1::COLLECTIVE_COPY);
  EXPECT_DOUBLE_EQ(formed.kept[0].node_spread_ratio(), 1);
  // Copies: one rank's bytes, busbw = algbw; the slower rank (2 ms) bounds it.
  const v1::CurvePoint& p = formed.kept[2].points(0);
  EXPECT_EQ(p.message_bytes(), 1024u);
  EXPECT_DOUBLE_EQ(p.time_seconds(), 2e-3);
  EXPECT_DOUBLE_EQ(p.busbw_bytes_per_second(), p.algbw_bytes_per_second());
}

TEST(CurveFormingTest, AVerifyTaskGetsOnePointPerDispatch) {
  v1::BenchmarkTask task = PairTask();
  task.clear_collectives();
  for (int k : {1, 4}) {
    v1::DispatchWorkload& w = *task.add_dispatches();
    w.set_strategy_kind(k == 1 ? v1::STRATEGY_KIND_TP_DEDUP
                               : v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
    w.set_chunks(k);
    w.set_rows(8);
    w.set_row_bytes(256);
    w.set_tensor_parallel_size(2);
  }
  auto reports = Both(task, 1e-3, 1e-3);
  ASSERT_TRUE(ValidateReport(task, reports["node-a"]).ok());
  // A collective series in a verify task is refused.
  v1::ReportBenchmarkRequest wrong = reports["node-a"];
  wrong.mutable_series(1)->set_collective(v1::COLLECTIVE_ALLTOALL);
  EXPECT_NE(ValidateReport(task, wrong).message().find("series[1]"),
            std::string::npos);
  const FormedCurves formed = FormCurves(task, reports, CurveChecks{}, kNow);
  ASSERT_EQ(formed.kept.size(), 2u);
  const v1::BandwidthCurve& pipelined = formed.kept[1];
  EXPECT_EQ(pipelined.strategy_kind(), v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  EXPECT_EQ(pipelined.chunks(), 4);
  ASSERT_EQ(pipelined.points_size(), 1);
  // D = (4 ranks / t=2) * 8 rows * 256 bytes; busbw over the EP group of 2.
  EXPECT_EQ(pipelined.points(0).message_bytes(), 2u * 8 * 256);
  EXPECT_DOUBLE_EQ(pipelined.points(0).busbw_bytes_per_second(),
                   pipelined.points(0).algbw_bytes_per_second() / 2);
}

// Every node's ranks' iterations (rank-major): the point carries the slowest
// rank per iteration; a count that is not ranks x iterations is refused.
TEST(CurveFormingTest, AVerifyPointCarriesTheSlowestRankPerIteration) {
  v1::BenchmarkTask task = PairTask();
  task.clear_collectives();
  task.set_iterations(3);
  v1::DispatchWorkload& w = *task.add_dispatches();
  w.set_strategy_kind(v1::STRATEGY_KIND_FLAT);
  w.set_chunks(1);
  w.set_rows(4);
  w.set_row_bytes(64);
  w.set_tensor_parallel_size(1);
  auto reports = Both(task, 1e-3, 1e-3);
  // node-a: rank 0 slow on iteration 0, rank 1 on iteration 2; node-b slow
  // on iteration 1.
  const std::map<std::string, std::vector<double>> iterations = {
      {"node-a", {5e-3, 1e-3, 1e-3, 1e-3, 1e-3, 7e-3}},
      {"node-b", {1e-3, 6e-3, 1e-3, 1e-3, 2e-3, 1e-3}}};
  for (const auto& [node, times] : iterations) {
    v1::SizeTimes& size = *reports[node].mutable_series(0)->mutable_sizes(0);
    for (double t : times) size.add_rank_iteration_seconds(t);
    ASSERT_TRUE(ValidateReport(task, reports[node]).ok());
  }
  const FormedCurves formed = FormCurves(task, reports, CurveChecks{}, kNow);
  ASSERT_EQ(formed.kept.size(), 1u);
  const v1::CurvePoint& p = formed.kept[0].points(0);
  ASSERT_EQ(p.iteration_seconds_size(), 3);
  EXPECT_DOUBLE_EQ(p.iteration_seconds(0), 5e-3);
  EXPECT_DOUBLE_EQ(p.iteration_seconds(1), 6e-3);
  EXPECT_DOUBLE_EQ(p.iteration_seconds(2), 7e-3);

  // One node without iterations: the point has none.
  auto without = reports;
  without["node-b"]
      .mutable_series(0)
      ->mutable_sizes(0)
      ->clear_rank_iteration_seconds();
  EXPECT_EQ(FormCurves(task, without, CurveChecks{}, kNow)
                .kept[0]
                .points(0)
                .iteration_seconds_size(),
            0);

  v1::ReportBenchmarkRequest short_report = reports["node-a"];
  short_report.mutable_series(0)->mutable_sizes(0)->add_rank_iteration_seconds(
      1e-3);
  EXPECT_NE(ValidateReport(task, short_report)
                .message()
                .find("series[0].sizes[0].rank_iteration_seconds: expected "
                      "none or 2 x 3"),
            std::string::npos);
  v1::ReportBenchmarkRequest negative = reports["node-a"];
  negative.mutable_series(0)->mutable_sizes(0)->set_rank_iteration_seconds(4,
                                                                           -1);
  EXPECT_NE(ValidateReport(task, negative)
                .message()
                .find("rank_iteration_seconds[4]: expected a time"),
            std::string::npos);
}

// An inter-node sweep's chains: the point carries the slowest rank's chain
// over all nodes beside the median, 0 when a node did not time them; a
// report's chain that is not one finite positive time per rank is refused,
// naming the field.
TEST(CurveFormingTest, APointCarriesTheSlowestRanksChain) {
  const v1::BenchmarkTask task = PairTask();
  auto reports = Both(task, 2e-3, 2e-3);
  const std::map<std::string, std::vector<double>> chains = {
      {"node-a", {1e-3, 1.5e-3}}, {"node-b", {1.2e-3, 1.1e-3}}};
  for (const auto& [node, times] : chains) {
    for (v1::SizeTimes& size :
         *reports[node].mutable_series(0)->mutable_sizes()) {
      for (double t : times) size.add_rank_chain_seconds(t);
    }
    ASSERT_TRUE(ValidateReport(task, reports[node]).ok());
  }
  const FormedCurves formed = FormCurves(task, reports, CurveChecks{}, kNow);
  ASSERT_EQ(formed.kept.size(), 1u);
  for (const v1::CurvePoint& p : formed.kept[0].points()) {
    EXPECT_DOUBLE_EQ(p.chain_time_seconds(), 1.5e-3);
    EXPECT_DOUBLE_EQ(p.time_seconds(), 2.2e-3);  // the median: 2 ms + 0.2 ms
  }
  // One node without chains: no point has one.
  auto without = reports;
  for (v1::SizeTimes& size :
       *without["node-b"].mutable_series(0)->mutable_sizes()) {
    size.clear_rank_chain_seconds();
  }
  const FormedCurves unchained = FormCurves(task, without, CurveChecks{}, kNow);
  ASSERT_EQ(unchained.kept.size(), 1u);
  for (const v1::CurvePoint& p : unchained.kept[0].points()) {
    EXPECT_EQ(p.chain_time_seconds(), 0);
  }
  v1::ReportBenchmarkRequest bad = reports["node-a"];
  bad.mutable_series(0)->mutable_sizes(1)->set_rank_chain_seconds(1, -1e-3);
  EXPECT_NE(ValidateReport(task, bad).message().find(
                "series[0].sizes[1].rank_chain_seconds[1]: expected a time"),
            std::string::npos)
      << ValidateReport(task, bad);
  bad.mutable_series(0)->mutable_sizes(1)->set_rank_chain_seconds(
      1, std::numeric_limits<double>::quiet_NaN());
  EXPECT_NE(ValidateReport(task, bad).message().find(
                "series[0].sizes[1].rank_chain_seconds[1]: expected a time"),
            std::string::npos);
  bad = reports["node-a"];
  bad.mutable_series(0)->mutable_sizes(0)->add_rank_chain_seconds(1e-3);
  EXPECT_NE(ValidateReport(task, bad).message().find(
                "series[0].sizes[0].rank_chain_seconds: expected none or one "
                "per rank (2), got 3"),
            std::string::npos);
}

}  // namespace
}  // namespace monta::coordination
