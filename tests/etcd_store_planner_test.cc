// The planner on etcd (--store=etcd, issue 20 item 2): one planner replica on
// a real three-member etcd (tests/testing/etcd_cluster) and two real agents on
// loopback. The agents register and measure themselves; the planner is
// SIGKILLed and started again on the same etcd: the nodes and their curves
// are back, loaded from etcd. A follower's GetBenchmarkTask (an etcd read)
// holds none of gRPC's callback threads: with etcd stopped and many such calls
// waiting, the replica still answers other RPCs.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/grpc_clients.h"

namespace monta::testing {
namespace {

TEST(EtcdStorePlannerTest, NodesAndCurvesSurviveAPlannerRestartOnEtcd) {
  EtcdCluster::Options options;
  options.members = 3;
  auto etcd = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::vector<std::string> store_flags = {
      "--store=etcd",
      "--etcd_endpoints=" + absl::StrJoin((*etcd)->endpoints(), ","),
      "--etcd_insecure", "--etcd_prefix=/planner-test/",
      "--leader_lease_seconds=2"};
  LocalCluster cluster;
  ASSERT_TRUE(cluster.StartPlanner(store_flags).ok());
  // The one replica leads once the election says so.
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)));
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());
  // The node's JSON, or a non-object while montactl fails (not registered
  // yet).
  const auto json = [&](const CommandResult& r) {
    return r.exit_code == 0 ? nlohmann::json::parse(r.out, nullptr, false)
                            : nlohmann::json();
  };
  // The agents measure themselves on registration: each node's curves.
  std::map<std::string, std::vector<std::string>> tasks;
  const auto curves_of = [&](const std::string& name) {
    std::vector<std::string> out;
    nlohmann::json node =
        json(cluster.Montactl({"--output=json", "node", name}));
    if (!node.is_object()) return out;
    for (const auto& curve : node["curves"]) out.push_back(curve["task_id"]);
    return out;
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const char* name : {"node-a", "node-b"}) {
          tasks[name] = curves_of(name);
          if (tasks[name].size() < 3) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  const int port = cluster.grpc_port();
  cluster.planner().Signal(SIGKILL);
  ASSERT_TRUE(cluster.planner().Wait(absl::Seconds(5)).ok());
  // Without bench-on-register and without --db: whatever it shows came from
  // etcd.
  std::vector<std::string> restart_flags = store_flags;
  restart_flags.push_back("--bench_on_register=false");
  ASSERT_TRUE(cluster.StartPlanner(restart_flags, port).ok());
  // It leads once the killed replica's election key ran out (2 s).
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)))
      << ReadFile(cluster.planner().log_path());
  for (const char* name : {"node-a", "node-b"}) {
    nlohmann::json node =
        json(cluster.Montactl({"--output=json", "node", name}));
    ASSERT_TRUE(node.is_object()) << name;
    EXPECT_EQ(node["name"], name);
    EXPECT_EQ(curves_of(name), tasks[name]) << node.dump(1);
  }
  // The agents carry on with the restarted planner.
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster.AllAlive({"node-a", "node-b"});
      },
      absl::Seconds(20)));
}

// etcd down: the planner keeps answering from memory but says NOT_SERVING
// for monta.v1.Planner until a commit to etcd succeeds again.
TEST(EtcdStorePlannerTest, FailedCommitsMakeThePlannerNotServingUntilOneLands) {
  EtcdCluster::Options options;
  options.members = 1;
  auto etcd = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  LocalCluster cluster;
  ASSERT_TRUE(cluster
                  .StartPlanner({"--store=etcd",
                                 "--etcd_endpoints=" + (*etcd)->endpoint(0),
                                 "--etcd_insecure", "--bench_on_register=false",
                                 "--leader_lease_seconds=2"})
                  .ok());
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)));
  (*etcd)->Kill(0);
  ASSERT_TRUE(cluster.StartAgent("node-a").ok());  // registers: a node commit
  EXPECT_TRUE(cluster.WaitForPlannerHealth("NOT_SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
  EXPECT_NE(ReadFile(cluster.planner().log_path()).find("etcd store"),
            std::string::npos);
  ASSERT_TRUE((*etcd)->Restart(0).ok());
  ASSERT_TRUE(cluster.StartAgent("node-b").ok());  // the next commit lands
  EXPECT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(30)))
      << ReadFile(cluster.planner().log_path());
}

// GetBenchmarkTask calls in flight, and how those that ended did.
class TaskCalls {
 public:
  // The callbacks use this object: a test that failed early cancels them.
  ~TaskCalls() {
    for (auto& call : calls_) call->context.TryCancel();
    WaitAll(absl::Seconds(60));
  }
  // Sends `count` calls of unknown task ids on `stub`, not waiting.
  void Send(monta::v1::Planner::Stub& stub, int count) {
    for (int i = 0; i < count; ++i) {
      calls_.push_back(std::make_unique<Call>());
      Call& call = *calls_.back();
      call.context.set_deadline(std::chrono::system_clock::now() +
                                std::chrono::seconds(120));
      call.request.set_task_id(absl::StrCat("bench-1-", i));
      stub.async()->GetBenchmarkTask(&call.context, &call.request, &call.reply,
                                     [this](grpc::Status status) {
                                       absl::MutexLock lock(&mu_);
                                       ended_.push_back(std::move(status));
                                     });
    }
  }
  std::vector<grpc::Status> Ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  // Waits until every call ended.
  bool WaitAll(absl::Duration timeout) {
    return WaitFor([&] { return Ended().size() == calls_.size(); }, timeout);
  }

 private:
  struct Call {
    grpc::ClientContext context;
    monta::v1::GetBenchmarkTaskRequest request;
    monta::v1::GetBenchmarkTaskReply reply;
  };
  std::vector<std::unique_ptr<Call>> calls_;
  absl::Mutex mu_;
  std::vector<grpc::Status> ended_ ABSL_GUARDED_BY(mu_);
};

bool Refused(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// A leader and a follower on three etcd members (a read of a stopped
// cluster then tries each, 2-5 s apiece: a wide window); `cluster` points at
// the follower once its cache is in sync. Empty on failure.
std::unique_ptr<EtcdCluster> StartLeaderAndFollower(LocalCluster& cluster) {
  EtcdCluster::Options options;
  options.members = 3;
  auto etcd = EtcdCluster::Start(std::move(options));
  EXPECT_TRUE(etcd.ok()) << etcd.status();
  if (!etcd.ok()) return nullptr;
  const std::vector<std::string> flags = {
      "--store=etcd",
      "--etcd_endpoints=" + absl::StrJoin((*etcd)->endpoints(), ","),
      "--etcd_insecure", "--bench_on_register=false",
      "--leader_lease_seconds=2",
      // The follower keeps answering reads while etcd is stopped.
      "--follower_max_lag_seconds=600"};
  EXPECT_TRUE(cluster.StartPlanner(flags).ok());
  EXPECT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)));
  absl::StatusOr<int> follower = cluster.StartReplica(flags);
  EXPECT_TRUE(follower.ok()) << follower.status();
  if (!follower.ok()) return nullptr;
  cluster.UsePlanner(*follower);
  const bool in_sync = WaitFor(
      [&] {
        return cluster.Montactl({"health", "monta.v1.Planner.read"}).out ==
               "SERVING\n";
      },
      absl::Seconds(20));
  EXPECT_TRUE(in_sync) << ReadFile(cluster.replica(*follower).log_path());
  return in_sync ? *std::move(etcd) : nullptr;
}

// A follower reads GetBenchmarkTask's task from etcd: on a few threads of its
// own (server/api/planner_service.h), never on gRPC's callback threads, and
// refusing RESOURCE_EXHAUSTED past a bound. With etcd stopped (SIGSTOP: every
// read waits for each member's deadline) and many such calls in flight, the
// follower still answers ListProfiles while none of those reads has finished
// (before the fix ListProfiles timed out after 60 s); the calls past the bound
// are refused naming it, the others end once etcd is back.
TEST(EtcdStorePlannerTest, AFollowersStoreReadsHoldNoCallbackThread) {
  LocalCluster cluster;
  std::unique_ptr<EtcdCluster> etcd = StartLeaderAndFollower(cluster);
  ASSERT_NE(etcd, nullptr);
  std::shared_ptr<grpc::Channel> channel =
      PlannerChannel(cluster, cluster.OperatorTlsFlags());
  ASSERT_NE(channel, nullptr);
  auto stub = monta::v1::Planner::NewStub(channel);
  monta::v1::ListProfilesReply profiles;
  ASSERT_TRUE(
      stub->ListProfiles(ContextWithDeadline().get(), {}, &profiles).ok());

  for (int i = 0; i < etcd->size(); ++i) etcd->Pause(i);
  // Far more calls than gRPC 1.51 has callback threads on this box.
  constexpr int kCalls = 200;
  TaskCalls calls;
  calls.Send(*stub, kCalls);
  // The calls past the bound are refused at once: all reached the replica.
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::vector<grpc::Status> ended = calls.Ended();
        return std::count_if(ended.begin(), ended.end(), Refused) > 0;
      },
      absl::Seconds(60)));
  const grpc::Status answered =
      stub->ListProfiles(ContextWithDeadline(60).get(), {}, &profiles);
  const std::vector<grpc::Status> ended_before = calls.Ended();
  for (int i = 0; i < etcd->size(); ++i) etcd->Resume(i);
  EXPECT_TRUE(answered.ok()) << answered.error_message();
  int refused = 0;
  for (const grpc::Status& s : ended_before) {
    // No store read had finished (etcd was stopped) when ListProfiles
    // answered: it did not wait for a thread they held.
    EXPECT_TRUE(Refused(s)) << s.error_code() << " " << s.error_message();
    if (!Refused(s)) continue;
    ++refused;
    EXPECT_NE(s.error_message().find("GetBenchmarkTask store reads"),
              std::string::npos)
        << s.error_message();
  }
  EXPECT_GT(refused, 0);
  EXPECT_LT(refused, kCalls);
  ASSERT_TRUE(calls.WaitAll(absl::Seconds(100)));
  std::cerr << "ListProfiles answered while " << kCalls - refused
            << " GetBenchmarkTask calls were running, queued or not yet "
               "refused ("
            << refused << " refused at the bound by then)" << std::endl;
}

}  // namespace
}  // namespace monta::testing
