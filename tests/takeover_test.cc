// A new leader leads from its follower's cache only when the cache holds
// every commit (issue 20: a new leader coordinating sooner after the old one
// died; server/planner_server.cc, StartLeading). Two real monta-planner
// replicas on one real etcd member, on loopback: replica 0 leads, replica 1
// follows with a watch-fed cache. Replica 1 is SIGSTOPped, so registrations
// acknowledged by the leader land in etcd behind its cache's back; the leader
// is then stopped (SIGTERM: it resigns, so replica 1 is elected the moment it
// runs again, with its watch still behind) and replica 1 SIGCONTed. The new
// leader's registry must be what etcd holds: every node etcd has, acknowledged
// before and behind the cache's back, and no other; a registration it takes
// lands in etcd (its store writer's mirror is loaded after it serves). Which
// way it took over (the cache kept once it caught up, or a reload) is logged,
// not asserted: it depends on which of its threads runs first.
#include <signal.h>

#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/etcd/client.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/grpc_clients.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

constexpr char kPrefix[] = "/takeover-test/";

struct Replica {
  int port = 0;
  Process process;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  std::unique_ptr<monta::v1::Planner::Stub> planner;
  std::unique_ptr<monta::v1::AgentGateway::Stub> gateway;
};

class TakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = EtcdCluster::Start(EtcdCluster::Options{});
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    etcd::ClientOptions options;
    options.endpoints = etcd_->endpoints();
    options.security.insecure = true;
    auto client = etcd::Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Replica `i` (a 10 s lease: a SIGSTOP of a few seconds keeps it).
  void StartReplica(int i) {
    Replica& r = replicas_[i];
    r.port = FreeLoopbackPort();
    const std::vector<std::string> argv = {
        Runfile("server/monta-planner"),
        absl::StrCat("--listen=127.0.0.1:", r.port),
        absl::StrCat("--metrics_listen=127.0.0.1:", FreeLoopbackPort()),
        "--store=etcd",
        "--etcd_endpoints=" + absl::StrJoin(etcd_->endpoints(), ","),
        "--etcd_insecure",
        absl::StrCat("--etcd_prefix=", kPrefix),
        "--leader_lease_seconds=10",
        absl::StrCat("--replica_id=replica-", i),
        "--insecure",
        "--bench_on_register=false",
        "--bench_interval_seconds=0",
        "--lease_seconds=600",
        "--heartbeat_seconds=60"};
    auto process =
        Process::Start(argv, absl::StrCat(TempDir(), "/replica-", i, ".log"));
    ASSERT_TRUE(process.ok()) << process.status();
    r.process = *std::move(process);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", r.port),
                                       grpc::InsecureChannelCredentials());
    r.health = grpc::health::v1::Health::NewStub(channel);
    r.planner = monta::v1::Planner::NewStub(channel);
    r.gateway = monta::v1::AgentGateway::NewStub(channel);
  }

  bool Serving(int i, const std::string& service) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse reply;
    return replicas_[i]
               .health->Check(ContextWithDeadline(2).get(), request, &reply)
               .ok() &&
           reply.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  bool Leads(int i) { return Serving(i, "monta.v1.Planner"); }

  grpc::Status Register(int i, const std::string& node) {
    monta::v1::RegisterRequest request;
    request.set_node_name(node);
    request.set_instance_id("i-" + node);
    monta::v1::RegisterReply reply;
    return replicas_[i].gateway->Register(ContextWithDeadline(10).get(),
                                          request, &reply);
  }
  // Registers `count` nodes named `stem`-<n> on replica `i`; the names.
  std::vector<std::string> RegisterMany(int i, const std::string& stem,
                                        int count) {
    std::vector<std::string> names;
    for (int n = 0; n < count; ++n) {
      const std::string node = absl::StrCat(stem, "-", n);
      const grpc::Status s = Register(i, node);
      EXPECT_TRUE(s.ok()) << node << ": " << s.error_message();
      if (s.ok()) names.push_back(node);
    }
    return names;
  }

  // Every node replica `i` lists (gone ones too); empty set when it fails.
  std::set<std::string> Listed(int i) {
    std::set<std::string> names;
    std::string token;
    do {
      monta::v1::ListNodesRequest request;
      request.set_include_gone(true);
      request.set_page_token(token);
      monta::v1::ListNodesReply reply;
      if (!replicas_[i]
               .planner
               ->ListNodes(ContextWithDeadline(10).get(), request, &reply)
               .ok()) {
        return {};
      }
      for (const auto& node : reply.nodes()) names.insert(node.name());
      token = reply.next_page_token();
    } while (!token.empty());
    return names;
  }

  // The node names etcd holds (P nodes/<name>).
  std::set<std::string> Stored() {
    const std::string dir = absl::StrCat(kPrefix, "nodes/");
    etcd::RangeRequest range;
    range.key = dir;
    range.range_end = etcd::PrefixEnd(dir);
    range.keys_only = true;
    auto got = client_->Range(range);
    EXPECT_TRUE(got.ok()) << got.status();
    std::set<std::string> names;
    if (!got.ok()) return names;
    for (const etcd::KeyValue& kv : got->kvs) {
      names.insert(kv.key.substr(dir.size()));
    }
    return names;
  }

  std::string Log(int i) { return ReadFile(replicas_[i].process.log_path()); }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<etcd::Client> client_;
  Replica replicas_[2];
};

TEST_F(TakeoverTest, ANewLeadersRegistryIsEtcdsWhenItsCacheWasBehind) {
  ASSERT_NO_FATAL_FAILURE(StartReplica(0));
  ASSERT_TRUE(WaitFor([&] { return Leads(0); }, absl::Seconds(30))) << Log(0);
  ASSERT_NO_FATAL_FAILURE(StartReplica(1));
  std::vector<std::string> acknowledged = RegisterMany(0, "before", 20);
  ASSERT_EQ(acknowledged.size(), 20u);
  // Replica 1 follows: its cache holds them.
  ASSERT_TRUE(WaitFor(
      [&] {
        return Serving(1, "monta.v1.Planner.read") &&
               Listed(1).size() == acknowledged.size();
      },
      absl::Seconds(30)))
      << Log(1);

  // Behind the cache's back: registrations acknowledged while replica 1 is
  // stopped, then the leader resigns.
  replicas_[1].process.Signal(SIGSTOP);
  const std::vector<std::string> behind = RegisterMany(0, "behind", 200);
  ASSERT_EQ(behind.size(), 200u);
  acknowledged.insert(acknowledged.end(), behind.begin(), behind.end());
  replicas_[0].process.Signal(SIGTERM);
  ASSERT_TRUE(replicas_[0].process.Wait(absl::Seconds(30)).ok()) << Log(0);
  replicas_[1].process.Signal(SIGCONT);
  ASSERT_TRUE(WaitFor([&] { return Leads(1); }, absl::Seconds(30))) << Log(1);

  const std::set<std::string> stored = Stored();
  EXPECT_EQ(stored.size(), acknowledged.size());
  for (const std::string& node : acknowledged) {
    EXPECT_EQ(stored.count(node), 1u) << node << " acknowledged, not in etcd";
  }
  const std::set<std::string> led = Listed(1);
  EXPECT_EQ(led, stored) << "the new leader's registry is not etcd's\n"
                         << Log(1);

  // It writes: a registration it takes lands in etcd.
  ASSERT_TRUE(Register(1, "after").ok());
  EXPECT_TRUE(
      WaitFor([&] { return Stored().count("after") == 1; }, absl::Seconds(10)));

  const std::string log = Log(1);
  const size_t line = log.find("leading with epoch");
  ASSERT_NE(line, std::string::npos) << log;
  std::cerr << "takeover_test: "
            << log.substr(line, log.find('\n', line) - line) << std::endl;
}

}  // namespace
}  // namespace monta::testing
