// Group commit of decisions from a real planner replica (--store=etcd, issue
// 20): a GetStrategy answered is in etcd when the call returns; with its only
// etcd member SIGSTOPped (no write can land) the call fails UNAVAILABLE "not
// stored" at --record_commit_timeout_seconds (logged, not asserted), and
// answers again once etcd does.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/etcd/client.h"
#include "server/etcd_store/records.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/grpc_clients.h"
#include "tests/testing/paper_job.h"
#include "tests/testing/process.h"

namespace monta {
namespace {

using ::monta::testing::EtcdCluster;
using ::monta::testing::LocalCluster;
using ::monta::testing::WaitFor;

constexpr char kPrefix[] = "/commit-test/";

// The job names of the decision records in etcd.
std::vector<std::string> DecidedJobs(etcd::Client& client) {
  etcd::RangeRequest range;
  range.key = etcd_store::RecordTablePrefix(kPrefix, "decisions");
  range.range_end = etcd::PrefixEnd(range.key);
  auto got = client.Range(range);
  EXPECT_TRUE(got.ok()) << got.status();
  std::vector<std::string> jobs;
  if (!got.ok()) return jobs;
  for (const etcd::KeyValue& kv : got->kvs) {
    auto row = etcd_store::DecodeRecord(kv.value);
    EXPECT_TRUE(row.ok()) << row.status();
    monta::v1::StrategyRequest request;
    if (row.ok() && !row->fields.empty() &&
        request.ParseFromString(row->fields[0])) {
      jobs.push_back(request.job().name());
    }
  }
  return jobs;
}

TEST(RecordCommitTest,
     AnsweredDecisionsAreStoredAndAnEtcdTakingNoWritesIsRefused) {
  EtcdCluster::Options etcd_options;
  etcd_options.members = 1;
  auto etcd = EtcdCluster::Start(std::move(etcd_options));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  LocalCluster cluster;
  absl::StatusOr<int> port = cluster.StartReplica(
      {"--store=etcd",
       "--etcd_endpoints=" + absl::StrJoin((*etcd)->endpoints(), ","),
       "--etcd_insecure", absl::StrCat("--etcd_prefix=", kPrefix),
       "--leader_lease_seconds=10", "--replica_id=replica-0",
       "--record_commit_timeout_seconds=1"});
  ASSERT_TRUE(port.ok()) << port.status();
  cluster.UsePlanner(*port);
  auto stub = monta::v1::Planner::NewStub(
      PlannerChannel(cluster, cluster.OperatorTlsFlags()));
  etcd::ClientOptions client_options;
  client_options.endpoints = (*etcd)->endpoints();
  client_options.security.insecure = true;
  auto client = etcd::Client::Create(std::move(client_options));
  ASSERT_TRUE(client.ok()) << client.status();

  const auto decide = [&](const std::string& job) {
    monta::v1::StrategyRequest request = testing::PaperJobRequest();
    request.mutable_job()->set_name(job);
    monta::v1::StrategyReply reply;
    return stub->GetStrategy(testing::ContextWithDeadline(30).get(), request,
                             &reply);
  };
  // Readable once it leads (a lone replica).
  ASSERT_TRUE(
      WaitFor([&] { return decide("warm-up").ok(); }, absl::Seconds(60)));
  for (int i = 0; i < 5; ++i) {
    const std::string job = absl::StrCat("stored-", i);
    const grpc::Status s = decide(job);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const std::vector<std::string> jobs = DecidedJobs(**client);
    EXPECT_NE(std::find(jobs.begin(), jobs.end(), job), jobs.end())
        << job << " answered but not in etcd";
  }

  (*etcd)->Pause(0);
  const auto paused_at = std::chrono::steady_clock::now();
  const grpc::Status refused = decide("refused");
  const double waited_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    paused_at)
          .count();
  (*etcd)->Resume(0);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  EXPECT_TRUE(
      absl::StrContains(refused.error_message(), "decision was not stored"))
      << refused.error_message();
  std::cerr << "record_commit_test: GetStrategy with etcd SIGSTOPped refused "
               "after "
            << waited_seconds << " s (--record_commit_timeout_seconds=1): "
            << refused.error_message() << std::endl;
  // Answers again once etcd takes writes.
  EXPECT_TRUE(WaitFor([&] { return decide("after").ok(); }, absl::Seconds(60)));
  const std::vector<std::string> jobs = DecidedJobs(**client);
  EXPECT_NE(std::find(jobs.begin(), jobs.end(), "after"), jobs.end());
}

}  // namespace
}  // namespace monta
