// The deny list (--deny_list_file) against the real planner binary over
// mutual TLS: a node named in the file is refused on every RPC of both
// services (its open WatchTasks stream ends) within a refresh interval, while
// the others carry on; a certificate is denied by its serial as openssl
// prints it; a bad file at a refresh keeps the previous list, at start it
// stops the planner with one line; removing the entry lets the node back in;
// a RendezvousGet parked before the deny answers the refusal (in process, to
// see it parked).
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/grpc_security.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/planner_server.h"
#include "tests/testing/cluster.h"
#include "tests/testing/grpc_clients.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

// Generous: a refused call is polled for, never timed.
constexpr absl::Duration kBound = absl::Seconds(60);

// Replaces `path`'s content at once (as a ConfigMap update does).
void WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
}

class DenyListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    deny_file_ = cluster_.dir() + "/deny-list.txt";
    WriteAtomically(deny_file_, "# nobody yet\n");
    const absl::Status started = cluster_.StartPlanner(
        {"--bench_on_register=false", "--lease_seconds=600",
         "--heartbeat_seconds=60", "--tls_refresh_seconds=1",
         "--deny_list_file=" + deny_file_});
    ASSERT_TRUE(started.ok()) << started;
    for (const std::string node : {"node-a", "node-b"}) {
      gateway_[node] = monta::v1::AgentGateway::NewStub(
          PlannerChannel(cluster_, cluster_.NodeTlsFlags(node)));
      planner_[node] = monta::v1::Planner::NewStub(
          PlannerChannel(cluster_, cluster_.NodeTlsFlags(node)));
      monta::v1::RegisterRequest request;
      request.set_node_name(node);
      request.set_instance_id("i-" + node);
      monta::v1::RegisterReply reply;
      const grpc::Status registered = gateway_[node]->Register(
          ContextWithDeadline().get(), request, &reply);
      ASSERT_TRUE(registered.ok()) << registered.error_message();
    }
    operator_ = monta::v1::Planner::NewStub(
        PlannerChannel(cluster_, cluster_.OperatorTlsFlags()));
  }

  grpc::Status Heartbeat(const std::string& node) {
    monta::v1::HeartbeatRequest request;
    request.set_node_name(node);
    request.set_instance_id("i-" + node);
    monta::v1::HeartbeatReply reply;
    return gateway_[node]->Heartbeat(ContextWithDeadline().get(), request,
                                     &reply);
  }

  // Polls `call` until its code is `want` (kBound at most).
  static bool Becomes(const std::function<grpc::Status()>& call,
                      grpc::StatusCode want, grpc::Status* last) {
    return WaitFor(
        [&] {
          *last = call();
          return last->error_code() == want;
        },
        kBound);
  }

  double Metric(const std::string& series) {
    return MetricValue(PlannerMetrics(cluster_), series);
  }

  LocalCluster cluster_;
  std::string deny_file_;
  std::map<std::string, std::unique_ptr<monta::v1::AgentGateway::Stub>>
      gateway_;
  std::map<std::string, std::unique_ptr<monta::v1::Planner::Stub>> planner_;
  std::unique_ptr<monta::v1::Planner::Stub> operator_;
};

TEST_F(DenyListTest, ADeniedNodeIsRefusedEverywhereAndLetBackInWhenRemoved) {
  // node-a's agent is watching for tasks when it is denied.
  monta::v1::WatchTasksRequest watch;
  watch.set_node_name("node-a");
  watch.set_instance_id("i-node-a");
  auto watch_context = ContextWithDeadline(120);
  auto stream = gateway_["node-a"]->WatchTasks(watch_context.get(), watch);
  grpc::Status watch_end;
  std::thread watcher([&] {
    monta::v1::BenchmarkTask task;
    while (stream->Read(&task)) {
    }
    watch_end = stream->Finish();
  });

  WriteAtomically(deny_file_, "node/node-a  # compromised\n");
  const absl::Time denied_at = absl::Now();
  grpc::Status last;
  ASSERT_TRUE(Becomes([&] { return Heartbeat("node-a"); },
                      grpc::StatusCode::PERMISSION_DENIED, &last))
      << last.error_message();
  // Printed for the record, not asserted (a loaded host may be slow).
  std::cout << "node-a refused " << absl::Now() - denied_at
            << " after the deny list named it (--tls_refresh_seconds=1)"
            << std::endl;
  EXPECT_TRUE(absl::StrContains(last.error_message(), "node node-a") &&
              absl::StrContains(last.error_message(), "--deny_list_file"))
      << last.error_message();
  watcher.join();
  EXPECT_EQ(watch_end.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << watch_end.error_message();
  // Every RPC, of both services, read-only ones included.
  monta::v1::ListNodesReply nodes;
  EXPECT_EQ(planner_["node-a"]
                ->ListNodes(ContextWithDeadline().get(), {}, &nodes)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  monta::v1::ListProfilesReply profiles;
  EXPECT_EQ(planner_["node-a"]
                ->ListProfiles(ContextWithDeadline().get(), {}, &profiles)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  monta::v1::RegisterRequest again;
  again.set_node_name("node-a");
  again.set_instance_id("i-node-a-2");
  monta::v1::RegisterReply registered;
  EXPECT_EQ(gateway_["node-a"]
                ->Register(ContextWithDeadline().get(), again, &registered)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // The others carry on.
  EXPECT_TRUE(Heartbeat("node-b").ok());
  EXPECT_TRUE(planner_["node-b"]
                  ->ListNodes(ContextWithDeadline().get(), {}, &nodes)
                  .ok());
  EXPECT_GT(Metric("monta_denied_calls_total{entry=\"node/node-a\"}"), 0);
  EXPECT_EQ(Metric("monta_deny_list_entries"), 1);

  // A file that does not parse keeps the list in force.
  WriteAtomically(deny_file_, "node/node-a\nthis is not an entry\n");
  ASSERT_TRUE(WaitFor(
      [&] {
        return Metric("monta_deny_list_loads_total{result=\"error\"}") > 0;
      },
      kBound));
  EXPECT_TRUE(absl::StrContains(ReadFile(cluster_.planner().log_path()),
                                "keeping the previous deny list"));
  EXPECT_EQ(Heartbeat("node-a").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Removed from the list, node-a is let back in.
  WriteAtomically(deny_file_, "# node-a cleared\n");
  const absl::Time cleared_at = absl::Now();
  ASSERT_TRUE(
      Becomes([&] { return Heartbeat("node-a"); }, grpc::StatusCode::OK, &last))
      << last.error_message();
  std::cout << "node-a let back in " << absl::Now() - cleared_at
            << " after its entry was removed" << std::endl;
  EXPECT_EQ(Metric("monta_deny_list_entries"), 0);
}

TEST_F(DenyListTest, ACertificateIsDeniedByItsSerialAsOpensslPrintsIt) {
  // The operator's certificate, by the line `openssl x509 -serial` prints.
  const std::vector<std::string> flags = cluster_.OperatorTlsFlags();
  const std::string cert =
      std::string(absl::StripPrefix(flags[1], "--tls_cert_file="));
  const CommandResult serial = testing::Run(
      {"/usr/bin/openssl", "x509", "-noout", "-serial", "-in", cert});
  ASSERT_EQ(serial.exit_code, 0) << serial.err;
  ASSERT_TRUE(absl::StartsWith(serial.out, "serial=")) << serial.out;
  monta::v1::RunBenchmarkRequest run;
  run.add_nodes("node-b");
  const auto bench = [&] {
    monta::v1::RunBenchmarkReply reply;
    return operator_->RunBenchmark(ContextWithDeadline().get(), run, &reply);
  };
  grpc::Status last = bench();
  ASSERT_TRUE(last.ok()) << last.error_message();
  WriteAtomically(deny_file_, serial.out);
  ASSERT_TRUE(Becomes(bench, grpc::StatusCode::PERMISSION_DENIED, &last))
      << last.error_message();
  EXPECT_TRUE(absl::StrContains(last.error_message(), "operator test"))
      << last.error_message();
  // The nodes' certificates have other serials.
  EXPECT_TRUE(Heartbeat("node-a").ok());
}

// A deny list that does not parse, or one under --insecure, stops the planner
// at start with one line.
TEST_F(DenyListTest, ABadFileAtStartIsAStartUpFailure) {
  const std::string bad = cluster_.dir() + "/bad-deny-list.txt";
  WriteAtomically(bad, "node-b\nserial=not-hex\n");
  std::vector<std::string> argv = {
      Runfile("server/monta-planner"), "--listen=127.0.0.1:0",
      "--metrics_listen=", "--deny_list_file=" + bad};
  for (const std::string& flag : cluster_.PlannerTlsFlags()) {
    argv.push_back(flag);
  }
  CommandResult refused = testing::Run(argv, absl::Seconds(60));
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err,
                                "monta-planner: --deny_list_file " + bad +
                                    ": line 2: expected serial=<hex digits>"))
      << refused.err;
  refused = testing::Run(
      {Runfile("server/monta-planner"), "--listen=127.0.0.1:0",
       "--metrics_listen=", "--insecure", "--deny_list_file=" + deny_file_},
      absl::Seconds(60));
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "needs mutual TLS"))
      << refused.err;
}

// A RendezvousGet node-a parked before it was denied answers the refusal,
// not the value node-b sets afterwards. In process (the planner's own
// PlannerServer over mutual TLS on loopback), so the test can see the Get
// parked before the list changes.
TEST(DenyListInProcessTest, AParkedGetOfADeniedNodeGetsNoValue) {
  LocalCluster certs;  // makes the CA, the planner's and the operator's
  const std::string deny_file = certs.dir() + "/deny-list.txt";
  WriteAtomically(deny_file, "");
  const auto security = [&](const std::vector<std::string>& flags) {
    GrpcSecurityOptions options;
    options.ca_file =
        std::string(absl::StripPrefix(flags[0], "--tls_ca_file="));
    options.cert_file =
        std::string(absl::StripPrefix(flags[1], "--tls_cert_file="));
    options.key_file =
        std::string(absl::StripPrefix(flags[2], "--tls_key_file="));
    options.refresh_seconds = 1;
    return options;
  };
  PlannerOptions options;
  options.grpc_address = "127.0.0.1:0";
  options.metrics_address = "";
  options.grpc_security = security(certs.PlannerTlsFlags());
  options.deny_list_file = deny_file;
  options.registry.lease = absl::Hours(1);
  auto server = PlannerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->grpc_port());
  std::map<std::string, std::unique_ptr<monta::v1::AgentGateway::Stub>> as;
  for (const std::string node : {"node-a", "node-b"}) {
    as[node] = monta::v1::AgentGateway::NewStub(grpc::CreateChannel(
        target, *MakeChannelCredentials(security(certs.NodeTlsFlags(node)))));
    monta::v1::RegisterRequest request;
    request.set_node_name(node);
    request.set_instance_id("i-" + node);
    monta::v1::RegisterReply reply;
    ASSERT_TRUE(
        as[node]->Register(ContextWithDeadline().get(), request, &reply).ok());
  }
  monta::v1::RunBenchmarkRequest run;
  run.add_nodes("node-a");
  run.add_nodes("node-b");
  run.set_ranks_per_node(1);
  auto scheduled = (*server)->coordinator().Schedule(run, Instant::Now());
  ASSERT_TRUE(scheduled.ok()) << scheduled.status();
  monta::v1::RendezvousGetRequest get;
  get.set_task_id(scheduled->task_id());
  get.set_key("unique-id");
  get.set_wait_seconds(600);
  grpc::Status got;
  monta::v1::RendezvousGetReply value;
  std::thread getter([&] {
    got = as["node-a"]->RendezvousGet(ContextWithDeadline(120).get(), get,
                                      &value);
  });
  ASSERT_TRUE(WaitFor(
      [&] { return (*server)->coordinator().waiter_count() == 1; }, kBound));
  WriteAtomically(deny_file, "node/node-a\n");
  monta::v1::HeartbeatRequest beat;
  beat.set_node_name("node-a");
  beat.set_instance_id("i-node-a");
  monta::v1::HeartbeatReply beat_reply;
  ASSERT_TRUE(WaitFor(
      [&] {
        return as["node-a"]
                   ->Heartbeat(ContextWithDeadline().get(), beat, &beat_reply)
                   .error_code() == grpc::StatusCode::PERMISSION_DENIED;
      },
      kBound));
  EXPECT_EQ((*server)->coordinator().waiter_count(), 1u);  // still parked
  monta::v1::RendezvousSetRequest set;
  set.set_task_id(get.task_id());
  set.set_key(get.key());
  set.set_value("secret");
  monta::v1::RendezvousSetReply set_reply;
  ASSERT_TRUE(as["node-b"]
                  ->RendezvousSet(ContextWithDeadline().get(), set, &set_reply)
                  .ok());
  getter.join();
  EXPECT_EQ(got.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << got.error_message();
  EXPECT_TRUE(value.value().empty());
}

}  // namespace
}  // namespace monta::testing
