// Coordinated benchmarks across real agents on loopback: the planner hands out
// tasks, the agents meet through the planner's rendezvous store, run Gloo
// AllToAll over TCP, and report curves that GetStrategy then cites.
#include <signal.h>

#include <fstream>
#include <iostream>

#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace monta::testing {
namespace {

class BenchClusterTest : public ::testing::Test {
 protected:
  void StartTwoNodes(const std::vector<std::string>& planner_flags) {
    ASSERT_TRUE(cluster_.StartPlanner(planner_flags).ok());
    ASSERT_TRUE(cluster_.StartAgent("node-a").ok());
    ASSERT_TRUE(cluster_.StartAgent("node-b").ok());
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster_.AllAlive({"node-a", "node-b"});
        },
        absl::Seconds(20)));
  }

  nlohmann::json Json(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0)
        << r.err << ReadFile(cluster_.agent("node-a").log_path());
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  LocalCluster cluster_;
};

TEST_F(BenchClusterTest, InterNodeSweepFeedsGetStrategy) {
  StartTwoNodes({"--bench_on_register=false"});
  nlohmann::json bench = Json(
      cluster_.Montactl({"--output=json", "bench", "--nodes=node-a,node-b",
                         "--ranks_per_node=2", "--bench_timeout_seconds=60"}));
  ASSERT_EQ(bench["status"]["state"], "TASK_STATE_SUCCEEDED") << bench.dump(1);
  const std::string task_id = bench["status"]["task_id"];

  // The curve is stored under both nodes, with nccl-tests' busbw for 4 ranks.
  for (const char* name : {"node-a", "node-b"}) {
    nlohmann::json node =
        Json(cluster_.Montactl({"--output=json", "node", name}));
    bool found = false;
    for (const auto& curve : node["curves"]) {
      if (curve["task_id"] != task_id) continue;
      found = true;
      EXPECT_EQ(curve["scope"], "SCOPE_INTER_NODE");
      EXPECT_EQ(curve["collective"], "COLLECTIVE_ALLTOALL");
      EXPECT_EQ(curve["nranks"], 4);
      EXPECT_EQ(curve["n_nodes"], 2);
      ASSERT_GE(curve["points"].size(), 3u);
      for (const auto& p : curve["points"]) {
        const double algbw = p["algbw_bytes_per_second"];
        const double busbw = p["busbw_bytes_per_second"];
        EXPECT_GT(algbw, 0);
        EXPECT_NEAR(busbw, algbw * 3 / 4, algbw * 1e-9);
        EXPECT_EQ(std::stoull(p["wrong_bytes"].get<std::string>()), 0u);
        // Across nodes each size is timed both ways (docs/MODEL.md §2): the
        // median and the warm chain.
        ASSERT_TRUE(p.contains("chain_time_seconds")) << p.dump();
        EXPECT_GT(p["chain_time_seconds"].get<double>(), 0) << p.dump();
        EXPECT_GT(p["time_seconds"].get<double>(), 0) << p.dump();
      }
    }
    EXPECT_TRUE(found) << name << ": " << node["curves"].dump(1);
  }

  // GetStrategy for these two nodes cites the measurement.
  const std::string job = cluster_.dir() + "/job.yaml";
  {
    std::ofstream out(job);
    out << "job:\n  hidden_size: 1024\n  num_experts: 8\n  top_k: 2\n  "
           "capacity_factor: 1.0\n"
           "  micro_batch_size: 1\n  sequence_length: 2048\n  "
           "bytes_per_element: 2\n"
           "  moe_layers: 4\n  world_size: 4\n  tensor_parallel_size: 2\n"
           "  expert_parallel_size: 2\n  pipeline_parallel_size: 1\n  "
           "data_parallel_size: 2\n"
           "  experts_tensor_parallel: true\n";
  }
  nlohmann::json plan = Json(
      cluster_.Montactl({"--output=json", "plan", "--job=" + job,
                         "--node_names=node-a,node-b", "--gpus_per_node=2"}));
  EXPECT_NE(plan["evidence"]["origin"], "EVIDENCE_SOURCE_PROFILE")
      << plan["evidence"].dump(1);
  bool cited = false;
  for (const auto& c : plan["evidence"]["curves"]) {
    if (c["used_as"] == "CURVE_ROLE_ALLTOALL_INTER") {
      EXPECT_EQ(c["origin"], "EVIDENCE_SOURCE_MEASURED");
      EXPECT_EQ(c["task_id"], task_id);
      EXPECT_GE(c["age_seconds"].get<double>(), 0);
      cited = true;
    }
  }
  EXPECT_TRUE(cited) << plan["evidence"].dump(1);
}

TEST_F(BenchClusterTest, AgentsMeasureThemselvesOnRegistration) {
  StartTwoNodes({});  // --bench_on_register defaults to true
  for (const char* name : {"node-a", "node-b"}) {
    EXPECT_TRUE(WaitFor(
        [&] {
          nlohmann::json node =
              Json(cluster_.Montactl({"--output=json", "node", name}));
          int intra = 0;
          for (const auto& c : node["curves"]) {
            if (c["scope"] != "SCOPE_INTRA_NODE") continue;
            ++intra;
            // Inside a node the median alone: no chain (0).
            for (const auto& p : c["points"]) {
              EXPECT_EQ(p.value("chain_time_seconds", -1.0), 0) << p.dump();
            }
          }
          return intra == 3;  // alltoall, allgather, copy
        },
        absl::Seconds(60)))
        << name;
  }
}

TEST_F(BenchClusterTest,
       KilledAgentFailsTaskNamingItsRanksAndSurvivorCarriesOn) {
  StartTwoNodes({"--bench_on_register=false", "--lease_seconds=3",
                 "--heartbeat_seconds=0.5"});
  // Large sizes keep the run going long enough to kill a node in the middle.
  std::vector<std::string> args = {
      "--output=json", "bench", "--nodes=node-a,node-b", "--ranks_per_node=2",
      "--bench_timeout_seconds=30"};
  std::vector<std::string> argv = {Runfile("client/montactl"),
                                   "--planner=" + cluster_.planner_address()};
  for (const std::string& flag : cluster_.OperatorTlsFlags()) {
    argv.push_back(flag);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  // Bigger sweep than the default through the RunBenchmark size fields is not
  // exposed by montactl; the default 64 KiB..16 MiB sweep lasts long enough on
  // this machine once node-b is killed right after it received the task.
  absl::StatusOr<Process> bench =
      Process::Start(argv, cluster_.dir() + "/bench.json");
  ASSERT_TRUE(bench.ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(cluster_.agent("node-b").log_path()).find("received") !=
               std::string::npos;
      },
      absl::Seconds(20)));
  cluster_.agent("node-b").Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  absl::StatusOr<int> exit = bench->Wait(absl::Seconds(45));
  ASSERT_TRUE(exit.ok());
  EXPECT_LT(absl::Now() - killed, absl::Seconds(31))
      << "task must fail within its deadline";
  nlohmann::json result = nlohmann::json::parse(
      ReadFile(cluster_.dir() + "/bench.json"), nullptr, false);
  ASSERT_FALSE(result.is_discarded())
      << ReadFile(cluster_.dir() + "/bench.json");
  EXPECT_EQ(result["status"]["state"], "TASK_STATE_FAILED");
  const std::string reason = result["status"]["reason"];
  std::cout << "task failure reason: " << reason << std::endl;
  EXPECT_NE(reason.find("node-b"), std::string::npos) << reason;
  EXPECT_NE(reason.find("rank(s) 2-3"), std::string::npos) << reason;

  // The survivor is idle again and takes the next task normally.
  nlohmann::json next = Json(
      cluster_.Montactl({"--output=json", "bench", "--nodes=node-a",
                         "--ranks_per_node=2", "--bench_timeout_seconds=60"}));
  EXPECT_EQ(next["status"]["state"], "TASK_STATE_SUCCEEDED")
      << next.dump(1) << ReadFile(cluster_.agent("node-a").log_path());
}

TEST_F(BenchClusterTest, PeriodicSweepsMeasurePairsAndNodes) {
  StartTwoNodes({"--bench_on_register=false", "--bench_interval_seconds=2"});
  EXPECT_TRUE(WaitFor(
      [&] {
        nlohmann::json node =
            Json(cluster_.Montactl({"--output=json", "node", "node-b"}));
        int intra = 0;
        int inter = 0;
        for (const auto& c : node["curves"]) {
          (c["scope"] == "SCOPE_INTER_NODE" ? inter : intra)++;
        }
        return inter >= 1 && intra >= 3;
      },
      absl::Seconds(60)));
}

TEST_F(BenchClusterTest, MeasurementsSurvivePlannerRestartWithDb) {
  const std::string db = cluster_.dir() + "/planner.db";
  StartTwoNodes({"--db=" + db});  // agents measure themselves on registration
  std::string task_id;
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json node =
            Json(cluster_.Montactl({"--output=json", "node", "node-a"}));
        if (node["curves"].size() < 3) return false;
        task_id = node["curves"][0]["task_id"];
        return true;
      },
      absl::Seconds(60)));
  const int port = cluster_.grpc_port();
  cluster_.planner().Signal(SIGKILL);
  ASSERT_TRUE(cluster_.planner().Wait(absl::Seconds(5)).ok());
  // Restarted without bench-on-register: whatever curves it shows came from the
  // file.
  ASSERT_TRUE(
      cluster_.StartPlanner({"--db=" + db, "--bench_on_register=false"}, port)
          .ok());
  nlohmann::json node =
      Json(cluster_.Montactl({"--output=json", "node", "node-a"}));
  ASSERT_EQ(node["curves"].size(), 3u) << node.dump(1);
  EXPECT_EQ(node["curves"][0]["task_id"], task_id);
  // And both agents carry on with the same instance, no duplicate-name
  // refusal: each is alive again once its next heartbeat (after its own
  // backoff) lands; the benchmark below needs both.
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_.AllAlive({"node-a", "node-b"});
      },
      absl::Seconds(10)));
  // Their task streams were re-established: a new benchmark reaches both.
  nlohmann::json bench =
      Json(cluster_.Montactl({"--output=json", "bench", "--nodes=node-a,node-b",
                              "--bench_timeout_seconds=20"}));
  EXPECT_EQ(bench["status"]["state"], "TASK_STATE_SUCCEEDED") << bench.dump(1);
  // The inter-node curve's chain times come back from the file as stored.
  auto inter_points = [&] {
    nlohmann::json node =
        Json(cluster_.Montactl({"--output=json", "node", "node-a"}));
    for (const auto& c : node["curves"]) {
      if (c["scope"] == "SCOPE_INTER_NODE") return c["points"];
    }
    return nlohmann::json();
  };
  const nlohmann::json stored = inter_points();
  ASSERT_FALSE(stored.empty());
  ASSERT_GT(stored[0].value("chain_time_seconds", 0.0), 0) << stored.dump(1);
  cluster_.planner().Signal(SIGKILL);
  ASSERT_TRUE(cluster_.planner().Wait(absl::Seconds(5)).ok());
  ASSERT_TRUE(
      cluster_.StartPlanner({"--db=" + db, "--bench_on_register=false"}, port)
          .ok());
  EXPECT_EQ(inter_points(), stored);
}

}  // namespace
}  // namespace monta::testing
