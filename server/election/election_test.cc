// The election against a real three-member etcd (tests/testing/etcd_cluster):
// the oldest candidate leads and the others wait in line behind it, fenced
// writes land while leading and nothing lands once the key is lost, every
// loss path (key deleted, lease revoked, etcd unreachable past the lease's
// local expiry, a fenced write refused) stops leading before anything else,
// Resign hands over. Process kills and pauses: //tests:election_test.
#include "server/election/election.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/election/candidates.h"
#include "server/election/fence.h"
#include "server/etcd/client.h"
#include "tests/testing/etcd_suite.h"
#include "tests/testing/process.h"

namespace monta::election {
namespace {

using ::monta::testing::WaitFor;

// Generous bounds for polls: the host is a loaded 2-core box.
constexpr absl::Duration kPatience = absl::Seconds(30);
// etcd's minimum TTL with the fixture's 1 s election timeout.
constexpr absl::Duration kTtl = absl::Seconds(2);

// What the callbacks saw, in order: "lead E" and "stop E <code>".
class Recorder {
 public:
  void Leading(int64_t epoch) {
    absl::MutexLock lock(&mu_);
    events_.push_back(absl::StrCat("lead ", epoch));
  }
  void Stopped(int64_t epoch, const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    events_.push_back(absl::StrCat("stop ", epoch, " ",
                                   absl::StatusCodeToString(why.code())));
    last_why_ = why;
  }
  std::vector<std::string> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  absl::Status last_why() const {
    absl::MutexLock lock(&mu_);
    return last_why_;
  }
  // The epoch of the last "lead" event (0 when none).
  int64_t last_led() const {
    absl::MutexLock lock(&mu_);
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (absl::StartsWith(*it, "lead ")) return std::stoll(it->substr(5));
    }
    return 0;
  }
  int count(absl::string_view prefix) const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(std::count_if(
        events_.begin(), events_.end(),
        [&](const auto& e) { return absl::StartsWith(e, prefix); }));
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  absl::Status last_why_ ABSL_GUARDED_BY(mu_);
};

class ElectionTest : public testing::EtcdSuite<1> {
 protected:
  std::unique_ptr<Election> StartElection(const std::string& id,
                                          Recorder* recorder) {
    ElectionOptions options;
    options.prefix = prefix_;
    options.replica_id = id;
    options.value = absl::StrCat(id, ":8443");
    options.lease_ttl = kTtl;
    options.on_leading = [recorder](int64_t e) { recorder->Leading(e); };
    options.on_stopped_leading = [recorder](int64_t e, const absl::Status& s) {
      recorder->Stopped(e, s);
    };
    auto election = Election::Start(client_.get(), options);
    EXPECT_TRUE(election.ok()) << election.status();
    return election.ok() ? *std::move(election) : nullptr;
  }

  etcd::TxnRequest PutTxn(const std::string& key) const {
    etcd::TxnRequest txn;
    txn.success = {etcd::Op::Put(prefix_ + "/data/" + key, "v")};
    return txn;
  }

  bool Exists(const std::string& key) const {
    auto got = client_->Get(prefix_ + "/data/" + key);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() && !got->kvs.empty();
  }
};

TEST(ElectionOptionsTest, BadOptionsNameTheField) {
  auto client = etcd::Client::Create([] {
    etcd::ClientOptions o;
    o.endpoints = {"127.0.0.1:1"};
    o.security.insecure = true;
    return o;
  }());
  ASSERT_TRUE(client.ok()) << client.status();
  auto start = [&](auto mutate) {
    ElectionOptions o;
    o.prefix = "/monta";
    o.replica_id = "planner-0";
    mutate(o);
    return Election::Start(client->get(), o).status();
  };
  struct Case {
    std::function<void(ElectionOptions&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& o) { o.prefix = "monta"; }, "ElectionOptions.prefix"},
      {[](auto& o) { o.prefix = "/monta/"; }, "ElectionOptions.prefix"},
      {[](auto& o) { o.prefix = "/mon ta"; }, "ElectionOptions.prefix"},
      {[](auto& o) { o.replica_id = ""; }, "ElectionOptions.replica_id"},
      {[](auto& o) { o.replica_id = "a/b"; }, "ElectionOptions.replica_id"},
      {[](auto& o) { o.replica_id = std::string(300, 'x'); },
       "ElectionOptions.replica_id"},
      {[](auto& o) { o.value = std::string(5000, 'v'); },
       "ElectionOptions.value"},
      {[](auto& o) { o.lease_ttl = absl::Milliseconds(500); },
       "ElectionOptions.lease_ttl"},
  };
  for (const Case& c : cases) {
    const absl::Status s = start(c.mutate);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.field)) << s;
    EXPECT_LT(s.message().size(), 300u) << "never echoes the input: " << s;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(
      Election::Start(nullptr, ElectionOptions()).status()));
}

TEST(FenceTest, AddFenceComparesFirstAndReadsTheKeyLast) {
  etcd::TxnRequest txn;
  txn.compares = {
      etcd::Compare::Version("/x", etcd::Compare::Result::kEqual, 0)};
  txn.success = {etcd::Op::Put("/x", "1")};
  txn.failure = {etcd::Op::Get("/x")};
  auto fenced = AddFence(Fence{"/m/election/a", 42}, txn);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  ASSERT_EQ(fenced->compares.size(), 2u);
  EXPECT_EQ(fenced->compares[0].key, "/m/election/a");
  EXPECT_EQ(fenced->compares[0].target, etcd::Compare::Target::kCreateRevision);
  EXPECT_EQ(fenced->compares[0].number, 42);
  EXPECT_EQ(fenced->compares[1].key, "/x");
  ASSERT_EQ(fenced->failure.size(), 2u);
  EXPECT_EQ(fenced->failure[1].key, "/m/election/a");
  EXPECT_EQ(fenced->success.size(), 1u);

  // A write in the failure branch would land when the fence fails.
  etcd::TxnRequest bad = txn;
  bad.failure = {etcd::Op::Delete("/x")};
  auto refused = AddFence(Fence{"/m/election/a", 42}, bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "failure branch"));
  // No fence, no epoch.
  EXPECT_FALSE(AddFence(Fence{"", 42}, txn).ok());
  EXPECT_FALSE(AddFence(Fence{"/k", 0}, txn).ok());
  // The fence's compare counts against etcd's limit.
  etcd::TxnRequest full;
  for (int i = 0; i < etcd::kMaxTxnOps; ++i) {
    full.compares.push_back(etcd::Compare::Version(
        absl::StrCat("/k", i), etcd::Compare::Result::kEqual, 0));
  }
  EXPECT_TRUE(absl::IsInvalidArgument(AddFence(Fence{"/k", 1}, full).status()));

  const absl::Status lost = NotLeaderError(7, "gone");
  EXPECT_TRUE(IsNotLeader(lost));
  EXPECT_TRUE(absl::IsFailedPrecondition(lost));
  EXPECT_EQ(lost.message(), "not leader (epoch 7 lost: gone)");
  EXPECT_FALSE(IsNotLeader(absl::FailedPreconditionError("other")));
}

TEST_F(ElectionTest, OldestCandidateLeadsOthersWaitInLine) {
  Recorder ra, rb, rc;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  auto b = StartElection("b", &rb);
  ASSERT_TRUE(
      WaitFor([&] { return b->state().role == Role::kFollowing; }, kPatience));
  auto c = StartElection("c", &rc);
  ASSERT_TRUE(WaitFor(
      [&] {
        return c->state().role == Role::kFollowing &&
               !c->state().predecessor_id.empty();
      },
      kPatience));
  // Each watches only the one before it.
  EXPECT_EQ(b->state().predecessor_id, "a");
  EXPECT_EQ(c->state().predecessor_id, "b");
  EXPECT_EQ(c->state().leader_id, "a");
  EXPECT_FALSE(b->leading());
  EXPECT_FALSE(c->leading());
  const int64_t epoch = *a->epoch();
  EXPECT_EQ(epoch, a->state().create_revision);
  EXPECT_EQ(ra.events(),
            std::vector<std::string>{absl::StrCat("lead ", epoch)});

  // Anyone reads who leads.
  auto leader = ReadLeader(*client_, prefix_);
  ASSERT_TRUE(leader.ok()) << leader.status();
  ASSERT_TRUE(leader->has_value());
  EXPECT_EQ((*leader)->replica_id, "a");
  EXPECT_EQ((*leader)->value, "a:8443");
  EXPECT_EQ((*leader)->create_revision, epoch);
  auto all = ListCandidates(*client_, prefix_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->by_age.size(), 3u);
  EXPECT_EQ(all->by_age[1].replica_id, "b");
  EXPECT_EQ(all->by_age[2].replica_id, "c");

  // A fenced write of the leader lands; a follower's is refused unsent.
  auto wrote = a->FencedTxn(epoch, PutTxn("by-a"));
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_TRUE(wrote->succeeded);
  EXPECT_TRUE(Exists("by-a"));
  auto refused = b->FencedTxn(epoch, PutTxn("by-b"));
  EXPECT_TRUE(IsNotLeader(refused.status())) << refused.status();
  EXPECT_FALSE(Exists("by-b"));
  EXPECT_EQ(rb.count("lead"), 0);
}

TEST_F(ElectionTest, ResignStopsLeadingFirstThenHandsOver) {
  Recorder ra, rb;
  // a's stop callback looks whether its key is still in etcd: it must run
  // before the key is deleted (the owner stops before the next one starts).
  bool key_present_at_stop = false;
  std::unique_ptr<Election> a;
  {
    ElectionOptions options;
    options.prefix = prefix_;
    options.replica_id = "a";
    options.lease_ttl = kTtl;
    options.on_leading = [&](int64_t e) { ra.Leading(e); };
    options.on_stopped_leading = [&](int64_t e, const absl::Status& s) {
      auto got = client_->Get(CandidateKey(prefix_, "a"));
      key_present_at_stop = got.ok() && !got->kvs.empty();
      EXPECT_TRUE(absl::IsFailedPrecondition(a->Resign()))
          << "Resign from a callback is refused";
      ra.Stopped(e, s);
    };
    auto started = Election::Start(client_.get(), options);
    ASSERT_TRUE(started.ok()) << started.status();
    a = *std::move(started);
  }
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  auto b = StartElection("b", &rb);
  ASSERT_TRUE(
      WaitFor([&] { return b->state().role == Role::kFollowing; }, kPatience));
  const int64_t epoch_a = *a->epoch();

  ASSERT_TRUE(a->Resign().ok());
  EXPECT_TRUE(key_present_at_stop);
  EXPECT_EQ(ra.events(), (std::vector<std::string>{
                             absl::StrCat("lead ", epoch_a),
                             absl::StrCat("stop ", epoch_a, " CANCELLED")}));
  EXPECT_FALSE(a->leading());
  EXPECT_EQ(a->state().role, Role::kResigned);
  EXPECT_TRUE(a->Resign().ok()) << "idempotent";
  // The key and the lease are gone at once; b leads without waiting for the
  // TTL (the bound here is generous; //tests:election_test measures).
  auto got = client_->Get(CandidateKey(prefix_, "a"));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());
  ASSERT_TRUE(WaitFor([&] { return b->leading(); }, kPatience));
  EXPECT_GT(*b->epoch(), epoch_a);
  auto refused = a->FencedTxn(epoch_a, PutTxn("after-resign"));
  EXPECT_TRUE(IsNotLeader(refused.status())) << refused.status();
  EXPECT_FALSE(Exists("after-resign"));
  // Resigned for good: a never campaigns again.
  auto all = ListCandidates(*client_, prefix_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->by_age.size(), 1u);
  EXPECT_EQ(all->by_age[0].replica_id, "b");
}

TEST_F(ElectionTest, KeyDeletedBehindTheLeadersBackLandsNothing) {
  Recorder ra;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  const int64_t epoch = *a->epoch();
  const Fence fence{a->key(), epoch};
  ASSERT_TRUE(FencedTxn(*client_, fence, PutTxn("before")).ok());
  EXPECT_TRUE(Exists("before"));

  ASSERT_TRUE(client_->Delete(a->key()).ok());
  // etcd itself refuses the old epoch's write, whoever sends it.
  auto direct = FencedTxn(*client_, fence, PutTxn("direct"));
  EXPECT_TRUE(IsNotLeader(direct.status())) << direct.status();
  EXPECT_TRUE(absl::StrContains(direct.status().message(),
                                absl::StrCat("epoch ", epoch, " lost")))
      << direct.status();
  // The Election learns it from its watch or from the refused write,
  // whichever comes first: it stops leading, once.
  auto through = a->FencedTxn(epoch, PutTxn("through-election"));
  EXPECT_TRUE(IsNotLeader(through.status())) << through.status();
  EXPECT_EQ(ra.count(absl::StrCat("stop ", epoch)), 1) << ra.last_why();
  EXPECT_FALSE(Exists("direct"));
  EXPECT_FALSE(Exists("through-election"));

  // Alone, it campaigns again with a new key: a new, larger epoch.
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  EXPECT_GT(*a->epoch(), epoch);
  EXPECT_EQ(ra.count(absl::StrCat("stop ", epoch)), 1);
  EXPECT_EQ(a->state().terms, 2);
  EXPECT_EQ(a->state().sessions, 2);
}

TEST_F(ElectionTest, RefusedFencedWriteStopsLeadingBeforeItReturns) {
  Recorder ra;
  absl::Notification release;
  ElectionOptions options;
  options.prefix = prefix_;
  options.replica_id = "a";
  options.lease_ttl = kTtl;
  // The owner is still starting to lead: the campaign thread waits in
  // on_leading, so the watch on a's key is not open yet and only etcd's
  // compare can tell a that its key is gone.
  options.on_leading = [&](int64_t e) {
    ra.Leading(e);
    release.WaitForNotification();
  };
  options.on_stopped_leading = [&](int64_t e, const absl::Status& s) {
    ra.Stopped(e, s);
  };
  auto a = Election::Start(client_.get(), options);
  ASSERT_TRUE(a.ok()) << a.status();
  bool started = WaitFor([&] { return ra.count("lead") == 1; }, kPatience);
  const int64_t epoch = (*a)->state().epoch;
  const bool deleted = started && client_->Delete((*a)->key()).ok();
  absl::StatusOr<etcd::TxnResult> result = absl::UnknownError("not run");
  std::thread writer([&] { result = (*a)->FencedTxn(epoch, PutTxn("x")); });
  // The refusal flips leading() at once; on_stopped_leading waits for
  // on_leading to return, and FencedTxn for on_stopped_leading.
  const bool flipped = WaitFor([&] { return !(*a)->leading(); }, kPatience);
  const int stops_before_release = ra.count("stop");
  release.Notify();
  writer.join();
  ASSERT_TRUE(started && deleted && flipped);
  EXPECT_EQ(stops_before_release, 0);
  EXPECT_TRUE(IsNotLeader(result.status())) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "key is gone"))
      << "refused by etcd's compare: " << result.status();
  EXPECT_EQ(ra.events(),
            (std::vector<std::string>{
                absl::StrCat("lead ", epoch),
                absl::StrCat("stop ", epoch, " FAILED_PRECONDITION")}));
  EXPECT_FALSE(Exists("x"));
}

TEST_F(ElectionTest, CallersFailedCompareIsNotALostFence) {
  Recorder ra;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  const int64_t epoch = *a->epoch();
  etcd::TxnRequest cas;
  cas.compares = {etcd::Compare::Value(prefix_ + "/data/v",
                                       etcd::Compare::Result::kEqual, "old")};
  cas.success = {etcd::Op::Put(prefix_ + "/data/v", "new")};
  cas.failure = {etcd::Op::Get(prefix_ + "/data/v")};
  auto result = a->FencedTxn(epoch, cas);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->succeeded);
  ASSERT_EQ(result->results.size(), 1u) << "the fence's own read is removed";
  EXPECT_TRUE(a->leading());
  EXPECT_EQ(ra.count("stop"), 0);
}

TEST_F(ElectionTest, LeaseRevokedStopsLeadingAndNextTakesOver) {
  Recorder ra, rb;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  auto b = StartElection("b", &rb);
  ASSERT_TRUE(
      WaitFor([&] { return b->state().role == Role::kFollowing; }, kPatience));
  const int64_t epoch = *a->epoch();
  ASSERT_TRUE(client_->RevokeLease(a->state().lease).ok());
  ASSERT_TRUE(WaitFor([&] { return ra.count("stop") == 1; }, kPatience));
  EXPECT_FALSE(a->leading());
  ASSERT_TRUE(WaitFor([&] { return b->leading(); }, kPatience));
  EXPECT_GT(*b->epoch(), epoch);
  // a is back in line, behind b.
  ASSERT_TRUE(WaitFor(
      [&] {
        const ElectionState s = a->state();
        return s.role == Role::kFollowing && s.predecessor_id == "b";
      },
      kPatience));
  EXPECT_EQ(ra.count("lead"), 1);
}

TEST_F(ElectionTest, SameIdWaitsForTheOlderKeyToGo) {
  // A previous process of replica "a" left its key on a lease still alive.
  auto old_lease = client_->GrantLease(absl::Seconds(60));
  ASSERT_TRUE(old_lease.ok());
  ASSERT_TRUE(
      client_->Put(CandidateKey(prefix_, "a"), "old", old_lease->id).ok());
  Recorder ra;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor(
      [&] { return absl::IsAlreadyExists(a->state().last_error); }, kPatience));
  EXPECT_EQ(a->state().role, Role::kCampaigning);
  EXPECT_FALSE(a->leading());
  ASSERT_TRUE(client_->RevokeLease(old_lease->id).ok());
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  auto leader = ReadLeader(*client_, prefix_);
  ASSERT_TRUE(leader.ok() && leader->has_value());
  EXPECT_EQ((*leader)->value, "a:8443");
}

TEST_F(ElectionTest, StrayKeysAreNotCandidates) {
  ASSERT_TRUE(client_->Put(CandidatesPrefix(prefix_) + "no-lease", "x").ok());
  auto lease = client_->GrantLease(absl::Seconds(60));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(
      client_->Put(CandidatesPrefix(prefix_) + "bad/id", "x", lease->id).ok());
  Recorder ra;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  auto all = ListCandidates(*client_, prefix_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->by_age.size(), 1u);
  EXPECT_EQ(all->by_age[0].replica_id, "a");
  ASSERT_TRUE(client_->RevokeLease(lease->id).ok());
}

TEST_F(ElectionTest, ClosingWhileLeadingStopsFirstAndLeavesTheKey) {
  Recorder ra;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  const int64_t epoch = *a->epoch();
  const std::string key = a->key();
  a.reset();
  EXPECT_EQ(ra.events(), (std::vector<std::string>{
                             absl::StrCat("lead ", epoch),
                             absl::StrCat("stop ", epoch, " CANCELLED")}));
  // As after a crash: the key waits for its lease's TTL.
  auto got = client_->Get(key);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs.size(), 1u);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto g = client_->Get(key);
        return g.ok() && g->kvs.empty();
      },
      kPatience));
}

// etcd stops answering for a moment, shorter than the lease: a fenced write
// sent then ends with an unknown outcome (it stays leader); with retry_for it
// is sent again until etcd answers, and lands.
TEST_F(ElectionTest, FencedTxnRetriesAnUnknownOutcomeWhileLeading) {
  etcd::ClientOptions quick_options;
  quick_options.request_timeout = absl::Milliseconds(300);
  std::unique_ptr<etcd::Client> quick = NewClient(quick_options);
  ASSERT_NE(quick, nullptr);
  Recorder ra;
  ElectionOptions options;
  options.prefix = prefix_;
  options.replica_id = "a";
  options.lease_ttl = kTtl;
  options.on_stopped_leading = [&](int64_t e, const absl::Status& s) {
    ra.Stopped(e, s);
  };
  auto a = Election::Start(quick.get(), options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitFor([&] { return (*a)->leading(); }, kPatience));
  const int64_t epoch = *(*a)->epoch();

  cluster_->Pause(0);
  auto once = (*a)->FencedTxn(epoch, PutTxn("once"));
  absl::StatusOr<etcd::TxnResult> retried = absl::UnknownError("not run");
  std::thread writer([&] {
    retried = (*a)->FencedTxn(epoch, PutTxn("retried"), absl::Seconds(10));
  });
  absl::SleepFor(absl::Milliseconds(500));
  cluster_->Resume(0);
  writer.join();
  EXPECT_TRUE(etcd::OutcomeUnknown(once.status()) ||
              absl::IsUnavailable(once.status()))
      << once.status();
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_TRUE(retried->succeeded);
  EXPECT_TRUE(Exists("retried"));
  EXPECT_EQ(ra.count("stop"), 0) << ra.last_why();
}

// etcd stops answering (SIGSTOP): the leader stops leading when its lease's
// local expiry passes, on its own clock, without a word from etcd; when etcd
// is back it leads again with a new epoch. Declared last, so it runs last
// (gtest's order): it pauses the shared etcd.
TEST_F(ElectionTest, EtcdUnreachablePastLocalExpiryStopsLeading) {
  Recorder ra;
  auto a = StartElection("a", &ra);
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  const int64_t epoch = *a->epoch();
  cluster_->Pause(0);
  const bool stopped =
      WaitFor([&] { return ra.count("stop") == 1; }, kPatience);
  const bool still_leading = a->leading();
  auto refused = a->FencedTxn(epoch, PutTxn("while-paused"));
  cluster_->Resume(0);
  ASSERT_TRUE(stopped);
  EXPECT_FALSE(still_leading);
  EXPECT_TRUE(absl::IsDeadlineExceeded(ra.last_why())) << ra.last_why();
  EXPECT_TRUE(IsNotLeader(refused.status())) << refused.status();
  ASSERT_TRUE(WaitFor([&] { return a->leading(); }, kPatience));
  EXPECT_GT(*a->epoch(), epoch);
  EXPECT_FALSE(Exists("while-paused"));
}

}  // namespace
}  // namespace monta::election
