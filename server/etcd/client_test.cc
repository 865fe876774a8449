// The etcd client against a real three-member etcd
// (tests/testing/etcd_cluster): KV and paging at a revision, transactions and
// their limits, leases and their loss, watches and compaction, mutual TLS. No
// mocks.
#include "server/etcd/client.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/admission/test_certs.h"
#include "server/etcd/lease_keepalive.h"
#include "server/etcd/watch.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/etcd_suite.h"
#include "tests/testing/process.h"

namespace monta::etcd {
namespace {

using ::monta::testing::EtcdCluster;

// Generous bounds for polls: the host is a loaded 2-core box.
constexpr absl::Duration kPatience = absl::Seconds(30);

class EtcdClientTest : public testing::EtcdSuite<1> {
 protected:
  void SetUp() override {
    EtcdSuite::SetUp();
    prefix_ += "/";
  }

  std::string Key(const std::string& name) const { return prefix_ + name; }
};

TEST_F(EtcdClientTest, PutGetDelete) {
  auto put = client_->Put(Key("a"), "one");
  ASSERT_TRUE(put.ok()) << put.status();
  auto got = client_->Get(Key("a"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "one");
  EXPECT_EQ(got->kvs[0].create_revision, put->revision);
  EXPECT_EQ(got->kvs[0].mod_revision, put->revision);
  EXPECT_EQ(got->kvs[0].version, 1);

  auto again = client_->Put(Key("a"), "two", 0, /*prev_kv=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->revision, put->revision);
  ASSERT_TRUE(again->has_prev);
  EXPECT_EQ(again->prev.value, "one");
  got = client_->Get(Key("a"));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs[0].value, "two");
  EXPECT_EQ(got->kvs[0].version, 2);
  EXPECT_EQ(got->kvs[0].create_revision, put->revision);

  auto deleted = client_->Delete(Key("a"), "", /*prev_kv=*/true);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->deleted, 1);
  ASSERT_EQ(deleted->prev.size(), 1u);
  EXPECT_EQ(deleted->prev[0].value, "two");
  got = client_->Get(Key("a"));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());

  // The old value is still there at its revision until compacted.
  RangeRequest old;
  old.key = Key("a");
  old.revision = put->revision;
  got = client_->Range(old);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "one");

  auto empty = client_->Put("", "x");
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();
}

TEST_F(EtcdClientTest, PrefixEnd) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

TEST_F(EtcdClientTest, ListPagesAtOneRevision) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(
        client_->Put(Key(absl::StrCat("k", 100 + i)), absl::StrCat("v", i))
            .ok());
  }
  auto head = client_->Get(Key("k100"));
  ASSERT_TRUE(head.ok());
  const int64_t revision = head->revision;
  // After the revision: change, delete and add keys. The list at `revision`
  // must not see any of it, on any page.
  ASSERT_TRUE(client_->Put(Key("k105"), "changed").ok());
  ASSERT_TRUE(client_->Delete(Key("k110")).ok());
  ASSERT_TRUE(client_->Put(Key("k1000"), "new").ok());

  ListRequest list;
  list.key = prefix_;
  list.range_end = PrefixEnd(prefix_);
  list.revision = revision;
  list.page_size = 7;
  std::vector<size_t> page_sizes;
  std::vector<KeyValue> all;
  auto listed = client_->ListPages(list, [&](std::vector<KeyValue> page) {
    page_sizes.push_back(page.size());
    for (KeyValue& kv : page) all.push_back(std::move(kv));
    return absl::OkStatus();
  });
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, revision);
  EXPECT_EQ(page_sizes, (std::vector<size_t>{7, 7, 7, 4}));
  ASSERT_EQ(all.size(), 25u);
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(all[i].key, Key(absl::StrCat("k", 100 + i)));
    EXPECT_EQ(all[i].value, absl::StrCat("v", i));
  }

  // A page of a plain Range: limit, more and the whole range's count.
  RangeRequest range;
  range.key = prefix_;
  range.range_end = PrefixEnd(prefix_);
  range.limit = 10;
  auto page = client_->Range(range);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->kvs.size(), 10u);
  EXPECT_TRUE(page->more);
  EXPECT_EQ(page->count, 25);  // 25 - k110 + k1000

  // Newest: the changes are there. List bounds what it collects.
  list.revision = 0;
  auto newest = client_->List(list, 100);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_GT(newest->revision, revision);
  ASSERT_EQ(newest->kvs.size(), 25u);
  EXPECT_EQ(newest->kvs[1].key, Key("k1000"));
  auto bounded = client_->List(list, 10);
  EXPECT_TRUE(absl::IsResourceExhausted(bounded.status())) << bounded.status();
  list.page_size = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(client_->List(list, 10).status()));
}

// The fencing primitive: a write lands only while the leader key is the one
// created at the revision the writer holds.
TEST_F(EtcdClientTest, TxnCompareAndSwapOnCreateRevision) {
  const std::string leader = Key("leader");
  const std::string data = Key("data");
  // Campaign: create the leader key only if absent.
  TxnRequest campaign;
  campaign.compares = {
      Compare::CreateRevision(leader, Compare::Result::kEqual, 0)};
  campaign.success = {Op::Put(leader, "replica-a")};
  campaign.failure = {Op::Get(leader)};
  auto won = client_->Txn(campaign);
  ASSERT_TRUE(won.ok()) << won.status();
  ASSERT_TRUE(won->succeeded);
  const int64_t epoch = won->revision;
  // A second campaign loses and reads the holder.
  campaign.success = {Op::Put(leader, "replica-b")};
  auto lost = client_->Txn(campaign);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_FALSE(lost->succeeded);
  ASSERT_EQ(lost->results.size(), 1u);
  ASSERT_EQ(lost->results[0].range.kvs.size(), 1u);
  EXPECT_EQ(lost->results[0].range.kvs[0].value, "replica-a");
  EXPECT_EQ(lost->results[0].range.kvs[0].create_revision, epoch);

  // A fenced write with the right epoch lands.
  TxnRequest fenced;
  fenced.compares = {
      Compare::CreateRevision(leader, Compare::Result::kEqual, epoch)};
  fenced.success = {Op::Put(data, "written by epoch 1")};
  fenced.failure = {Op::Get(leader)};
  auto landed = client_->Txn(fenced);
  ASSERT_TRUE(landed.ok()) << landed.status();
  EXPECT_TRUE(landed->succeeded);
  ASSERT_EQ(landed->results.size(), 1u);
  EXPECT_EQ(landed->results[0].kind, Op::Kind::kPut);

  // The leader key is deleted and created again (a new leader): the old
  // epoch's write is refused, and the else branch tells who leads now.
  ASSERT_TRUE(client_->Delete(leader).ok());
  auto next = client_->Put(leader, "replica-b");
  ASSERT_TRUE(next.ok());
  fenced.success = {Op::Put(data, "stale write by epoch 1")};
  auto refused = client_->Txn(fenced);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->succeeded);
  ASSERT_EQ(refused->results[0].range.kvs.size(), 1u);
  EXPECT_EQ(refused->results[0].range.kvs[0].create_revision, next->revision);
  auto value = client_->Get(data);
  ASSERT_TRUE(value.ok());
  ASSERT_EQ(value->kvs.size(), 1u);
  EXPECT_EQ(value->kvs[0].value, "written by epoch 1");
}

TEST_F(EtcdClientTest, TxnComparesOnModRevisionValueAndVersion) {
  const std::string key = Key("k");
  auto put = client_->Put(key, "v1");
  ASSERT_TRUE(put.ok());
  struct Case {
    Compare compare;
    bool holds;
  };
  const std::vector<Case> cases = {
      {Compare::ModRevision(key, Compare::Result::kEqual, put->revision), true},
      {Compare::ModRevision(key, Compare::Result::kLess, put->revision), false},
      {Compare::ModRevision(key, Compare::Result::kGreater, 0), true},
      {Compare::Value(key, Compare::Result::kEqual, "v1"), true},
      {Compare::Value(key, Compare::Result::kNotEqual, "v1"), false},
      {Compare::Version(key, Compare::Result::kEqual, 1), true},
      {Compare::Version(key, Compare::Result::kGreater, 1), false},
      {Compare::Lease(key, Compare::Result::kEqual, 0), true},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    TxnRequest txn;
    txn.compares = {cases[i].compare};
    txn.success = {Op::Get(key)};
    txn.failure = {Op::Get(key)};
    auto result = client_->Txn(txn);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->succeeded, cases[i].holds) << "case " << i;
  }
}

// etcd refuses a branch that writes one key twice: batches must dedupe.
TEST_F(EtcdClientTest, TxnWritingOneKeyTwiceIsRefusedByEtcd) {
  TxnRequest txn;
  txn.success = {Op::Put(Key("k"), "1"), Op::Put(Key("k"), "2")};
  auto twice = client_->Txn(txn);
  EXPECT_TRUE(absl::IsInvalidArgument(twice.status())) << twice.status();
  EXPECT_TRUE(absl::StrContains(twice.status().message(), "duplicate key"))
      << twice.status();
  txn.success = {Op::Put(Key("k"), "1"), Op::Delete(Key("k"))};
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Txn(txn).status()));
  auto absent = client_->Get(Key("k"));
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->kvs.empty());
}

TEST_F(EtcdClientTest, TxnOverLimitsRefusedBeforeSending) {
  TxnRequest big;
  for (int i = 0; i < kMaxTxnOps + 1; ++i) {
    big.success.push_back(Op::Put(Key(absl::StrCat("op", i)), "x"));
  }
  auto refused = client_->Txn(big);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "129 success"));
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "128"));
  big.success.pop_back();  // 128 operations: etcd takes them
  auto taken = client_->Txn(big);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->results.size(), 128u);

  // Bytes: a Put request of key "<k>" and a value of L bytes serializes to
  // 2 + |k| + 1 + 3 + L bytes (tags, lengths, 3-byte varint for L ~ 1.5 MiB).
  const std::string key = Key("big");
  const size_t limit = kMaxRequestBytes - kRaftEnvelopeBytes;
  const size_t largest = limit - (2 + key.size() + 1 + 3);
  auto at_limit = client_->Put(key, std::string(largest, 'x'));
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();  // etcd accepts it
  auto over = client_->Put(key, std::string(largest + 1, 'y'));
  ASSERT_TRUE(absl::IsInvalidArgument(over.status())) << over.status();
  EXPECT_TRUE(
      absl::StrContains(over.status().message(), "--max-request-bytes"));
  TxnRequest large;
  large.success = {Op::Put(Key("big-txn"), std::string(1600000, 'z'))};
  refused = client_->Txn(large);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  auto absent = client_->Get(Key("big-txn"));
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->kvs.empty());
  auto unchanged = client_->Get(key);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(unchanged->kvs[0].value.size(), largest);

  // etcd's own limit is real: a client told a larger one is refused by etcd.
  ClientOptions loose;
  loose.max_request_bytes = 4 << 20;
  std::unique_ptr<Client> client = NewClient(loose);
  auto too_large = client->Txn(large);
  ASSERT_TRUE(absl::IsInvalidArgument(too_large.status()))
      << too_large.status();
  EXPECT_TRUE(
      absl::StrContains(too_large.status().message(), "request is too large"))
      << too_large.status();
}

TEST_F(EtcdClientTest, LeaseKeepAliveKeepsKeyPastTtlThenRevokeIsReported) {
  auto lease = client_->GrantLease(absl::Seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_GE(lease->ttl_seconds, 2);
  ASSERT_TRUE(client_->Put(Key("held"), "x", lease->id).ok());
  std::atomic<int> callbacks{0};
  auto keepalive = client_->KeepAlive(
      *lease, [&](const absl::Status&) { callbacks.fetch_add(1); });
  ASSERT_TRUE(keepalive.ok()) << keepalive.status();

  // Three TTLs later the key is still there, and etcd still counts the lease.
  const MonoTime past_ttl = MonoAfter(std::chrono::steady_clock::now(),
                                      absl::Seconds(3 * lease->ttl_seconds));
  while (std::chrono::steady_clock::now() < past_ttl) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  auto held = client_->Get(Key("held"));
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->kvs.size(), 1u);
  EXPECT_FALSE((*keepalive)->lost());
  EXPECT_GE((*keepalive)->renewals(), 3);
  EXPECT_GT((*keepalive)->expiry(), std::chrono::steady_clock::now());
  auto ttl = client_->LeaseTimeToLive(lease->id, /*keys=*/true);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(ttl->ttl_seconds, 0);
  EXPECT_EQ(ttl->keys, std::vector<std::string>{Key("held")});

  // Revoked elsewhere: the key goes with the lease, the loss is reported.
  std::unique_ptr<Client> other = NewClient();
  ASSERT_TRUE(other->RevokeLease(lease->id).ok());
  ASSERT_TRUE((*keepalive)->WaitLost(kPatience));
  EXPECT_TRUE(absl::IsNotFound((*keepalive)->status()))
      << (*keepalive)->status();
  EXPECT_TRUE(
      testing::WaitFor([&] { return callbacks.load() == 1; }, kPatience));
  held = client_->Get(Key("held"));
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(held->kvs.empty());
  ttl = client_->LeaseTimeToLive(lease->id);
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(ttl->ttl_seconds, -1);
  EXPECT_TRUE(absl::IsNotFound(client_->RevokeLease(lease->id)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->GrantLease(absl::Milliseconds(0)).status()));
  // etcd raises a TTL to its minimum, 1.5 election timeouts rounded up (2 s
  // with the fixture's 1 s election timeout).
  auto short_lease = client_->GrantLease(absl::Seconds(1));
  ASSERT_TRUE(short_lease.ok()) << short_lease.status();
  EXPECT_EQ(short_lease->ttl_seconds, 2);
}

// etcd itself stops answering (SIGSTOP): the keepalive cannot renew, and
// reports the loss when the lease's TTL has run out on this side.
TEST_F(EtcdClientTest, LeaseLossReportedWhenEtcdStopsAnswering) {
  auto lease = client_->GrantLease(absl::Seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put(Key("held"), "x", lease->id).ok());
  auto keepalive = client_->KeepAlive(*lease, nullptr);
  ASSERT_TRUE(keepalive.ok());
  ASSERT_TRUE(testing::WaitFor([&] { return (*keepalive)->renewals() > 0; },
                               kPatience));
  ClientOptions quick_options;
  quick_options.request_timeout = absl::Seconds(1);
  std::unique_ptr<Client> quick = NewClient(quick_options);
  ASSERT_TRUE(quick->Get(Key("held")).ok());  // connected
  cluster_->Pause(0);
  const bool lost = (*keepalive)->WaitLost(kPatience);
  const MonoTime lost_at = std::chrono::steady_clock::now();
  const MonoTime expiry = (*keepalive)->expiry();
  // A write sent to the stopped member: no answer, outcome unknown. A read:
  // no endpoint answered, nothing to doubt.
  auto write = quick->Put(Key("unknown"), "x");
  auto read = quick->Get(Key("held"));
  cluster_->Resume(0);
  EXPECT_TRUE(absl::IsDeadlineExceeded(write.status())) << write.status();
  EXPECT_TRUE(OutcomeUnknown(write.status())) << write.status();
  EXPECT_TRUE(absl::IsUnavailable(read.status())) << read.status();
  EXPECT_FALSE(OutcomeUnknown(read.status()));
  ASSERT_TRUE(lost);
  EXPECT_TRUE(absl::IsDeadlineExceeded((*keepalive)->status()))
      << (*keepalive)->status();
  EXPECT_TRUE(absl::StrContains((*keepalive)->status().message(),
                                "not renewed before its TTL ran out"));
  // Reported once its own expiry passed, not before.
  EXPECT_GE(lost_at, expiry);
  // etcd, back, expires the lease and its key.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto got = client_->Get(Key("held"));
        return got.ok() && got->kvs.empty();
      },
      kPatience));
  auto landed = client_->Get(Key("unknown"));
  ASSERT_TRUE(landed.ok());
  std::cout << "the write of unknown outcome "
            << (landed->kvs.empty() ? "did not land" : "landed") << "\n";
}

// Txn(txn, deadline): the deadline, not request_timeout (an hour here, so a
// client that ignored it would hang the test), bounds an attempt at a member
// that answers nothing; a deadline already passed sends nothing.
TEST_F(EtcdClientTest, ATxnWithADeadlineGivesUpByIt) {
  ClientOptions patient_options;
  patient_options.request_timeout = absl::Hours(1);
  std::unique_ptr<Client> patient = NewClient(patient_options);
  ASSERT_TRUE(patient->Get(Key("any")).ok());  // connected
  TxnRequest put;
  put.success.push_back(Op::Put(Key("late"), "x"));
  auto passed = patient->Txn(
      put, std::chrono::steady_clock::now() - std::chrono::milliseconds(1));
  EXPECT_TRUE(absl::IsDeadlineExceeded(passed.status())) << passed.status();
  EXPECT_FALSE(OutcomeUnknown(passed.status())) << passed.status();
  auto absent = client_->Get(Key("late"));
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->kvs.empty());  // nothing was sent

  cluster_->Pause(0);
  const MonoTime started = std::chrono::steady_clock::now();
  auto stopped = patient->Txn(put, MonoAfter(started, absl::Milliseconds(500)));
  const absl::Duration took =
      MonoSince(started, std::chrono::steady_clock::now());
  cluster_->Resume(0);
  EXPECT_TRUE(absl::IsDeadlineExceeded(stopped.status())) << stopped.status();
  EXPECT_TRUE(OutcomeUnknown(stopped.status())) << stopped.status();
  std::cout << "a Txn with a 500ms deadline at a SIGSTOPped member gave up "
               "after "
            << absl::FormatDuration(took) << "\n";
}

// The client side stops (SIGSTOP of a process holding the lease): etcd
// expires the lease and its key; resumed, the holder reports the loss.
TEST_F(EtcdClientTest, LeaseLossReportedWhenClientWasStopped) {
  const std::string key = Key("held");
  const std::string log = absl::StrCat(testing::TempDir(), "/holder.log");
  auto holder = testing::Process::Start(
      {testing::Runfile("server/etcd/etcd_lease_holder"), cluster_->endpoint(0),
       key, "2"},
      log);
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_TRUE(testing::WaitFor(
      [&] { return absl::StrContains(testing::ReadFile(log), "held"); },
      kPatience))
      << testing::ReadFile(log);
  auto got = client_->Get(key);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  holder->Signal(SIGSTOP);
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto now = client_->Get(key);
        return now.ok() && now->kvs.empty();
      },
      kPatience));
  holder->Signal(SIGCONT);
  auto exit = holder->Wait(kPatience);
  ASSERT_TRUE(exit.ok()) << exit.status() << testing::ReadFile(log);
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 3)
      << testing::ReadFile(log);
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(log), "lost: "))
      << testing::ReadFile(log);
}

std::vector<std::string> Describe(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events) {
    out.push_back(absl::StrCat(e.type == Event::Type::kPut ? "put " : "delete ",
                               e.kv.key, "=", e.kv.value));
  }
  return out;
}

// Reads batches until `count` events arrived (or the patience ran out).
std::vector<Event> Collect(Watch& watch, size_t count) {
  std::vector<Event> events;
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), kPatience);
  while (events.size() < count && std::chrono::steady_clock::now() < deadline) {
    auto batch = watch.Next(absl::Seconds(1));
    if (!batch.ok()) {
      if (absl::IsDeadlineExceeded(batch.status())) continue;
      break;
    }
    for (Event& e : batch->events) events.push_back(std::move(e));
  }
  return events;
}

TEST_F(EtcdClientTest, WatchDeliversPutsAndDeletesInOrder) {
  auto before = client_->Put(Key("a"), "0");
  ASSERT_TRUE(before.ok()) << before.status();
  // From now: the put above is not delivered.
  WatchOptions now;
  now.key = prefix_;
  now.range_end = PrefixEnd(prefix_);
  auto live = client_->OpenWatch(now);
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_TRUE(testing::WaitFor([&] { return (*live)->next_revision() > 0; },
                               kPatience));
  EXPECT_EQ((*live)->next_revision(), before->revision + 1);

  ASSERT_TRUE(client_->Put(Key("a"), "1").ok());
  ASSERT_TRUE(client_->Put(Key("b"), "2").ok());
  ASSERT_TRUE(client_->Delete(Key("a")).ok());
  TxnRequest txn;  // two events of one revision
  txn.success = {Op::Put(Key("c"), "3"), Op::Put(Key("d"), "4")};
  ASSERT_TRUE(client_->Txn(txn).ok());
  ASSERT_TRUE(client_->Put(Key("outside"), "x").ok() &&
              client_->Put("/elsewhere", "x").ok());
  const std::vector<std::string> expected = {
      absl::StrCat("put ", Key("a"), "=1"),
      absl::StrCat("put ", Key("b"), "=2"),
      absl::StrCat("delete ", Key("a"), "="),
      absl::StrCat("put ", Key("c"), "=3"),
      absl::StrCat("put ", Key("d"), "=4"),
      absl::StrCat("put ", Key("outside"), "=x")};
  std::vector<Event> events = Collect(**live, expected.size());
  EXPECT_EQ(Describe(events), expected);
  ASSERT_EQ(events.size(), expected.size());
  EXPECT_EQ(events[3].kv.mod_revision, events[4].kv.mod_revision);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GE(events[i].kv.mod_revision, events[i - 1].kv.mod_revision);
  }

  // From a past revision, with previous values: the same history again.
  WatchOptions past = now;
  past.start_revision = before->revision;
  past.prev_kv = true;
  auto replay = client_->OpenWatch(past);
  ASSERT_TRUE(replay.ok());
  events = Collect(**replay, expected.size() + 1);
  ASSERT_EQ(events.size(), expected.size() + 1);
  EXPECT_EQ(events[0].kv.value, "0");
  EXPECT_EQ(events[1].kv.value, "1");
  ASSERT_TRUE(events[1].has_prev);
  EXPECT_EQ(events[1].prev.value, "0");
  ASSERT_TRUE(events[3].has_prev);  // the delete of a
  EXPECT_EQ(events[3].prev.value, "1");

  // A requested progress notification arrives as its own batch.
  (*live)->RequestProgress();
  bool progress = false;
  for (int i = 0; i < 30 && !progress; ++i) {
    auto batch = (*live)->Next(absl::Seconds(1));
    progress = batch.ok() && batch->progress && batch->events.empty();
  }
  EXPECT_TRUE(progress);

  (*live)->Cancel();
  auto ended = (*live)->Next(absl::Seconds(1));
  EXPECT_TRUE(absl::IsCancelled(ended.status())) << ended.status();
}

TEST_F(EtcdClientTest, WatchQueueIsBoundedAndLosesNothing) {
  WatchOptions options;
  options.key = prefix_;
  options.range_end = PrefixEnd(prefix_);
  options.max_queued_events = 4;
  auto watch = client_->OpenWatch(options);
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(testing::WaitFor([&] { return (*watch)->next_revision() > 0; },
                               kPatience));
  constexpr int kPuts = 50;
  for (int i = 0; i < kPuts; ++i) {
    ASSERT_TRUE(client_->Put(Key(absl::StrCat("k", i)), "v").ok());
  }
  // Nobody reads while the puts land: the queue holds at most 4 events (or
  // one etcd response, when a single one is larger), the rest wait in etcd;
  // all arrive, in order.
  ASSERT_TRUE(testing::WaitFor([&] { return (*watch)->queued_events() >= 4; },
                               kPatience));
  absl::SleepFor(absl::Milliseconds(300));  // let it read more, if it would
  const size_t queued = (*watch)->queued_events();
  std::vector<Event> events;
  size_t largest_batch = 0;
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), kPatience);
  while (events.size() < kPuts && std::chrono::steady_clock::now() < deadline) {
    auto batch = (*watch)->Next(absl::Seconds(1));
    if (!batch.ok()) continue;
    largest_batch = std::max(largest_batch, batch->events.size());
    for (Event& e : batch->events) events.push_back(std::move(e));
  }
  EXPECT_LE(queued, std::max<size_t>(4, largest_batch));
  EXPECT_LT(queued, static_cast<size_t>(kPuts));
  ASSERT_EQ(events.size(), static_cast<size_t>(kPuts));
  for (int i = 0; i < kPuts; ++i) {
    EXPECT_EQ(events[i].kv.key, Key(absl::StrCat("k", i)));
  }
}

TEST_F(EtcdClientTest, CompactionYieldsRelistSignal) {
  auto first = client_->Put(Key("a"), "1");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(client_->Put(Key("a"), "2").ok());
  auto last = client_->Put(Key("b"), "3");
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(client_->Compact(last->revision).ok());

  RangeRequest old;
  old.key = Key("a");
  old.revision = first->revision;
  auto gone = client_->Range(old);
  EXPECT_TRUE(absl::IsOutOfRange(gone.status())) << gone.status();

  WatchOptions options;
  options.key = prefix_;
  options.range_end = PrefixEnd(prefix_);
  options.start_revision = first->revision;
  auto watch = client_->OpenWatch(options);
  ASSERT_TRUE(watch.ok());
  auto batch = (*watch)->Next(kPatience);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->compact_revision, last->revision);
  EXPECT_TRUE(batch->events.empty());
  auto ended = (*watch)->Next(absl::Seconds(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(ended.status())) << ended.status();
  EXPECT_TRUE(absl::StrContains(ended.status().message(), "list again"));

  // The relist: a list at the compact revision, a watch after it.
  ListRequest list;
  list.key = prefix_;
  list.range_end = PrefixEnd(prefix_);
  list.revision = batch->compact_revision;
  auto listed = client_->List(list, 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->kvs.size(), 2u);
  EXPECT_EQ(listed->kvs[0].value, "2");
  options.start_revision = listed->revision + 1;
  auto resumed = client_->OpenWatch(options);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(client_->Put(Key("c"), "4").ok());
  std::vector<Event> events = Collect(**resumed, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kv.value, "4");
}

TEST_F(EtcdClientTest, OptionsValidated) {
  ClientOptions options;
  options.security.insecure = true;
  auto none = Client::Create(options);
  EXPECT_TRUE(absl::IsInvalidArgument(none.status()));
  EXPECT_TRUE(absl::StrContains(none.status().message(), "--etcd_endpoints"));
  options.endpoints = {"127.0.0.1"};
  EXPECT_TRUE(absl::StrContains(Client::Create(options).status().message(),
                                "expected host:port"));
  options.endpoints = {"https://127.0.0.1:2379"};
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(options).status()));
  options.endpoints = {"http://127.0.0.1:2379"};
  EXPECT_TRUE(Client::Create(options).ok());
  options.keepalive_time = absl::Seconds(1);
  EXPECT_TRUE(absl::StrContains(Client::Create(options).status().message(),
                                "keepalive_time"));
  ClientOptions tls;
  tls.endpoints = {"127.0.0.1:2379"};
  auto missing = Client::Create(tls);
  EXPECT_TRUE(
      absl::StrContains(missing.status().message(), "--etcd_tls_ca_file"))
      << missing.status();
}

// Mutual TLS to etcd: its own CA, etcd requiring client certificates.
TEST(EtcdTlsTest, MutualTls) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/etcd-tls");
  std::filesystem::create_directories(dir);
  auto ca = admission::WriteTestCa(dir, "etcd-ca", "etcd test CA");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto server = admission::WriteTestLeafCert(*ca, dir, "etcd", "IP:127.0.0.1");
  auto planner = admission::WriteTestLeafCert(*ca, dir, "planner",
                                              "URI:spiffe://monta/planner");
  auto foreign_ca = admission::WriteTestCa(dir, "foreign-ca", "foreign CA");
  ASSERT_TRUE(server.ok() && planner.ok() && foreign_ca.ok());
  auto foreign = admission::WriteTestLeafCert(*foreign_ca, dir, "foreign",
                                              "URI:spiffe://monta/planner");
  ASSERT_TRUE(foreign.ok());

  EtcdCluster::Options options;
  options.tls = std::make_unique<EtcdCluster::Tls>();
  options.tls->server_cert_file = server->cert_file;
  options.tls->server_key_file = server->key_file;
  options.tls->ca_file = ca->cert_file;
  options.tls->client_cert_file = planner->cert_file;
  options.tls->client_key_file = planner->key_file;
  auto cluster = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  ClientOptions trusted;
  trusted.endpoints = {absl::StrCat("https://", (*cluster)->endpoint(0))};
  trusted.security.ca_file = ca->cert_file;
  trusted.security.cert_file = planner->cert_file;
  trusted.security.key_file = planner->key_file;
  auto client = Client::Create(trusted);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("/tls", "over mTLS").ok());
  auto got = (*client)->Get("/tls");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "over mTLS");

  // A certificate of another CA: etcd refuses the handshake; nothing lands.
  ClientOptions stranger = trusted;
  stranger.security.cert_file = foreign->cert_file;
  stranger.security.key_file = foreign->key_file;
  stranger.request_timeout = absl::Seconds(2);
  auto refused = Client::Create(stranger);
  ASSERT_TRUE(refused.ok()) << refused.status();
  auto put = (*refused)->Put("/tls", "from a stranger");
  EXPECT_TRUE(absl::IsUnavailable(put.status())) << put.status();
  // Plaintext to the TLS port fails too.
  ClientOptions plain;
  plain.endpoints = {(*cluster)->endpoint(0)};
  plain.security.insecure = true;
  plain.request_timeout = absl::Seconds(2);
  auto plaintext = Client::Create(plain);
  ASSERT_TRUE(plaintext.ok());
  EXPECT_FALSE((*plaintext)->Put("/tls", "plaintext").ok());
  got = (*client)->Get("/tls");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs[0].value, "over mTLS");
}

}  // namespace
}  // namespace monta::etcd
