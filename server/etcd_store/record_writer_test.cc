// RecordWriter on one real etcd member: a record told stored is in etcd when
// its caller hears so; records that arrive while a Txn is in flight share the
// next one; two replicas' records land under distinct keys; a full queue and
// an etcd that takes no writes (its member SIGSTOPped) refuse UNAVAILABLE and
// tell nothing stored; the destructor with callers waiting tells each one;
// pruning by age and by count (bounded deletes) leaves the newest.
#include "server/etcd_store/record_writer.h"

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/etcd_store/records.h"
#include "server/store/record_done.h"
#include "tests/testing/etcd_suite.h"

namespace monta::etcd_store {
namespace {

// What a writer told many callers, waited for without a clock.
class Outcomes {
 public:
  store::RecordDone Done() {
    return [this](const absl::Status& stored) {
      absl::MutexLock lock(&mu_);
      told_.push_back(stored);
    };
  }
  // Blocks until `n` were told; returns them.
  std::vector<absl::Status> Wait(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return told_.size() >= n;
    };
    mu_.Await(absl::Condition(&enough));
    return told_;
  }
  size_t told() {
    absl::MutexLock lock(&mu_);
    return told_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Status> told_ ABSL_GUARDED_BY(mu_);
};

// Holds the writer's Txn attempts at the gate until opened (a Txn "in
// flight"): what arrives meanwhile queues for the next one.
class Gate {
 public:
  std::function<void()> Hook() {
    return [this] {
      absl::MutexLock lock(&mu_);
      ++arrived_;
      mu_.Await(absl::Condition(&open_));
    };
  }
  void WaitArrived() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n > 0; }, &arrived_));
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

 private:
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

class RecordWriterTest : public monta::testing::EtcdSuite<1> {
 protected:
  RecordWriterOptions Options(const std::string& prefix,
                              const std::string& origin) {
    RecordWriterOptions options;
    options.prefix = prefix;
    options.origin = origin;
    return options;
  }
  // The records of `table`, in key order.
  std::vector<etcd::KeyValue> Records(const std::string& prefix,
                                      const std::string& table = "decisions") {
    etcd::RangeRequest range;
    range.key = RecordTablePrefix(prefix, table);
    range.range_end = etcd::PrefixEnd(range.key);
    auto result = client_->Range(range);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->kvs : std::vector<etcd::KeyValue>{};
  }
  // The job names of the decisions stored under `prefix`.
  std::set<std::string> Jobs(const std::string& prefix) {
    std::set<std::string> jobs;
    for (const etcd::KeyValue& kv : Records(prefix)) {
      auto row = DecodeRecord(kv.value);
      EXPECT_TRUE(row.ok()) << row.status();
      if (!row.ok() || row->fields.size() != 2) continue;
      monta::v1::StrategyRequest request;
      EXPECT_TRUE(request.ParseFromString(row->fields[0]));
      jobs.insert(request.job().name());
    }
    return jobs;
  }
  static monta::v1::StrategyRequest Job(const std::string& name) {
    monta::v1::StrategyRequest request;
    request.mutable_job()->set_name(name);
    return request;
  }
  // One decision, waited for: what the writer told.
  static absl::Status Decide(RecordWriter& writer, const std::string& job) {
    store::RecordWait stored;
    writer.RecordDecision(Job(job), {}, stored.done());
    return stored.Wait();
  }
};

TEST_F(RecordWriterTest, ARecordToldStoredIsInEtcdWhenItsCallerHearsSo) {
  const std::string prefix = "/stored/";
  RecordWriter writer(client_.get(), Options(prefix, "replica-a"));
  for (int i = 0; i < 5; ++i) {
    const std::string job = absl::StrCat("job-", i);
    ASSERT_TRUE(Decide(writer, job).ok());
    // Read back at once: no flush, no wait.
    EXPECT_EQ(Jobs(prefix).count(job), 1u) << job;
  }
  store::RecordWait verified;
  writer.RecordVerification({}, {}, verified.done());
  ASSERT_TRUE(verified.Wait().ok());
  EXPECT_EQ(Records(prefix, "verifications").size(), 1u);
  store::RecordWait audited;
  writer.RecordAudit({"operator alice", "forget_curves", "node n", "1 curve"},
                     audited.done());
  ASSERT_TRUE(audited.Wait().ok());
  const std::vector<etcd::KeyValue> audit = Records(prefix, "audit_log");
  ASSERT_EQ(audit.size(), 1u);
  auto row = DecodeRecord(audit[0].value);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->fields[0], "operator alice");
  const RecordWriter::Stats stats = writer.stats();
  EXPECT_EQ(stats.written, 7);
  EXPECT_EQ(stats.txns, 7);  // one at a time: each sent at once, alone
  EXPECT_EQ(stats.refused, 0);
}

TEST_F(RecordWriterTest, RecordsArrivingWhileATxnIsInFlightShareTheNext) {
  const std::string prefix = "/share/";
  constexpr int kRecords = 200;
  Gate gate;
  RecordWriterOptions options = Options(prefix, "replica-a");
  options.before_send = gate.Hook();
  RecordWriter writer(client_.get(), options);
  Outcomes outcomes;
  writer.RecordDecision(Job("j-0"), {}, outcomes.Done());
  gate.WaitArrived();  // j-0's Txn is in flight
  // Concurrent callers while it is.
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 1 + t; i < kRecords; i += 4) {
        writer.RecordDecision(Job(absl::StrCat("j-", i)), {}, outcomes.Done());
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(writer.stats().queued, kRecords - 1);
  EXPECT_EQ(outcomes.told(), 0u);  // nobody told before its Txn landed
  gate.Open();
  for (const absl::Status& s : outcomes.Wait(kRecords)) {
    EXPECT_TRUE(s.ok()) << s;
  }
  // j-0 alone, then 199 in Txns of at most 128: 128 + 71.
  const RecordWriter::Stats stats = writer.stats();
  EXPECT_EQ(stats.written, kRecords);
  EXPECT_EQ(stats.txns, 3);
  std::set<int64_t> revisions;
  for (const etcd::KeyValue& kv : Records(prefix)) {
    revisions.insert(kv.mod_revision);
  }
  EXPECT_EQ(Jobs(prefix).size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(revisions.size(), 3u);
  std::cerr << kRecords << " decisions in " << stats.txns << " Txns, "
            << revisions.size() << " etcd revisions" << std::endl;
}

TEST_F(RecordWriterTest, TwoReplicasRecordsLandUnderTheirOwnKeys) {
  const std::string prefix = "/replicas/";
  constexpr int kA = 300, kB = 50;
  Outcomes outcomes;
  {
    RecordWriter a(client_.get(), Options(prefix, "replica-a"));
    RecordWriter b(client_.get(), Options(prefix, "replica-b"));
    std::thread to_a([&] {
      for (int i = 0; i < kA; ++i) {
        a.RecordDecision(Job(absl::StrCat("a-", i)), {}, outcomes.Done());
      }
    });
    for (int i = 0; i < kB; ++i) {
      b.RecordDecision(Job(absl::StrCat("b-", i)), {}, outcomes.Done());
    }
    to_a.join();
    for (const absl::Status& s : outcomes.Wait(kA + kB)) {
      EXPECT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(a.stats().written, kA);
    EXPECT_LE(a.stats().txns, kA);
    std::cerr << "replica-a: " << a.stats().written << " records in "
              << a.stats().txns << " Txns (300 from one caller, no gate)"
              << std::endl;
  }
  std::map<std::string, int> per_origin;
  for (const etcd::KeyValue& kv : Records(prefix)) {
    per_origin[absl::StrContains(kv.key, "/replica-a/") ? "a" : "b"]++;
  }
  EXPECT_EQ(per_origin["a"], kA);
  EXPECT_EQ(per_origin["b"], kB);
  EXPECT_EQ(Jobs(prefix).size(), static_cast<size_t>(kA + kB));  // none lost
}

TEST_F(RecordWriterTest, AFullQueueRefusesAtOnceAndTellsNothingStored) {
  const std::string prefix = "/full/";
  Gate gate;
  RecordWriterOptions options = Options(prefix, "replica-a");
  options.max_queued_records = 10;
  options.before_send = gate.Hook();
  std::vector<std::string> refused;
  options.on_refused = [&](const std::string& reason) {
    refused.push_back(reason);  // on the caller's thread for a full queue
  };
  RecordWriter writer(client_.get(), options);
  Outcomes sent;
  writer.RecordDecision(Job("in-flight"), {}, sent.Done());
  gate.WaitArrived();
  for (int i = 0; i < 10; ++i) {
    writer.RecordDecision(Job(absl::StrCat("q-", i)), {}, sent.Done());
  }
  for (int i = 0; i < 5; ++i) {
    const absl::Status s = Decide(writer, absl::StrCat("over-", i));
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "decision was not stored")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "queue is full")) << s;
  }
  EXPECT_EQ(refused, std::vector<std::string>(5, "queue_full"));
  EXPECT_EQ(writer.stats().queued, 10);
  EXPECT_EQ(writer.stats().refused, 5);
  gate.Open();
  for (const absl::Status& s : sent.Wait(11)) EXPECT_TRUE(s.ok()) << s;
  const std::set<std::string> jobs = Jobs(prefix);
  EXPECT_EQ(jobs.size(), 11u);
  EXPECT_EQ(jobs.count("over-0"), 0u);
  // Room again.
  EXPECT_TRUE(Decide(writer, "after").ok());
}

// Resumes the member when the test ends, whatever happened.
struct Resumer {
  ~Resumer() { cluster->Resume(0); }
  monta::testing::EtcdCluster* cluster;
};

TEST_F(RecordWriterTest, AnEtcdThatTakesNoWritesIsRefusedWithinTheBound) {
  const std::string prefix = "/stopped/";
  RecordWriterOptions options = Options(prefix, "replica-a");
  options.commit_timeout = absl::Seconds(1);
  options.attempt_timeout = absl::Milliseconds(300);
  std::vector<std::string> refused;
  options.on_refused = [&](const std::string& reason) {
    refused.push_back(reason);  // on the writer's thread
  };
  RecordWriter writer(client_.get(), options);
  ASSERT_TRUE(Decide(writer, "before").ok());  // connected
  cluster_->Pause(0);  // SIGSTOP: the only member, so no quorum
  Resumer resume{cluster_};
  Outcomes outcomes;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    writer.RecordDecision(Job(absl::StrCat("paused-", i)), {}, outcomes.Done());
  }
  for (const absl::Status& s : outcomes.Wait(20)) {
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;  // never OK
    EXPECT_TRUE(absl::StrContains(s.message(), "decision was not stored")) << s;
  }
  std::cerr << "20 decisions refused after "
            << absl::FormatDuration(
                   absl::FromChrono(std::chrono::steady_clock::now() - started))
            << " (commit_timeout 1s, attempt_timeout 300ms)" << std::endl;
  EXPECT_EQ(refused, std::vector<std::string>(20, "not_stored"));
  const RecordWriter::Stats stats = writer.stats();
  EXPECT_EQ(stats.refused, 20);
  EXPECT_EQ(stats.written, 1);
  EXPECT_GE(stats.failed_txns, 1);
  cluster_->Resume(0);
  // Writes again once etcd does.
  EXPECT_TRUE(Decide(writer, "after").ok());
  EXPECT_EQ(Jobs(prefix).count("after"), 1u);
}

TEST_F(RecordWriterTest, TheDestructorTellsEveryCallerStillWaiting) {
  const std::string prefix = "/destructor/";
  Outcomes outcomes;
  cluster_->Pause(0);
  Resumer resume{cluster_};
  {
    RecordWriterOptions options = Options(prefix, "replica-a");
    options.commit_timeout = absl::Milliseconds(800);
    options.attempt_timeout = absl::Milliseconds(200);
    RecordWriter writer(client_.get(), options);
    for (int i = 0; i < 50; ++i) {
      writer.RecordDecision(Job(absl::StrCat("d-", i)), {}, outcomes.Done());
    }
  }  // destroyed with 50 callers waiting on an etcd that takes no writes
  const std::vector<absl::Status> told = outcomes.Wait(50);
  ASSERT_EQ(told.size(), 50u);  // each told exactly once
  for (const absl::Status& s : told) EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  // And with etcd answering, the destructor sends what is queued.
  cluster_->Resume(0);
  Outcomes sent;
  {
    RecordWriter writer(client_.get(), Options(prefix, "replica-b"));
    for (int i = 0; i < 50; ++i) {
      writer.RecordDecision(Job(absl::StrCat("e-", i)), {}, sent.Done());
    }
  }
  for (const absl::Status& s : sent.Wait(50)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(sent.told(), 50u);
}

TEST_F(RecordWriterTest, PruningByAgeThenCountLeavesTheNewest) {
  const std::string prefix = "/prune/";
  // 2,500 records a day old (more than two bounded deletes), as a migration
  // or an earlier replica left them.
  const double day_ago =
      static_cast<double>(absl::ToUnixMicros(absl::Now())) * 1e-6 - 86400;
  RecordTxn txn(client_->options());
  for (int i = 0; i < 2500; ++i) {
    std::string key = RecordKey(prefix, "decisions", day_ago + i * 1e-3,
                                kSqliteOrigin, i + 1);
    std::string value = EncodeRecord(day_ago + i * 1e-3, {"", ""});
    if (!txn.Fits(RecordTxn::PutBytes(key, value))) {
      ASSERT_TRUE(txn.Send(*client_).ok());
    }
    txn.Add(std::move(key), std::move(value));
  }
  ASSERT_TRUE(txn.Send(*client_).ok());
  RecordWriter writer(client_.get(), Options(prefix, "leader"));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Decide(writer, absl::StrCat("new-", i)).ok());
  }
  ASSERT_EQ(Records(prefix).size(), 2520u);

  auto pruned = writer.PruneDecisions(absl::Now() - absl::Hours(1), 1000);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 2500);
  ASSERT_EQ(Records(prefix).size(), 20u);

  pruned = writer.PruneDecisions(absl::Now() - absl::Hours(1), 5);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 15);
  const std::vector<etcd::KeyValue> left = Records(prefix);
  ASSERT_EQ(left.size(), 5u);
  for (size_t i = 0; i < left.size(); ++i) {
    auto row = DecodeRecord(left[i].value);
    ASSERT_TRUE(row.ok());
    monta::v1::StrategyRequest request;
    ASSERT_TRUE(request.ParseFromString(row->fields[0]));
    EXPECT_EQ(request.job().name(), absl::StrCat("new-", 15 + i));
  }
  // Nothing more to do.
  pruned = writer.PruneDecisions(absl::Now() - absl::Hours(1), 5);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(*pruned, 0);
}

}  // namespace
}  // namespace monta::etcd_store
