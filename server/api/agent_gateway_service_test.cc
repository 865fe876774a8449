// The agent gateway's waiting calls on gRPC's callback API, through a real
// in-process planner on loopback: a WatchTasks stream receives a task
// scheduled after it opened, RendezvousGet waits for a Set, a cancelled Get
// gives its waiter back, a stream whose lease expires is ended, and
// GetBenchmarkTask shows a task pending, then running. The work a
// registration starts (--bench_on_register) holds up no registration.
#include "server/api/agent_gateway_service.h"

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/api/authz.h"
#include "server/planner_server.h"

namespace monta {
namespace {

// Bounds for waits that end as soon as the server does its part; only a
// broken server reaches them.
constexpr absl::Duration kBound = absl::Seconds(60);

class AgentGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PlannerOptions options;
    options.grpc_address = "127.0.0.1:0";
    // Transport security and authorization are tests/mtls_attack_test's.
    options.grpc_security.insecure = true;
    options.metrics_address = "";
    options.registry.lease = absl::Seconds(2);
    options.registry.heartbeat_interval = absl::Seconds(1);
    auto started = PlannerServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    planner_ = monta::v1::Planner::NewStub(channel);
    gateway_ = monta::v1::AgentGateway::NewStub(channel);
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(GrpcDeadline(kBound));
    return context;
  }

  void Register(const std::string& node) {
    monta::v1::RegisterRequest request;
    request.set_node_name(node);
    request.set_instance_id("i-" + node);
    monta::v1::RegisterReply reply;
    ASSERT_TRUE(gateway_->Register(Context().get(), request, &reply).ok());
  }

  // A benchmark of node-a scheduled by RunBenchmark: its task id, "" when
  // refused.
  std::string ScheduleOnNodeA() {
    monta::v1::RunBenchmarkRequest run;
    run.add_nodes("node-a");
    monta::v1::RunBenchmarkReply scheduled;
    const grpc::Status status =
        planner_->RunBenchmark(Context().get(), run, &scheduled);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return scheduled.status().task_id();
  }

  // node-a's WatchTasks stream on `context`.
  std::unique_ptr<grpc::ClientReader<monta::v1::BenchmarkTask>> WatchNodeA(
      grpc::ClientContext* context) {
    monta::v1::WatchTasksRequest watch;
    watch.set_node_name("node-a");
    watch.set_instance_id("i-node-a");
    return gateway_->WatchTasks(context, watch);
  }

  // Polls `done` until it holds or kBound passed.
  static bool Eventually(const std::function<bool()>& done) {
    const MonoTime end = MonoAfter(std::chrono::steady_clock::now(), kBound);
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  std::unique_ptr<PlannerServer> server_;
  std::unique_ptr<monta::v1::Planner::Stub> planner_;
  std::unique_ptr<monta::v1::AgentGateway::Stub> gateway_;
};

TEST_F(AgentGatewayTest, WatchGetsALaterTaskAndGetWaitsForSet) {
  Register("node-a");
  auto watch_context = Context();
  auto reader = WatchNodeA(watch_context.get());
  // The stream is registered once the server waits on node-a's queue.
  ASSERT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 1; }));

  const std::string task_id = ScheduleOnNodeA();
  ASSERT_FALSE(task_id.empty());
  monta::v1::BenchmarkTask task;
  ASSERT_TRUE(reader->Read(&task));
  EXPECT_EQ(task.task_id(), task_id);

  monta::v1::RendezvousGetRequest get;
  get.set_task_id(task.task_id());
  get.set_key("unique-id");
  get.set_wait_seconds(3600);
  monta::v1::RendezvousGetReply got;
  grpc::Status get_status;
  std::thread getter([&] {
    get_status = gateway_->RendezvousGet(Context().get(), get, &got);
  });
  // The Get waits (as a second waiter) until the key is set.
  ASSERT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 2; }));
  monta::v1::RendezvousSetRequest set;
  set.set_task_id(task.task_id());
  set.set_key("unique-id");
  set.set_value("42");
  monta::v1::RendezvousSetReply set_reply;
  ASSERT_TRUE(gateway_->RendezvousSet(Context().get(), set, &set_reply).ok());
  getter.join();
  ASSERT_TRUE(get_status.ok()) << get_status.error_message();
  EXPECT_EQ(got.value(), "42");
  watch_context->TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 0; }));
}

// GetBenchmarkTask (montactl task) over gRPC: a task pending, then running
// once its node's stream took it (started_at set), attempt 1 of the leader's
// memory; a bad id names the field, an unknown one is NOT_FOUND.
TEST_F(AgentGatewayTest, GetBenchmarkTaskShowsATaskPendingThenRunning) {
  Register("node-a");
  const std::string task_id = ScheduleOnNodeA();
  ASSERT_FALSE(task_id.empty());
  monta::v1::GetBenchmarkTaskRequest get;
  get.set_task_id(task_id);
  monta::v1::GetBenchmarkTaskReply pending;
  ASSERT_TRUE(planner_->GetBenchmarkTask(Context().get(), get, &pending).ok());
  EXPECT_EQ(pending.status().state(), monta::v1::TASK_STATE_PENDING);
  EXPECT_FALSE(pending.status().has_started_at());
  EXPECT_EQ(pending.task().task_id(), task_id);
  EXPECT_EQ(pending.attempt(), 1);
  EXPECT_EQ(pending.max_attempts(), 3);
  EXPECT_FALSE(pending.from_store());

  auto watch_context = Context();
  auto reader = WatchNodeA(watch_context.get());
  monta::v1::BenchmarkTask task;
  ASSERT_TRUE(reader->Read(&task));
  monta::v1::GetBenchmarkTaskReply running;
  ASSERT_TRUE(planner_->GetBenchmarkTask(Context().get(), get, &running).ok());
  EXPECT_EQ(running.status().state(), monta::v1::TASK_STATE_RUNNING);
  EXPECT_TRUE(running.status().has_started_at());
  watch_context->TryCancel();
  reader->Finish();

  for (const std::string& bad :
       {std::string(), std::string(257, 'x'), std::string("a/b")}) {
    get.set_task_id(bad);
    monta::v1::GetBenchmarkTaskReply reply;
    const grpc::Status refused =
        planner_->GetBenchmarkTask(Context().get(), get, &reply);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(refused.error_message().find("task_id: expected 1..256 bytes"),
              std::string::npos)
        << refused.error_message();
  }
  get.set_task_id("bench-0-0");
  monta::v1::GetBenchmarkTaskReply unknown;
  EXPECT_EQ(
      planner_->GetBenchmarkTask(Context().get(), get, &unknown).error_code(),
      grpc::StatusCode::NOT_FOUND);
}

TEST_F(AgentGatewayTest, CancelledGetGivesItsWaiterBack) {
  Register("node-a");
  const std::string task_id = ScheduleOnNodeA();
  ASSERT_FALSE(task_id.empty());
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(task_id);
  get.set_key("never-set");
  get.set_wait_seconds(3600);
  grpc::ClientContext context;
  monta::v1::RendezvousGetReply got;
  grpc::Status status;
  absl::Notification done;
  gateway_->async()->RendezvousGet(&context, &get, &got, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  ASSERT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 1; }));
  context.TryCancel();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // Freed now, not when its hour is up.
  EXPECT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 0; }));
}

TEST_F(AgentGatewayTest, WatchEndsWhenTheLeaseExpires) {
  Register("node-a");  // and never heartbeats: the 2 s lease runs out
  auto context = Context();
  auto reader = WatchNodeA(context.get());
  monta::v1::BenchmarkTask task;
  EXPECT_FALSE(reader->Read(&task));
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_NE(status.error_message().find("lease expired"), std::string::npos)
      << status.error_message();
}

// Three WatchTasks streams of one instance: each newer one ends the older
// with ABORTED saying why, and the newest gets the node's tasks; another
// node's stream, open throughout, is not touched.
TEST_F(AgentGatewayTest, ANewerWatchEndsTheOlderOne) {
  Register("node-a");
  Register("node-b");
  // Keeps the 2 s leases alive while the streams come and go.
  absl::Notification stop;
  std::thread heartbeats([&] {
    do {
      for (const std::string node : {"node-a", "node-b"}) {
        monta::v1::HeartbeatRequest beat;
        beat.set_node_name(node);
        beat.set_instance_id("i-" + node);
        monta::v1::HeartbeatReply reply;
        gateway_->Heartbeat(Context().get(), beat, &reply);
      }
    } while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  });
  monta::v1::WatchTasksRequest other;
  other.set_node_name("node-b");
  other.set_instance_id("i-node-b");
  std::unique_ptr<grpc::ClientContext> other_context = Context();
  auto other_reader = gateway_->WatchTasks(other_context.get(), other);
  ASSERT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 1; }));
  monta::v1::WatchTasksRequest watch;
  watch.set_node_name("node-a");
  watch.set_instance_id("i-node-a");
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<monta::v1::BenchmarkTask>>>
      readers;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(Context());
    readers.push_back(gateway_->WatchTasks(contexts.back().get(), watch));
    if (i == 0) {
      ASSERT_TRUE(Eventually(
          [&] { return server_->coordinator().waiter_count() == 2; }));
      continue;
    }
    monta::v1::BenchmarkTask task;
    EXPECT_FALSE(readers[i - 1]->Read(&task));
    const grpc::Status ended = readers[i - 1]->Finish();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED) << i;
    EXPECT_EQ(ended.error_message(),
              "superseded by a newer WatchTasks stream of this instance");
  }
  ASSERT_TRUE(
      Eventually([&] { return server_->coordinator().waiter_count() == 2; }));
  const std::string task_id = ScheduleOnNodeA();
  ASSERT_FALSE(task_id.empty());
  monta::v1::BenchmarkTask task;
  ASSERT_TRUE(readers[2]->Read(&task));
  EXPECT_EQ(task.task_id(), task_id);
  stop.Notify();
  heartbeats.join();
  contexts[2]->TryCancel();
  EXPECT_EQ(readers[2]->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // node-b's stream was open until its own cancellation, never superseded.
  other_context->TryCancel();
  EXPECT_EQ(other_reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(AgentGatewayTest, GetWithoutTheKeyTimesOutNamingIt) {
  Register("node-a");
  const std::string task_id = ScheduleOnNodeA();
  ASSERT_FALSE(task_id.empty());
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(task_id);
  get.set_key("never-set");
  get.set_wait_seconds(0);
  monta::v1::RendezvousGetReply got;
  const grpc::Status status =
      gateway_->RendezvousGet(Context().get(), get, &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(status.error_message().find("never-set"), std::string::npos)
      << status.error_message();
}

// A store that takes every change at once.
class AcceptingStore : public registry::RegistryObserver {
 public:
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<registry::Change>&) override {
    return {};
  }
};

// The registered callback (the planner's --bench_on_register schedule, a
// store write) runs off the registry's delivery thread, which answers every
// registration: while it hangs on node-a, node-a's and node-b's Registers are
// answered; it then runs for both, in registration order. (It ran on the
// delivery thread before the agent's answer: node-a's Register waited for
// it, and every registration behind it.)
TEST(AgentGatewayRegisteredTest, ItsWorkHoldsUpNoRegistration) {
  registry::Registry registry{registry::RegistryOptions{}};
  AcceptingStore store;
  registry.SetObserver(&store);
  coordination::Coordinator coordinator(&registry, {});
  api::Authorizer authz(/*enforce=*/false, &coordinator);
  absl::Notification entered, release;
  absl::Mutex mu;
  std::vector<std::string> ran;
  auto gateway = std::make_unique<api::AgentGatewayService>(
      &registry, &coordinator, &authz, [&](const std::string& node) {
        if (!entered.HasBeenNotified()) entered.Notify();
        release.WaitForNotification();
        absl::MutexLock lock(&mu);
        ran.push_back(node);
      });
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(gateway.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = monta::v1::AgentGateway::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  for (const char* node : {"node-a", "node-b"}) {
    monta::v1::RegisterRequest request;
    request.set_node_name(node);
    request.set_instance_id(std::string("i-") + node);
    monta::v1::RegisterReply reply;
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(kBound));
    const grpc::Status status = stub->Register(&context, request, &reply);
    EXPECT_TRUE(status.ok()) << node << ": " << status.error_message();
  }
  // Both answered while the work on node-a may hang still.
  release.Notify();
  server->Shutdown();
  gateway.reset();  // runs what is still queued
  EXPECT_EQ(ran, (std::vector<std::string>{"node-a", "node-b"}));
}

}  // namespace
}  // namespace monta
