#include "agent/runtime/bench_runner.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/runtime/agent_metrics.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
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

// A planner whose store is behind for the first `refusals` reports: it
// refuses them RESOURCE_EXHAUSTED, taking nothing, as the coordinator does.
class BusyGateway : public monta::v1::AgentGateway::CallbackService {
 public:
  explicit BusyGateway(int refusals) : refusals_(refusals) {}
  grpc::ServerUnaryReactor* ReportBenchmark(
      grpc::CallbackServerContext* context,
      const monta::v1::ReportBenchmarkRequest* request,
      monta::v1::ReportBenchmarkReply* reply) override {
    absl::MutexLock lock(&mu_);
    ++reports_;
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(reports_ <= refusals_
                        ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       "ReportBenchmark refused: the planner "
                                       "is overloaded; retry after a backoff")
                        : grpc::Status::OK);
    return reactor;
  }
  int reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  const int refusals_;
  absl::Mutex mu_;
  int reports_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs a task that does not place node-a (its failure is still reported)
// against `gateway`; returns the discarded-error counter's line ("" when
// none was counted).
std::string RunAgainst(BusyGateway& gateway, int timeout_seconds) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&gateway);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  prometheus::Registry registry;
  AgentMetrics metrics(registry, "node-a", [] { return true; });
  BenchRunnerOptions options;
  options.node_name = "node-a";
  options.on_discarded_error = [&metrics](const std::string& site) {
    metrics.RecordDiscardedError(site);
  };
  auto stub = monta::v1::AgentGateway::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  monta::v1::BenchmarkTask task;
  task.set_task_id("t-1");
  task.add_nodes("node-b");
  task.set_ranks_per_node(1);
  task.set_timeout_seconds(timeout_seconds);
  Cancellation cancel;
  MakeBenchRunner(options)(task, stub.get(), cancel);
  server->Shutdown();
  const std::string out =
      prometheus::TextSerializer().Serialize(registry.Collect());
  const std::string line =
      "monta_agent_discarded_errors_total{node=\"node-a\",site="
      "\"report_benchmark\"} 1";
  return out.find(line) != std::string::npos ? line : "";
}

// A report refused because the planner's store is behind is sent again
// after a backoff until the planner takes it: nothing is dropped.
TEST(BenchRunnerTest, AReportRefusedWhileThePlannerIsBehindIsSentAgain) {
  BusyGateway gateway(/*refusals=*/2);
  EXPECT_EQ(RunAgainst(gateway, /*timeout_seconds=*/60), "");
  EXPECT_EQ(gateway.reports(), 3);
}

// Refused until the task's deadline: the agent stops sending and counts the
// report dropped (the planner fails the task at its deadline).
TEST(BenchRunnerTest, AReportRefusedUntilTheDeadlineIsCountedDropped) {
  BusyGateway gateway(/*refusals=*/1000);
  EXPECT_NE(RunAgainst(gateway, /*timeout_seconds=*/2), "");
  EXPECT_GT(gateway.reports(), 1);
}

}  // namespace
}  // namespace monta::agent
