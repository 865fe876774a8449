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

// How a run of a task that does not place node-a (it fails without running
// anything; its failure is still reported) ended.
struct RunEnd {
  std::string finished;  // what on_finished was told
  bool counted = false;  // the report was counted dropped
};

// Runs that task with its report going to `address`.
RunEnd RunTask(const std::string& address, int timeout_seconds) {
  prometheus::Registry registry;
  AgentMetrics metrics(registry, "node-a", [] { return true; });
  BenchRunnerOptions options;
  options.node_name = "node-a";
  options.on_discarded_error = [&metrics](const std::string& site) {
    metrics.RecordDiscardedError(site);
  };
  RunEnd run;
  options.on_finished = [&run](const std::string& result) {
    run.finished = result;
  };
  auto stub = monta::v1::AgentGateway::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  monta::v1::BenchmarkTask task;
  task.set_task_id("t-1");
  task.add_nodes("node-b");
  task.set_ranks_per_node(1);
  task.set_timeout_seconds(timeout_seconds);
  Cancellation cancel;
  MakeBenchRunner(options)(task, stub.get(), cancel);
  const std::string out =
      prometheus::TextSerializer().Serialize(registry.Collect());
  run.counted = out.find(
                    "monta_agent_discarded_errors_total{node=\"node-a\",site="
                    "\"report_benchmark\"} 1") != std::string::npos;
  return run;
}

TEST(BenchRunnerTest, AReportThePlannerDoesNotTakeIsCounted) {
  // No planner behind this socket: the report fails at once (UNAVAILABLE).
  const RunEnd run = RunTask("unix:/nonexistent-monta-dir/planner.sock", 0);
  EXPECT_EQ(run.finished, "failed");
  EXPECT_TRUE(run.counted);
}

// A planner whose store is behind for the first `refusals` reports: it
// refuses them RESOURCE_EXHAUSTED, taking nothing, as the coordinator does
// (or with `code`, a refusal of another kind).
class BusyGateway : public monta::v1::AgentGateway::CallbackService {
 public:
  explicit BusyGateway(int refusals, grpc::StatusCode code =
                                         grpc::StatusCode::RESOURCE_EXHAUSTED)
      : refusals_(refusals), code_(code) {}
  grpc::ServerUnaryReactor* ReportBenchmark(
      grpc::CallbackServerContext* context,
      const monta::v1::ReportBenchmarkRequest* request,
      monta::v1::ReportBenchmarkReply* reply) override {
    absl::MutexLock lock(&mu_);
    ++reports_;
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(reports_ <= refusals_
                        ? grpc::Status(code_,
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
  const grpc::StatusCode code_;
  absl::Mutex mu_;
  int reports_ ABSL_GUARDED_BY(mu_) = 0;
};

// RunTask with the report going to `gateway`, served on loopback.
RunEnd RunAgainst(BusyGateway& gateway, int timeout_seconds) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&gateway);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  const RunEnd run = RunTask(absl::StrCat("127.0.0.1:", port), timeout_seconds);
  server->Shutdown();
  return run;
}

// A report refused because the planner's store is behind is sent again
// after a backoff until the planner takes it: nothing is dropped.
TEST(BenchRunnerTest, AReportRefusedWhileThePlannerIsBehindIsSentAgain) {
  BusyGateway gateway(/*refusals=*/2);
  EXPECT_FALSE(RunAgainst(gateway, /*timeout_seconds=*/60).counted);
  EXPECT_EQ(gateway.reports(), 3);
}

// Refused until the task's deadline: the agent stops sending and counts the
// report dropped (the planner fails the task at its deadline).
TEST(BenchRunnerTest, AReportRefusedUntilTheDeadlineIsCountedDropped) {
  BusyGateway gateway(/*refusals=*/1000);
  EXPECT_TRUE(RunAgainst(gateway, /*timeout_seconds=*/2).counted);
  EXPECT_GT(gateway.reports(), 1);
}

// A refusal that the same report would get again (a task unknown or of
// another leader, a report out of bounds, a node that may not report, one
// already taken, a replica that does not lead) is not sent again: one try,
// counted dropped at once, long before the task's deadline.
TEST(BenchRunnerTest, AReportRefusedForGoodIsSentOnce) {
  for (const grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT,
        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::PERMISSION_DENIED, grpc::StatusCode::ALREADY_EXISTS,
        grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::UNAUTHENTICATED}) {
    BusyGateway gateway(/*refusals=*/1000, code);
    const RunEnd run = RunAgainst(gateway, /*timeout_seconds=*/600);
    EXPECT_TRUE(run.counted) << code;
    EXPECT_EQ(run.finished, "failed") << code;
    EXPECT_EQ(gateway.reports(), 1) << code;
  }
}

}  // namespace
}  // namespace monta::agent
