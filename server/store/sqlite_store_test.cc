#include "server/store/sqlite_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/metrics/planner_metrics.h"

namespace monta::store {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

monta::v1::BandwidthCurve Curve(const std::string& task, uint64_t bytes) {
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.set_scope(monta::v1::SCOPE_INTER_NODE);
  c.set_nranks(4);
  c.set_n_nodes(2);
  c.add_nodes("a");
  c.add_nodes("b");
  c.set_task_id(task);
  c.add_points()->set_message_bytes(bytes);
  return c;
}

Instant Later(Instant t, absl::Duration d) {
  return Instant{t.wall + d, MonoAfter(t.mono, d)};
}

// Registers nodes "a" and "b" (instance "i-a", "i-b") at `now`.
void RegisterAB(registry::Registry& registry, Instant now) {
  for (const char* name : {"a", "b"}) {
    monta::v1::RegisterRequest r;
    r.set_node_name(name);
    r.set_instance_id(std::string("i-") + name);
    r.mutable_topology()->set_hostname(name);
    ASSERT_TRUE(registry.Register(r, now).ok());
  }
}

// The planner's wiring: the registry writes through the store seam, under
// the fence Lead hands out.
std::unique_ptr<RegistryWriter> Wire(SqliteStore& store,
                                     registry::Registry& registry) {
  absl::StatusOr<Fence> fence = store.Lead();
  EXPECT_TRUE(fence.ok()) << fence.status();
  auto writer =
      std::make_unique<RegistryWriter>(&store, fence.ok() ? *fence : Fence{});
  registry.SetObserver(writer.get());
  return writer;
}

Mutation NodeMutation(const monta::v1::NodeInfo& node) {
  Mutation m;
  m.kind = Mutation::Kind::kNode;
  m.node = node;
  return m;
}

Mutation CurveMutation(monta::v1::BandwidthCurve curve) {
  Mutation m;
  m.kind = Mutation::Kind::kCurve;
  m.curve = std::move(curve);
  m.curve.set_sequence(1);
  return m;
}

TEST(SqliteStoreTest, NodesAndLatestCurvesSurviveARestart) {
  const std::string path = TempPath("restart.db");
  const Instant t0 = Instant::Now();
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    registry::Registry registry{registry::RegistryOptions{}};
    const auto writer = Wire(**store, registry);
    RegisterAB(registry, t0);
    ASSERT_TRUE(registry.AddCurve(Curve("t1", 1024)).ok());
    ASSERT_TRUE(registry.AddCurve(Curve("t2", 4096)).ok());
    EXPECT_EQ(*(*store)->CurveCount(), 2);  // the history keeps both
    EXPECT_EQ((*store)->write_errors(), 0);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok());
  registry::Registry registry{registry::RegistryOptions{}};
  ASSERT_TRUE(LoadInto(**store, registry).ok());
  const auto writer = Wire(**store, registry);
  auto a = registry.Get("a", Later(t0, absl::Seconds(1)));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->instance_id(), "i-a");
  EXPECT_EQ(a->topology().hostname(), "a");
  ASSERT_EQ(a->curves_size(), 1);
  EXPECT_EQ(a->curves(0).task_id(), "t2");  // the latest measurement wins
  EXPECT_EQ(*(*store)->CurveCount(), 2);    // loading wrote nothing
  // The same agent instance resumes with a heartbeat, no re-registration
  // needed.
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("a");
  hb.set_instance_id("i-a");
  EXPECT_TRUE(registry.Heartbeat(hb, Later(t0, absl::Seconds(2))).ok());
}

TEST(SqliteStoreTest, ACurveWhoseNodeIsGoneIsLoggedAndCounted) {
  const std::string path = TempPath("orphan.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto fence = (*store)->Lead();
    ASSERT_TRUE(fence.ok()) << fence.status();
    // Nodes "a" and "b" were never stored.
    ASSERT_TRUE(
        (*store)->Commit(*fence, {CurveMutation(Curve("t1", 1024))}).ok());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok());
  prometheus::Registry prometheus;
  metrics::PlannerMetrics metrics(prometheus);
  registry::Registry registry{registry::RegistryOptions{}};
  ASSERT_TRUE(LoadInto(**store, registry, [&metrics](const std::string& site) {
                metrics.RecordDiscardedError(site);
              }).ok());
  const std::string out =
      prometheus::TextSerializer().Serialize(prometheus.Collect());
  EXPECT_NE(out.find("monta_discarded_errors_total{site=\"load_curve\"} 1"),
            std::string::npos)
      << out;
}

// Two planners opened on one file by mistake: the later one's Lead fences the
// first, whose writes are then refused (counted), never interleaved.
TEST(SqliteStoreTest, ASecondWriterOnTheFileFencesTheFirst) {
  const std::string path = TempPath("two-writers.db");
  auto first = SqliteStore::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  auto old_fence = (*first)->Lead();
  ASSERT_TRUE(old_fence.ok()) << old_fence.status();
  monta::v1::NodeInfo node;
  node.set_name("a");
  ASSERT_TRUE((*first)->Commit(*old_fence, {NodeMutation(node)}).ok());
  auto second = SqliteStore::Open(path);
  ASSERT_TRUE(second.ok()) << second.status();
  auto fence = (*second)->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  node.set_name("b");
  auto refused = (*first)->Commit(*old_fence, {NodeMutation(node)});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("fenced"), std::string::npos)
      << refused.status();
  EXPECT_EQ((*first)->write_errors(), 1);
  node.set_name("c");
  ASSERT_TRUE((*second)->Commit(*fence, {NodeMutation(node)}).ok());
  auto listed = (*second)->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->nodes.size(), 2u);
  EXPECT_EQ(listed->nodes[0].name(), "a");
  EXPECT_EQ(listed->nodes[1].name(), "c");
  // The revision is the file's: it counts on across both writers.
  EXPECT_EQ(listed->revision, 2);
}

// What verify runs taught the planner (knowledge_store.h): records by id,
// written under the writer's fence, kept across a restart.
TEST(SqliteStoreTest, KnowledgeRecordsAreFencedAndSurviveARestart) {
  const std::string path = TempPath("knowledge.db");
  auto first = SqliteStore::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<std::string> failed;
  (*first)->SetWriteListener(
      [&](const std::string& operation, const absl::Status& status) {
        if (!status.ok()) failed.push_back(operation);
      });
  auto fence = (*first)->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  ASSERT_TRUE(
      (*first)
          ->WriteKnowledge(*fence, {{"nodesets/aa", "one"}, {"jobs/bb", "two"}})
          .ok());
  ASSERT_TRUE((*first)
                  ->WriteKnowledge(*fence, {{"jobs/bb", std::nullopt},
                                            {"nodesets/aa", "three"}})
                  .ok());
  absl::Status bad_id = (*first)->WriteKnowledge(*fence, {{"a b", "x"}});
  EXPECT_EQ(bad_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.message().find("knowledge id"), std::string::npos) << bad_id;
  EXPECT_EQ((*first)
                ->WriteKnowledge(
                    *fence, {{"nodesets/big",
                              std::string(kMaxKnowledgeRecordBytes + 1, 'x')}})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*first)->WatchKnowledge(0).status().code(),
            absl::StatusCode::kUnimplemented);
  // A second planner on the file takes over: the first one's writes are
  // refused, nothing changed.
  auto second = SqliteStore::Open(path);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->Lead().ok());
  absl::Status fenced =
      (*first)->WriteKnowledge(*fence, {{"nodesets/aa", "stale"}});
  EXPECT_EQ(fenced.code(), absl::StatusCode::kFailedPrecondition) << fenced;
  EXPECT_EQ(failed, std::vector<std::string>{"knowledge"});
  first->reset();
  second->reset();
  auto reopened = SqliteStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<KnowledgeList> listed = (*reopened)->ListKnowledge();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->records.size(), 1u);
  EXPECT_EQ(listed->records[0].id, "nodesets/aa");
  EXPECT_EQ(listed->records[0].value, "three");
}

TEST(SqliteStoreTest, DecisionsAreKeptWhole) {
  auto store = SqliteStore::Open(TempPath("decisions.db"));
  ASSERT_TRUE(store.ok());
  monta::v1::StrategyRequest request;
  request.mutable_job()->set_name("paper");
  monta::v1::StrategyReply reply;
  reply.mutable_chosen()->set_kind(monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  reply.mutable_chosen()->set_chunks_effective(6);
  reply.mutable_evidence()->set_origin(monta::v1::EVIDENCE_SOURCE_PROFILE);
  (*store)->RecordDecision(request, reply);
  (*store)->RecordDecision(request, reply);
  EXPECT_EQ(*(*store)->DecisionCount(), 2);
  EXPECT_EQ((*store)->write_errors(), 0);
}

TEST(SqliteStoreTest, VerificationsAreKeptWithTheirScores) {
  const std::string path = TempPath("verifications.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok());
    monta::v1::VerifyRequest request;
    request.mutable_request()->mutable_job()->set_name("cpu-dev");
    monta::v1::VerifyReply reply;
    reply.add_nodes("node-0");
    reply.add_nodes("node-1");
    reply.mutable_task()->set_task_id("bench-7");
    reply.set_regret_ratio(0.04);
    (*store)->RecordVerification(request, reply);
    EXPECT_EQ(*(*store)->VerificationCount(), 1);
    EXPECT_EQ((*store)->write_errors(), 0);
  }
  // Reopened, the row is still there (a real file, not a cache).
  auto reopened = SqliteStore::Open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(*(*reopened)->VerificationCount(), 1);
}

// The registry removes a node gone for --gone_after_seconds: its row and the
// curves naming it leave the database, so a restart neither restores it nor
// trips over curves of a node that no longer exists.
TEST(SqliteStoreTest, ARemovedNodeLeavesWithItsCurves) {
  const std::string path = TempPath("removed.db");
  const Instant t0 = Instant::Now();
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    registry::RegistryOptions options;
    options.gone_after = absl::Seconds(60);
    registry::Registry registry(options);
    const auto writer = Wire(**store, registry);
    for (const char* name : {"a", "b", "c"}) {
      monta::v1::RegisterRequest r;
      r.set_node_name(name);
      r.set_instance_id(name);
      ASSERT_TRUE(registry.Register(r, t0).ok());
    }
    ASSERT_TRUE(registry.AddCurve(Curve("pair", 1024)).ok());  // a and b
    monta::v1::BandwidthCurve c_only = Curve("c", 1024);
    c_only.clear_nodes();
    c_only.add_nodes("c");
    ASSERT_TRUE(registry.AddCurve(c_only).ok());
    ASSERT_TRUE(registry.Deregister("b", "b", t0).ok());
    monta::v1::HeartbeatRequest hb;
    for (const char* name : {"a", "c"}) {
      hb.set_node_name(name);
      hb.set_instance_id(name);
      ASSERT_TRUE(registry.Heartbeat(hb, Later(t0, absl::Seconds(30))).ok());
    }
    EXPECT_EQ(registry.RemoveGone(Later(t0, absl::Seconds(60))),
              std::vector<std::string>{"b"});
    EXPECT_EQ(*(*store)->CurveCount(), 1);  // c's own curve stays
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok());
  registry::Registry registry{registry::RegistryOptions{}};
  int discarded = 0;
  ASSERT_TRUE(LoadInto(**store, registry, [&discarded](const std::string&) {
                ++discarded;
              }).ok());
  EXPECT_EQ(discarded, 0);
  const auto nodes = registry.List(Instant::Now(), /*include_gone=*/true);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name(), "a");
  EXPECT_EQ(nodes[0].curves_size(), 0);
  EXPECT_EQ(nodes[1].name(), "c");
  EXPECT_EQ(nodes[1].curves_size(), 1);
}

TEST(SqliteStoreTest, DecisionsArePrunedByAgeAndCount) {
  auto store = SqliteStore::Open(TempPath("prune.db"));
  ASSERT_TRUE(store.ok());
  monta::v1::StrategyRequest request;
  monta::v1::StrategyReply reply;
  for (int i = 0; i < 5; ++i) (*store)->RecordDecision(request, reply);
  const absl::Time now = absl::Now();
  // Nothing is older than an hour ago; the newest 3 of 5 stay.
  EXPECT_EQ(*(*store)->PruneDecisions(now - absl::Hours(1), 3), 2);
  EXPECT_EQ(*(*store)->DecisionCount(), 3);
  EXPECT_EQ(*(*store)->PruneDecisions(now - absl::Hours(1), 3), 0);
  // All were made before an hour from now.
  EXPECT_EQ(*(*store)->PruneDecisions(now + absl::Hours(1), 3), 3);
  EXPECT_EQ(*(*store)->DecisionCount(), 0);
  (*store)->RecordDecision(request, reply);
  EXPECT_EQ(*(*store)->PruneDecisions(now - absl::Hours(1), 0), 1);
  EXPECT_EQ((*store)->write_errors(), 0);
}

TEST(SqliteStoreTest, UnopenablePathIsAClearError) {
  auto store = SqliteStore::Open("/nonexistent-dir/x/planner.db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.status().message(),
            "--db /nonexistent-dir/x/planner.db: directory /nonexistent-dir/x: "
            "No such file or directory");
}

TEST(SqliteStoreTest, DirectoryIsRefused) {
  const std::string dir = TempPath("a-directory");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  auto store = SqliteStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().message(),
            "--db " + dir + ": is a directory, not a database file");
}

TEST(SqliteStoreTest, GarbageFileIsDataLossAndMovesAside) {
  const std::string path = TempPath("garbage.db");
  std::ofstream(path)
      << "this is not a database, just text that is long enough to matter\n";
  auto store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss)
      << store.status();
  absl::StatusOr<std::string> aside = SqliteStore::MoveAside(path);
  ASSERT_TRUE(aside.ok()) << aside.status();
  EXPECT_EQ(aside->rfind(path + ".corrupt-", 0), 0u) << *aside;
  std::ifstream moved(*aside);
  EXPECT_TRUE(moved.good());
  EXPECT_TRUE(SqliteStore::Open(path).ok());  // a fresh one in its place
}

// Another connection holds the write lock: writes fail (after the busy
// timeout) and the listener hears each failure, then one success.
TEST(SqliteStoreTest, WriteListenerHearsFailuresAndRecovery) {
  const std::string path = TempPath("locked.db");
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::pair<std::string, bool>> heard;
  (*store)->SetWriteListener(
      [&heard](const std::string& operation, const absl::Status& status) {
        heard.emplace_back(operation, status.ok());
      });
  monta::v1::NodeInfo node;
  node.set_name("a");
  auto fence = (*store)->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  (void)(*store)->Commit(*fence, {NodeMutation(node)});
  EXPECT_TRUE(heard.empty());  // successes are news only after a failure
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  (void)(*store)->Commit(*fence, {NodeMutation(node)});
  (void)(*store)->Commit(*fence, {CurveMutation(Curve("t1", 1024))});
  ASSERT_EQ(sqlite3_exec(other, "COMMIT;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  (void)(*store)->Commit(*fence, {NodeMutation(node)});
  (void)(*store)->Commit(*fence, {NodeMutation(node)});
  const std::vector<std::pair<std::string, bool>> want = {
      {"node", false}, {"curve", false}, {"node", true}};
  EXPECT_EQ(heard, want);
  EXPECT_EQ((*store)->write_errors(), 2);
}

// The schema of a planner before issue 17: curves without the planner's
// sequence, ordered by their agents' measured_at.
constexpr const char* kOldSchema = R"sql(
CREATE TABLE nodes (name TEXT PRIMARY KEY, info BLOB NOT NULL,
                    updated_unix_seconds REAL NOT NULL);
CREATE TABLE curves (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id TEXT NOT NULL, nodes TEXT NOT NULL, collective INTEGER NOT NULL,
  scope INTEGER NOT NULL, strategy TEXT NOT NULL,
  measured_unix_seconds REAL NOT NULL, measurement TEXT NOT NULL,
  curve BLOB NOT NULL);
CREATE INDEX curves_by_nodes ON curves (nodes, collective, scope);
CREATE INDEX curves_by_measurement ON curves (measurement, id);
CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
)sql";

// Writes a node row and a curve row as the old planner did.
void OldRows(
    sqlite3* db,
    const std::vector<std::pair<monta::v1::BandwidthCurve, absl::Time>>&
        curves) {
  for (const char* name : {"a", "b"}) {
    monta::v1::NodeInfo node;
    node.set_name(name);
    const std::string blob = node.SerializeAsString();
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO nodes VALUES (?1, ?2, 0)", -1,
                                 &stmt, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(stmt, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(stmt, 2, blob.data(), blob.size(), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
    sqlite3_finalize(stmt);
  }
  for (const auto& [curve, measured] : curves) {
    monta::v1::BandwidthCurve c = curve;
    c.mutable_measured_at()->set_seconds(absl::ToUnixSeconds(measured));
    const std::string blob = c.SerializeAsString();
    const std::string key = registry::CurveKey(c);
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(
                  db,
                  "INSERT INTO curves (task_id, nodes, collective, scope, "
                  "strategy, measured_unix_seconds, measurement, curve) VALUES "
                  "(?1, 'a,b', 1, 2, '', ?2, ?3, ?4)",
                  -1, &stmt, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(stmt, 1, c.task_id().c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(stmt, 2,
                        absl::ToDoubleSeconds(measured - absl::UnixEpoch()));
    sqlite3_bind_text(stmt, 3, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(stmt, 4, blob.data(), blob.size(), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
    sqlite3_finalize(stmt);
  }
}

// A database of the old schema with a curve dated 100 years ahead (the forged
// 10 s curve of issue 17, another measurement of the same node pair) between
// two honest ones: after the migration the row order decides (the later honest
// curve is the newest), and no age counts from the forged date.
TEST(SqliteStoreTest, AnOldDatabaseIsMigratedAndItsFutureRowLosesItsDate) {
  const std::string path = TempPath("old-schema.db");
  const absl::Time now = absl::Now();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, kOldSchema, nullptr, nullptr, nullptr),
              SQLITE_OK);
    monta::v1::BandwidthCurve forged = Curve("forged", 1024);
    forged.set_nranks(2);
    OldRows(db, {{Curve("honest-1", 1024), now - absl::Hours(2)},
                 {forged, now + absl::Hours(24 * 365 * 100)},
                 {Curve("honest-2", 1024), now - absl::Hours(1)}});
    sqlite3_close(db);
  }
  for (int open = 0; open < 2; ++open) {  // the migration runs once
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    registry::Registry registry{registry::RegistryOptions{}};
    ASSERT_TRUE(LoadInto(**store, registry).ok());
    auto loaded = registry.ListCurves("a");
    ASSERT_TRUE(loaded.ok());
    ASSERT_EQ(loaded->curves_size(), 2);  // honest-2 and the forged one
    const monta::v1::BandwidthCurve& newest = loaded->curves(0);
    EXPECT_EQ(newest.task_id(), "honest-2") << "open " << open;
    EXPECT_EQ(newest.sequence(), 3u);  // its row
    EXPECT_LE(newest.received_at().seconds(), absl::ToUnixSeconds(now));
    const monta::v1::BandwidthCurve& forged = loaded->curves(1);
    EXPECT_EQ(forged.task_id(), "forged");
    EXPECT_EQ(forged.sequence(), 2u);
    // Its claim stays for display; the planner's date is the migration's.
    EXPECT_GT(forged.measured_at().seconds(),
              absl::ToUnixSeconds(now + absl::Hours(24 * 365 * 99)));
    EXPECT_LE(forged.received_at().seconds(), absl::ToUnixSeconds(absl::Now()));
    // New curves number above every old row.
    const auto writer = Wire(**store, registry);
    monta::v1::BandwidthCurve next = Curve("next", 2048);
    next.set_nranks(8);
    ASSERT_TRUE(registry.AddCurve(next).ok());
    auto listed = registry.ListCurves("a");
    ASSERT_TRUE(listed.ok());
    EXPECT_EQ(listed->curves(0).task_id(), "next");
    EXPECT_GE(listed->curves(0).sequence(), 4u);
    ASSERT_TRUE(registry.Forget({"next", ""}).ok());
  }
  // The forged row is history with its date clamped to the migration.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT sequence, received_unix_seconds FROM "
                               "curves WHERE task_id = 'forged'",
                               -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(stmt, 0), 2);
  EXPECT_LE(sqlite3_column_double(stmt, 1),
            absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

// Forget drops the rows (history included) and puts back the newest curve of
// the same measurement that is left; the audit log keeps who did it.
std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The migration's source: read, never written (no probe row, no upgrade);
// an older schema is refused rather than upgraded; a missing file is not
// created.
TEST(SqliteStoreTest, OpenReadOnlyLeavesTheFileAsItIs) {
  const std::string path = TempPath("read-only.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto fence = (*store)->Lead();
    ASSERT_TRUE(fence.ok());
    monta::v1::NodeInfo node;
    node.set_name("a");
    ASSERT_TRUE((*store)->Commit(*fence, {NodeMutation(node)}).ok());
    (*store)->RecordDecision({}, {});
  }
  const std::string before = Bytes(path);
  ASSERT_GT(before.size(), 0u);
  {
    auto store = SqliteStore::OpenReadOnly(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto listed = (*store)->List();
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_EQ(listed->nodes.size(), 1u);
    EXPECT_EQ(*(*store)->DecisionCount(), 1);
    (*store)->RecordDecision({}, {});  // refused by SQLite, logged
    EXPECT_EQ(*(*store)->DecisionCount(), 1);
  }
  EXPECT_TRUE(Bytes(path) == before) << "the file changed";

  const std::string old_path = TempPath("read-only-old.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(old_path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, kOldSchema, nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const std::string old_before = Bytes(old_path);
  auto old = SqliteStore::OpenReadOnly(old_path);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.status().message().find("older schema"), std::string::npos)
      << old.status();
  EXPECT_TRUE(Bytes(old_path) == old_before);

  const std::string missing = TempPath("read-only-missing.db");
  auto none = SqliteStore::OpenReadOnly(missing);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  struct stat st {};
  EXPECT_NE(stat(missing.c_str(), &st), 0) << "created";
}

TEST(SqliteStoreTest, ForgottenCurvesLeaveTheDatabaseAndTheAuditLogSaysWho) {
  const std::string path = TempPath("forget.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    registry::Registry registry{registry::RegistryOptions{}};
    const auto writer = Wire(**store, registry);
    RegisterAB(registry, Instant::Now());
    ASSERT_TRUE(registry.AddCurve(Curve("honest", 1024)).ok());
    ASSERT_TRUE(registry.AddCurve(Curve("forged", 1024)).ok());
    EXPECT_EQ(registry.Get("a", Instant::Now())->curves(0).task_id(), "forged");
    auto reply = registry.Forget({"forged", ""});
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->restored_size(), 1);
    EXPECT_EQ(reply->restored(0).task_id(), "honest");
    EXPECT_EQ(reply->restored(0).sequence(), 1u);
    EXPECT_EQ(registry.Get("a", Instant::Now())->curves(0).task_id(), "honest");
    EXPECT_EQ(*(*store)->CurveCount(), 1);
    (*store)->RecordAudit({"operator alice", "forget_curves", "task forged",
                           "dropped 1 curve(s)"});
    EXPECT_EQ((*store)->write_errors(), 0);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok());
  registry::Registry registry{registry::RegistryOptions{}};
  ASSERT_TRUE(LoadInto(**store, registry).ok());
  EXPECT_EQ(registry.Get("b", Instant::Now())->curves(0).task_id(), "honest");
  auto audit = (*store)->AuditEntries();
  ASSERT_TRUE(audit.ok()) << audit.status();
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].identity, "operator alice");
  EXPECT_EQ((*audit)[0].target, "task forged");
}

}  // namespace
}  // namespace monta::store
