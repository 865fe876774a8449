// RecordWriter on one real etcd member: records of two replicas land under
// distinct keys in fewer Txns (and etcd revisions) than records; a full queue
// drops and counts; pruning by age and by count (bounded deletes) leaves the
// newest.
#include "server/etcd_store/record_writer.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/etcd_store/records.h"
#include "tests/testing/etcd_suite.h"

namespace monta::etcd_store {
namespace {

class RecordWriterTest : public monta::testing::EtcdSuite<1> {
 protected:
  RecordWriterOptions Options(const std::string& prefix,
                              const std::string& origin) {
    RecordWriterOptions options;
    options.prefix = prefix;
    options.origin = origin;
    options.flush_interval = absl::Hours(1);  // sent by Flush or a full Txn
    return options;
  }
  // The decisions' keys and values, in key order.
  std::vector<etcd::KeyValue> Decisions(const std::string& prefix) {
    etcd::RangeRequest range;
    range.key = RecordTablePrefix(prefix, "decisions");
    range.range_end = etcd::PrefixEnd(range.key);
    auto result = client_->Range(range);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->kvs : std::vector<etcd::KeyValue>{};
  }
  static monta::v1::StrategyRequest Job(const std::string& name) {
    monta::v1::StrategyRequest request;
    request.mutable_job()->set_name(name);
    return request;
  }
};

TEST_F(RecordWriterTest, TwoReplicasRecordsLandInBatchesUnderTheirOwnKeys) {
  const std::string prefix = "/batches/";
  constexpr int kA = 300, kB = 50;
  {
    RecordWriter a(client_.get(), Options(prefix, "replica-a"));
    RecordWriter b(client_.get(), Options(prefix, "replica-b"));
    for (int i = 0; i < kA; ++i) {
      a.RecordDecision(Job(absl::StrCat("a-", i)), {});
    }
    for (int i = 0; i < kB; ++i) {
      b.RecordDecision(Job(absl::StrCat("b-", i)), {});
    }
    b.RecordVerification({}, {});
    b.RecordAudit({"operator alice", "forget_curves", "node n", "1 curve"});
    ASSERT_TRUE(a.Flush().ok());
    ASSERT_TRUE(b.Flush().ok());
    const RecordWriter::Stats sa = a.stats();
    EXPECT_EQ(sa.written, kA);
    EXPECT_EQ(sa.dropped, 0);
    EXPECT_EQ(sa.queued, 0);
    EXPECT_GE(sa.txns, 3);  // 300 records, 128 per Txn
    EXPECT_LE(sa.txns, 4);
    std::cerr << "replica-a: " << sa.written << " records in " << sa.txns
              << " Txns" << std::endl;
  }
  const std::vector<etcd::KeyValue> kvs = Decisions(prefix);
  ASSERT_EQ(kvs.size(), static_cast<size_t>(kA + kB));
  std::set<int64_t> revisions;
  std::map<std::string, int> per_origin;
  std::set<std::string> jobs;
  for (const etcd::KeyValue& kv : kvs) {
    revisions.insert(kv.mod_revision);
    per_origin[absl::StrContains(kv.key, "/replica-a/") ? "a" : "b"]++;
    auto row = DecodeRecord(kv.value);
    ASSERT_TRUE(row.ok()) << row.status();
    ASSERT_EQ(row->fields.size(), 2u);
    monta::v1::StrategyRequest request;
    ASSERT_TRUE(request.ParseFromString(row->fields[0]));
    jobs.insert(request.job().name());
  }
  EXPECT_EQ(per_origin["a"], kA);
  EXPECT_EQ(per_origin["b"], kB);
  EXPECT_EQ(jobs.size(), static_cast<size_t>(kA + kB));  // none lost
  // One revision per Txn: far fewer than the records.
  EXPECT_LE(revisions.size(), 6u) << revisions.size();
  std::cerr << kvs.size() << " decision records in " << revisions.size()
            << " etcd revisions" << std::endl;
  for (const char* table : {"verifications", "audit_log"}) {
    etcd::RangeRequest range;
    range.key = RecordTablePrefix(prefix, table);
    range.range_end = etcd::PrefixEnd(range.key);
    auto got = client_->Range(range);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->kvs.size(), 1u) << table;
    EXPECT_TRUE(absl::StrContains(got->kvs[0].key, "/replica-b/"));
  }
}

TEST_F(RecordWriterTest, AFullQueueDropsAndCounts) {
  const std::string prefix = "/full/";
  RecordWriterOptions options = Options(prefix, "replica-a");
  options.max_queued_records = 10;
  std::vector<std::string> dropped;
  options.on_dropped = [&](const std::string& reason) {
    dropped.push_back(reason);
  };
  RecordWriter writer(client_.get(), options);
  for (int i = 0; i < 15; ++i) {
    writer.RecordDecision(Job(absl::StrCat("j-", i)), {});
  }
  EXPECT_EQ(writer.stats().queued, 10);
  EXPECT_EQ(writer.stats().dropped, 5);
  EXPECT_EQ(dropped, std::vector<std::string>(5, "queue_full"));
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(Decisions(prefix).size(), 10u);
  // Room again after the flush.
  writer.RecordDecision(Job("after"), {});
  EXPECT_EQ(writer.stats().queued, 1);
  EXPECT_EQ(writer.stats().dropped, 5);
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
    writer.RecordDecision(Job(absl::StrCat("new-", i)), {});
  }
  ASSERT_TRUE(writer.Flush().ok());
  ASSERT_EQ(Decisions(prefix).size(), 2520u);

  auto pruned = writer.PruneDecisions(absl::Now() - absl::Hours(1), 1000);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 2500);
  ASSERT_EQ(Decisions(prefix).size(), 20u);

  pruned = writer.PruneDecisions(absl::Now() - absl::Hours(1), 5);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 15);
  const std::vector<etcd::KeyValue> left = Decisions(prefix);
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
