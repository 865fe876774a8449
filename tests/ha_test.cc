// One leader among the planner's replicas, fenced (issue 20 item 5), end to
// end: three real etcd 3.4 members, three monta-planner replicas on
// --store=etcd with a 2 s election lease, and two real agents that know all
// three replicas (--planner=a,b,c), all on loopback with free ports. The
// agents register with whoever leads and measure themselves; the leader is
// SIGKILLed: another replica leads, its registry reloaded from etcd (the
// nodes and curves acknowledged before the kill are there), and it
// coordinates a benchmark the agents finish. Then that leader gets SIGTERM:
// it resigns and the last replica leads. Followers refuse with UNAVAILABLE
// naming the leader. The measured times are logged, not asserted (timed bars
// belong in perf/).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd_cluster.h"

namespace monta::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class HaTest : public ::testing::Test {
 protected:
  // The replica whose log says it leads now (and has not stopped since), or
  // -1. Each replica logs "leading with epoch E" when a term starts and
  // "stopped leading epoch E" when it ends.
  int Leader(const std::vector<int>& alive) {
    for (int port : alive) {
      const std::string log = ReadFile(cluster_.replica(port).log_path());
      const size_t led = log.rfind("leading with epoch");
      if (led == std::string::npos) continue;
      const size_t stopped = log.rfind("stopped leading epoch");
      if (stopped == std::string::npos || stopped < led) return port;
    }
    return -1;
  }
  int WaitForLeader(const std::vector<int>& alive, absl::Duration timeout) {
    int leader = -1;
    WaitFor(
        [&] {
          leader = Leader(alive);
          return leader > 0;
        },
        timeout);
    return leader;
  }
  std::string Logs() {
    std::string out;
    for (int port : ports_) {
      absl::StrAppend(&out, "--- replica :", port, "\n",
                      ReadFile(cluster_.replica(port).log_path()));
    }
    for (const char* node : {"node-a", "node-b"}) {
      absl::StrAppend(&out, "--- ", node, "\n",
                      ReadFile(cluster_.agent(node).log_path()));
    }
    return out;
  }
  nlohmann::json Json(const CommandResult& r) {
    return r.exit_code == 0 ? nlohmann::json::parse(r.out, nullptr, false)
                            : nlohmann::json();
  }
  // The task ids of `node`'s curves as the planner montactl talks to sees
  // them (empty while it does not answer).
  std::vector<std::string> CurvesOf(const std::string& node) {
    std::vector<std::string> out;
    nlohmann::json info =
        Json(cluster_.Montactl({"--output=json", "node", node}));
    if (!info.is_object()) return out;
    for (const auto& curve : info["curves"]) out.push_back(curve["task_id"]);
    return out;
  }

  void StartReplicas(const EtcdCluster& etcd) {
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<int> port = cluster_.StartReplica(
          {"--store=etcd",
           "--etcd_endpoints=" + absl::StrJoin(etcd.endpoints(), ","),
           "--etcd_insecure", "--etcd_prefix=/ha-test/",
           "--leader_lease_seconds=2", absl::StrCat("--replica_id=replica-", i),
           "--lease_seconds=6", "--heartbeat_seconds=1"});
      ASSERT_TRUE(port.ok()) << port.status();
      ports_.push_back(*port);
    }
  }
  // A follower refuses, naming the leader's address (it looks who leads
  // once a second).
  void ExpectFollowersNameTheLeader(int leader) {
    for (int port : ports_) {
      if (port == leader) continue;
      cluster_.UsePlanner(port);
      CommandResult refused;
      EXPECT_TRUE(WaitFor(
          [&] {
            refused = cluster_.Montactl({"nodes"});
            return refused.err.find(absl::StrCat(
                       "not the leader (leader: 127.0.0.1:", leader, ")")) !=
                   std::string::npos;
          },
          absl::Seconds(10)))
          << refused.err;
      EXPECT_NE(refused.exit_code, 0);
    }
    cluster_.UsePlanner(leader);
  }
  // The agents measure themselves on registration: each node's curves once
  // the leader shows them (then they are in etcd).
  std::map<std::string, std::vector<std::string>> WaitForOwnCurves() {
    std::map<std::string, std::vector<std::string>> curves;
    EXPECT_TRUE(WaitFor(
        [&] {
          for (const char* node : {"node-a", "node-b"}) {
            curves[node] = CurvesOf(node);
            if (curves[node].size() < 3) return false;
          }
          return true;
        },
        absl::Seconds(60)))
        << Logs();
    return curves;
  }
  // The leader montactl talks to coordinates: the agents move to it and
  // finish an inter-node benchmark it hands out (it needs both). The task id;
  // empty when it never succeeded.
  std::string BenchmarkBothNodes() {
    nlohmann::json bench;
    const bool done = WaitFor(
        [&] {
          if (!cluster_.AllAlive({"node-a", "node-b"})) return false;
          bench = Json(cluster_.Montactl(
              {"--output=json", "bench", "--nodes=node-a,node-b",
               "--max_bytes=65536", "--bench_timeout_seconds=30"}));
          return bench.is_object() &&
                 bench["status"]["state"] == "TASK_STATE_SUCCEEDED";
        },
        absl::Seconds(40));
    EXPECT_TRUE(done) << bench.dump(1) << "\n" << Logs();
    return done ? bench["status"]["task_id"].get<std::string>() : "";
  }
  bool HasCurve(const std::string& node, const std::string& task_id) {
    const std::vector<std::string> now = CurvesOf(node);
    return std::find(now.begin(), now.end(), task_id) != now.end();
  }
  std::vector<int> Without(const std::vector<int>& ports, int port) {
    std::vector<int> out;
    for (int p : ports) {
      if (p != port) out.push_back(p);
    }
    return out;
  }

  LocalCluster cluster_;
  std::vector<int> ports_;
};

TEST_F(HaTest, LeaderKillAndGracefulStopHandOverWithNodesAndCurves) {
  EtcdCluster::Options options;
  options.members = 3;
  auto etcd = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  StartReplicas(**etcd);
  ASSERT_EQ(ports_.size(), 3u);
  const int first = WaitForLeader(ports_, absl::Seconds(20));
  ASSERT_GT(first, 0) << Logs();
  ExpectFollowersNameTheLeader(first);
  std::vector<std::string> addresses;
  for (int port : ports_) addresses.push_back(absl::StrCat("127.0.0.1:", port));
  const std::string planners = "--planner=" + absl::StrJoin(addresses, ",");
  ASSERT_TRUE(cluster_.StartAgent("node-a", {planners}).ok());
  ASSERT_TRUE(cluster_.StartAgent("node-b", {planners}).ok());
  std::map<std::string, std::vector<std::string>> acknowledged =
      WaitForOwnCurves();

  // SIGKILL the leader: another replica leads after the lease (+ etcd's
  // expiry check), its registry reloaded from etcd, and coordinates.
  const Clock::time_point killed = Clock::now();
  cluster_.replica(first).Signal(SIGKILL);
  ASSERT_TRUE(cluster_.replica(first).Wait(absl::Seconds(5)).ok());
  const std::vector<int> alive = Without(ports_, first);
  const int second = WaitForLeader(alive, absl::Seconds(20));
  ASSERT_GT(second, 0) << Logs();
  const double elected_s = SecondsSince(killed);
  cluster_.UsePlanner(second);
  for (const char* node : {"node-a", "node-b"}) {
    EXPECT_EQ(CurvesOf(node), acknowledged[node]) << node << "\n" << Logs();
  }
  const std::string task_id = BenchmarkBothNodes();
  ASSERT_FALSE(task_id.empty());
  std::cerr << "ha_test: leader SIGKILL -> new leader in " << elected_s
            << " s, its benchmark finished " << SecondsSince(killed)
            << " s after the kill (lease 2 s)" << std::endl;
  EXPECT_TRUE(HasCurve("node-a", task_id) && HasCurve("node-b", task_id));
  EXPECT_NE(ReadFile(cluster_.agent("node-a").log_path()).find("leader epoch"),
            std::string::npos);

  // SIGTERM: the leader resigns and the last replica leads without waiting
  // for the lease.
  const Clock::time_point stopped = Clock::now();
  cluster_.replica(second).Signal(SIGTERM);
  const int third = WaitForLeader(Without(alive, second), absl::Seconds(20));
  ASSERT_GT(third, 0) << Logs();
  const double handed_over_s = SecondsSince(stopped);
  ASSERT_TRUE(cluster_.replica(second).Wait(absl::Seconds(10)).ok());
  EXPECT_NE(ReadFile(cluster_.replica(second).log_path())
                .find("resigned from the election"),
            std::string::npos);
  cluster_.UsePlanner(third);
  EXPECT_TRUE(HasCurve("node-a", task_id) && HasCurve("node-b", task_id));
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_.AllAlive({"node-a", "node-b"});
      },
      absl::Seconds(20)))
      << Logs();
  std::cerr << "ha_test: leader SIGTERM -> next leader in " << handed_over_s
            << " s" << std::endl;
}

}  // namespace
}  // namespace monta::testing
