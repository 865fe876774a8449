// monta-planner --migrate_from_sqlite (issue 20 item 8): a SQLite store file
// written through SqliteStore (nodes, a curve history longer than the etcd
// store keeps, more decisions than fit one etcd Txn, verifications, audit
// entries) is copied by the real binary into a real etcd; the counts and a
// sample of records are compared between the file and etcd; a second run is
// refused (the prefix is not empty) unless --migrate_into_nonempty; the source
// file's bytes are the same after every run (it is opened read-only); a planner
// started on the prefix serves the migrated nodes.
#include "server/etcd_store/migrate.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/etcd_store/etcd_store.h"
#include "server/store/sqlite_store.h"
#include "server/store/test_mutations.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd_cluster.h"

namespace monta::testing {
namespace {

namespace tm = store::test_mutations;
using store::SqliteStore;

constexpr int kDecisions = 300;  // > 128 operations: several Txns
constexpr int kHistory = 12;     // rows of one measurement, > curve_history 8
constexpr char kPrefix[] = "/migrated/";

// The file: nodes a, b, c; curves of (a,b) x kHistory and (b,c) x 2;
// decisions, verifications and audit entries.
void WriteFile(const std::string& path) {
  auto db = SqliteStore::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  auto fence = (*db)->Lead();
  ASSERT_TRUE(fence.ok());
  std::vector<store::Mutation> batch = {tm::Node("a", "host-a"),
                                        tm::Node("b", "host-b"),
                                        tm::Node("c", "host-c")};
  uint64_t sequence = 0;
  for (int i = 0; i < kHistory; ++i) {
    batch.push_back(tm::CurveAdded(
        tm::Curve(absl::StrCat("bench-ab-", i), ++sequence, {"a", "b"})));
  }
  for (int i = 0; i < 2; ++i) {
    batch.push_back(tm::CurveAdded(
        tm::Curve(absl::StrCat("bench-bc-", i), ++sequence, {"b", "c"})));
  }
  ASSERT_TRUE((*db)->Commit(*fence, batch).ok());
  ASSERT_TRUE((*db)
                  ->WriteKnowledge(*fence, {{"nodesets/ab", "calibration"},
                                            {"jobs/j1", "verify reply"}})
                  .ok());
  for (int i = 0; i < kDecisions; ++i) {
    v1::StrategyRequest request;
    request.mutable_job()->set_name(absl::StrCat("job-", i));
    v1::StrategyReply reply;
    reply.set_decision_seconds(i);
    (*db)->RecordDecision(request, reply);
  }
  for (int i = 0; i < 5; ++i) {
    v1::VerifyRequest request;
    request.mutable_request()->mutable_job()->set_name(
        absl::StrCat("verify-", i));
    v1::VerifyReply reply;
    reply.set_regret_ratio(0.01 * i);
    (*db)->RecordVerification(request, reply);
  }
  for (int i = 0; i < 3; ++i) {
    (*db)->RecordAudit({"operator alice", "forget_curves",
                        absl::StrCat("task bench-", i), "dropped 1 curve"});
  }
}

CommandResult Migrate(const std::string& file, const EtcdCluster& etcd,
                      const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv = {Runfile("server/monta-planner"),
                                   "--migrate_from_sqlite=" + file,
                                   "--store=etcd",
                                   "--etcd_endpoints=" + etcd.endpoint(0),
                                   "--etcd_insecure",
                                   absl::StrCat("--etcd_prefix=", kPrefix)};
  argv.insert(argv.end(), more.begin(), more.end());
  return Run(argv, absl::Seconds(60));
}

// The rows of one table, by id.
std::map<int64_t, SqliteStore::LogRow> Rows(SqliteStore& db,
                                            SqliteStore::LogTable table) {
  std::map<int64_t, SqliteStore::LogRow> rows;
  EXPECT_TRUE(db.ForEachLogRow(table, [&](SqliteStore::LogRow row) {
                  rows[row.id] = row;
                  return absl::OkStatus();
                }).ok());
  return rows;
}

// The etcd store lists the file's nodes and current curves, and the records'
// keys hold its rows (a sample compared field by field).
void ExpectEtcdHoldsTheFile(const std::string& file, const EtcdCluster& etcd) {
  etcd::ClientOptions client_options;
  client_options.endpoints = {etcd.endpoint(0)};
  client_options.security.insecure = true;
  auto client = etcd::Client::Create(client_options);
  ASSERT_TRUE(client.ok());
  etcd_store::EtcdStoreOptions store_options;
  store_options.prefix = kPrefix;
  auto migrated = etcd_store::EtcdStore::Open(client->get(), store_options);
  ASSERT_TRUE(migrated.ok()) << migrated.status();
  auto in_etcd = (*migrated)->List();
  ASSERT_TRUE(in_etcd.ok()) << in_etcd.status();
  auto db = SqliteStore::OpenReadOnly(file);
  ASSERT_TRUE(db.ok()) << db.status();
  auto in_file = (*db)->List();
  ASSERT_TRUE(in_file.ok());
  ASSERT_EQ(in_etcd->nodes.size(), in_file->nodes.size());
  for (size_t i = 0; i < in_file->nodes.size(); ++i) {
    EXPECT_EQ(in_etcd->nodes[i].SerializeAsString(),
              in_file->nodes[i].SerializeAsString());
  }
  // The current curve of each measurement, whole (sequence and received
  // time included), and the highest sequence: new curves number above it.
  ASSERT_EQ(in_etcd->curves.size(), 2u);
  ASSERT_EQ(in_etcd->curves.size(), in_file->curves.size());
  for (size_t i = 0; i < in_file->curves.size(); ++i) {
    EXPECT_EQ(in_etcd->curves[i].SerializeAsString(),
              in_file->curves[i].SerializeAsString());
  }
  EXPECT_EQ(in_etcd->max_curve_sequence, in_file->max_curve_sequence);

  // Every decision key, and a sample of records compared field by field.
  const std::map<SqliteStore::LogTable, std::vector<int64_t>> samples = {
      {SqliteStore::LogTable::kDecisions, {1, 128, 129, kDecisions}},
      {SqliteStore::LogTable::kVerifications, {1, 5}},
      {SqliteStore::LogTable::kAudit, {1, 3}}};
  for (const auto& [table, ids] : samples) {
    const auto rows = Rows(**db, table);
    for (int64_t id : ids) {
      SCOPED_TRACE(absl::StrCat(SqliteStore::LogTableName(table), " ", id));
      ASSERT_EQ(rows.count(id), 1u);
      auto got = (*client)->Get(etcd_store::RecordKey(
          kPrefix, SqliteStore::LogTableName(table),
          rows.at(id).at_unix_seconds, etcd_store::kSqliteOrigin, id));
      ASSERT_TRUE(got.ok());
      ASSERT_EQ(got->kvs.size(), 1u);
      auto record = etcd_store::DecodeRecord(got->kvs[0].value);
      ASSERT_TRUE(record.ok()) << record.status();
      EXPECT_EQ(record->fields, rows.at(id).fields);
      EXPECT_NEAR(record->at_unix_seconds, rows.at(id).at_unix_seconds, 1e-6);
    }
  }
  v1::StrategyReply last;
  ASSERT_TRUE(last.ParseFromString(
      Rows(**db, SqliteStore::LogTable::kDecisions).at(kDecisions).fields[1]));
  EXPECT_EQ(last.decision_seconds(), kDecisions - 1);
}

// Again: refused; a missing file and a missing --store=etcd too.
void ExpectRefusals(const std::string& file, const EtcdCluster& etcd) {
  CommandResult r = Migrate(file, etcd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "is not empty")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--migrate_into_nonempty")) << r.err;
  // Told to: the same keys, put again; nothing doubles.
  r = Migrate(file, etcd, {"--migrate_into_nonempty"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "curves: read 14, in etcd 10")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "decisions: read 300, in etcd 300"))
      << r.out;
  // A file that is not there is not created and migrated empty.
  r = Migrate(TempDir() + "/missing.db", etcd, {"--migrate_into_nonempty"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "No such file")) << r.err;
  // Without --store=etcd there is nowhere to copy to.
  r = monta::testing::Run(
      {Runfile("server/monta-planner"), "--migrate_from_sqlite=" + file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "needs --store=etcd")) << r.err;
}

// A planner on the prefix serves the migrated nodes.
void ExpectAPlannerServesTheNodes(const EtcdCluster& etcd) {
  LocalCluster cluster;
  ASSERT_TRUE(
      cluster
          .StartPlanner(
              {"--store=etcd", "--etcd_endpoints=" + etcd.endpoint(0),
               "--etcd_insecure", absl::StrCat("--etcd_prefix=", kPrefix),
               "--bench_on_register=false", "--leader_lease_seconds=2"})
          .ok());
  ASSERT_TRUE(cluster.WaitForPlannerHealth("SERVING", absl::Seconds(20)))
      << ReadFile(cluster.planner().log_path());
  for (const char* name : {"a", "b", "c"}) {
    CommandResult node = cluster.Montactl({"--output=json", "node", name});
    EXPECT_EQ(node.exit_code, 0) << name << ": " << node.err;
    EXPECT_TRUE(absl::StrContains(node.out, absl::StrCat("host-", name)))
        << node.out;
  }
}

TEST(MigrateTest, EverySqliteRecordLandsInEtcd) {
  const std::string file = TempDir() + "/planner.db";
  WriteFile(file);
  if (HasFatalFailure()) return;
  // The source is read, never written (no probe row, no upgrade): its bytes
  // are compared whole after every run below.
  const std::string bytes_before = ReadFile(file);
  ASSERT_GT(bytes_before.size(), 0u);
  auto etcd = EtcdCluster::Start({});
  ASSERT_TRUE(etcd.ok()) << etcd.status();

  CommandResult r = Migrate(file, **etcd);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "nodes: read 3, in etcd 3")) << r.out;
  // The newest 8 of (a,b)'s 12 rows, and (b,c)'s 2.
  EXPECT_TRUE(absl::StrContains(r.out,
                                "curves: read 14, in etcd 10 (4 older rows not "
                                "copied: the etcd store keeps the newest 8"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "decisions: read 300, in etcd 300"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "verifications: read 5, in etcd 5"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "audit: read 3, in etcd 3")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "knowledge: read 2, in etcd 2"))
      << r.out;

  ExpectEtcdHoldsTheFile(file, **etcd);
  if (HasFatalFailure()) return;
  ExpectRefusals(file, **etcd);
  const std::string bytes_after = ReadFile(file);
  EXPECT_EQ(bytes_after.size(), bytes_before.size());
  EXPECT_TRUE(bytes_after == bytes_before)
      << "the source file changed during the migrations";
  ExpectAPlannerServesTheNodes(**etcd);
}

}  // namespace
}  // namespace monta::testing
