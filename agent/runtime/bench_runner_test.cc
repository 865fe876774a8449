#include "agent/runtime/bench_runner.h"

#include <string>

#include "agent/runtime/agent_metrics.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace monta::agent {
namespace {

TEST(BenchRunnerTest, AReportThePlannerDoesNotTakeIsCounted) {
  prometheus::Registry registry;
  AgentMetrics metrics(registry, "node-a", [] { return true; });
  BenchRunnerOptions options;
  options.node_name = "node-a";
  options.on_discarded_error = [&metrics](const std::string& site) {
    metrics.RecordDiscardedError(site);
  };
  std::string finished;
  options.on_finished = [&finished](const std::string& result) {
    finished = result;
  };
  // No planner behind this socket: the report fails at once (UNAVAILABLE).
  auto stub = monta::v1::AgentGateway::NewStub(
      grpc::CreateChannel("unix:/nonexistent-monta-dir/planner.sock",
                          grpc::InsecureChannelCredentials()));
  // A task that does not place this node fails without running anything.
  monta::v1::BenchmarkTask task;
  task.set_task_id("t-1");
  task.add_nodes("node-b");
  task.set_ranks_per_node(1);
  Cancellation cancel;
  MakeBenchRunner(options)(task, stub.get(), cancel);

  EXPECT_EQ(finished, "failed");
  const std::string out =
      prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(out.find("monta_agent_discarded_errors_total{node=\"node-a\",site="
                     "\"report_benchmark\"} 1"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace monta::agent
