// Rendezvous memory against the real planner binary over mutual TLS, with
// four nodes each calling as itself (its own certificate): across 16 tasks
// one node stops at its share (--max_rendezvous_bytes_per_node) while the
// others still set their keys, all together stop at the planner-wide cap
// (--max_rendezvous_bytes), monta_planner_held_bytes{kind="rendezvous"} says
// what is held, and ending the tasks gives it all back.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/grpc_clients.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

constexpr int kEntryBytes = 64 << 10;  // key and value of one Set
constexpr int kShareBytes = 1 << 20;   // per node: 16 entries
constexpr int kCapBytes = 3 << 20;     // in all: three nodes' shares
constexpr char kHeld[] = "monta_planner_held_bytes{kind=\"rendezvous\"}";

// Resident memory of process `pid` in bytes (VmRSS), 0 when unreadable.
double ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      return std::stod(line.substr(6)) * 1024;
    }
  }
  return 0;
}

class RendezvousBoundsTest : public ::testing::Test {
 protected:
  // The planner with small bounds, nodes a..d registered by themselves and
  // 16 tasks of all four (--max_pending_tasks_per_node's default).
  void SetUp() override {
    const absl::Status started = cluster_.StartPlanner(
        {"--bench_on_register=false", "--lease_seconds=600",
         "--heartbeat_seconds=60", "--max_rendezvous_value_bytes=65536",
         absl::StrCat("--max_rendezvous_bytes_per_task=", kShareBytes),
         absl::StrCat("--max_rendezvous_bytes_per_node=", kShareBytes),
         absl::StrCat("--max_rendezvous_bytes=", kCapBytes)});
    ASSERT_TRUE(started.ok()) << started;
    for (const std::string& node : nodes_) {
      auto channel = PlannerChannel(cluster_, cluster_.NodeTlsFlags(node));
      ASSERT_NE(channel, nullptr) << node;
      as_[node] = monta::v1::AgentGateway::NewStub(channel);
      monta::v1::RegisterRequest request;
      request.set_node_name(node);
      request.set_instance_id("i-" + node);
      monta::v1::RegisterReply reply;
      const grpc::Status registered =
          as_[node]->Register(ContextWithDeadline().get(), request, &reply);
      ASSERT_TRUE(registered.ok()) << registered.error_message();
    }
    auto planner = monta::v1::Planner::NewStub(
        PlannerChannel(cluster_, cluster_.OperatorTlsFlags()));
    for (int i = 0; i < 16; ++i) {
      monta::v1::RunBenchmarkRequest run;
      for (const std::string& node : nodes_) run.add_nodes(node);
      run.set_ranks_per_node(1);
      run.set_timeout_seconds(3600);
      monta::v1::RunBenchmarkReply reply;
      const grpc::Status scheduled =
          planner->RunBenchmark(ContextWithDeadline().get(), run, &reply);
      ASSERT_TRUE(scheduled.ok()) << scheduled.error_message();
      tasks_.push_back(reply.status().task_id());
    }
  }

  // `node` sets 64 KiB entries, one per task in turn, until refused; returns
  // how many it set and the refusal.
  int Fill(const std::string& node, grpc::Status* refused) {
    int set = 0;
    for (int i = 0; i < 64; ++i) {
      monta::v1::RendezvousSetRequest request;
      request.set_task_id(tasks_[i % tasks_.size()]);
      request.set_key(absl::StrCat(node, "/", i));
      request.set_value(std::string(kEntryBytes - request.key().size(), 'v'));
      monta::v1::RendezvousSetReply reply;
      *refused = as_[node]->RendezvousSet(ContextWithDeadline().get(), request,
                                          &reply);
      if (!refused->ok()) return set;
      ++set;
    }
    return set;
  }

  double Held() { return MetricValue(PlannerMetrics(cluster_), kHeld); }

  LocalCluster cluster_;
  const std::vector<std::string> nodes_ = {"node-a", "node-b", "node-c",
                                           "node-d"};
  std::map<std::string, std::unique_ptr<monta::v1::AgentGateway::Stub>> as_;
  std::vector<std::string> tasks_;
};

TEST_F(RendezvousBoundsTest, OneNodeStopsAtItsShareAllStopAtTheCap) {
  const double rss_before = ResidentBytes(cluster_.planner().pid());
  grpc::Status refused;
  // node-a in 16 tasks: its share and no more.
  EXPECT_EQ(Fill("node-a", &refused), kShareBytes / kEntryBytes);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "node node-a") &&
              absl::StrContains(refused.error_message(),
                                "--max_rendezvous_bytes_per_node"))
      << refused.error_message();
  EXPECT_EQ(Held(), kShareBytes);
  // The others are not starved by node-a: each gets its own share.
  for (const char* node : {"node-b", "node-c"}) {
    EXPECT_EQ(Fill(node, &refused), kShareBytes / kEntryBytes) << node;
    EXPECT_TRUE(absl::StrContains(refused.error_message(),
                                  "--max_rendezvous_bytes_per_node"))
        << refused.error_message();
  }
  // Three shares fill the planner-wide cap: node-d gets nothing, and is told
  // which bound it hit.
  EXPECT_EQ(Fill("node-d", &refused), 0);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(
      absl::StrContains(refused.error_message(), "(--max_rendezvous_bytes)"))
      << refused.error_message();
  const double held = Held();
  EXPECT_EQ(held, kCapBytes);
  const double rss_full = ResidentBytes(cluster_.planner().pid());
  std::cout << std::fixed << std::setprecision(1) << "rendezvous held " << held
            << " bytes across 16 tasks (cap " << kCapBytes << "); planner RSS "
            << rss_before / 1e6 << " -> " << rss_full / 1e6 << " MB"
            << std::endl;

  // node-a leaving fails its 16 tasks: every byte comes back.
  monta::v1::DeregisterRequest leave;
  leave.set_node_name("node-a");
  leave.set_instance_id("i-node-a");
  monta::v1::DeregisterReply left;
  ASSERT_TRUE(as_["node-a"]
                  ->Deregister(ContextWithDeadline().get(), leave, &left)
                  .ok());
  EXPECT_EQ(Held(), 0);
}

}  // namespace
}  // namespace monta::testing
