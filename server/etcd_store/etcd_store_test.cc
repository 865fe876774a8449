// EtcdStore on one real three-member etcd (tests/testing/etcd_cluster): the
// store seam's contract suite (a fresh key prefix per case; dropping the
// history is etcd's compaction), then etcd's own cases: schema versions side
// by side, compaction, a member SIGKILLed mid-run, batches over etcd's
// request limits, and the election's fence (create revision of a key).
#include "server/etcd_store/etcd_store.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/store/forwarding_store.h"
#include "server/store/store_contract.h"
#include "tests/testing/etcd_cluster.h"

namespace monta::etcd_store {
namespace {

using store::ChangeWatch;
using store::Committed;
using store::Event;
using store::Fence;
using store::ForwardingStore;
using store::Mutation;
using store::Snapshot;
using store::Store;
using store::StoreContractTest;
using store::StoreFactory;

using monta::testing::EtcdCluster;

// One cluster for the whole binary, started before the first test.
EtcdCluster* cluster = nullptr;

class EtcdEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    EtcdCluster::Options options;
    options.members = 3;
    auto started = EtcdCluster::Start(std::move(options));
    ASSERT_TRUE(started.ok()) << started.status();
    cluster = started->release();
  }
  void TearDown() override {
    delete cluster;
    cluster = nullptr;
  }
};
::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new EtcdEnvironment);

std::unique_ptr<etcd::Client> NewClient(
    std::vector<std::string> endpoints = {}) {
  etcd::ClientOptions options;
  options.endpoints = endpoints.empty() ? cluster->endpoints() : endpoints;
  options.security.insecure = true;
  options.request_timeout = absl::Seconds(2);
  auto client = etcd::Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::string FreshPrefix(const std::string& what) {
  static std::atomic<int> next{0};
  return absl::StrCat("/", what, "-", next++, "/");
}

// A store with its own client.
class OwningStore : public ForwardingStore {
 public:
  static absl::StatusOr<std::unique_ptr<OwningStore>> Open(
      EtcdStoreOptions options) {
    std::unique_ptr<etcd::Client> client = NewClient();
    if (client == nullptr) return absl::UnavailableError("no etcd client");
    auto store = EtcdStore::Open(client.get(), std::move(options));
    if (!store.ok()) return store.status();
    return std::unique_ptr<OwningStore>(
        new OwningStore(std::move(client), *std::move(store)));
  }
  etcd::Client& client() { return *client_; }
  EtcdStore& store() { return *store_; }

 private:
  OwningStore(std::unique_ptr<etcd::Client> client,
              std::unique_ptr<EtcdStore> store)
      : ForwardingStore(store.get()),
        client_(std::move(client)),
        store_(std::move(store)) {}
  std::unique_ptr<etcd::Client> client_;
  std::unique_ptr<EtcdStore> store_;
};

// Compacts (physically) through the cluster's newest revision.
absl::Status CompactAll(etcd::Client& client) {
  auto now = client.Get("/");
  if (!now.ok()) return now.status();
  return client.Compact(now->revision, /*physical=*/true);
}

StoreFactory EtcdFactory() {
  StoreFactory f;
  f.name = "etcd";
  f.make = []() -> absl::StatusOr<std::unique_ptr<Store>> {
    EtcdStoreOptions options;
    options.prefix = FreshPrefix("contract");
    auto store = OwningStore::Open(std::move(options));
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(*store));
  };
  f.drop_history = [](std::unique_ptr<Store>& store) -> absl::Status {
    return CompactAll(static_cast<OwningStore&>(*store).client());
  };
  return f;
}

INSTANTIATE_TEST_SUITE_P(Etcd, StoreContractTest,
                         ::testing::Values(EtcdFactory()),
                         [](const auto& info) { return info.param.name; });

Mutation Node(const std::string& name, std::string instance = "") {
  Mutation m;
  m.kind = Mutation::Kind::kNode;
  m.node.set_name(name);
  m.node.set_instance_id(instance.empty() ? "i-" + name : std::move(instance));
  return m;
}

// A store under `options` whose fence is the newest (Lead).
void OpenLeading(const EtcdStoreOptions& options,
                 std::unique_ptr<OwningStore>& store, Fence& fence) {
  auto opened = OwningStore::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store = *std::move(opened);
  auto led = store->Lead();
  ASSERT_TRUE(led.ok()) << led.status();
  fence = *led;
}

// A curve between `a` and `b`.
Mutation CurveOf(const std::string& a, const std::string& b, uint64_t seq) {
  Mutation m;
  m.kind = Mutation::Kind::kCurve;
  m.curve.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  m.curve.set_scope(monta::v1::SCOPE_INTER_NODE);
  m.curve.set_nranks(2);
  m.curve.add_nodes(a);
  m.curve.add_nodes(b);
  m.curve.set_task_id(absl::StrCat("t", seq));
  m.curve.set_sequence(seq);
  return m;
}

std::vector<std::string> Names(const Snapshot& s) {
  std::vector<std::string> out;
  for (const auto& n : s.nodes) out.push_back(n.name());
  return out;
}

TEST(EtcdStoreTest, ReplicasOfOneMajorShareAStoreAndANewerMajorIsRefused) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string prefix = FreshPrefix("schema");
  EtcdStoreOptions older;
  older.prefix = prefix;
  older.schema = {1, 0};
  EtcdStoreOptions newer = older;
  newer.schema = {1, 1};
  // The first replica on an empty prefix writes its version.
  auto old_store = EtcdStore::Open(client.get(), older);
  ASSERT_TRUE(old_store.ok()) << old_store.status();
  EXPECT_EQ(client->Get(prefix + "schema")->kvs.at(0).value, "1.0");
  // A newer minor (a rolling update) opens the same store and keeps it.
  auto new_store = EtcdStore::Open(client.get(), newer);
  ASSERT_TRUE(new_store.ok()) << new_store.status();
  EXPECT_EQ(client->Get(prefix + "schema")->kvs.at(0).value, "1.0");
  // Both work: the old one writes, the new one takes over and reads it.
  auto old_fence = (*old_store)->Lead();
  ASSERT_TRUE(old_fence.ok()) << old_fence.status();
  ASSERT_TRUE((*old_store)->Commit(*old_fence, {Node("a")}).ok());
  auto new_fence = (*new_store)->Lead();
  ASSERT_TRUE(new_fence.ok()) << new_fence.status();
  ASSERT_TRUE((*new_store)->Commit(*new_fence, {Node("b")}).ok());
  EXPECT_EQ(Names(*(*old_store)->List()), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*old_store)->Commit(*old_fence, {Node("c")}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A store written by a newer major is refused, naming both versions.
  ASSERT_TRUE(client->Put(prefix + "schema", "2.0").ok());
  auto refused = EtcdStore::Open(client.get(), newer);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("2.0"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("1.1"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("newer"), std::string::npos)
      << refused.status();
  // And so is an older major by a newer replica; and a malformed version.
  EtcdStoreOptions next_major = older;
  next_major.schema = {3, 0};
  auto older_major = EtcdStore::Open(client.get(), next_major);
  EXPECT_EQ(older_major.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(older_major.status().message().find("older"), std::string::npos)
      << older_major.status();
  ASSERT_TRUE(client->Put(prefix + "schema", "one").ok());
  EXPECT_EQ(EtcdStore::Open(client.get(), older).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(EtcdStoreTest, BadOptionsAreRefusedNamingTheField) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  EtcdStoreOptions options;
  options.prefix = "monta";
  auto bad = EtcdStore::Open(client.get(), options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("prefix"), std::string::npos);
  options.prefix = "/ok/";
  options.curve_history = 0;
  bad = EtcdStore::Open(client.get(), options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("curve_history"), std::string::npos);
}

// A List at a compacted revision and a watch from one are told to list
// again; the newest list and a watch from it go on.
TEST(EtcdStoreTest, CompactionMeansListAgain) {
  EtcdStoreOptions options;
  options.prefix = FreshPrefix("compact");
  std::unique_ptr<OwningStore> store;
  Fence fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, store, fence));
  auto r1 = store->Commit(fence, {Node("a")});
  ASSERT_TRUE(r1.ok()) << r1.status();
  auto r2 = store->Commit(fence, {Node("a", "i-a2")});
  ASSERT_TRUE(r2.ok()) << r2.status();
  auto at_r1 = store->List(r1->revision);
  ASSERT_TRUE(at_r1.ok()) << at_r1.status();
  EXPECT_EQ(at_r1->nodes.at(0).instance_id(), "i-a");
  ASSERT_TRUE(CompactAll(store->client()).ok());
  auto gone = store->List(r1->revision);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(gone.status().message().find("list"), std::string::npos);
  auto watch = store->Watch(r1->revision - 1);
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ((*watch)->Next(absl::Seconds(30)).status().code(),
            absl::StatusCode::kOutOfRange);
  auto newest = store->List();
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->nodes.at(0).instance_id(), "i-a2");
}

// A batch over etcd's 128 operations per Txn is split at mutation
// boundaries into fenced Txns; every part lands and the watch sees every
// mutation once, in order. A node larger than one request is refused whole.
TEST(EtcdStoreTest, ABatchOverEtcdsLimitsIsSplitAndAnOversizedNodeRefused) {
  EtcdStoreOptions options;
  options.prefix = FreshPrefix("limits");
  std::unique_ptr<OwningStore> store;
  Fence fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, store, fence));
  const int64_t before = store->List()->revision;
  auto watch = store->Watch(before);
  ASSERT_TRUE(watch.ok()) << watch.status();
  std::vector<Mutation> storm;
  for (int i = 0; i < 300; ++i)
    storm.push_back(Node(absl::StrCat("n", 1000 + i)));
  auto committed = store->Commit(fence, storm);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_GE(store->store().last_commit_txns(), 3);
  auto listed = store->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->nodes.size(), 300u);
  EXPECT_EQ(listed->revision, committed->revision);
  std::vector<std::string> seen;
  while (seen.size() < storm.size()) {
    auto batch = (*watch)->Next(absl::Seconds(30));
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (const Event& e : *batch) {
      for (const Mutation& m : e.mutations) seen.push_back(m.node.name());
    }
  }
  ASSERT_EQ(seen.size(), storm.size());
  for (size_t i = 0; i < seen.size(); ++i)
    EXPECT_EQ(seen[i], storm[i].node.name());
  // 2 MiB of instance id: larger than etcd takes in one request.
  auto huge = store->Commit(fence, {Node("big", std::string(2 << 20, 'x'))});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument)
      << huge.status();
  EXPECT_EQ(store->List()->revision, committed->revision);
}

// The task queue's records (TaskStore): 300 records of 8 KiB split over
// etcd's 128 operations and 1.5 MiB, listed back, read by id, deleted; outside
// the registry's List and watch; refused under an older fence, and over the
// record bound.
TEST(EtcdStoreTest, TaskRecordsAreWrittenInFencedTxnsWithinEtcdsLimits) {
  EtcdStoreOptions options;
  options.prefix = FreshPrefix("tasks");
  std::unique_ptr<OwningStore> store;
  Fence fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, store, fence));
  const int64_t before = store->List()->revision;
  store::TaskWrites writes;
  for (int i = 0; i < 300; ++i) {
    writes[absl::StrCat("bench-", 1000 + i)] =
        absl::StrCat(i, std::string(8 << 10, 'r'));
  }
  ASSERT_TRUE(store->store().WriteTasks(fence, writes).ok());
  auto listed = store->store().ListTasks();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 300u);
  EXPECT_EQ(listed->front().substr(0, 2), "0r");
  EXPECT_EQ(listed->back().substr(0, 3), "299");
  // Not the registry's: its snapshot and watch see no task.
  auto snapshot = store->List();
  ASSERT_TRUE(snapshot.ok());
  EXPECT_TRUE(snapshot->nodes.empty());
  auto watch = store->Watch(before);
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ((*watch)->Next(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  store::TaskWrites deletes;
  for (int i = 0; i < 299; ++i) deletes[absl::StrCat("bench-", 1000 + i)];
  ASSERT_TRUE(store->store().WriteTasks(fence, deletes).ok());
  EXPECT_EQ(store->store().ListTasks()->size(), 1u);
  // One record by id (what a follower answers GetBenchmarkTask with): the
  // one left, none for a deleted or unknown id, a bad id refused.
  auto kept = store->store().GetTask("bench-1299");
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->has_value());
  EXPECT_EQ((*kept)->substr(0, 3), "299");
  auto deleted = store->store().GetTask("bench-1000");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_FALSE(deleted->has_value());
  EXPECT_EQ(store->store().GetTask("tasks/../a").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->store().GetTask("").status().code(),
            absl::StatusCode::kInvalidArgument);

  std::unique_ptr<OwningStore> newer;
  Fence newer_fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, newer, newer_fence));
  const absl::Status fenced =
      store->store().WriteTasks(fence, {{"bench-1", std::string("late")}});
  EXPECT_TRUE(IsFenced(fenced)) << fenced;
  EXPECT_EQ(newer->store().ListTasks()->size(), 1u);
  const absl::Status huge = newer->store().WriteTasks(
      newer_fence,
      {{"bench-2", std::string(store::kMaxTaskRecordBytes + 1, 'x')}});
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument) << huge;
  EXPECT_EQ(newer->store()
                .WriteTasks(newer_fence, {{"a/b", std::string("x")}})
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Each measurement keeps its newest curve_history curves in etcd; the
// newest is current.
TEST(EtcdStoreTest, CurveHistoryIsBounded) {
  EtcdStoreOptions options;
  options.curve_history = 2;
  options.prefix = FreshPrefix("history");
  std::unique_ptr<OwningStore> store;
  Fence fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, store, fence));
  ASSERT_TRUE(store->Commit(fence, {Node("a"), Node("b")}).ok());
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    ASSERT_TRUE(store->Commit(fence, {CurveOf("a", "b", seq)}).ok());
  }
  etcd::RangeRequest range;
  range.key = options.prefix + "curves/";
  range.range_end = etcd::PrefixEnd(range.key);
  auto stored = store->client().Range(range);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->count, 2);
  auto listed = store->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->curves.size(), 1u);
  EXPECT_EQ(listed->curves[0].task_id(), "t5");
  EXPECT_EQ(listed->max_curve_sequence, 5u);
}

// A removal that deletes more keys than one Txn takes sends its deletes in
// Txns of their own before the one that removes the node and logs it.
TEST(EtcdStoreTest, ARemovalOverEtcdsLimitsDeletesEveryCurveNamingTheNode) {
  EtcdStoreOptions options;
  options.prefix = FreshPrefix("removal");
  std::unique_ptr<OwningStore> store;
  Fence fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, store, fence));
  std::vector<Mutation> batch = {Node("a")};
  for (int i = 0; i < 150; ++i) {
    const std::string peer = absl::StrCat("p", 100 + i);
    batch.push_back(Node(peer));
    batch.push_back(CurveOf("a", peer, i + 1));
  }
  ASSERT_TRUE(store->Commit(fence, batch).ok());
  ASSERT_EQ(store->List()->curves.size(), 150u);
  auto watch = store->Watch(store->List()->revision);
  ASSERT_TRUE(watch.ok()) << watch.status();
  Mutation removed;
  removed.kind = Mutation::Kind::kNodeRemoved;
  removed.node_name = "a";
  auto committed = store->Commit(fence, {removed});
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_GE(store->store().last_commit_txns(), 2);
  auto listed = store->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->curves.empty());
  EXPECT_EQ(listed->nodes.size(), 150u);
  // The watch sees the removal once, at the last part's revision.
  auto events = (*watch)->Next(absl::Seconds(30));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().revision, committed->revision);
  EXPECT_EQ(events->front().mutations.at(0).node_name, "a");
}

// With an election the fence is the leader key's create revision: a commit
// of an epoch whose key was deleted and created again is refused.
TEST(EtcdStoreTest, TheElectionsFenceIsTheLeaderKeysCreateRevision) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string prefix = FreshPrefix("elected");
  const std::string leader_key = prefix + "election/replica-1";
  auto created = client->Put(leader_key, "me");
  ASSERT_TRUE(created.ok()) << created.status();
  int64_t epoch = created->revision;
  EtcdStoreOptions options;
  options.prefix = prefix;
  options.fence_key = leader_key;
  options.leader_epoch = [&]() -> absl::StatusOr<int64_t> {
    if (epoch == 0) return absl::UnavailableError("not leading");
    return epoch;
  };
  auto store = EtcdStore::Open(client.get(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto fence = (*store)->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  EXPECT_EQ(fence->epoch, created->revision);
  ASSERT_TRUE((*store)->Commit(*fence, {Node("a")}).ok());
  // The key is lost (its lease expired) and made again: a new epoch.
  ASSERT_TRUE(client->Delete(leader_key).ok());
  auto again = client->Put(leader_key, "me");
  ASSERT_TRUE(again.ok());
  auto refused = (*store)->Commit(*fence, {Node("b")});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
      << refused.status();
  epoch = again->revision;
  auto next = (*store)->Lead();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*store)->Commit(*next, {Node("b")}).ok());
  EXPECT_EQ(Names(*(*store)->List()), (std::vector<std::string>{"a", "b"}));
  epoch = 0;
  EXPECT_EQ((*store)->Lead().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The write listener hears every failed commit and the first success after.
TEST(EtcdStoreTest, TheWriteListenerHearsFailuresAndTheRecovery) {
  EtcdStoreOptions options;
  options.prefix = FreshPrefix("listener");
  auto store = OwningStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::pair<std::string, absl::StatusCode>> heard;
  (*store)->store().SetWriteListener(
      [&](const std::string& operation, const absl::Status& status) {
        heard.emplace_back(operation, status.code());
      });
  auto fence = (*store)->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  ASSERT_TRUE((*store)->Commit(*fence, {Node("a")}).ok());
  EXPECT_TRUE(heard.empty());
  Fence stale = *fence;
  ASSERT_TRUE((*store)->Lead().ok());
  EXPECT_FALSE((*store)->Commit(stale, {Node("b")}).ok());
  EXPECT_FALSE((*store)->Commit(stale, {Node("c")}).ok());
  auto fresh = (*store)->Lead();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE((*store)->Commit(*fresh, {Node("b")}).ok());
  ASSERT_TRUE((*store)->Commit(*fresh, {Node("c")}).ok());
  const std::vector<std::pair<std::string, absl::StatusCode>> expected = {
      {"node", absl::StatusCode::kFailedPrecondition},
      {"node", absl::StatusCode::kFailedPrecondition},
      {"node", absl::StatusCode::kOk}};
  EXPECT_EQ(heard, expected);
  (*store)->store().SetWriteListener(nullptr);
}

// etcd's leader is SIGKILLed while the writer commits: every commit
// acknowledged before, during and after is there once the member is back
// (read through the restarted member alone too).
TEST(EtcdStoreTest, CommitsAcknowledgedAcrossAMemberKillAreAllThere) {
  EtcdStoreOptions options;
  options.prefix = FreshPrefix("kill");
  std::unique_ptr<OwningStore> store;
  Fence fence;
  ASSERT_NO_FATAL_FAILURE(OpenLeading(options, store, fence));
  std::vector<std::string> acknowledged;
  int failed = 0;
  int killed = -1;
  // 15 commits, etcd's leader killed, then commits until 25 more are
  // acknowledged (a failed one, while the members elect a new leader, is
  // retried after 50 ms, at most 400 times: a bound, not a timed assert).
  for (int i = 0; acknowledged.size() < 40 && failed < 400; ++i) {
    if (i == 15) {
      ASSERT_EQ(acknowledged.size(), 15u);
      auto leader = cluster->LeaderIndex();
      ASSERT_TRUE(leader.ok()) << leader.status();
      killed = *leader;
      cluster->Kill(killed);
    }
    const std::string name = absl::StrCat("n", 100 + i);
    auto committed = store->Commit(fence, {Node(name)});
    if (committed.ok()) {
      acknowledged.push_back(name);
    } else {
      ++failed;  // not acknowledged: may or may not be there
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  std::cout << "commits acknowledged across the kill of member " << killed
            << ": " << acknowledged.size() << " (" << failed
            << " failed while etcd elected a new leader)" << std::endl;
  ASSERT_EQ(acknowledged.size(), 40u) << failed << " failed";
  ASSERT_TRUE(cluster->Restart(killed).ok()) << cluster->LogTail(killed);
  auto reader = NewClient({cluster->endpoint(killed)});
  ASSERT_NE(reader, nullptr);
  options.schema = kEtcdSchemaVersion;
  auto view = EtcdStore::Open(reader.get(), options);
  ASSERT_TRUE(view.ok()) << view.status();
  auto listed = (*view)->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  const std::vector<std::string> stored = Names(*listed);
  for (const std::string& name : acknowledged) {
    EXPECT_TRUE(std::find(stored.begin(), stored.end(), name) != stored.end())
        << name << " was acknowledged and is gone";
  }
}

}  // namespace
}  // namespace monta::etcd_store
