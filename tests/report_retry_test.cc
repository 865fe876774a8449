// The agent's report retry against a real planner and a real agent: a report
// the planner refuses for good (more curves than --max_curves_per_report) is
// sent once, not again until the task's deadline, and the agent says why it
// stopped.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/grpc_clients.h"

namespace monta::testing {
namespace {

// The planner's ReportBenchmark calls answered `code` (labels as exposed).
std::string ReportCalls(const std::string& code) {
  return absl::StrCat("monta_rpc_requests_total{code=\"", code,
                      "\",component=\"planner\",method=\"ReportBenchmark\","
                      "service=\"monta.v1.AgentGateway\"}");
}

// The registration benchmark reports three curves (AllToAll, AllGather, copy)
// in one report; at most one is allowed. Before this was INVALID_ARGUMENT the
// planner refused it RESOURCE_EXHAUSTED, the agent's retry code, and the agent
// sent it again and again until the task's deadline.
TEST(ReportRetryTest, AReportThatCanNeverPassIsSentOnceAndTheAgentSaysWhy) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner({"--max_curves_per_report=1"}).ok())
      << ReadFile(cluster.planner().log_path());
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  const std::string log = cluster.agent("node-a").log_path();
  const std::string gave_up =
      "not sending it again after 1 tries: INVALID_ARGUMENT is not retried";
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(ReadFile(log), gave_up); },
                      absl::Seconds(90)))
      << "agent log:\n"
      << ReadFile(log);
  const std::string agent_log = ReadFile(log);
  EXPECT_TRUE(absl::StrContains(agent_log, "--max_curves_per_report"))
      << agent_log;
  EXPECT_FALSE(absl::StrContains(agent_log, "sending it again in"))
      << agent_log;
  // The log line comes after the last try: the planner saw that one report,
  // refused INVALID_ARGUMENT, and no RESOURCE_EXHAUSTED one.
  const std::string metrics = PlannerMetrics(cluster);
  EXPECT_EQ(MetricValue(metrics, ReportCalls("INVALID_ARGUMENT")), 1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, ReportCalls("RESOURCE_EXHAUSTED")), -1)
      << metrics;
}

}  // namespace
}  // namespace monta::testing
