#include "server/store/sqlite_store.h"

#include <sqlite3.h>

#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/proto_names.h"
#include "google/protobuf/util/time_util.h"

namespace monta::store {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS nodes (
  name TEXT PRIMARY KEY,
  info BLOB NOT NULL,            -- monta.v1.NodeInfo without curves
  updated_unix_seconds REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS curves (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id TEXT NOT NULL,
  nodes TEXT NOT NULL,           -- comma-separated, sorted
  collective INTEGER NOT NULL,
  scope INTEGER NOT NULL,
  strategy TEXT NOT NULL,        -- CurveStrategyName: "" for a plain collective
  measured_unix_seconds REAL NOT NULL,
  measurement TEXT NOT NULL,     -- registry::CurveKey: rows with one key are one
                                 -- measurement's history, the newest is current
  curve BLOB NOT NULL            -- monta.v1.BandwidthCurve
);
CREATE INDEX IF NOT EXISTS curves_by_nodes ON curves (nodes, collective, scope);
CREATE INDEX IF NOT EXISTS curves_by_measurement ON curves (measurement, id);
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  decided_unix_seconds REAL NOT NULL,
  job_name TEXT NOT NULL,
  strategy TEXT NOT NULL,          -- chosen StrategyKind's short name
  chunks INTEGER NOT NULL,         -- K_eff of the chosen candidate
  speedup_over_flat REAL NOT NULL,
  total_seconds_per_layer REAL NOT NULL,
  evidence_source TEXT NOT NULL,   -- measured | profile | mixed
  request BLOB NOT NULL,           -- monta.v1.StrategyRequest
  reply BLOB NOT NULL              -- monta.v1.StrategyReply
);
)sql";

// Finalizes a statement on every path.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
      stmt_ = nullptr;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt* get() const { return stmt_; }
  // SQLITE_TRANSIENT: SQLite copies the bytes, so temporaries may be bound.
  void BindText(int index, const std::string& text) {
    sqlite3_bind_text(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT);
  }
  void BindBlob(int index, const std::string& bytes) {
    sqlite3_bind_blob(stmt_, index, bytes.data(), bytes.size(),
                      SQLITE_TRANSIENT);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

absl::Status SqliteError(sqlite3* db, const std::string& what) {
  return absl::InternalError(
      absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

double NowSeconds() {
  return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("--db ", path, ": cannot open: ", message));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db));
  absl::MutexLock lock(&store->mu_);
  // WAL: readers never block the writer; NORMAL sync is durable across process
  // crashes (the planner's failure mode), only a power loss can drop the last
  // commit.
  for (const char* sql :
       {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=NORMAL;",
        "PRAGMA busy_timeout=2000;", kSchema}) {
    if (absl::Status s = store->Exec(sql); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("--db ", path, ": ", s.message()));
    }
  }
  return store;
}

SqliteStore::SqliteStore(sqlite3* db) : db_(db) {}

SqliteStore::~SqliteStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status SqliteStore::Exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::LoadInto(
    registry::Registry& registry,
    const std::function<void(const std::string& site)>& on_discarded) {
  std::vector<monta::v1::NodeInfo> nodes;
  std::vector<monta::v1::BandwidthCurve> curves;
  {
    absl::MutexLock lock(&mu_);
    Statement node_rows(db_, "SELECT name, info FROM nodes ORDER BY name");
    if (node_rows.get() == nullptr) return SqliteError(db_, "reading nodes");
    while (sqlite3_step(node_rows.get()) == SQLITE_ROW) {
      monta::v1::NodeInfo node;
      const void* blob = sqlite3_column_blob(node_rows.get(), 1);
      const int size = sqlite3_column_bytes(node_rows.get(), 1);
      if (!node.ParseFromArray(blob, size)) {
        return absl::DataLossError(
            absl::StrCat("sqlite: node \"",
                         reinterpret_cast<const char*>(
                             sqlite3_column_text(node_rows.get(), 0)),
                         "\" does not parse as monta.v1.NodeInfo"));
      }
      nodes.push_back(std::move(node));
    }
    // Only the newest row of each measurement: start-up reads what the registry
    // keeps, not the whole history.
    Statement curve_rows(
        db_,
        "SELECT id, curve FROM curves WHERE id IN (SELECT MAX(id) FROM "
        "curves GROUP BY measurement) ORDER BY id");
    if (curve_rows.get() == nullptr) return SqliteError(db_, "reading curves");
    while (sqlite3_step(curve_rows.get()) == SQLITE_ROW) {
      monta::v1::BandwidthCurve curve;
      if (!curve.ParseFromArray(sqlite3_column_blob(curve_rows.get(), 1),
                                sqlite3_column_bytes(curve_rows.get(), 1))) {
        return absl::DataLossError(absl::StrCat(
            "sqlite: curve row ", sqlite3_column_int64(curve_rows.get(), 0),
            " does not parse as monta.v1.BandwidthCurve"));
      }
      curves.push_back(std::move(curve));
    }
  }
  for (const auto& node : nodes) registry.Restore(node);
  for (const auto& curve : curves) {
    // A curve naming a node that is no longer stored is history only.
    if (absl::Status added = registry.AddCurve(curve); !added.ok()) {
      std::cerr << "monta-planner: sqlite: curve of task " << curve.task_id()
                << " stays history only: " << added << std::endl;
      if (on_discarded) on_discarded("load_curve");
    }
  }
  return absl::OkStatus();
}

void SqliteStore::WriteFailed(const std::string& what) {
  ++write_errors_;
  std::cerr << "monta-planner: " << SqliteError(db_, what) << std::endl;
}

void SqliteStore::NodeChanged(const monta::v1::NodeInfo& node) {
  monta::v1::NodeInfo copy = node;
  copy.clear_curves();  // kept in their own table
  const std::string blob = copy.SerializeAsString();
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "INSERT INTO nodes (name, info, updated_unix_seconds) VALUES "
                 "(?1, ?2, ?3) "
                 "ON CONFLICT(name) DO UPDATE SET info = excluded.info, "
                 "updated_unix_seconds = excluded.updated_unix_seconds");
  if (stmt.get() == nullptr) {
    WriteFailed("preparing node upsert");
    return;
  }
  stmt.BindText(1, node.name());
  stmt.BindBlob(2, blob);
  sqlite3_bind_double(stmt.get(), 3, NowSeconds());
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
    WriteFailed("writing node " + node.name());
  }
}

void SqliteStore::CurveAdded(const monta::v1::BandwidthCurve& curve) {
  using google::protobuf::util::TimeUtil;
  const std::string blob = curve.SerializeAsString();
  const std::string nodes = absl::StrJoin(curve.nodes(), ",");
  const std::string measurement = registry::CurveKey(curve);
  const double measured =
      curve.has_measured_at()
          ? TimeUtil::TimestampToNanoseconds(curve.measured_at()) / 1e9
          : NowSeconds();
  absl::MutexLock lock(&mu_);
  Statement stmt(
      db_,
      "INSERT INTO curves (task_id, nodes, collective, scope, strategy, "
      "measured_unix_seconds, measurement, curve) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  if (stmt.get() == nullptr) {
    WriteFailed("preparing curve insert");
    return;
  }
  stmt.BindText(1, curve.task_id());
  stmt.BindText(2, nodes);
  sqlite3_bind_int(stmt.get(), 3, curve.collective());
  sqlite3_bind_int(stmt.get(), 4, curve.scope());
  const std::string strategy = CurveStrategyName(curve.strategy_kind());
  stmt.BindText(5, strategy);
  sqlite3_bind_double(stmt.get(), 6, measured);
  stmt.BindText(7, measurement);
  stmt.BindBlob(8, blob);
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
    WriteFailed("writing curve of task " + curve.task_id());
  }
}

void SqliteStore::RecordDecision(const monta::v1::StrategyRequest& request,
                                 const monta::v1::StrategyReply& reply) {
  const std::string request_blob = request.SerializeAsString();
  const std::string reply_blob = reply.SerializeAsString();
  const auto& chosen = reply.chosen();
  absl::MutexLock lock(&mu_);
  Statement stmt(
      db_,
      "INSERT INTO decisions (decided_unix_seconds, job_name, strategy, "
      "chunks, "
      "speedup_over_flat, total_seconds_per_layer, evidence_source, request, "
      "reply) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  if (stmt.get() == nullptr) {
    WriteFailed("preparing decision insert");
    return;
  }
  sqlite3_bind_double(stmt.get(), 1, NowSeconds());
  stmt.BindText(2, request.job().name());
  const std::string strategy = ShortName(chosen.kind());
  stmt.BindText(3, strategy);
  sqlite3_bind_int(stmt.get(), 4, chosen.chunks_effective());
  sqlite3_bind_double(stmt.get(), 5, chosen.speedup_over_flat());
  sqlite3_bind_double(stmt.get(), 6, chosen.total_seconds_per_layer());
  const std::string source = ShortName(reply.evidence().origin());
  stmt.BindText(7, source);
  stmt.BindBlob(8, request_blob);
  stmt.BindBlob(9, reply_blob);
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
    WriteFailed("writing a decision");
  }
}

absl::StatusOr<int64_t> SqliteStore::Count(const char* table) {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, absl::StrCat("SELECT COUNT(*) FROM ", table).c_str());
  if (stmt.get() == nullptr || sqlite3_step(stmt.get()) != SQLITE_ROW) {
    return SqliteError(db_, absl::StrCat("counting ", table));
  }
  return sqlite3_column_int64(stmt.get(), 0);
}

absl::StatusOr<int64_t> SqliteStore::CurveCount() { return Count("curves"); }

absl::StatusOr<int64_t> SqliteStore::DecisionCount() {
  return Count("decisions");
}

int64_t SqliteStore::write_errors() const {
  absl::MutexLock lock(&mu_);
  return write_errors_;
}

}  // namespace monta::store
