#include "server/store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/clock.h"
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
  curve BLOB NOT NULL,           -- monta.v1.BandwidthCurve
  -- Added by issue 17 (Migrate adds them to older files): the planner's order
  -- of evidence (the highest sequence of a measurement is current), and its
  -- wall time when the curve was formed (ages count from it).
  -- measured_unix_seconds above is the agent's claim, for display only.
  sequence INTEGER NOT NULL DEFAULT 0,
  received_unix_seconds REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS curves_by_nodes ON curves (nodes, collective, scope);
CREATE INDEX IF NOT EXISTS curves_by_measurement ON curves (measurement, id);
CREATE INDEX IF NOT EXISTS curves_by_task ON curves (task_id);
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
CREATE TABLE IF NOT EXISTS verifications (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  verified_unix_seconds REAL NOT NULL,
  job_name TEXT NOT NULL,
  nodes TEXT NOT NULL,             -- comma-separated, rank order
  task_id TEXT NOT NULL,
  regret_ratio REAL NOT NULL,      -- measured(chosen) / measured(best) - 1
  median_error_ratio REAL NOT NULL,
  request BLOB NOT NULL,           -- monta.v1.VerifyRequest
  reply BLOB NOT NULL              -- monta.v1.VerifyReply
);
-- The benchmark task queue (server/bench/task_record.h), by task id.
CREATE TABLE IF NOT EXISTS bench_tasks (
  task_id TEXT PRIMARY KEY,
  record BLOB NOT NULL
);
-- What verify runs taught the planner (knowledge_store.h: each node set's
-- calibration and runs, the newest verify reply per job), by id. Added after
-- bench_tasks: an older file gains it when a planner opens it.
CREATE TABLE IF NOT EXISTS plan_knowledge (
  id TEXT PRIMARY KEY,
  record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS store_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at_unix_seconds REAL NOT NULL,
  identity TEXT NOT NULL,          -- "operator alice", from the certificate
  action TEXT NOT NULL,            -- "forget_curves"
  target TEXT NOT NULL,            -- "task bench-...", "node node-b"
  detail TEXT NOT NULL             -- what it changed
);
)sql";

// Open's write probe: an existing database with its schema would otherwise be
// opened without a single write, and a read-only one would fail only later.
constexpr const char* kWriteProbe =
    "INSERT OR REPLACE INTO store_meta (key, value) "
    "VALUES ('opened_unix_seconds', strftime('%s', 'now'));";

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

// The status code of the connection's last error: a damaged file is DATA_LOSS
// (the planner may move it aside), an unwritable one FAILED_PRECONDITION.
absl::StatusCode CodeOf(sqlite3* db) {
  switch (sqlite3_errcode(db)) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kUnavailable;
  }
}

// The directory `path` is in ("." for a bare name).
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "."
         : slash == 0               ? "/"
                                    : path.substr(0, slash);
}

// Whether this process may write `path` (the effective ids, as SQLite's
// open() is checked; a read-only mount says no to root too); errno on no.
bool Writable(const std::string& path) {
  return faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0;
}

// Refuses a path SQLite would fail on with a vague "unable to open database
// file" or a misleading "not a database": a directory, a file in a directory
// that does not exist, a read-only file, or a directory SQLite cannot create
// its journal and WAL files in (a writable file there is no help: it is not
// corrupt, and moving it aside would fail too).
absl::Status CheckPath(const std::string& path) {
  struct stat st {};
  const std::string dir = DirectoryOf(path);
  const bool exists = stat(path.c_str(), &st) == 0;
  if (exists) {
    if (S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--db ", path, ": is a directory, not a database file"));
    }
    if (!Writable(path)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--db ", path, ": read-only: the file cannot be opened for writing (",
          std::strerror(errno), ")"));
    }
  } else if (errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("--db ", path, ": ", std::strerror(errno)));
  }
  if (stat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--db ", path, ": directory ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--db ", path, ": ", dir, " is not a directory"));
  }
  if (!Writable(dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--db ", path, ": directory ", dir, " is not writable (",
        std::strerror(errno), "): SQLite needs to create ",
        exists ? "its journal and WAL files (<db>-wal, <db>-shm) beside the "
                 "database"
               : "the database there",
        "; make the directory writable or put --db in one that is"));
  }
  return absl::OkStatus();
}

double NowSeconds() {
  return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
}

// The curve of a row whose columns from `first` on are sequence,
// received_unix_seconds and the curve blob; the columns are the planner's
// truth for the first two (a row from before issue 17 has neither in its
// blob).
absl::StatusOr<monta::v1::BandwidthCurve> CurveOfRow(sqlite3_stmt* row,
                                                     int first) {
  using google::protobuf::util::TimeUtil;
  monta::v1::BandwidthCurve curve;
  if (!curve.ParseFromArray(sqlite3_column_blob(row, first + 2),
                            sqlite3_column_bytes(row, first + 2))) {
    return absl::DataLossError("does not parse as monta.v1.BandwidthCurve");
  }
  curve.set_sequence(static_cast<uint64_t>(sqlite3_column_int64(row, first)));
  *curve.mutable_received_at() = TimeUtil::NanosecondsToTimestamp(
      static_cast<int64_t>(sqlite3_column_double(row, first + 1) * 1e9));
  return curve;
}

}  // namespace

// The tables of opaque records by id (WriteRowsLocked, ListRows).
const SqliteStore::RecordTable SqliteStore::kTaskRows{"bench_tasks", "task_id",
                                                      "task"};
const SqliteStore::RecordTable SqliteStore::kKnowledgeRows{
    "plan_knowledge", "id", "knowledge record"};

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path) {
  if (absl::Status usable = CheckPath(path); !usable.ok()) return usable;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("--db ", path, ": cannot open: ", message));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  absl::MutexLock lock(&store->mu_);
  if (absl::Status usable = store->CheckUsable(); !usable.ok()) {
    return absl::Status(usable.code(),
                        absl::StrCat("--db ", path, ": ", usable.message()));
  }
  if (absl::Status migrated = store->Migrate(); !migrated.ok()) {
    return absl::Status(migrated.code(),
                        absl::StrCat("--db ", path, ": ", migrated.message()));
  }
  absl::StatusOr<int64_t> revision = store->MetaInt("revision");
  if (!revision.ok()) {
    return absl::Status(
        revision.status().code(),
        absl::StrCat("--db ", path, ": ", revision.status().message()));
  }
  store->history_ = std::make_shared<History>(*revision);
  return store;
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::OpenReadOnly(
    const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": is a directory, not a database file"));
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) !=
      SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open read-only: ", message));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  absl::MutexLock lock(&store->mu_);
  absl::Status usable = store->QuickCheck();
  absl::StatusOr<bool> has_sequence = false;
  if (usable.ok()) has_sequence = store->HasCurveSequence();
  if (usable.ok() && !has_sequence.ok()) usable = has_sequence.status();
  if (usable.ok() && !*has_sequence) {
    usable = absl::FailedPreconditionError(
        "an older schema (curve rows without a planner sequence, before "
        "issue 17), and the file is opened read-only: start this version's "
        "planner on it once (--db) to upgrade it, then copy it");
  }
  absl::StatusOr<int64_t> revision =
      usable.ok() ? store->MetaInt("revision") : usable;
  if (!revision.ok()) {
    return absl::Status(revision.status().code(),
                        absl::StrCat(path, ": ", revision.status().message()));
  }
  store->history_ = std::make_shared<History>(*revision);
  return store;
}

absl::Status SqliteStore::CheckUsable() {
  // SQLite opens a file it may not write read-only without saying so.
  if (sqlite3_db_readonly(db_, "main") == 1) {
    return absl::FailedPreconditionError(
        "read-only: the file cannot be opened for writing");
  }
  if (absl::Status intact = QuickCheck(); !intact.ok()) return intact;
  // WAL: readers never block the writer; NORMAL sync is durable across process
  // crashes (the planner's failure mode), only a power loss can drop the last
  // commit.
  for (const char* sql :
       {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=NORMAL;",
        "PRAGMA busy_timeout=2000;", kSchema, kWriteProbe}) {
    if (absl::Status s = Exec(sql); !s.ok()) {
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        return absl::FailedPreconditionError(
            absl::StrCat("not writable: ", s.message()));
      }
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::QuickCheck() {
  // quick_check reads every page (not the index cross-checks of
  // integrity_check): a file with overwritten or missing pages is refused
  // rather than loaded as a partial state.
  std::vector<std::string> problems;
  {
    Statement check(db_, "PRAGMA quick_check(3);");
    int step =
        check.get() == nullptr ? SQLITE_ERROR : sqlite3_step(check.get());
    for (; step == SQLITE_ROW; step = sqlite3_step(check.get())) {
      const unsigned char* row = sqlite3_column_text(check.get(), 0);
      problems.push_back(row != nullptr ? reinterpret_cast<const char*>(row)
                                        : "");
    }
    if (step != SQLITE_DONE) {
      const absl::StatusCode code = CodeOf(db_);
      // Only a damaged file is called corrupt (and may be moved aside); one
      // SQLite cannot open or write is said so.
      return absl::Status(
          code, absl::StrCat(code == absl::StatusCode::kDataLoss
                                 ? "corrupt or not a SQLite database: "
                                 : "cannot be read: ",
                             sqlite3_errmsg(db_)));
    }
  }
  if (problems.size() != 1 || problems.front() != "ok") {
    return absl::DataLossError(absl::StrCat(
        "corrupt: PRAGMA quick_check: ",
        absl::StrReplaceAll(absl::StrJoin(problems, "; "), {{"\n", " "}})));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SqliteStore::HasCurveSequence() {
  Statement columns(db_, "PRAGMA table_info(curves);");
  if (columns.get() == nullptr) {
    return SqliteError(db_, "reading the curves table's columns");
  }
  bool has_sequence = false;
  while (sqlite3_step(columns.get()) == SQLITE_ROW) {
    const unsigned char* name = sqlite3_column_text(columns.get(), 1);
    if (name != nullptr &&
        std::string(reinterpret_cast<const char*>(name)) == "sequence") {
      has_sequence = true;
    }
  }
  return has_sequence;
}

absl::Status SqliteStore::Migrate() {
  absl::StatusOr<bool> has = HasCurveSequence();
  if (!has.ok()) return has.status();
  const bool has_sequence = *has;
  if (absl::Status s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
  absl::Status migrated = absl::OkStatus();
  if (!has_sequence) {
    migrated = Exec(
        "ALTER TABLE curves ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE curves ADD COLUMN received_unix_seconds REAL NOT NULL "
        "DEFAULT 0;");
  }
  const double now = NowSeconds();
  if (migrated.ok()) {
    // A row an agent dated in the future (its clock, or a forgery) once
    // outranked every later measurement; it is ordered by its row now.
    Statement future(db_,
                     "SELECT id, task_id, measured_unix_seconds FROM curves "
                     "WHERE sequence = 0 AND measured_unix_seconds > ?1");
    sqlite3_bind_double(future.get(), 1, now);
    while (future.get() != nullptr &&
           sqlite3_step(future.get()) == SQLITE_ROW) {
      const unsigned char* task = sqlite3_column_text(future.get(), 1);
      std::cerr << "monta-planner: sqlite: curve row "
                << sqlite3_column_int64(future.get(), 0) << " of task "
                << (task != nullptr ? reinterpret_cast<const char*>(task) : "")
                << " claims it was measured "
                << absl::FormatTime(
                       absl::FromUnixSeconds(static_cast<int64_t>(
                           sqlite3_column_double(future.get(), 2))),
                       absl::UTCTimeZone())
                << ", in the future; migrated: ordered by its row, its age "
                   "counted from now"
                << std::endl;
    }
    Statement update(db_,
                     "UPDATE curves SET sequence = id, received_unix_seconds "
                     "= MIN(measured_unix_seconds, ?1) WHERE sequence = 0");
    sqlite3_bind_double(update.get(), 1, now);
    if (update.get() == nullptr || sqlite3_step(update.get()) != SQLITE_DONE) {
      migrated = SqliteError(db_, "migrating curve rows");
    }
  }
  if (migrated.ok()) {
    migrated = Exec(
        "CREATE INDEX IF NOT EXISTS curves_by_sequence ON curves "
        "(measurement, sequence);"
        "INSERT OR REPLACE INTO store_meta (key, value) "
        "VALUES ('schema_version', '2');");
  }
  if (!migrated.ok()) {
    (void)Exec("ROLLBACK;");
    return migrated;
  }
  return Exec("COMMIT;");
}

absl::StatusOr<std::string> SqliteStore::MoveAside(const std::string& path) {
  const std::string aside = absl::StrCat(
      path, ".corrupt-",
      absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone()));
  if (std::rename(path.c_str(), aside.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--db ", path, ": cannot move it aside to ", aside, ": ",
                     std::strerror(errno)));
  }
  // The journal files belong to the old file: a fresh database must not
  // replay them.
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string from = path + suffix;
    const std::string to = aside + suffix;
    if (std::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("--db ", path, ": cannot move ", from, " aside to ", to,
                       ": ", std::strerror(errno)));
    }
  }
  return aside;
}

// The commits of this process, newest last, for watches: every revision
// after kept_after_ up to head_ is held.
class SqliteStore::History {
 public:
  explicit History(int64_t revision) : kept_after_(revision), head_(revision) {}

  void Append(Event event) {
    absl::MutexLock lock(&mu_);
    // Another writer committed in between (it took the fence since): the
    // revisions between are not known here, so no watch may skip them.
    if (event.revision != head_ + 1) {
      events_.clear();
      kept_after_ = event.revision - 1;
    }
    head_ = event.revision;
    events_.push_back(std::move(event));
    while (events_.size() > kWatchHistory) {
      kept_after_ = events_.front().revision;
      events_.pop_front();
    }
    cv_.notify_all();
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    cv_.notify_all();
  }

  // The commits after `*after` (moved on past them); see ChangeWatch::Next.
  absl::StatusOr<std::vector<Event>> Next(int64_t* after,
                                          absl::Duration timeout) {
    // Monotonic (WaitUntil): a wall clock step does not stretch the wait.
    const MonoTime deadline =
        MonoAfter(std::chrono::steady_clock::now(), timeout);
    absl::MutexLock lock(&mu_);
    while (!closed_ && *after >= kept_after_ && head_ <= *after) {
      if (WaitUntil(mu_, cv_, deadline)) break;
    }
    if (*after < kept_after_) {
      return absl::OutOfRangeError(absl::StrCat(
          "sqlite watch: revision ", *after + 1,
          " is no longer held (this process holds revisions ", kept_after_ + 1,
          "..", head_, "); list again and watch from its revision"));
    }
    std::vector<Event> out;
    for (const Event& event : events_) {
      if (event.revision > *after) out.push_back(event);
    }
    if (!out.empty()) {
      *after = out.back().revision;
      return out;
    }
    if (closed_) return absl::CancelledError("sqlite watch: the store closed");
    return absl::DeadlineExceededError("sqlite watch: no commit came");
  }

 private:
  absl::Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  int64_t kept_after_ ABSL_GUARDED_BY(mu_);
  int64_t head_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

class SqliteWatch : public ChangeWatch {
 public:
  SqliteWatch(std::shared_ptr<SqliteStore::History> history, int64_t after)
      : history_(std::move(history)), after_(after) {}
  absl::StatusOr<std::vector<Event>> Next(absl::Duration timeout) override {
    return history_->Next(&after_, timeout);
  }

 private:
  const std::shared_ptr<SqliteStore::History> history_;
  int64_t after_;
};

}  // namespace

SqliteStore::SqliteStore(sqlite3* db, std::string path)
    : path_(std::move(path)), db_(db) {}

SqliteStore::~SqliteStore() {
  if (history_ != nullptr) history_->Close();
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::StatusOr<int64_t> SqliteStore::MetaInt(const char* key) {
  Statement stmt(db_,
                 "SELECT CAST(value AS INTEGER) FROM store_meta WHERE "
                 "key = ?1");
  if (stmt.get() == nullptr) return SqliteError(db_, "reading store_meta");
  stmt.BindText(1, key);
  const int step = sqlite3_step(stmt.get());
  if (step == SQLITE_ROW) return sqlite3_column_int64(stmt.get(), 0);
  if (step == SQLITE_DONE) return 0;
  return SqliteError(db_, absl::StrCat("reading store_meta ", key));
}

absl::Status SqliteStore::SetMetaInt(const char* key, int64_t value) {
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?1, "
                 "?2)");
  if (stmt.get() == nullptr) return SqliteError(db_, "writing store_meta");
  stmt.BindText(1, key);
  sqlite3_bind_int64(stmt.get(), 2, value);
  return sqlite3_step(stmt.get()) == SQLITE_DONE
             ? absl::OkStatus()
             : SqliteError(db_, absl::StrCat("writing store_meta ", key));
}

absl::StatusOr<Fence> SqliteStore::Lead() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
  absl::StatusOr<int64_t> epoch = MetaInt("writer_epoch");
  absl::Status status = epoch.status();
  if (status.ok()) status = SetMetaInt("writer_epoch", *epoch + 1);
  if (status.ok()) status = Exec("COMMIT;");
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  return Fence{*epoch + 1};
}

absl::StatusOr<Snapshot> SqliteStore::List(int64_t revision) {
  absl::MutexLock lock(&mu_);
  // One read transaction: the revision and the rows agree.
  if (absl::Status s = Exec("BEGIN;"); !s.ok()) return s;
  Snapshot snapshot;
  absl::StatusOr<int64_t> current = MetaInt("revision");
  absl::Status status = current.status();
  if (status.ok() && revision != 0 && revision != *current) {
    status = absl::OutOfRangeError(
        absl::StrCat("sqlite: revision ", revision,
                     " is not held: the SQLite store holds "
                     "only its newest, ",
                     *current, " (list at 0)"));
  }
  if (status.ok()) {
    snapshot.revision = *current;
    status = ReadNodes(snapshot);
  }
  if (status.ok()) status = ReadCurves(snapshot);
  (void)Exec(status.ok() ? "COMMIT;" : "ROLLBACK;");
  if (!status.ok()) return status;
  return snapshot;
}

absl::StatusOr<int64_t> SqliteStore::NewestRevision() {
  absl::MutexLock lock(&mu_);
  return MetaInt("revision");
}

absl::StatusOr<Committed> SqliteStore::Commit(
    const Fence& fence, const std::vector<Mutation>& mutations) {
  if (mutations.empty()) {
    return absl::InvalidArgumentError("mutations: expected at least one");
  }
  for (size_t i = 0; i < mutations.size(); ++i) {
    if (absl::Status s = ValidateMutation(mutations[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutations[", i, "]: ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  const char* operation = registry::ChangeOperation(mutations.front().kind);
  absl::StatusOr<Committed> committed =
      CommitLocked(fence, mutations, &operation);
  WriteDone(operation, committed.status());
  if (committed.ok()) history_->Append(Event{committed->revision, mutations});
  return committed;
}

absl::Status SqliteStore::CheckFenceLocked(const Fence& fence) {
  absl::StatusOr<int64_t> epoch = MetaInt("writer_epoch");
  if (!epoch.ok()) return epoch.status();
  if (fence.epoch < 1 || fence.epoch != *epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sqlite: fenced: the write's fence (epoch ", fence.epoch,
        ") is not the writer's (epoch ", *epoch,
        "): another planner opened this database since; nothing written"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::WriteTasks(const Fence& fence,
                                     const TaskWrites& writes) {
  if (absl::Status s = ValidateTaskWrites(writes); !s.ok()) return s;
  if (writes.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  absl::Status status = WriteRowsLocked(kTaskRows, fence, writes);
  WriteDone("task", status);
  return status;
}

absl::Status SqliteStore::WriteKnowledge(const Fence& fence,
                                         const KnowledgeWrites& writes) {
  if (absl::Status s = ValidateKnowledgeWrites(writes); !s.ok()) return s;
  if (writes.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  absl::Status status = WriteRowsLocked(kKnowledgeRows, fence, writes);
  WriteDone("knowledge", status);
  return status;
}

absl::Status SqliteStore::WriteRowsLocked(const RecordTable& table,
                                          const Fence& fence,
                                          const RecordWrites& writes) {
  if (absl::Status s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
  absl::Status status = CheckFenceLocked(fence);
  const std::string put =
      absl::StrCat("INSERT INTO ", table.name, " (", table.id, ", record) ",
                   "VALUES (?1, ?2) ON CONFLICT(", table.id,
                   ") DO UPDATE SET record = excluded.record");
  const std::string remove =
      absl::StrCat("DELETE FROM ", table.name, " WHERE ", table.id, " = ?1");
  for (const auto& [id, record] : writes) {
    if (!status.ok()) break;
    Statement stmt(db_, record.has_value() ? put.c_str() : remove.c_str());
    if (stmt.get() == nullptr) {
      status =
          SqliteError(db_, absl::StrCat("preparing a ", table.what, " write"));
      break;
    }
    stmt.BindText(1, id);
    if (record.has_value()) stmt.BindBlob(2, *record);
    if (sqlite3_step(stmt.get()) != SQLITE_DONE) {
      status = SqliteError(db_, absl::StrCat("writing ", table.what, " ", id));
    }
  }
  if (status.ok()) status = Exec("COMMIT;");
  if (!status.ok()) (void)Exec("ROLLBACK;");
  return status;
}

absl::StatusOr<std::vector<KnowledgeRecord>> SqliteStore::ListRows(
    const RecordTable& table) {
  absl::MutexLock lock(&mu_);
  std::vector<KnowledgeRecord> rows;
  {
    // A file opened read-only may predate the table: it holds none.
    Statement exists(db_,
                     "SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                     "name = ?1");
    if (exists.get() == nullptr) {
      return SqliteError(db_, absl::StrCat("looking up ", table.name));
    }
    exists.BindText(1, table.name);
    if (sqlite3_step(exists.get()) != SQLITE_ROW) return rows;
  }
  const std::string sql = absl::StrCat("SELECT ", table.id, ", record FROM ",
                                       table.name, " ORDER BY ", table.id);
  Statement stmt(db_, sql.c_str());
  if (stmt.get() == nullptr) {
    return SqliteError(db_, absl::StrCat("preparing a ", table.what, " list"));
  }
  int step;
  while ((step = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    const unsigned char* id = sqlite3_column_text(stmt.get(), 0);
    const void* blob = sqlite3_column_blob(stmt.get(), 1);
    const int bytes = sqlite3_column_bytes(stmt.get(), 1);
    rows.push_back(KnowledgeRecord{
        id == nullptr ? "" : reinterpret_cast<const char*>(id),
        std::string(static_cast<const char*>(blob),
                    blob == nullptr ? 0 : static_cast<size_t>(bytes))});
  }
  if (step != SQLITE_DONE) {
    return SqliteError(db_, absl::StrCat("listing ", table.what, "s"));
  }
  return rows;
}

absl::StatusOr<std::vector<std::string>> SqliteStore::ListTasks() {
  absl::StatusOr<std::vector<KnowledgeRecord>> rows = ListRows(kTaskRows);
  if (!rows.ok()) return rows.status();
  std::vector<std::string> records;
  records.reserve(rows->size());
  for (KnowledgeRecord& row : *rows) records.push_back(std::move(row.value));
  return records;
}

absl::StatusOr<std::optional<std::string>> SqliteStore::GetTask(
    const std::string& task_id) {
  if (absl::Status s = ValidateTaskId(task_id, "task id"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Statement stmt(db_, "SELECT record FROM bench_tasks WHERE task_id = ?1");
  if (stmt.get() == nullptr) return SqliteError(db_, "preparing a task read");
  stmt.BindText(1, task_id);
  const int step = sqlite3_step(stmt.get());
  if (step == SQLITE_DONE) return std::optional<std::string>();
  if (step != SQLITE_ROW) return SqliteError(db_, "reading task " + task_id);
  const void* blob = sqlite3_column_blob(stmt.get(), 0);
  const int bytes = sqlite3_column_bytes(stmt.get(), 0);
  return std::optional<std::string>(
      std::in_place, static_cast<const char*>(blob),
      blob == nullptr ? 0 : static_cast<size_t>(bytes));
}

absl::StatusOr<KnowledgeList> SqliteStore::ListKnowledge() {
  absl::StatusOr<std::vector<KnowledgeRecord>> rows = ListRows(kKnowledgeRows);
  if (!rows.ok()) return rows.status();
  KnowledgeList list;
  list.records = *std::move(rows);
  return list;
}

absl::StatusOr<std::unique_ptr<KnowledgeWatch>> SqliteStore::WatchKnowledge(
    int64_t) {
  return absl::UnimplementedError(
      "sqlite: one planner is the only reader of its knowledge: no watch");
}

absl::StatusOr<Committed> SqliteStore::CommitLocked(
    const Fence& fence, const std::vector<Mutation>& mutations,
    const char** operation) {
  if (absl::Status s = Exec("BEGIN IMMEDIATE;"); !s.ok()) return s;
  Committed committed;
  absl::Status status = CheckFenceLocked(fence);
  for (const Mutation& mutation : mutations) {
    if (!status.ok()) break;
    status = Apply(mutation, &committed.restored);
    if (!status.ok()) *operation = registry::ChangeOperation(mutation.kind);
  }
  absl::StatusOr<int64_t> revision = MetaInt("revision");
  if (status.ok()) status = revision.status();
  if (status.ok()) {
    committed.revision = *revision + 1;
    status = SetMetaInt("revision", committed.revision);
  }
  if (status.ok()) status = Exec("COMMIT;");
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  return committed;
}

absl::Status SqliteStore::Apply(
    const Mutation& mutation,
    std::vector<monta::v1::BandwidthCurve>* restored) {
  switch (mutation.kind) {
    case Mutation::Kind::kNode:
      return PutNode(mutation.node);
    case Mutation::Kind::kCurve:
      return AppendCurve(mutation.curve);
    case Mutation::Kind::kNodeRemoved:
      return RemoveNode(mutation.node_name);
    case Mutation::Kind::kCurvesForgotten:
      return ForgetCurves(mutation.forget, mutation.measurements, restored);
  }
  return absl::InvalidArgumentError("mutation: unknown kind");
}

absl::StatusOr<std::unique_ptr<ChangeWatch>> SqliteStore::Watch(
    int64_t after_revision) {
  if (after_revision < 0) {
    return absl::InvalidArgumentError("watch: after_revision must be >= 0");
  }
  return std::unique_ptr<ChangeWatch>(
      new SqliteWatch(history_, after_revision));
}

absl::Status SqliteStore::Exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::Status(CodeOf(db_), absl::StrCat("sqlite: ", message));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::ReadNodes(Snapshot& snapshot) {
  Statement node_rows(db_, "SELECT name, info FROM nodes ORDER BY name");
  if (node_rows.get() == nullptr) return SqliteError(db_, "reading nodes");
  int step = SQLITE_ROW;
  while ((step = sqlite3_step(node_rows.get())) == SQLITE_ROW) {
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
    snapshot.nodes.push_back(std::move(node));
  }
  // A read error ends the loop too: a partial state must not load silently.
  if (step != SQLITE_DONE) {
    return absl::Status(CodeOf(db_), absl::StrCat("sqlite: reading nodes: ",
                                                  sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::ReadCurves(Snapshot& snapshot) {
  // Only the newest row of each measurement (by the planner's sequence):
  // start-up reads what the registry keeps, not the whole history.
  Statement curve_rows(
      db_,
      "SELECT c.id, c.sequence, c.received_unix_seconds, c.curve FROM curves "
      "c JOIN (SELECT measurement, MAX(sequence) AS newest FROM curves GROUP "
      "BY measurement) m ON c.measurement = m.measurement AND c.sequence = "
      "m.newest ORDER BY c.sequence");
  if (curve_rows.get() == nullptr) return SqliteError(db_, "reading curves");
  int step = SQLITE_ROW;
  while ((step = sqlite3_step(curve_rows.get())) == SQLITE_ROW) {
    absl::StatusOr<monta::v1::BandwidthCurve> curve =
        CurveOfRow(curve_rows.get(), 1);
    if (!curve.ok()) {
      return absl::DataLossError(absl::StrCat(
          "sqlite: curve row ", sqlite3_column_int64(curve_rows.get(), 0), ": ",
          curve.status().message()));
    }
    snapshot.curves.push_back(*std::move(curve));
  }
  if (step != SQLITE_DONE) {
    return absl::Status(CodeOf(db_), absl::StrCat("sqlite: reading curves: ",
                                                  sqlite3_errmsg(db_)));
  }
  Statement highest(db_, "SELECT MAX(sequence) FROM curves");
  if (highest.get() != nullptr && sqlite3_step(highest.get()) == SQLITE_ROW) {
    snapshot.max_curve_sequence =
        static_cast<uint64_t>(sqlite3_column_int64(highest.get(), 0));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::PutNode(const monta::v1::NodeInfo& node) {
  monta::v1::NodeInfo copy = node;
  copy.clear_curves();  // kept in their own table
  Statement stmt(db_,
                 "INSERT INTO nodes (name, info, updated_unix_seconds) VALUES "
                 "(?1, ?2, ?3) "
                 "ON CONFLICT(name) DO UPDATE SET info = excluded.info, "
                 "updated_unix_seconds = excluded.updated_unix_seconds");
  if (stmt.get() == nullptr) {
    return SqliteError(db_, "preparing node upsert");
  }
  stmt.BindText(1, node.name());
  stmt.BindBlob(2, copy.SerializeAsString());
  sqlite3_bind_double(stmt.get(), 3, NowSeconds());
  return sqlite3_step(stmt.get()) == SQLITE_DONE
             ? absl::OkStatus()
             : SqliteError(db_, "writing node " + node.name());
}

absl::Status SqliteStore::AppendCurve(const monta::v1::BandwidthCurve& curve) {
  using google::protobuf::util::TimeUtil;
  const double measured =
      curve.has_measured_at()
          ? TimeUtil::TimestampToNanoseconds(curve.measured_at()) / 1e9
          : NowSeconds();
  const double received =
      curve.has_received_at()
          ? TimeUtil::TimestampToNanoseconds(curve.received_at()) / 1e9
          : NowSeconds();
  Statement stmt(
      db_,
      "INSERT INTO curves (task_id, nodes, collective, scope, strategy, "
      "measured_unix_seconds, measurement, curve, sequence, "
      "received_unix_seconds) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  if (stmt.get() == nullptr) {
    return SqliteError(db_, "preparing curve insert");
  }
  stmt.BindText(1, curve.task_id());
  stmt.BindText(2, absl::StrJoin(curve.nodes(), ","));
  sqlite3_bind_int(stmt.get(), 3, curve.collective());
  sqlite3_bind_int(stmt.get(), 4, curve.scope());
  stmt.BindText(5, CurveStrategyName(curve.strategy_kind()));
  sqlite3_bind_double(stmt.get(), 6, measured);
  stmt.BindText(7, registry::CurveKey(curve));
  stmt.BindBlob(8, curve.SerializeAsString());
  sqlite3_bind_int64(stmt.get(), 9, static_cast<int64_t>(curve.sequence()));
  sqlite3_bind_double(stmt.get(), 10, received);
  return sqlite3_step(stmt.get()) == SQLITE_DONE
             ? absl::OkStatus()
             : SqliteError(db_, "writing curve of task " + curve.task_id());
}

void SqliteStore::RecordDecision(const monta::v1::StrategyRequest& request,
                                 const monta::v1::StrategyReply& reply,
                                 RecordDone stored) {
  RecordDecision(request, reply);
  stored(absl::OkStatus());
}

void SqliteStore::RecordVerification(const monta::v1::VerifyRequest& request,
                                     const monta::v1::VerifyReply& reply,
                                     RecordDone stored) {
  RecordVerification(request, reply);
  stored(absl::OkStatus());
}

void SqliteStore::RecordAudit(const AuditEntry& entry, RecordDone stored) {
  RecordAudit(entry);
  stored(absl::OkStatus());
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
    WriteDone("decision", SqliteError(db_, "preparing decision insert"));
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
  WriteDone("decision", sqlite3_step(stmt.get()) == SQLITE_DONE
                            ? absl::OkStatus()
                            : SqliteError(db_, "writing a decision"));
}

void SqliteStore::RecordVerification(const monta::v1::VerifyRequest& request,
                                     const monta::v1::VerifyReply& reply) {
  const std::string request_blob = request.SerializeAsString();
  const std::string reply_blob = reply.SerializeAsString();
  const std::string nodes = absl::StrJoin(reply.nodes(), ",");
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "INSERT INTO verifications (verified_unix_seconds, job_name, "
                 "nodes, task_id, regret_ratio, median_error_ratio, request, "
                 "reply) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  if (stmt.get() == nullptr) {
    WriteDone("verification",
              SqliteError(db_, "preparing verification insert"));
    return;
  }
  sqlite3_bind_double(stmt.get(), 1, NowSeconds());
  stmt.BindText(2, request.request().job().name());
  stmt.BindText(3, nodes);
  stmt.BindText(4, reply.task().task_id());
  sqlite3_bind_double(stmt.get(), 5, reply.regret_ratio());
  sqlite3_bind_double(stmt.get(), 6, reply.median_error_ratio());
  stmt.BindBlob(7, request_blob);
  stmt.BindBlob(8, reply_blob);
  WriteDone("verification", sqlite3_step(stmt.get()) == SQLITE_DONE
                                ? absl::OkStatus()
                                : SqliteError(db_, "writing a verification"));
}

absl::StatusOr<int64_t> SqliteStore::VerificationCount() {
  return Count("verifications");
}

absl::Status SqliteStore::RemoveNode(const std::string& node_name) {
  // The node's row and every curve naming it ("nodes" is comma-separated): on
  // a restart they would name a node that no longer exists.
  Statement node(db_, "DELETE FROM nodes WHERE name = ?1");
  Statement curves(db_,
                   "DELETE FROM curves WHERE "
                   "',' || nodes || ',' LIKE '%,' || ?1 || ',%'");
  if (node.get() == nullptr || curves.get() == nullptr) {
    return SqliteError(db_, "preparing node removal");
  }
  node.BindText(1, node_name);
  curves.BindText(1, node_name);
  const bool done = sqlite3_step(node.get()) == SQLITE_DONE &&
                    sqlite3_step(curves.get()) == SQLITE_DONE;
  return done ? absl::OkStatus()
              : SqliteError(db_, "removing node " + node_name);
}

std::optional<monta::v1::BandwidthCurve> SqliteStore::NewestCurve(
    const std::string& measurement) {
  Statement row(db_,
                "SELECT sequence, received_unix_seconds, curve FROM curves "
                "WHERE measurement = ?1 ORDER BY sequence DESC LIMIT 1");
  if (row.get() == nullptr) return std::nullopt;
  row.BindText(1, measurement);
  if (sqlite3_step(row.get()) != SQLITE_ROW) return std::nullopt;
  absl::StatusOr<monta::v1::BandwidthCurve> curve = CurveOfRow(row.get(), 0);
  if (!curve.ok()) return std::nullopt;
  return *std::move(curve);
}

absl::Status SqliteStore::ForgetCurves(
    const registry::ForgetSelector& what,
    const std::vector<std::string>& measurements,
    std::vector<monta::v1::BandwidthCurve>* restored) {
  Statement drop(db_, !what.task_id.empty()
                          ? "DELETE FROM curves WHERE task_id = ?1"
                          : "DELETE FROM curves WHERE "
                            "',' || nodes || ',' LIKE '%,' || ?1 || ',%'");
  if (drop.get() == nullptr) {
    return SqliteError(db_, "preparing curve removal");
  }
  drop.BindText(1, !what.task_id.empty() ? what.task_id : what.node_name);
  if (sqlite3_step(drop.get()) != SQLITE_DONE) {
    return SqliteError(db_, "removing curves");
  }
  for (const std::string& measurement : measurements) {
    if (auto curve = NewestCurve(measurement)) {
      restored->push_back(*std::move(curve));
    }
  }
  return absl::OkStatus();
}

void SqliteStore::RecordAudit(const AuditEntry& entry) {
  absl::MutexLock lock(&mu_);
  Statement stmt(db_,
                 "INSERT INTO audit_log (at_unix_seconds, identity, action, "
                 "target, detail) VALUES (?1, ?2, ?3, ?4, ?5)");
  if (stmt.get() == nullptr) {
    WriteDone("audit", SqliteError(db_, "preparing audit insert"));
    return;
  }
  sqlite3_bind_double(stmt.get(), 1, NowSeconds());
  stmt.BindText(2, entry.identity);
  stmt.BindText(3, entry.action);
  stmt.BindText(4, entry.target);
  stmt.BindText(5, entry.detail);
  WriteDone("audit", sqlite3_step(stmt.get()) == SQLITE_DONE
                         ? absl::OkStatus()
                         : SqliteError(db_, "writing the audit log"));
}

absl::StatusOr<std::vector<AuditEntry>> SqliteStore::AuditEntries() {
  absl::MutexLock lock(&mu_);
  Statement rows(db_,
                 "SELECT identity, action, target, detail FROM audit_log "
                 "ORDER BY id");
  if (rows.get() == nullptr) return SqliteError(db_, "reading the audit log");
  std::vector<AuditEntry> out;
  const auto text = [&](int column) {
    const unsigned char* t = sqlite3_column_text(rows.get(), column);
    return t != nullptr ? std::string(reinterpret_cast<const char*>(t)) : "";
  };
  while (sqlite3_step(rows.get()) == SQLITE_ROW) {
    out.push_back(AuditEntry{text(0), text(1), text(2), text(3)});
  }
  return out;
}

absl::StatusOr<int64_t> SqliteStore::PruneDecisions(absl::Time older_than,
                                                    int64_t max_rows) {
  absl::MutexLock lock(&mu_);
  // By age, then by count (the newest max_rows stay). Ids grow with time, so
  // both cut the oldest rows; the id index makes each one range delete.
  Statement by_age(db_,
                   "DELETE FROM decisions WHERE decided_unix_seconds < ?1");
  Statement by_count(db_,
                     "DELETE FROM decisions WHERE id <= (SELECT id FROM "
                     "decisions ORDER BY id DESC LIMIT 1 OFFSET ?1)");
  if (by_age.get() == nullptr || by_count.get() == nullptr) {
    const absl::Status error = SqliteError(db_, "preparing decision pruning");
    WriteDone("decision", error);
    return error;
  }
  sqlite3_bind_double(by_age.get(), 1,
                      absl::ToDoubleSeconds(older_than - absl::UnixEpoch()));
  sqlite3_bind_int64(by_count.get(), 1, std::max<int64_t>(0, max_rows));
  int64_t deleted = 0;
  for (sqlite3_stmt* stmt : {by_age.get(), by_count.get()}) {
    if (sqlite3_step(stmt) != SQLITE_DONE) {
      const absl::Status error = SqliteError(db_, "pruning decisions");
      WriteDone("decision", error);
      return error;
    }
    deleted += sqlite3_changes(db_);
  }
  WriteDone("decision", absl::OkStatus());
  return deleted;
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

absl::Status SqliteStore::ForEachCurve(
    const std::function<absl::Status(monta::v1::BandwidthCurve)>& visit) {
  absl::MutexLock lock(&mu_);
  Statement rows(db_,
                 "SELECT id, sequence, received_unix_seconds, curve FROM "
                 "curves ORDER BY sequence, id");
  if (rows.get() == nullptr) return SqliteError(db_, "reading curves");
  int step = SQLITE_ROW;
  while ((step = sqlite3_step(rows.get())) == SQLITE_ROW) {
    absl::StatusOr<monta::v1::BandwidthCurve> curve = CurveOfRow(rows.get(), 1);
    if (!curve.ok()) {
      return absl::DataLossError(absl::StrCat(
          "sqlite: curve row ", sqlite3_column_int64(rows.get(), 0), ": ",
          curve.status().message()));
    }
    if (absl::Status s = visit(*std::move(curve)); !s.ok()) return s;
  }
  return step == SQLITE_DONE
             ? absl::OkStatus()
             : absl::Status(CodeOf(db_),
                            absl::StrCat("sqlite: reading curves: ",
                                         sqlite3_errmsg(db_)));
}

const char* SqliteStore::LogTableName(LogTable table) {
  switch (table) {
    case LogTable::kDecisions:
      return "decisions";
    case LogTable::kVerifications:
      return "verifications";
    case LogTable::kAudit:
      return "audit_log";
  }
  return "";
}

absl::Status SqliteStore::ForEachLogRow(
    LogTable table, const std::function<absl::Status(LogRow)>& visit) {
  const char* sql = nullptr;
  switch (table) {
    case LogTable::kDecisions:
      sql =
          "SELECT id, decided_unix_seconds, request, reply FROM decisions "
          "ORDER BY id";
      break;
    case LogTable::kVerifications:
      sql =
          "SELECT id, verified_unix_seconds, request, reply FROM "
          "verifications ORDER BY id";
      break;
    case LogTable::kAudit:
      sql =
          "SELECT id, at_unix_seconds, identity, action, target, detail "
          "FROM audit_log ORDER BY id";
      break;
  }
  absl::MutexLock lock(&mu_);
  Statement rows(db_, sql);
  const std::string name = LogTableName(table);
  if (rows.get() == nullptr) return SqliteError(db_, "reading " + name);
  const int columns = sqlite3_column_count(rows.get());
  int step = SQLITE_ROW;
  while ((step = sqlite3_step(rows.get())) == SQLITE_ROW) {
    LogRow row;
    row.id = sqlite3_column_int64(rows.get(), 0);
    row.at_unix_seconds = sqlite3_column_double(rows.get(), 1);
    for (int c = 2; c < columns; ++c) {
      const void* bytes = sqlite3_column_blob(rows.get(), c);
      const int size = sqlite3_column_bytes(rows.get(), c);
      row.fields.emplace_back(
          bytes != nullptr ? static_cast<const char*>(bytes) : "",
          static_cast<size_t>(size));
    }
    if (absl::Status s = visit(std::move(row)); !s.ok()) return s;
  }
  return step == SQLITE_DONE
             ? absl::OkStatus()
             : absl::Status(CodeOf(db_),
                            absl::StrCat("sqlite: reading ", name, ": ",
                                         sqlite3_errmsg(db_)));
}

absl::StatusOr<int64_t> SqliteStore::DecisionCount() {
  return Count("decisions");
}

void SqliteStore::WriteDone(const std::string& operation,
                            const absl::Status& status) {
  if (status.ok()) {
    if (!failing_) return;
    failing_ = false;
    std::cerr << "monta-planner: sqlite: writes succeed again (" << operation
              << ")" << std::endl;
  } else {
    ++write_errors_;
    failing_ = true;
    std::cerr << "monta-planner: " << status << std::endl;
  }
  if (listener_) listener_(operation, status);
}

void SqliteStore::SetWriteListener(WriteListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

int64_t SqliteStore::write_errors() const {
  absl::MutexLock lock(&mu_);
  return write_errors_;
}

}  // namespace monta::store
