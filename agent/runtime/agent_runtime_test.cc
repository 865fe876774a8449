// The agent's planner connection against real in-process gRPC gateways:
// several planner endpoints (a follower that refuses, then the leader), tasks
// of an older leader epoch ignored, a run of an older epoch dropped at once
// (unreported) when a newer leader shows up, and heartbeats spread over the
// replicas (a planner on etcd), moving on when one goes.
#include "agent/runtime/agent_runtime.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent/runtime/bench_runner.h"
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
  // `beats_anywhere`: a follower answers heartbeats (a planner on etcd).
  Gateway(bool leading, int64_t epoch,
          std::vector<monta::v1::BenchmarkTask> tasks = {},
          bool beats_anywhere = false)
      : leading_(leading),
        beats_anywhere_(beats_anywhere),
        epoch_(epoch),
        tasks_(std::move(tasks)) {}

  grpc::Status Register(grpc::ServerContext*, const monta::v1::RegisterRequest*,
                        monta::v1::RegisterReply* reply) override {
    if (!leading_ || dead_) return NotLeader();
    absl::MutexLock lock(&mu_);
    ++registrations_;
    reply->set_lease_seconds(5);
    reply->set_heartbeat_interval_seconds(0.2);
    reply->set_leader_epoch(epoch_);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*,
                         const monta::v1::HeartbeatRequest* request,
                         monta::v1::HeartbeatReply* reply) override {
    if ((!leading_ && !beats_anywhere_) || dead_) return NotLeader();
    {
      absl::MutexLock lock(&mu_);
      beats_[request->node_name()] += 1;
      if (request->has_topology()) ++topology_beats_;
    }
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
    while (!context->IsCancelled() && !dead_) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return dead_ ? NotLeader() : grpc::Status::OK;
  }
  grpc::Status RendezvousSet(grpc::ServerContext*,
                             const monta::v1::RendezvousSetRequest*,
                             monta::v1::RendezvousSetReply*) override {
    return dead_ ? NotLeader() : grpc::Status::OK;
  }
  // No key ever comes (the task's other node never joins): waits until the
  // caller gives up or this replica dies.
  grpc::Status RendezvousGet(grpc::ServerContext* context,
                             const monta::v1::RendezvousGetRequest*,
                             monta::v1::RendezvousGetReply*) override {
    ++gets_;
    while (!context->IsCancelled() && !dead_) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return NotLeader();
  }
  grpc::Status ReportBenchmark(grpc::ServerContext*,
                               const monta::v1::ReportBenchmarkRequest* request,
                               monta::v1::ReportBenchmarkReply*) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(*request);
    return dead_ ? NotLeader() : grpc::Status::OK;
  }
  int registrations() {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  // Every report that reached this replica (dead or not).
  std::vector<monta::v1::ReportBenchmarkRequest> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  int gets() const { return gets_.load(); }
  // SIGKILL, as the agent sees it: every call fails UNAVAILABLE from now on.
  void Die() { dead_ = true; }
  // Heartbeats by node, and those that carried a topology.
  std::map<std::string, int> beats() {
    absl::MutexLock lock(&mu_);
    return beats_;
  }
  int topology_beats() {
    absl::MutexLock lock(&mu_);
    return topology_beats_;
  }

 private:
  static grpc::Status NotLeader() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "not the leader (leader: unknown)");
  }
  const bool leading_;
  const bool beats_anywhere_;
  const int64_t epoch_;
  std::atomic<bool> dead_{false};
  std::atomic<int> gets_{0};
  absl::Mutex mu_;
  std::vector<monta::v1::BenchmarkTask> tasks_ ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<monta::v1::ReportBenchmarkRequest> reports_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> beats_ ABSL_GUARDED_BY(mu_);
  int topology_beats_ ABSL_GUARDED_BY(mu_) = 0;
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

// An agent of node-a that knows both replicas, retrying fast.
AgentOptions TwoReplicas(const Running& first, const Running& second) {
  AgentOptions options;
  options.planner_address =
      absl::StrCat("127.0.0.1:", first.port, ",127.0.0.1:", second.port);
  options.node_name = "node-a";
  options.instance_id = "i-1";
  options.initial_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(50);
  options.rpc_timeout = absl::Seconds(2);
  return options;
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
  AgentOptions options = TwoReplicas(f, l);
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

// Polls `done` every 20 ms for up to 30 s; only a broken agent waits that long.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// The leader of epoch 3 hands out a task of two nodes (an hour's timeout) and
// dies while this node waits at its rendezvous for the other. Once the agent
// registers with the leader of epoch 4 it drops that run at once, reports
// nothing for it (to neither replica), and takes epoch 4's attempt of the
// same task from the new leader (which fails at once here: it does not place
// the node) and reports that. Without the drop the run would wait out its
// hour and the test its 30 s.
TEST(AgentRuntimeTest, ANewerLeaderEpochDropsTheOlderRunUnreported) {
  monta::v1::BenchmarkTask old_run = Task("bench-1", 3);
  old_run.add_nodes("node-b");
  old_run.set_backend(monta::v1::BACKEND_GLOO);
  old_run.add_collectives(monta::v1::COLLECTIVE_ALLTOALL);
  old_run.set_timeout_seconds(3600);
  monta::v1::BenchmarkTask new_attempt = Task("bench-1", 4);
  new_attempt.set_nodes(0, "node-c");
  Gateway old_leader(/*leading=*/true, 3, {old_run});
  Gateway new_leader(/*leading=*/true, 4, {new_attempt});
  Running o = Serve(&old_leader);
  Running n = Serve(&new_leader);
  ASSERT_GT(o.port, 0);
  ASSERT_GT(n.port, 0);

  absl::Mutex mu;
  std::vector<std::string> results;
  BenchRunnerOptions bench;
  bench.node_name = "node-a";
  bench.on_finished = [&](const std::string& result) {
    absl::MutexLock lock(&mu);
    results.push_back(result);
  };
  AgentOptions options = TwoReplicas(o, n);
  options.runner = MakeBenchRunner(bench);
  AgentRuntime agent(options);
  agent.Start();
  // node-a joined and waits for node-b at the old leader's rendezvous.
  ASSERT_TRUE(Eventually([&] { return old_leader.gets() > 0; }));
  old_leader.Die();
  ASSERT_TRUE(Eventually([&] { return !new_leader.reports().empty(); }));
  agent.Stop();
  o.server->Shutdown();
  n.server->Shutdown();

  EXPECT_EQ(agent.newest_epoch(), 4);
  EXPECT_EQ(agent.superseded_runs(), 1);
  EXPECT_TRUE(old_leader.reports().empty());
  const std::vector<monta::v1::ReportBenchmarkRequest> reports =
      new_leader.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].task_id(), "bench-1");
  EXPECT_EQ(reports[0].leader_epoch(), 4);
  absl::MutexLock lock(&mu);
  // The dropped run unwinds on its own thread while the new one runs.
  std::sort(results.begin(), results.end());
  EXPECT_EQ(results, (std::vector<std::string>{"failed", "superseded"}));
}

// A planner on etcd: every replica takes heartbeats. Agents spread their
// heartbeats over the replicas by their names' hash and register, watch and
// send topology refreshes at the leader only; when a follower goes, its
// agents heartbeat to the next replica without registering again.
TEST(AgentRuntimeTest, HeartbeatsSpreadOverReplicasAndMoveWhenOneGoes) {
  Gateway follower(/*leading=*/false, 0, {}, /*beats_anywhere=*/true);
  Gateway leader(/*leading=*/true, 5);
  Running f = Serve(&follower);
  Running l = Serve(&leader);
  ASSERT_GT(f.port, 0);
  ASSERT_GT(l.port, 0);
  std::vector<std::unique_ptr<AgentRuntime>> agents;
  for (int i = 0; i < 8; ++i) {
    AgentOptions options;
    options.planner_address =
        absl::StrCat("127.0.0.1:", f.port, ",127.0.0.1:", l.port);
    options.node_name = absl::StrCat("node-", i);
    options.initial_backoff = absl::Milliseconds(10);
    options.max_backoff = absl::Milliseconds(50);
    options.rpc_timeout = absl::Seconds(2);
    options.topology_refresh = absl::Milliseconds(500);
    options.discover = [] { return monta::v1::NodeTopology(); };
    agents.push_back(std::make_unique<AgentRuntime>(options));
    agents.back()->Start();
  }
  // Every agent heartbeats somewhere, and both replicas get some.
  const auto beating = [&] {
    std::map<std::string, int> all = follower.beats();
    for (const auto& [node, n] : leader.beats()) all[node] += n;
    return all.size() == 8 && follower.beats().size() >= 1 &&
           leader.topology_beats() >= 1;
  };
  EXPECT_TRUE(Eventually(beating));
  EXPECT_EQ(follower.registrations(), 0);
  EXPECT_EQ(leader.registrations(), 8);
  // Topology refreshes go to the leader, never to a follower.
  EXPECT_EQ(follower.topology_beats(), 0);
  const size_t on_follower = follower.beats().size();
  EXPECT_GT(on_follower, 0u);
  EXPECT_LT(on_follower, 8u);

  // The follower goes: its agents heartbeat to the leader, registered once.
  f.server->Shutdown();
  const std::map<std::string, int> before = leader.beats();
  EXPECT_TRUE(Eventually([&] {
    const std::map<std::string, int> now = leader.beats();
    if (now.size() != 8) return false;
    for (const auto& [node, n] : now) {
      auto it = before.find(node);
      if (it != before.end() && it->second >= n) return false;
    }
    return true;
  }));
  for (auto& agent : agents) agent->Stop();
  l.server->Shutdown();
  EXPECT_EQ(leader.registrations(), 8);
}

}  // namespace
}  // namespace monta::agent
