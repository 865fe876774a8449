// The agent's planner connection against real in-process gRPC gateways:
// several planner endpoints (a follower that refuses, then the leader), and
// tasks of an older leader epoch ignored.
#include "agent/runtime/agent_runtime.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/agent.grpc.pb.h"

namespace monta::agent {
namespace {

// A planner replica: a follower refuses every call UNAVAILABLE, as
// monta-planner's do; the leader registers the node with its epoch and
// streams the tasks it was given.
class Gateway : public monta::v1::AgentGateway::Service {
 public:
  Gateway(bool leading, int64_t epoch,
          std::vector<monta::v1::BenchmarkTask> tasks = {})
      : leading_(leading), epoch_(epoch), tasks_(std::move(tasks)) {}

  grpc::Status Register(grpc::ServerContext*, const monta::v1::RegisterRequest*,
                        monta::v1::RegisterReply* reply) override {
    if (!leading_) return NotLeader();
    absl::MutexLock lock(&mu_);
    ++registrations_;
    reply->set_lease_seconds(5);
    reply->set_heartbeat_interval_seconds(0.2);
    reply->set_leader_epoch(epoch_);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*,
                         const monta::v1::HeartbeatRequest*,
                         monta::v1::HeartbeatReply* reply) override {
    if (!leading_) return NotLeader();
    reply->set_lease_seconds(5);
    reply->set_leader_epoch(epoch_);
    return grpc::Status::OK;
  }
  grpc::Status WatchTasks(
      grpc::ServerContext* context, const monta::v1::WatchTasksRequest*,
      grpc::ServerWriter<monta::v1::BenchmarkTask>* writer) override {
    if (!leading_) return NotLeader();
    std::vector<monta::v1::BenchmarkTask> tasks;
    {
      absl::MutexLock lock(&mu_);
      tasks.swap(tasks_);
    }
    for (const auto& task : tasks) writer->Write(task);
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(20));
    return grpc::Status::OK;
  }
  grpc::Status ReportBenchmark(grpc::ServerContext*,
                               const monta::v1::ReportBenchmarkRequest*,
                               monta::v1::ReportBenchmarkReply*) override {
    return grpc::Status::OK;
  }
  int registrations() {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }

 private:
  static grpc::Status NotLeader() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "not the leader (leader: unknown)");
  }
  const bool leading_;
  const int64_t epoch_;
  absl::Mutex mu_;
  std::vector<monta::v1::BenchmarkTask> tasks_ ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Running {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

Running Serve(Gateway* gateway) {
  Running r;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &r.port);
  builder.RegisterService(gateway);
  r.server = builder.BuildAndStart();
  return r;
}

monta::v1::BenchmarkTask Task(const std::string& id, int64_t epoch) {
  monta::v1::BenchmarkTask task;
  task.set_task_id(id);
  task.add_nodes("node-a");
  task.set_ranks_per_node(1);
  task.set_leader_epoch(epoch);
  return task;
}

TEST(AgentRuntimeTest, MovesPastAFollowerAndIgnoresTasksOfAnOlderEpoch) {
  Gateway follower(/*leading=*/false, 0);
  Gateway leader(/*leading=*/true, 5,
                 {Task("of-epoch-3", 3), Task("of-epoch-5", 5)});
  Running f = Serve(&follower);
  Running l = Serve(&leader);
  ASSERT_GT(f.port, 0);
  ASSERT_GT(l.port, 0);

  absl::Mutex mu;
  std::vector<std::string> ran;
  AgentOptions options;
  options.planner_address =
      absl::StrCat("127.0.0.1:", f.port, ",127.0.0.1:", l.port);
  options.node_name = "node-a";
  options.instance_id = "i-1";
  options.initial_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(50);
  options.rpc_timeout = absl::Seconds(2);
  options.runner = [&](const monta::v1::BenchmarkTask& task,
                       monta::v1::AgentGateway::StubInterface*, Cancellation&) {
    absl::MutexLock lock(&mu);
    ran.push_back(task.task_id());
  };
  AgentRuntime agent(options);
  agent.Start();
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    {
      absl::MutexLock lock(&mu);
      if (!ran.empty()) break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  agent.Stop();
  f.server->Shutdown();
  l.server->Shutdown();

  EXPECT_EQ(follower.registrations(), 0);
  EXPECT_GE(leader.registrations(), 1);
  EXPECT_EQ(agent.newest_epoch(), 5);
  EXPECT_EQ(agent.stale_tasks(), 1);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ran, std::vector<std::string>{"of-epoch-5"});
}

}  // namespace
}  // namespace monta::agent
