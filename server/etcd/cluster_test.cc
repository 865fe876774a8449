// The etcd client against a real three-member etcd cluster
// (tests/testing/etcd_cluster): a watch survives the member it is connected
// to being killed, without losing or repeating events; a watch that falls
// behind a compaction while away yields the relist signal; unary calls fail
// over, a failed write moves the client off its member and a dead member's
// failed channel is not waited for; `hasleader` makes an isolated member
// refuse at once.
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/etcd/lease_keepalive.h"
#include "server/etcd/watch.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/process.h"

namespace monta::etcd {
namespace {

using ::monta::testing::EtcdCluster;

constexpr absl::Duration kPatience = absl::Seconds(30);

std::unique_ptr<EtcdCluster> StartCluster() {
  EtcdCluster::Options options;
  options.members = 3;
  auto cluster = EtcdCluster::Start(std::move(options));
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

std::unique_ptr<Client> NewClient(std::vector<std::string> endpoints) {
  ClientOptions options;
  options.endpoints = std::move(endpoints);
  options.security.insecure = true;
  options.request_timeout = absl::Seconds(3);
  auto client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Idempotent writes for a writer that retries through a failover: a key is
// created only if absent (a retried create lands once), deletes of absent keys
// make no event.
absl::Status CreateOnce(Client& client, const std::string& key,
                        const std::string& value) {
  absl::Status last;
  for (int attempt = 0; attempt < 20; ++attempt) {
    TxnRequest txn;
    txn.compares = {Compare::CreateRevision(key, Compare::Result::kEqual, 0)};
    txn.success = {Op::Put(key, value)};
    auto result = client.Txn(txn);
    if (result.ok()) return absl::OkStatus();
    last = result.status();
    absl::SleepFor(absl::Milliseconds(200));
  }
  return last;
}

absl::Status DeleteRetrying(Client& client, const std::string& key) {
  absl::Status last;
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto result = client.Delete(key);
    if (result.ok()) return absl::OkStatus();
    last = result.status();
    absl::SleepFor(absl::Milliseconds(200));
  }
  return last;
}

TEST(EtcdClusterTest, WatchSurvivesItsMemberKilledWithoutLossOrRepeat) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> watcher = NewClient(cluster->endpoints());
  WatchOptions options;
  options.key = "/w/";
  options.range_end = PrefixEnd("/w/");
  auto watch = watcher->OpenWatch(options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return !(*watch)->endpoint().empty() && (*watch)->next_revision() > 0;
      },
      kPatience));
  const int victim = cluster->IndexOf((*watch)->endpoint());
  ASSERT_GE(victim, 0) << (*watch)->endpoint();
  // The writer talks to the two other members only, so none of its writes
  // is lost with the victim.
  std::vector<std::string> others;
  for (int i = 0; i < cluster->size(); ++i) {
    if (i != victim) others.push_back(cluster->endpoint(i));
  }
  std::unique_ptr<Client> writer = NewClient(others);

  constexpr int kKeys = 60;
  std::vector<std::string> expected;
  absl::Status written;
  for (int i = 0; i < kKeys && written.ok(); ++i) {
    const std::string key = absl::StrCat("/w/", 100 + i);
    if (i == kKeys / 3) cluster->Kill(victim);
    written = CreateOnce(*writer, key, absl::StrCat("v", i));
    expected.push_back(absl::StrCat("put ", key, "=v", i));
    if (i % 3 == 2) {  // every third key deleted again
      const std::string gone = absl::StrCat("/w/", 100 + i - 1);
      written.Update(DeleteRetrying(*writer, gone));
      expected.push_back(absl::StrCat("delete ", gone));
    }
  }
  ASSERT_TRUE(written.ok()) << written;

  std::vector<std::string> seen;
  int64_t last_revision = 0;
  bool ordered = true;
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), kPatience);
  while (seen.size() < expected.size() &&
         std::chrono::steady_clock::now() < deadline) {
    auto batch = (*watch)->Next(absl::Seconds(1));
    if (!batch.ok()) {
      ASSERT_TRUE(absl::IsDeadlineExceeded(batch.status())) << batch.status();
      continue;
    }
    for (const Event& e : batch->events) {
      ordered = ordered && e.kv.mod_revision > last_revision;
      last_revision = e.kv.mod_revision;
      seen.push_back(e.type == Event::Type::kPut
                         ? absl::StrCat("put ", e.kv.key, "=", e.kv.value)
                         : absl::StrCat("delete ", e.kv.key));
    }
  }
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(ordered);
  EXPECT_GE((*watch)->reconnects(), 1);
  EXPECT_NE((*watch)->endpoint(), cluster->endpoint(victim));
  // Nothing more: no event delivered twice after the reconnect.
  auto extra = (*watch)->Next(absl::Seconds(1));
  EXPECT_TRUE(absl::IsDeadlineExceeded(extra.status()))
      << (extra.ok() ? absl::StrCat(extra->events.size(), " more events")
                     : extra.status().ToString());

  // Unary calls fail over from the dead member, listed first.
  std::vector<std::string> dead_first = {cluster->endpoint(victim)};
  for (const std::string& e : others) dead_first.push_back(e);
  std::unique_ptr<Client> client = NewClient(dead_first);
  auto got = client->Get(absl::StrCat("/w/", 100));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kvs.size(), 1u);
  EXPECT_NE(client->preferred_endpoint(), cluster->endpoint(victim));
  EXPECT_TRUE(client->Put("/w/after", "x").ok());
}

// The member a lease's keepalive talks to dies: the keepalive moves on, the
// lease and its key live on past several TTLs.
TEST(EtcdClusterTest, KeepAliveSurvivesItsMemberKilled) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient(cluster->endpoints());
  auto lease = client->GrantLease(absl::Seconds(3));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client->Put("/lease/held", "x", lease->id).ok());
  auto keepalive = client->KeepAlive(*lease, nullptr);
  ASSERT_TRUE(keepalive.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return (*keepalive)->renewals() > 0 &&
               !(*keepalive)->endpoint().empty();
      },
      kPatience));
  const int victim = cluster->IndexOf((*keepalive)->endpoint());
  ASSERT_GE(victim, 0);
  cluster->Kill(victim);
  const int64_t renewals = (*keepalive)->renewals();
  const MonoTime past_ttl = MonoAfter(std::chrono::steady_clock::now(),
                                      absl::Seconds(3 * lease->ttl_seconds));
  while (std::chrono::steady_clock::now() < past_ttl && !(*keepalive)->lost()) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE((*keepalive)->status().ok()) << (*keepalive)->status();
  EXPECT_GT((*keepalive)->renewals(), renewals);
  EXPECT_NE((*keepalive)->endpoint(), cluster->endpoint(victim));
  std::vector<std::string> others;
  for (int i = 0; i < cluster->size(); ++i) {
    if (i != victim) others.push_back(cluster->endpoint(i));
  }
  auto held = NewClient(others)->Get("/lease/held");
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->kvs.size(), 1u);
}

// A watcher whose only member dies; meanwhile the others move on and compact
// past the watcher's revision. When its member is back, the watch resumes
// from its revision and gets the relist signal.
TEST(EtcdClusterTest, WatchBehindCompactionAfterReconnectYieldsRelistSignal) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> watcher = NewClient({cluster->endpoint(0)});
  std::unique_ptr<Client> writer =
      NewClient({cluster->endpoint(1), cluster->endpoint(2)});
  auto put = writer->Put("/c/a", "1");
  ASSERT_TRUE(put.ok()) << put.status();
  WatchOptions options;
  options.key = "/c/";
  options.range_end = PrefixEnd("/c/");
  options.start_revision = put->revision;
  auto watch = watcher->OpenWatch(options);
  ASSERT_TRUE(watch.ok());
  auto first = (*watch)->Next(kPatience);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->events.size(), 1u);

  cluster->Kill(0);
  // If member 0 led, the others elect a new leader first: a write may fail
  // meanwhile ("no leader", or outcome unknown); these may land twice.
  absl::StatusOr<PutResult> last;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        last = writer->Put("/c/a", "2");
        if (!last.ok()) std::cerr << last.status() << "\n";
        return last.ok();
      },
      kPatience));
  last = writer->Put("/c/b", "3");
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(writer->Compact(last->revision).ok());
  ASSERT_TRUE(cluster->Restart(0).ok());

  absl::StatusOr<WatchBatch> batch;
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), kPatience);
  do {
    batch = (*watch)->Next(absl::Seconds(1));
  } while (absl::IsDeadlineExceeded(batch.status()) &&
           std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->events.empty());
  EXPECT_EQ(batch->compact_revision, last->revision);
  EXPECT_TRUE(
      absl::IsFailedPrecondition((*watch)->Next(absl::Seconds(1)).status()));
}

// A write's member lets its deadline pass (it is paused) and the other
// member is dead: the preferred endpoint moves off each member a write failed
// at (the write's outcome is unknown), and once the dead member's channel is
// in TRANSIENT_FAILURE (gRPC keeps it there, reconnecting in the background)
// the next call does not wait on it: it once waited the whole connect timeout
// there, for a state change that never came.
TEST(EtcdClusterTest, AFailedWriteMovesOnAndADeadMemberIsNotWaitedFor) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto leader = cluster->LeaderIndex();
  ASSERT_TRUE(leader.ok()) << leader.status();
  // Two followers: the member that will be paused first (the client connects
  // to it before the pause: a stopped process accepts TCP but never answers
  // HTTP/2), then the victim, which the client has not connected to.
  std::vector<int> followers;
  for (int i = 0; i < cluster->size(); ++i) {
    if (i != *leader) followers.push_back(i);
  }
  const std::string paused = cluster->endpoint(followers[0]);
  const std::string dead = cluster->endpoint(followers[1]);
  ClientOptions options;
  options.endpoints = {paused, dead};
  options.security.insecure = true;
  options.request_timeout = absl::Seconds(2);
  // Long enough that waiting it out on the dead member would show.
  options.connect_timeout = absl::Seconds(60);
  auto created = Client::Create(std::move(options));
  ASSERT_TRUE(created.ok()) << created.status();
  Client& client = **created;
  ASSERT_TRUE(client.Put("/f/k", "0").ok());
  ASSERT_EQ(client.preferred_endpoint(), paused);

  cluster->Kill(followers[1]);
  cluster->Pause(followers[0]);
  // The paused member takes the write and lets its deadline pass: outcome
  // unknown, and the client moves off it.
  absl::Status lost = client.Put("/f/k", "1").status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(lost)) << lost;
  EXPECT_TRUE(OutcomeUnknown(lost)) << lost;
  EXPECT_EQ(client.preferred_endpoint(), dead);
  // The next starts at the dead member (refused: nothing sent, its channel
  // now in TRANSIENT_FAILURE), goes on to the paused one and fails there the
  // same way.
  lost = client.Put("/f/k", "1").status();
  EXPECT_TRUE(OutcomeUnknown(lost)) << lost;
  EXPECT_EQ(client.preferred_endpoint(), dead);
  cluster->Resume(followers[0]);

  // Next calls start past the dead member's failed channel: each answers
  // long before the 60 s connect timeout (while etcd settles they may be
  // refused "no leader"). Another key: the writes to /f/k whose outcome was
  // unknown may still land (the paused member forwards them once resumed).
  absl::Status put;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        const MonoTime start = std::chrono::steady_clock::now();
        put = client.Put("/f/after", "2").status();
        const absl::Duration took =
            MonoSince(start, std::chrono::steady_clock::now());
        EXPECT_LT(took, absl::Seconds(30))
            << "waited on the dead member: " << put;
        return put.ok();
      },
      kPatience))
      << put;
  EXPECT_EQ(client.preferred_endpoint(), paused);
  auto got = client.Get("/f/after");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "2");
}

// Two members stopped: the third has no leader. With `hasleader` it refuses
// at once (UNAVAILABLE "no leader"), where a plain serializable read would
// answer from its possibly stale state.
TEST(EtcdClusterTest, HasLeaderMakesAnIsolatedMemberRefuse) {
  std::unique_ptr<EtcdCluster> cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  std::unique_ptr<Client> client = NewClient({cluster->endpoint(2)});
  ASSERT_TRUE(client->Put("/h", "before").ok());
  cluster->Pause(0);
  cluster->Pause(1);

  absl::Status refused;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        RangeRequest request;
        request.key = "/h";
        request.serializable = true;
        refused = client->Range(request).status();
        return !refused.ok();
      },
      kPatience))
      << "the isolated member kept answering";
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "no leader")) << refused;
  auto put = client->Put("/h", "during");
  EXPECT_TRUE(absl::IsUnavailable(put.status())) << put.status();
  EXPECT_TRUE(absl::StrContains(put.status().message(), "no leader"))
      << put.status();

  // The same serializable read without the metadata is served, stale.
  auto channel = grpc::CreateChannel(cluster->endpoint(2),
                                     grpc::InsecureChannelCredentials());
  auto kv = etcdserverpb::KV::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  etcdserverpb::RangeRequest request;
  request.set_key("/h");
  request.set_serializable(true);
  etcdserverpb::RangeResponse response;
  grpc::Status plain = kv->Range(&context, request, &response);
  ASSERT_TRUE(plain.ok()) << plain.error_message();
  ASSERT_EQ(response.kvs_size(), 1);
  EXPECT_EQ(response.kvs(0).value(), "before");

  cluster->Resume(0);
  cluster->Resume(1);
  EXPECT_TRUE(testing::WaitFor([&] { return client->Put("/h", "after").ok(); },
                               kPatience));
}

}  // namespace
}  // namespace monta::etcd
