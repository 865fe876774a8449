// The attacks of issue 11 ("anyone who reaches port 7400 is every node"),
// replayed over real mutual-TLS connections against a real planner (in this
// process, gRPC on loopback): each is refused with UNAVAILABLE (no handshake),
// UNAUTHENTICATED or PERMISSION_DENIED, the victim node's state and the plan
// do not change, and the legitimate node can still do what the attacker
// could not (so a refusal is the authorization's doing, not a broken setup).
#include <signal.h>
#include <sqlite3.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/admission/test_certs.h"
#include "server/bench/test_reports.h"
#include "server/planner_server.h"
#include "tests/testing/cluster.h"
#include "tests/testing/paper_job.h"
#include "tests/testing/process.h"

namespace monta {
namespace {

using admission::TestCertFiles;
using grpc::StatusCode;

constexpr absl::string_view kSecretInstance = "instance-of-node-a-7f3c";

class MtlsAttackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::TempDir() + "/mtls");
    testing::Run({"/bin/mkdir", "-p", *dir_});
    auto ca = admission::WriteTestCa(*dir_, "ca", "monta-test-ca");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = new TestCertFiles(*ca);
    auto rogue_ca = admission::WriteTestCa(*dir_, "rogue-ca", "monta-test-ca");
    ASSERT_TRUE(rogue_ca.ok()) << rogue_ca.status();
    for (const auto& [name, san] : {
             std::pair<std::string, std::string>{"planner",
                                                 "DNS:localhost,IP:127.0.0.1"},
             {"node-a", "URI:spiffe://monta/node/node-a"},
             {"node-b", "URI:spiffe://monta/node/node-b"},
             {"node-c", "URI:spiffe://monta/node/node-c"},
             {"node-d", "URI:spiffe://monta/node/node-d"},
             {"operator", "URI:spiffe://monta/operator/alice"},
             {"reader", "DNS:dashboard.example.org"},
             {"two-identities",
              "URI:spiffe://monta/node/node-a,URI:spiffe://monta/operator/x"},
         }) {
      ASSERT_TRUE(admission::WriteTestLeafCert(*ca, *dir_, name, san).ok());
    }
    // node-a's name, signed by a CA the planner does not trust.
    ASSERT_TRUE(admission::WriteTestLeafCert(*rogue_ca, *dir_, "rogue-node-a",
                                             "URI:spiffe://monta/node/node-a")
                    .ok());
    PlannerOptions options;
    options.grpc_address = "127.0.0.1:0";
    options.metrics_address = "";
    options.grpc_security = Security("planner");
    options.health_address = "127.0.0.1:0";
    options.registry.lease = absl::Hours(1);  // no lease runs out mid-test
    auto started = PlannerServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
  }

  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static GrpcSecurityOptions Security(const std::string& identity) {
    GrpcSecurityOptions security;
    security.ca_file = ca_->cert_file;
    security.cert_file = absl::StrCat(*dir_, "/", identity, ".crt");
    security.key_file = absl::StrCat(*dir_, "/", identity, ".key");
    return security;
  }

  static std::string Target() {
    return absl::StrCat("127.0.0.1:", server_->grpc_port());
  }

  // A fresh channel presenting `identity`'s certificate.
  static std::shared_ptr<grpc::Channel> As(const std::string& identity) {
    auto credentials = MakeChannelCredentials(Security(identity));
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    return grpc::CreateChannel(Target(), *credentials);
  }

  static std::unique_ptr<monta::v1::AgentGateway::Stub> Gateway(
      const std::string& identity) {
    return monta::v1::AgentGateway::NewStub(As(identity));
  }
  static std::unique_ptr<monta::v1::Planner::Stub> Planner(
      const std::string& identity) {
    return monta::v1::Planner::NewStub(As(identity));
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    return context;
  }

  static monta::v1::RegisterRequest Registration(const std::string& node,
                                                 absl::string_view instance) {
    monta::v1::RegisterRequest request;
    request.set_node_name(node);
    request.set_instance_id(std::string(instance));
    request.set_bench_address("127.0.0.1");
    request.mutable_topology()->set_hostname(node);
    return request;
  }

  static grpc::Status Register(const std::string& identity,
                               const monta::v1::RegisterRequest& request) {
    monta::v1::RegisterReply reply;
    return Gateway(identity)->Register(Context().get(), request, &reply);
  }

  // The node as every reader sees it.
  static monta::v1::NodeInfo Node(const std::string& node) {
    monta::v1::GetNodeRequest request;
    request.set_name(node);
    monta::v1::NodeInfo info;
    const grpc::Status s =
        Planner("reader")->GetNode(Context().get(), request, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  // The cpu-dev job (examples/cpu-dev.yaml) planned on node-a and node-b.
  static monta::v1::StrategyReply PlanOnAB() {
    return PlanOn({"node-a", "node-b"});
  }
  static monta::v1::StrategyReply PlanOn(
      const std::vector<std::string>& nodes) {
    const monta::v1::StrategyRequest request = testing::PaperJobOnNodes(nodes);
    monta::v1::StrategyReply reply;
    const grpc::Status s =
        Planner("reader")->GetStrategy(Context().get(), request, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    reply.clear_decision_seconds();  // how long it took is no part of a plan
    return reply;
  }

  static monta::v1::ListCurvesReply Curves(const std::string& node) {
    monta::v1::ListCurvesRequest request;
    request.set_node_name(node);
    monta::v1::ListCurvesReply reply;
    const grpc::Status s =
        Planner("reader")->ListCurves(Context().get(), request, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return reply;
  }

  // What a plan is judged by: the choice, its predicted time and evidence.
  static std::string PlanSummary(const monta::v1::StrategyReply& reply) {
    return absl::StrCat(reply.chosen().kind(),
                        " K=", reply.chosen().chunks_effective(),
                        " t=", reply.chosen().step_seconds(),
                        " evidence=", reply.evidence().origin());
  }

  // A benchmark of `nodes` scheduled by the operator (2 ranks per node).
  static std::string Schedule(const std::vector<std::string>& nodes) {
    monta::v1::RunBenchmarkRequest request;
    for (const std::string& node : nodes) request.add_nodes(node);
    request.set_ranks_per_node(2);
    request.set_timeout_seconds(600);
    monta::v1::RunBenchmarkReply reply;
    const grpc::Status s =
        Planner("operator")->RunBenchmark(Context().get(), request, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return reply.status().task_id();
  }

  // `reporter`'s report of task `task_id` as an agent sends it, every rank
  // taking `seconds` at every size, naming `ranks` (empty: the reporter's own
  // ranks in the task).
  static monta::v1::ReportBenchmarkRequest TimesReport(
      const std::string& task_id, const std::string& reporter, double seconds,
      const std::vector<int>& ranks = {}) {
    absl::StatusOr<monta::v1::BenchmarkTask> spec =
        server_->coordinator().Spec(task_id);
    EXPECT_TRUE(spec.ok()) << spec.status();
    monta::v1::ReportBenchmarkRequest report =
        coordination::ReportForTesting(*spec, reporter, seconds);
    if (!ranks.empty()) {
      report.clear_ranks();
      for (int r : ranks) report.add_ranks(r);
    }
    return report;
  }

  static grpc::Status Report(const std::string& identity,
                             const monta::v1::ReportBenchmarkRequest& report) {
    monta::v1::ReportBenchmarkReply reply;
    return Gateway(identity)->ReportBenchmark(Context().get(), report, &reply);
  }

  // node-a and node-b registered by their own agents (once per suite).
  void SetUp() override {
    if (registered_) return;
    ASSERT_TRUE(
        Register("node-a", Registration("node-a", kSecretInstance)).ok());
    ASSERT_TRUE(Register("node-b", Registration("node-b", "b-1")).ok());
    registered_ = true;
  }

  static std::string* dir_;
  static TestCertFiles* ca_;
  static PlannerServer* server_;
  static bool registered_;
};

std::string* MtlsAttackTest::dir_ = nullptr;
TestCertFiles* MtlsAttackTest::ca_ = nullptr;
PlannerServer* MtlsAttackTest::server_ = nullptr;
bool MtlsAttackTest::registered_ = false;

// Refused without reaching a handler: no certificate, plaintext, or a
// certificate from a CA the planner does not trust.
void ExpectNoHandshake(const grpc::Status& status, const std::string& who) {
  EXPECT_TRUE(status.error_code() == StatusCode::UNAVAILABLE ||
              status.error_code() == StatusCode::UNAUTHENTICATED)
      << who << ": " << status.error_code() << " " << status.error_message();
}

TEST_F(MtlsAttackTest, AnonymousAndUntrustedClientsNeverGetIn) {
  grpc::SslCredentialsOptions no_client_cert;
  no_client_cert.pem_root_certs = testing::ReadFile(ca_->cert_file);
  ASSERT_FALSE(no_client_cert.pem_root_certs.empty());
  const std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>>
      outsiders = {
          {"TLS without a client certificate",
           grpc::CreateChannel(Target(), grpc::SslCredentials(no_client_cert))},
          {"plaintext",
           grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials())},
          {"node-a's name from an untrusted CA", As("rogue-node-a")},
      };
  for (const auto& [who, channel] : outsiders) {
    monta::v1::ListNodesReply nodes;
    ExpectNoHandshake(monta::v1::Planner::NewStub(channel)->ListNodes(
                          Context().get(), {}, &nodes),
                      who);
    monta::v1::HeartbeatRequest heartbeat;
    heartbeat.set_node_name("node-a");
    heartbeat.set_instance_id(std::string(kSecretInstance));
    monta::v1::HeartbeatReply reply;
    ExpectNoHandshake(monta::v1::AgentGateway::NewStub(channel)->Heartbeat(
                          Context().get(), heartbeat, &reply),
                      who);
  }
  // The control: the same call with a trusted certificate gets through.
  monta::v1::ListNodesReply nodes;
  EXPECT_TRUE(Planner("reader")->ListNodes(Context().get(), {}, &nodes).ok());
}

// The plaintext health port (for kubelet probes) answers health checks and
// nothing else: without a client certificate every Monta RPC is refused.
TEST_F(MtlsAttackTest, PlaintextHealthPortServesOnlyHealth) {
  ASSERT_GT(server_->health_port(), 0);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->health_port()),
                          grpc::InsecureChannelCredentials());
  grpc::health::v1::HealthCheckRequest check;
  check.set_service("monta.v1.Planner");
  grpc::health::v1::HealthCheckResponse health;
  const grpc::Status checked =
      grpc::health::v1::Health::NewStub(channel)->Check(Context().get(), check,
                                                        &health);
  ASSERT_TRUE(checked.ok()) << checked.error_message();
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  monta::v1::ListNodesReply nodes;
  EXPECT_EQ(monta::v1::Planner::NewStub(channel)
                ->ListNodes(Context().get(), {}, &nodes)
                .error_code(),
            StatusCode::UNAUTHENTICATED);
  monta::v1::RegisterReply registered;
  EXPECT_EQ(
      monta::v1::AgentGateway::NewStub(channel)
          ->Register(Context().get(), Registration("node-a", "x"), &registered)
          .error_code(),
      StatusCode::UNAUTHENTICATED);
  monta::v1::RunBenchmarkRequest bench;
  bench.add_nodes("node-a");
  monta::v1::RunBenchmarkReply bench_reply;
  EXPECT_EQ(monta::v1::Planner::NewStub(channel)
                ->RunBenchmark(Context().get(), bench, &bench_reply)
                .error_code(),
            StatusCode::UNAUTHENTICATED);
}

TEST_F(MtlsAttackTest, AnotherNodeCannotHeartbeatReRegisterOrDeregisterIt) {
  const monta::v1::NodeInfo before = Node("node-a");
  // Even knowing node-a's instance id (it was the credential once).
  monta::v1::HeartbeatRequest heartbeat;
  heartbeat.set_node_name("node-a");
  heartbeat.set_instance_id(std::string(kSecretInstance));
  monta::v1::HeartbeatReply heartbeat_reply;
  EXPECT_EQ(Gateway("node-b")
                ->Heartbeat(Context().get(), heartbeat, &heartbeat_reply)
                .error_code(),
            StatusCode::PERMISSION_DENIED);
  // 8 fake GPUs and another bench address.
  monta::v1::RegisterRequest takeover = Registration("node-a", kSecretInstance);
  takeover.set_bench_address("10.66.6.6");
  for (int i = 0; i < 8; ++i) takeover.mutable_topology()->add_gpus();
  const grpc::Status reregistered = Register("node-b", takeover);
  EXPECT_EQ(reregistered.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(reregistered.error_message(), "node node-b"))
      << reregistered.error_message();
  // Readers and operators are not nodes either.
  EXPECT_EQ(Register("reader", takeover).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("operator", takeover).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("two-identities", takeover).error_code(),
            StatusCode::PERMISSION_DENIED);
  monta::v1::DeregisterRequest deregister;
  deregister.set_node_name("node-a");
  deregister.set_instance_id(std::string(kSecretInstance));
  monta::v1::DeregisterReply deregister_reply;
  EXPECT_EQ(Gateway("node-b")
                ->Deregister(Context().get(), deregister, &deregister_reply)
                .error_code(),
            StatusCode::PERMISSION_DENIED);

  const monta::v1::NodeInfo after = Node("node-a");
  EXPECT_EQ(after.state(), monta::v1::NODE_STATE_ALIVE);
  EXPECT_EQ(after.bench_address(), "127.0.0.1");
  EXPECT_EQ(after.topology().gpus_size(), 0);
  EXPECT_EQ(after.registered_at().seconds(), before.registered_at().seconds());
  EXPECT_EQ(after.registered_at().nanos(), before.registered_at().nanos());
  // The control: node-a's own certificate may heartbeat as node-a.
  EXPECT_TRUE(Gateway("node-a")
                  ->Heartbeat(Context().get(), heartbeat, &heartbeat_reply)
                  .ok());
}

TEST_F(MtlsAttackTest, NobodyElseCanHoldANodesName) {
  // node-c's agent has not started yet; node-b tries to take its name first.
  EXPECT_EQ(Register("node-b", Registration("node-c", "squatter")).error_code(),
            StatusCode::PERMISSION_DENIED);
  monta::v1::GetNodeRequest get;
  get.set_name("node-c");
  monta::v1::NodeInfo info;
  EXPECT_EQ(
      Planner("reader")->GetNode(Context().get(), get, &info).error_code(),
      StatusCode::NOT_FOUND);
  // So the real agent registers at once (no ALREADY_EXISTS).
  EXPECT_TRUE(Register("node-c", Registration("node-c", "c-1")).ok());
}

TEST_F(MtlsAttackTest, WatchTasksOnlyForItself) {
  for (const std::string identity : {"node-b", "reader", "operator"}) {
    monta::v1::WatchTasksRequest request;
    request.set_node_name("node-a");
    request.set_instance_id(std::string(kSecretInstance));
    auto context = Context();
    auto stream = Gateway(identity)->WatchTasks(context.get(), request);
    monta::v1::BenchmarkTask task;
    EXPECT_FALSE(stream->Read(&task)) << identity;
    EXPECT_EQ(stream->Finish().error_code(), StatusCode::PERMISSION_DENIED)
        << identity;
  }
}

TEST_F(MtlsAttackTest, OnlyOperatorsRunBenchmarks) {
  monta::v1::RunBenchmarkRequest request;
  request.add_nodes("node-a");
  for (const std::string identity : {"reader", "node-a", "node-b"}) {
    monta::v1::RunBenchmarkReply reply;
    const grpc::Status s =
        Planner(identity)->RunBenchmark(Context().get(), request, &reply);
    EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << identity;
    EXPECT_TRUE(absl::StrContains(s.error_message(), "operator"))
        << s.error_message();
  }
  // Verify runs workloads on the nodes too: operators only.
  for (const std::string identity : {"reader", "node-a"}) {
    monta::v1::VerifyReply reply;
    EXPECT_EQ(Planner(identity)
                  ->Verify(Context().get(), monta::v1::VerifyRequest(), &reply)
                  .error_code(),
              StatusCode::PERMISSION_DENIED)
        << identity;
  }
  // Every authenticated caller may read.
  for (const std::string identity : {"reader", "node-b", "operator"}) {
    monta::v1::ListProfilesReply profiles;
    EXPECT_TRUE(
        Planner(identity)->ListProfiles(Context().get(), {}, &profiles).ok())
        << identity;
  }
}

TEST_F(MtlsAttackTest, ForgedResultsAreRefusedAndThePlanStays) {
  const std::string plan_before = PlanSummary(PlanOnAB());
  const std::string task_a = Schedule({"node-a"});
  const std::string task_ab = Schedule({"node-a", "node-b"});
  ASSERT_FALSE(task_a.empty());
  ASSERT_FALSE(task_ab.empty());
  struct Forgery {
    std::string what;
    std::string identity;
    monta::v1::ReportBenchmarkRequest report;
  };
  // 1 ns per operation: absurdly fast, had it landed.
  const std::vector<Forgery> forgeries = {
      {"a non-member reporting", "node-b",
       TimesReport(task_a, "node-b", 1e-9, {0, 1})},
      {"a non-member reporting as the member", "node-b",
       TimesReport(task_a, "node-a", 1e-9)},
      {"node-b reporting node-a's ranks", "node-b",
       TimesReport(task_ab, "node-b", 1e-9, {0, 1})},
      {"node-b reporting its ranks and node-a's", "node-b",
       TimesReport(task_ab, "node-b", 1e-9, {0, 1, 2, 3})},
      {"node-a reporting one of its two ranks", "node-a",
       TimesReport(task_ab, "node-a", 1e-9, {0})},
      {"a reader", "reader", TimesReport(task_a, "node-a", 1e-9)},
  };
  for (const Forgery& forgery : forgeries) {
    EXPECT_EQ(Report(forgery.identity, forgery.report).error_code(),
              StatusCode::PERMISSION_DENIED)
        << forgery.what;
  }
  // The rendezvous store of a task is its members' only.
  monta::v1::RendezvousSetRequest set;
  set.set_task_id(task_a);
  set.set_key("join/0");
  set.set_value("x");
  monta::v1::RendezvousSetReply set_reply;
  EXPECT_EQ(Gateway("node-b")
                ->RendezvousSet(Context().get(), set, &set_reply)
                .error_code(),
            StatusCode::PERMISSION_DENIED);
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(task_a);
  get.set_key("join/0");
  monta::v1::RendezvousGetReply get_reply;
  EXPECT_EQ(Gateway("node-b")
                ->RendezvousGet(Context().get(), get, &get_reply)
                .error_code(),
            StatusCode::PERMISSION_DENIED);

  EXPECT_EQ(Node("node-a").curves_size(), 0);
  EXPECT_EQ(Node("node-b").curves_size(), 0);
  EXPECT_EQ(PlanSummary(PlanOnAB()), plan_before);
  // The control: node-a's own report of its own task is taken (so what was
  // refused above would have landed).
  EXPECT_TRUE(
      Gateway("node-a")->RendezvousSet(Context().get(), set, &set_reply).ok());
  EXPECT_TRUE(Report("node-a", TimesReport(task_a, "node-a", 1e-3)).ok());
  EXPECT_EQ(Node("node-a").curves_size(), 3);  // alltoall, allgather, copy
  EXPECT_EQ(Node("node-b").curves_size(), 0);
}

// Issue 17: node-b puts 157 reports into one pending task (the first a real
// one, then more of them, and one of 64 curves x 1,024 points): the planner
// takes each node's first report and refuses the rest, holds no more than one
// report per node, and nothing once the task ended.
TEST_F(MtlsAttackTest, AReportFloodIsRefusedAfterEachNodesFirst) {
  const std::string task = Schedule({"node-a", "node-b"});
  ASSERT_FALSE(task.empty());
  const size_t held_before = server_->coordinator().held_report_bytes();
  monta::v1::ReportBenchmarkRequest huge = TimesReport(task, "node-b", 1e-3);
  for (int i = 0; i < 63; ++i) *huge.add_series() = huge.series(0);
  for (auto& series : *huge.mutable_series()) {
    while (series.sizes_size() < 1024) *series.add_sizes() = series.sizes(0);
  }
  const grpc::Status refused = Report("node-b", huge);
  EXPECT_EQ(refused.error_code(), StatusCode::INVALID_ARGUMENT)
      << refused.error_message();
  for (const std::string node : {"node-b", "node-a"}) {
    int ok = 0;
    int already = 0;
    for (int i = 0; i < 157; ++i) {
      const grpc::Status s = Report(node, TimesReport(task, node, 1e-3));
      if (s.ok()) ++ok;
      if (s.error_code() == StatusCode::ALREADY_EXISTS) ++already;
    }
    EXPECT_EQ(ok, 1) << node;
    EXPECT_EQ(already, 156) << node;
    if (node == "node-b") {
      // One small report held (the sweep's 5 sizes x 2 ranks).
      EXPECT_GT(server_->coordinator().held_report_bytes(), held_before);
      EXPECT_LT(server_->coordinator().held_report_bytes(),
                held_before + (64 << 10));
    }
  }
  // node-a's report ended the task: its reports are freed.
  EXPECT_EQ(server_->coordinator().held_report_bytes(), held_before);
  EXPECT_EQ(server_->coordinator().Status(task)->state(),
            monta::v1::TASK_STATE_SUCCEEDED);
}

// Issue 17: a node of a task an operator scheduled claims 10x the times the
// other node measured in the same collectives. The curve is excluded, with
// the reason in the task's status, the node's evidence, the plan's notes and
// monta_curves_excluded_total; the honest curve stays the evidence, and no
// plan for nodes outside the pair changes.
TEST_F(MtlsAttackTest, ANodeClaimingTenTimesTheOthersIsExcluded) {
  ASSERT_TRUE(Register("node-d", Registration("node-d", "d-1")).ok());
  std::map<std::string, std::string> honest;
  for (const std::string other : {"node-b", "node-d"}) {
    const std::string task = Schedule({"node-a", other});
    ASSERT_TRUE(Report("node-a", TimesReport(task, "node-a", 1e-3)).ok());
    ASSERT_TRUE(Report(other, TimesReport(task, other, 1.2e-3)).ok());
    ASSERT_EQ(server_->coordinator().Status(task)->state(),
              monta::v1::TASK_STATE_SUCCEEDED);
    honest[other] = task;
  }
  const monta::v1::StrategyReply ad_before = PlanOn({"node-a", "node-d"});
  const monta::v1::StrategyReply ab_before = PlanOnAB();

  const std::string task = Schedule({"node-a", "node-b"});
  ASSERT_TRUE(Report("node-a", TimesReport(task, "node-a", 1e-3)).ok());
  ASSERT_TRUE(Report("node-b", TimesReport(task, "node-b", 1e-2)).ok());
  const auto status = server_->coordinator().Status(task);
  EXPECT_EQ(status->state(), monta::v1::TASK_STATE_FAILED);
  ASSERT_EQ(status->excluded_size(), 1);
  EXPECT_EQ(status->excluded(0).reason(),
            monta::v1::EXCLUSION_REASON_NODES_DISAGREE);
  const monta::v1::ListCurvesReply b = Curves("node-b");
  ASSERT_GE(b.excluded_size(), 1);
  EXPECT_EQ(b.excluded(0).curve().task_id(), task);
  EXPECT_NE(b.excluded(0).detail().find("node node-b's"), std::string::npos)
      << b.excluded(0).detail();
  EXPECT_NE(b.excluded(0).detail().find("10.0x node node-a's"),
            std::string::npos)
      << b.excluded(0).detail();
  for (const auto& curve : b.curves()) EXPECT_NE(curve.task_id(), task);

  // Outside the pair nothing moved, to the byte (but the curves' ages).
  const auto ageless = [](monta::v1::StrategyReply reply) {
    for (auto& curve : *reply.mutable_evidence()->mutable_curves()) {
      curve.clear_age_seconds();
    }
    return reply.SerializeAsString();
  };
  EXPECT_EQ(ageless(PlanOn({"node-a", "node-d"})), ageless(ad_before));
  // The pair keeps its honest evidence and says what it left out.
  const monta::v1::StrategyReply ab_after = PlanOnAB();
  EXPECT_EQ(PlanSummary(ab_after), PlanSummary(ab_before));
  bool noted = false;
  for (const auto& curve : ab_after.evidence().curves()) {
    if (curve.used_as() == monta::v1::CURVE_ROLE_ALLTOALL_INTER) {
      EXPECT_EQ(curve.task_id(), honest["node-b"]);
    }
  }
  for (const std::string& note : ab_after.evidence().notes()) {
    if (absl::StrContains(note, absl::StrCat("task ", task)) &&
        absl::StrContains(note, "excluded (nodes_disagree")) {
      noted = true;
    }
  }
  EXPECT_TRUE(noted) << ab_after.evidence().DebugString();
  const std::string metrics =
      prometheus::TextSerializer().Serialize(server_->metrics().Collect());
  EXPECT_TRUE(absl::StrContains(
      metrics, "monta_curves_excluded_total{reason=\"nodes_disagree\"} 1"))
      << metrics;
}

// Evidence can be listed by anyone with a certificate and dropped only by an
// operator.
TEST_F(MtlsAttackTest, OnlyOperatorsForgetEvidence) {
  monta::v1::ForgetCurvesRequest forget;
  forget.set_node_name("node-a");
  for (const std::string identity : {"reader", "node-a", "node-b"}) {
    monta::v1::ForgetCurvesReply reply;
    const grpc::Status s =
        Planner(identity)->ForgetCurves(Context().get(), forget, &reply);
    EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << identity;
  }
  monta::v1::ListCurvesRequest list;
  list.set_node_name("node-a");
  for (const std::string identity : {"reader", "node-b", "operator"}) {
    monta::v1::ListCurvesReply reply;
    EXPECT_TRUE(
        Planner(identity)->ListCurves(Context().get(), list, &reply).ok())
        << identity;
  }
  // The control: an operator may (a task that produced nothing: a no-op).
  forget.clear_node_name();
  forget.set_task_id("bench-none");
  monta::v1::ForgetCurvesReply reply;
  EXPECT_TRUE(
      Planner("operator")->ForgetCurves(Context().get(), forget, &reply).ok());
  EXPECT_EQ(reply.forgotten_size(), 0);
}

TEST_F(MtlsAttackTest, InstanceIdIsNeverHandedOut) {
  monta::v1::ListNodesRequest list;
  list.set_include_gone(true);
  monta::v1::ListNodesReply nodes;
  ASSERT_TRUE(Planner("reader")->ListNodes(Context().get(), list, &nodes).ok());
  ASSERT_GE(nodes.nodes_size(), 2);
  EXPECT_FALSE(absl::StrContains(nodes.DebugString(), kSecretInstance));
  EXPECT_FALSE(
      absl::StrContains(Node("node-a").DebugString(), kSecretInstance));
  // A second agent of node-a (same certificate, another process) is told the
  // name is held, not by whom.
  const grpc::Status second =
      Register("node-a", Registration("node-a", "second"));
  EXPECT_EQ(second.error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_FALSE(absl::StrContains(second.error_message(), kSecretInstance))
      << second.error_message();
  monta::v1::HeartbeatRequest heartbeat;
  heartbeat.set_node_name("node-a");
  heartbeat.set_instance_id("second");
  monta::v1::HeartbeatReply reply;
  const grpc::Status stale =
      Gateway("node-a")->Heartbeat(Context().get(), heartbeat, &reply);
  EXPECT_FALSE(stale.ok());
  EXPECT_FALSE(absl::StrContains(stale.error_message(), kSecretInstance))
      << stale.error_message();
}

// Issue 17's forged curve, replayed with the real binaries over mutual TLS: a
// planner with --db and the agents of node-a and node-b (tests/testing/
// cluster.h). In a two-node benchmark an operator scheduled, node-b's
// certificate reports 10 s per operation dated 100 years ahead before node-b's
// own agent does. The planner excludes the curve (node-a's agent measured
// milliseconds), the plan for examples/cpu-dev.yaml does not move, node-b's
// real report is refused, an honest re-measurement is the evidence afterwards,
// also after a planner restart on the same --db; an operator's forget of it
// brings the first one back, audited.
class RealClusterAttackTest : public ::testing::Test {
 protected:
  void StartPlanner(int port = 0) {
    ASSERT_TRUE(cluster_
                    .StartPlanner({"--db=" + cluster_.dir() + "/planner.db",
                                   "--bench_on_register=false"},
                                  port)
                    .ok());
  }

  // A channel with the cluster's certificate `name` (node-cert-node-b,
  // operator).
  std::shared_ptr<grpc::Channel> As(const std::string& name) {
    GrpcSecurityOptions security;
    security.ca_file = cluster_.dir() + "/ca.crt";
    security.cert_file = absl::StrCat(cluster_.dir(), "/", name, ".crt");
    security.key_file = absl::StrCat(cluster_.dir(), "/", name, ".key");
    auto credentials = MakeChannelCredentials(security);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    return grpc::CreateChannel(cluster_.planner_address(), *credentials);
  }

  nlohmann::json Json(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"--output=json"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::CommandResult r = cluster_.Montactl(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  // montactl plan --job examples/cpu-dev.yaml --node_names node-a,node-b.
  nlohmann::json Plan() {
    return Json({"plan", "--job=" + testing::Runfile("examples/cpu-dev.yaml"),
                 "--node_names=node-a,node-b"});
  }
  static std::string InterTask(const nlohmann::json& plan) {
    for (const auto& c : plan["evidence"]["curves"]) {
      if (c["used_as"] == "CURVE_ROLE_ALLTOALL_INTER") return c["task_id"];
    }
    return "";
  }
  static std::string Choice(const nlohmann::json& plan) {
    return absl::StrCat(plan["chosen"]["kind"].get<std::string>(),
                        " K=", plan["chosen"].value("chunks_effective", 0));
  }
  static double SecondsPerLayer(const nlohmann::json& plan) {
    return plan["chosen"].value("total_seconds_per_layer", 0.0);
  }

  // An honest benchmark of the pair through montactl; its task id.
  std::string Bench() {
    nlohmann::json bench =
        Json({"bench", "--nodes=node-a,node-b", "--ranks_per_node=2",
              "--bench_timeout_seconds=120"});
    EXPECT_EQ(bench["status"]["state"], "TASK_STATE_SUCCEEDED")
        << bench.dump(1);
    return bench["status"].value("task_id", "");
  }

  std::string Metrics() {
    httplib::Client client("127.0.0.1", cluster_.metrics_port());
    auto scraped = client.Get("/metrics");
    return scraped ? scraped->body : "";
  }

  // The operator schedules the pair; node-b's certificate reports first: 10 s
  // per operation, dated 100 years ahead. The task's id ("" on failure).
  std::string ScheduleAndForge() {
    monta::v1::RunBenchmarkRequest run;
    run.add_nodes("node-a");
    run.add_nodes("node-b");
    run.set_ranks_per_node(2);
    run.set_timeout_seconds(120);
    monta::v1::RunBenchmarkReply scheduled;
    grpc::ClientContext run_context;
    const grpc::Status ran = monta::v1::Planner::NewStub(As("operator"))
                                 ->RunBenchmark(&run_context, run, &scheduled);
    EXPECT_TRUE(ran.ok()) << ran.error_message();
    // What node-b's agent was handed (the planner's defaults).
    monta::v1::BenchmarkTask spec;
    spec.set_task_id(scheduled.status().task_id());
    spec.add_nodes("node-a");
    spec.add_nodes("node-b");
    spec.set_ranks_per_node(2);
    spec.add_collectives(monta::v1::COLLECTIVE_ALLTOALL);
    spec.set_min_bytes(64 << 10);
    spec.set_max_bytes(16 << 20);
    spec.set_step_factor(4);
    monta::v1::ReportBenchmarkRequest forged =
        coordination::ReportForTesting(spec, "node-b", 10);
    forged.mutable_measured_at()->set_seconds(
        absl::ToUnixSeconds(absl::Now() + absl::Hours(24 * 365 * 100)));
    monta::v1::ReportBenchmarkReply reported;
    grpc::ClientContext report_context;
    const grpc::Status taken =
        monta::v1::AgentGateway::NewStub(As("node-cert-node-b"))
            ->ReportBenchmark(&report_context, forged, &reported);
    EXPECT_TRUE(taken.ok()) << taken.error_message();
    return ran.ok() && taken.ok() ? spec.task_id() : "";
  }

  // node-a's exclusion of `task`'s curve, once the task ended (null if never).
  nlohmann::json WaitExcluded(const std::string& task) {
    nlohmann::json excluded;
    testing::WaitFor(
        [&] {
          const nlohmann::json curves = Json({"curves", "node-a"});
          for (const auto& e : curves.value("excluded", nlohmann::json())) {
            if (e["curve"]["task_id"] == task) excluded = e;
          }
          return !excluded.is_null();
        },
        absl::Seconds(120));
    if (excluded.is_null()) {
      ADD_FAILURE() << "task " << task << " excluded nothing; planner log:\n"
                    << testing::ReadFile(cluster_.planner().log_path())
                    << "\nnode-a's agent:\n"
                    << testing::ReadFile(cluster_.agent("node-a").log_path())
                    << "\nnode-b's agent:\n"
                    << testing::ReadFile(cluster_.agent("node-b").log_path());
      excluded = nlohmann::json::object();
    }
    return excluded;
  }

  // The operator drops `task`'s evidence: `older` (kept in --db) is the
  // evidence again, and the audit log (a log line, the audit_log table) names
  // the operator.
  void ExpectForgetIsAudited(const std::string& task,
                             const std::string& older) {
    const nlohmann::json forgot = Json({"forget", "--task=" + task});
    ASSERT_EQ(forgot["forgotten"].size(), 1u) << forgot.dump(1);
    ASSERT_EQ(forgot["restored"].size(), 1u) << forgot.dump(1);
    EXPECT_EQ(forgot["restored"][0]["task_id"], older);
    EXPECT_EQ(InterTask(Plan()), older);
    EXPECT_TRUE(absl::StrContains(
        testing::ReadFile(cluster_.planner().log_path()),
        absl::StrCat("operator test forgot the curves of task ", task)));
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((cluster_.dir() + "/planner.db").c_str(), &db,
                              SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    sqlite3_stmt* row = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT identity, action, target FROM "
                                 "audit_log ORDER BY id DESC LIMIT 1",
                                 -1, &row, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(row), SQLITE_ROW);
    const auto text = [&](int column) {
      return std::string(
          reinterpret_cast<const char*>(sqlite3_column_text(row, column)));
    };
    EXPECT_EQ(text(0), "operator test");
    EXPECT_EQ(text(1), "forget_curves");
    EXPECT_EQ(text(2), "task " + task);
    sqlite3_finalize(row);
    sqlite3_close(db);
  }

  static bool NotesExclusion(const nlohmann::json& plan,
                             const std::string& task) {
    for (const auto& note : plan["evidence"]["notes"]) {
      const std::string text = note.get<std::string>();
      if (absl::StrContains(text, absl::StrCat("task ", task, " on ")) &&
          absl::StrContains(text, "excluded")) {
        return true;
      }
    }
    return false;
  }

  testing::LocalCluster cluster_;
};

TEST_F(RealClusterAttackTest, AForgedFutureCurveNeitherLandsNorPinsThePlan) {
  StartPlanner();
  ASSERT_TRUE(cluster_.StartAgent("node-a").ok());
  ASSERT_TRUE(cluster_.StartAgent("node-b").ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return cluster_.AllAlive({"node-a", "node-b"});
      },
      absl::Seconds(30)));
  const std::string honest = Bench();
  const nlohmann::json before = Plan();
  ASSERT_EQ(InterTask(before), honest) << before.dump(1);

  const std::string forged_task = ScheduleAndForge();
  ASSERT_FALSE(forged_task.empty());
  // node-a's agent reports what it measured: the curve is excluded.
  const nlohmann::json excluded = WaitExcluded(forged_task);
  EXPECT_EQ(excluded["reason"], "EXCLUSION_REASON_NODES_DISAGREE")
      << excluded.dump(1);
  EXPECT_TRUE(absl::StrContains(excluded.value("detail", ""),
                                "node node-b's median rank time 10 s"))
      << excluded.dump(1);
  // node-b's own agent, reporting later, is told it already did.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(
            testing::ReadFile(cluster_.agent("node-b").log_path()),
            "already reported");
      },
      absl::Seconds(120)));
  const nlohmann::json after = Plan();
  EXPECT_EQ(InterTask(after), honest);
  EXPECT_EQ(Choice(after), Choice(before));
  EXPECT_EQ(SecondsPerLayer(after), SecondsPerLayer(before));
  EXPECT_TRUE(NotesExclusion(after, forged_task)) << after["evidence"].dump(1);
  const std::string metrics = Metrics();
  EXPECT_TRUE(absl::StrContains(
      metrics, "monta_curves_excluded_total{reason=\"nodes_disagree\"} 1"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(
      metrics, "monta_planner_held_bytes{kind=\"task_reports\"} 0"))
      << metrics;

  // An honest re-measurement is the evidence, before and after a restart.
  const std::string remeasured = Bench();
  const nlohmann::json fresh = Plan();
  EXPECT_EQ(InterTask(fresh), remeasured);
  // Within what a loaded test machine's noise allows (the lead's quiet-host
  // numbers: perf/trust_bench.sh); the forged curve would have meant 10 s per
  // operation.
  EXPECT_LT(SecondsPerLayer(fresh), 5 * SecondsPerLayer(before));
  const int port = cluster_.grpc_port();
  cluster_.planner().Signal(SIGTERM);
  ASSERT_TRUE(cluster_.planner().Wait(absl::Seconds(15)).ok());
  StartPlanner(port);
  const nlohmann::json restarted = Plan();
  EXPECT_EQ(InterTask(restarted), remeasured) << restarted.dump(1);
  EXPECT_EQ(Choice(restarted), Choice(fresh));
  EXPECT_EQ(SecondsPerLayer(restarted), SecondsPerLayer(fresh));
  ExpectForgetIsAudited(remeasured, honest);
}

}  // namespace
}  // namespace monta
