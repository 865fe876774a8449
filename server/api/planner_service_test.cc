// GetStrategy, ListProfiles and node lookups through a real in-process gRPC
// server, as a training launcher would call them.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/planner_server.h"
#include "tests/testing/paper_job.h"

namespace monta {
namespace {

// The MoNTA paper's setting (examples/monta-paper-2x70b.yaml): 2 A800 nodes x
// 8, TP=8, 8K sequence, 70B-class experts.
monta::v1::StrategyRequest PaperRequest() { return testing::PaperJobRequest(); }

// The paper's layer on two CPU nodes with 2 ranks each (a Gloo development
// cluster): TP 2 inside a node, EP 2 across the two.
monta::v1::StrategyRequest TwoNodeRequest(const std::string& a,
                                          const std::string& b) {
  monta::v1::StrategyRequest r = PaperRequest();
  r.mutable_job()->set_world_size(4);
  r.mutable_job()->set_tensor_parallel_size(2);
  r.mutable_job()->set_data_parallel_size(2);
  r.mutable_job()->set_expert_parallel_size(2);
  r.mutable_placement()->clear_profile();
  r.mutable_placement()->set_nodes(0);
  r.mutable_placement()->add_node_names(a);
  r.mutable_placement()->add_node_names(b);
  r.mutable_placement()->set_gpus_per_node(2);
  return r;
}

// Registers `name` (instance `instance`) through the agent gateway, with the
// fabric label an agent may claim for itself (none when `leaf` is empty).
grpc::Status RegisterNode(monta::v1::AgentGateway::Stub& gateway,
                          const std::string& name, const std::string& instance,
                          const std::string& leaf = "") {
  monta::v1::RegisterRequest reg;
  reg.set_node_name(name);
  reg.set_instance_id(instance);
  if (!leaf.empty()) {
    (*reg.mutable_topology()
          ->mutable_labels())["network.topology.nvidia.com/leaf"] = leaf;
  }
  monta::v1::RegisterReply reg_reply;
  grpc::ClientContext context;
  return gateway.Register(&context, reg, &reg_reply);
}

class PlannerServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PlannerOptions options;
    options.grpc_address = "127.0.0.1:0";
    options.grpc_security.insecure = true;  // gRPC is not under test here
    options.metrics_address =
        "";  // exposer teardown is slow; metrics tested elsewhere
    auto started = PlannerServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    planner_ = monta::v1::Planner::NewStub(channel).release();
    gateway_ = monta::v1::AgentGateway::NewStub(channel).release();
  }
  static void TearDownTestSuite() {
    delete planner_;
    delete gateway_;
    delete server_;
  }

  grpc::Status Plan(const monta::v1::StrategyRequest& request,
                    monta::v1::StrategyReply* reply) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return planner_->GetStrategy(&context, request, reply);
  }

  // Expects INVALID_ARGUMENT naming `field`.
  void ExpectInvalid(const monta::v1::StrategyRequest& request,
                     const std::string& field) {
    monta::v1::StrategyReply reply;
    grpc::Status status = Plan(request, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << field << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(field), std::string::npos)
        << "message should name " << field << ": " << status.error_message();
  }

  static PlannerServer* server_;
  static monta::v1::Planner::Stub* planner_;
  static monta::v1::AgentGateway::Stub* gateway_;
};

PlannerServer* PlannerServiceTest::server_ = nullptr;
monta::v1::Planner::Stub* PlannerServiceTest::planner_ = nullptr;
monta::v1::AgentGateway::Stub* PlannerServiceTest::gateway_ = nullptr;

TEST_F(PlannerServiceTest, PaperSettingPicksPipelinedDedupWithLargeSpeedup) {
  monta::v1::StrategyReply reply;
  grpc::Status status = Plan(PaperRequest(), &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.chosen().kind(), monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  EXPECT_GT(reply.chosen().chunks_effective(), 1);
  EXPECT_GE(reply.chosen().speedup_over_flat(), 4.0);
  EXPECT_EQ(reply.evidence().origin(), monta::v1::EVIDENCE_SOURCE_PROFILE);
  EXPECT_EQ(reply.evidence().profile(), "a800-hgx");
  ASSERT_GT(reply.candidates_size(), 2);
  for (const auto& c : reply.candidates()) {
    if (!c.feasible()) continue;
    EXPECT_NEAR(c.forward_seconds_per_layer() + c.backward_seconds_per_layer(),
                c.total_seconds_per_layer(), 1e-12);
  }
}

TEST_F(PlannerServiceTest, ZeroAndNegativeSizesNameTheField) {
  auto r = PaperRequest();
  r.mutable_job()->set_hidden_size(0);
  ExpectInvalid(r, "job.hidden_size");
  r = PaperRequest();
  r.mutable_job()->set_sequence_length(-5);
  ExpectInvalid(r, "job.sequence_length");
  r = PaperRequest();
  r.mutable_job()->set_num_experts(0);
  ExpectInvalid(r, "job.num_experts");
  r = PaperRequest();
  r.mutable_placement()->set_nodes(0);
  ExpectInvalid(r, "placement.nodes");
}

TEST_F(PlannerServiceTest, TensorParallelLargerThanNodeIsRefused) {
  auto r = PaperRequest();
  r.mutable_job()->set_tensor_parallel_size(16);
  r.mutable_job()->set_data_parallel_size(1);
  r.mutable_job()->set_expert_parallel_size(1);
  ExpectInvalid(r, "job.tensor_parallel_size");
}

TEST_F(PlannerServiceTest, ParallelSizesMustMultiplyToWorld) {
  auto r = PaperRequest();
  r.mutable_job()->set_data_parallel_size(3);
  ExpectInvalid(r, "job.world_size");
  r = PaperRequest();
  r.mutable_placement()->set_nodes(3);  // 24 GPUs for a 16-rank job
  ExpectInvalid(r, "world_size");
}

TEST_F(PlannerServiceTest, UnknownProfileAndNodeAreNamed) {
  auto r = PaperRequest();
  r.mutable_placement()->set_profile("tpu-v5");
  monta::v1::StrategyReply reply;
  grpc::Status status = Plan(r, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_NE(status.error_message().find("tpu-v5"), std::string::npos);
  EXPECT_NE(status.error_message().find("a800-hgx"), std::string::npos)
      << "should list the known profiles: " << status.error_message();

  r = PaperRequest();
  r.mutable_placement()->clear_profile();
  r.mutable_placement()->set_nodes(0);
  r.mutable_placement()->add_node_names("no-such-node");
  status = Plan(r, &reply);
  EXPECT_TRUE(status.error_code() == grpc::StatusCode::NOT_FOUND ||
              status.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_NE(status.error_message().find("no-such-node"), std::string::npos);
}

TEST_F(PlannerServiceTest, AbsurdSizesAreRefused) {
  auto r = PaperRequest();
  r.mutable_job()->set_hidden_size(int64_t{1} << 40);
  ExpectInvalid(r, "job.hidden_size");
  r = PaperRequest();
  r.mutable_job()->set_sequence_length(int64_t{1} << 40);
  ExpectInvalid(r, "job.sequence_length");
  r = PaperRequest();
  r.mutable_job()->set_top_k(5);
  ExpectInvalid(r, "job.top_k");
  r = PaperRequest();
  r.mutable_job()->set_bytes_per_element(3);
  ExpectInvalid(r, "job.bytes_per_element");
  r = PaperRequest();
  r.mutable_job()->set_capacity_factor(-1);
  ExpectInvalid(r, "job.capacity_factor");
  r = PaperRequest();
  r.mutable_options()->set_max_chunks(100000);
  ExpectInvalid(r, "options.max_chunks");
}

TEST_F(PlannerServiceTest, InfeasibleStrategyIsListedNotAnError) {
  // Sequence parallelism already splits tokens over the TP group: tp_dedup
  // has nothing to deduplicate. (An uneven C is offered padded instead.)
  auto r = PaperRequest();
  r.mutable_job()->set_sequence_parallel(true);
  monta::v1::StrategyReply reply;
  grpc::Status status = Plan(r, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  bool saw_infeasible = false;
  for (const auto& c : reply.candidates()) {
    if (c.kind() == monta::v1::STRATEGY_KIND_TP_DEDUP && !c.feasible()) {
      saw_infeasible = true;
      EXPECT_FALSE(c.infeasible_reason().empty());
    }
  }
  EXPECT_TRUE(saw_infeasible);
  EXPECT_TRUE(reply.chosen().feasible());
}

TEST_F(PlannerServiceTest, RegisteredNodesWithoutCurvesFallBackToTheirProfile) {
  for (const char* name : {"cpu-a", "cpu-b"}) {
    ASSERT_TRUE(RegisterNode(*gateway_, name, "x").ok());
  }
  monta::v1::StrategyReply reply;
  grpc::Status status = Plan(TwoNodeRequest("cpu-a", "cpu-b"), &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.evidence().origin(), monta::v1::EVIDENCE_SOURCE_PROFILE);
  EXPECT_EQ(reply.evidence().profile(), "cpu-gloo");
}

// Errors never echo unbounded input: a 10 KB name comes back as a bounded
// prefix with its length (whole, the error once exceeded gRPC's metadata limit
// and the caller saw "received initial metadata size exceeds limit").
TEST_F(PlannerServiceTest, LongInputsComeBackAsABoundedPrefix) {
  const std::string long_name(10240, 'n');
  const auto expect_bounded = [](const grpc::Status& status,
                                 grpc::StatusCode code,
                                 const std::string& rpc) {
    EXPECT_EQ(status.error_code(), code)
        << rpc << ": " << status.error_message();
    EXPECT_NE(status.error_message().find("(10240 bytes)"), std::string::npos)
        << rpc << ": " << status.error_message();
    EXPECT_LT(status.error_message().size(), 1000u) << rpc;
  };
  monta::v1::GetNodeRequest get;
  get.set_name(long_name);
  monta::v1::NodeInfo info;
  grpc::ClientContext get_context;
  expect_bounded(planner_->GetNode(&get_context, get, &info),
                 grpc::StatusCode::NOT_FOUND, "GetNode");

  auto r = PaperRequest();
  r.mutable_placement()->clear_profile();
  r.mutable_placement()->set_nodes(0);
  r.mutable_placement()->add_node_names(long_name);
  monta::v1::StrategyReply reply;
  expect_bounded(Plan(r, &reply), grpc::StatusCode::NOT_FOUND, "GetStrategy");

  monta::v1::HeartbeatRequest heartbeat;
  heartbeat.set_node_name(long_name);
  heartbeat.set_instance_id("x");
  monta::v1::HeartbeatReply heartbeat_reply;
  grpc::ClientContext heartbeat_context;
  expect_bounded(
      gateway_->Heartbeat(&heartbeat_context, heartbeat, &heartbeat_reply),
      grpc::StatusCode::NOT_FOUND, "Heartbeat");

  monta::v1::RendezvousGetRequest rendezvous;
  rendezvous.set_task_id(long_name);
  rendezvous.set_key("k");
  monta::v1::RendezvousGetReply rendezvous_reply;
  grpc::ClientContext rendezvous_context;
  expect_bounded(gateway_->RendezvousGet(&rendezvous_context, rendezvous,
                                         &rendezvous_reply),
                 grpc::StatusCode::NOT_FOUND, "RendezvousGet");

  monta::v1::RunBenchmarkRequest bench;
  bench.add_nodes(long_name);
  monta::v1::RunBenchmarkReply bench_reply;
  grpc::ClientContext bench_context;
  expect_bounded(planner_->RunBenchmark(&bench_context, bench, &bench_reply),
                 grpc::StatusCode::INVALID_ARGUMENT, "RunBenchmark");
}

// Every repeated request field has a bound, refused INVALID_ARGUMENT naming
// the field and the bound.
TEST_F(PlannerServiceTest, RepeatedFieldsAreBounded) {
  auto r = PaperRequest();
  for (int i = 0; i < 200000; ++i) {
    r.mutable_options()->add_allowed(monta::v1::STRATEGY_KIND_FLAT);
  }
  ExpectInvalid(r, "options.allowed: at most 16 entries, got 200000 entries");

  r = PaperRequest();
  r.mutable_placement()->clear_profile();
  r.mutable_placement()->set_nodes(0);
  for (int i = 0; i < 8193; ++i) {
    r.mutable_placement()->add_node_names(absl::StrCat("n", i));
  }
  ExpectInvalid(r, "placement.node_names: at most 8192 nodes");

  monta::v1::RunBenchmarkRequest bench;
  for (int i = 0; i < 1025; ++i) bench.add_nodes(absl::StrCat("n", i));
  monta::v1::RunBenchmarkReply bench_reply;
  grpc::ClientContext bench_context;
  const grpc::Status refused =
      planner_->RunBenchmark(&bench_context, bench, &bench_reply);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("nodes: at most 1024 nodes, got 1025"),
            std::string::npos)
      << refused.error_message();

  monta::v1::VerifyRequest verify;
  *verify.mutable_request() = PaperRequest();
  verify.mutable_request()->mutable_placement()->clear_profile();
  verify.mutable_request()->mutable_placement()->add_node_names("cpu-a");
  for (int i = 0; i < 17; ++i) verify.add_chunks(i + 1);
  monta::v1::VerifyReply verify_reply;
  grpc::ClientContext verify_context;
  const grpc::Status verify_refused =
      planner_->Verify(&verify_context, verify, &verify_reply);
  EXPECT_EQ(verify_refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(verify_refused.error_message().find("chunks: at most 16 values"),
            std::string::npos)
      << verify_refused.error_message();

  // A scope this planner does not know is named, not run as something else.
  verify.clear_chunks();
  verify.set_scope(static_cast<monta::v1::VerifyScope>(7));
  grpc::ClientContext scope_context;
  const grpc::Status scope_refused =
      planner_->Verify(&scope_context, verify, &verify_reply);
  EXPECT_EQ(scope_refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(scope_refused.error_message().find(
                "scope: expected LAYER, OP or unspecified (LAYER), got 7"),
            std::string::npos)
      << scope_refused.error_message();
}

TEST_F(PlannerServiceTest, ListProfilesGivesSourcedConstants) {
  monta::v1::ListProfilesReply reply;
  grpc::ClientContext context;
  ASSERT_TRUE(planner_->ListProfiles(&context, {}, &reply).ok());
  std::set<std::string> names;
  for (const auto& p : reply.profiles()) {
    names.insert(p.name());
    EXPECT_FALSE(p.version().empty());
    ASSERT_FALSE(p.constants().empty()) << p.name();
    for (const auto& c : p.constants())
      EXPECT_FALSE(c.source().empty()) << c.name();
  }
  for (const char* want : {"a800-hgx", "a100-hgx", "h800-hgx", "h100-hgx",
                           "h200-hgx", "cpu-gloo"}) {
    EXPECT_EQ(names.count(want), 1u) << want;
  }
}

// GetFabric and NodeInfo.fabric on a planner started with a fabric map: the
// map places the nodes, an agent's labels are a hint that never moves one,
// and registered nodes outside the map are listed as such. node-a's agent
// says it sits in r1; node-x is in no map.
class PlannerServiceFabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    map_ = std::string(tmp != nullptr ? tmp : "/tmp") +
           "/planner-service-fabric.yaml";
    std::ofstream(map_) << "version: 1\n"
                           "racks:\n"
                           "- name: r0\n"
                           "  uplink_bits_per_second: 100mbit\n"
                           "  nodes: [node-a]\n"
                           "- name: r1\n"
                           "  nodes: [node-b, node-c]\n";
    PlannerOptions options;
    options.grpc_address = "127.0.0.1:0";
    options.grpc_security.insecure = true;
    options.metrics_address = "";
    options.fabric.map_file = map_;
    auto server = PlannerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    planner_ = monta::v1::Planner::NewStub(channel);
    auto gateway = monta::v1::AgentGateway::NewStub(channel);
    for (const auto& [name, claim] :
         {std::pair<std::string, std::string>{"node-a", "r1"},
          {"node-x", "r0"}}) {
      ASSERT_TRUE(RegisterNode(*gateway, name, "i", claim).ok());
    }
  }

  std::string map_;
  std::unique_ptr<PlannerServer> server_;
  std::unique_ptr<monta::v1::Planner::Stub> planner_;
};

TEST_F(PlannerServiceFabricTest, NodesAndTreeFollowTheMapNotTheAgents) {
  monta::v1::NodeInfo a;
  {
    grpc::ClientContext context;
    monta::v1::GetNodeRequest request;
    request.set_name("node-a");
    ASSERT_TRUE(planner_->GetNode(&context, request, &a).ok());
  }
  EXPECT_EQ(a.fabric().rack(), "r0");
  EXPECT_EQ(a.fabric().source(), monta::v1::FABRIC_SOURCE_MAP);
  EXPECT_EQ(a.fabric().hint_rack(), "r1");
  EXPECT_TRUE(a.fabric().hint_disagrees());

  monta::v1::FabricReply tree;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(planner_->GetFabric(&context, {}, &tree).ok());
  }
  ASSERT_EQ(tree.blocks_size(), 1);
  ASSERT_EQ(tree.blocks(0).racks_size(), 2);
  const auto& r0 = tree.blocks(0).racks(0);
  EXPECT_EQ(r0.name(), "r0");
  EXPECT_DOUBLE_EQ(r0.uplink().declared_bytes_per_second(), 12.5e6);
  ASSERT_EQ(r0.nodes_size(), 1);
  EXPECT_EQ(r0.nodes(0).name(), "node-a");
  EXPECT_EQ(r0.nodes(0).state(), monta::v1::NODE_STATE_ALIVE);
  const auto& r1 = tree.blocks(0).racks(1);
  ASSERT_EQ(r1.nodes_size(), 2);  // node-a's claim added nothing here
  EXPECT_EQ(r1.nodes(0).state(), monta::v1::NODE_STATE_UNSPECIFIED);
  ASSERT_EQ(tree.unplaced_size(), 1);
  EXPECT_EQ(tree.unplaced(0).name(), "node-x");
  EXPECT_EQ(tree.unplaced(0).position().hint_rack(), "r0");
  ASSERT_EQ(tree.sources_size(), 1);
  EXPECT_EQ(tree.sources(0).path(), map_);
  EXPECT_EQ(tree.sources(0).nodes(), 3);

  monta::v1::ListNodesReply nodes;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(planner_->ListNodes(&context, {}, &nodes).ok());
  }
  ASSERT_EQ(nodes.nodes_size(), 2);
  EXPECT_EQ(nodes.nodes(1).fabric().source(), monta::v1::FABRIC_SOURCE_NONE);
}

// RunBenchmark with fabric_levels: one round of level measurements over the
// placed idle nodes (node-a alone in r0; node-b and node-c in r1), each task
// tagged with its span; node-x, outside the map, only noted.
TEST_F(PlannerServiceFabricTest, ALevelRoundMeasuresThePlacedNodes) {
  auto gateway = monta::v1::AgentGateway::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  for (const char* name : {"node-b", "node-c"}) {
    ASSERT_TRUE(RegisterNode(*gateway, name, "i").ok());
  }
  const auto run = [this](const monta::v1::RunBenchmarkRequest& request,
                          monta::v1::RunBenchmarkReply* reply) {
    grpc::ClientContext context;
    return planner_->RunBenchmark(&context, request, reply);
  };
  monta::v1::RunBenchmarkRequest request;
  request.set_fabric_levels(true);
  request.set_dry_run(true);
  monta::v1::RunBenchmarkReply dry;
  ASSERT_TRUE(run(request, &dry).ok());
  // Inside r1; a pair across r0 and r1 (r0 has one node: nothing at once).
  ASSERT_EQ(dry.fabric_tasks_size(), 2) << dry.DebugString();
  EXPECT_EQ(dry.fabric_tasks(0).fabric().level(),
            monta::v1::FABRIC_SPAN_LEVEL_RACK);
  EXPECT_EQ(dry.fabric_tasks(0).nodes(0), "node-b");
  EXPECT_EQ(dry.fabric_tasks(1).fabric().level(),
            monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  EXPECT_EQ(dry.fabric_tasks(1).nodes(0), "node-a");
  EXPECT_EQ(dry.fabric_tasks(1).task_id(), "");
  std::string notes;
  for (const auto& note : dry.notes()) absl::StrAppend(&notes, note, "\n");
  EXPECT_TRUE(absl::StrContains(notes, "rack r0: 1 idle node(s) of 1 alive"))
      << notes;
  EXPECT_TRUE(absl::StrContains(notes, "1 idle node(s) outside the fabric"))
      << notes;

  request.set_dry_run(false);
  request.set_max_bytes(1 << 20);
  monta::v1::RunBenchmarkReply round;
  ASSERT_TRUE(run(request, &round).ok());
  ASSERT_EQ(round.fabric_tasks_size(), 2) << round.DebugString();
  for (const auto& task : round.fabric_tasks()) {
    EXPECT_NE(task.task_id(), "");
    EXPECT_EQ(task.state(), monta::v1::TASK_STATE_PENDING);
    EXPECT_EQ(task.fabric().concurrent_nodes(), 2);
  }
  // The round's nodes are busy now: a second round finds nothing idle.
  monta::v1::RunBenchmarkReply busy;
  ASSERT_TRUE(run(request, &busy).ok());
  EXPECT_EQ(busy.fabric_tasks_size(), 0) << busy.DebugString();

  // Bad requests name the field.
  for (const auto& [field, bad] :
       std::vector<std::pair<std::string, monta::v1::RunBenchmarkRequest>>{
           {"nodes",
            [&] {
              auto r = request;
              r.add_nodes("node-a");
              return r;
            }()},
           {"wait",
            [&] {
              auto r = request;
              r.set_wait(true);
              return r;
            }()},
           {"dry_run", [] {
              monta::v1::RunBenchmarkRequest r;
              r.set_dry_run(true);
              return r;
            }()}}) {
    monta::v1::RunBenchmarkReply reply;
    const grpc::Status status = run(bad, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_TRUE(absl::StartsWith(status.error_message(), field + ":"))
        << status.error_message();
  }
}

TEST_F(PlannerServiceFabricTest, APlansEvidenceSaysWhereItsNodesSit) {
  monta::v1::StrategyReply plan;
  grpc::ClientContext context;
  grpc::Status status = planner_->GetStrategy(
      &context, TwoNodeRequest("node-a", "node-x"), &plan);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_NE(
      std::find(plan.evidence().notes().begin(), plan.evidence().notes().end(),
                "fabric: rack r0 (fabric map): node-a; outside the "
                "fabric: node-x. With nodes outside the fabric the uplinks "
                "are not priced: the plan rests on node and pair "
                "measurements, as without a fabric"),
      plan.evidence().notes().end())
      << plan.evidence().DebugString();
}

}  // namespace
}  // namespace monta
