// Durable planner state in an embedded SQLite file (WAL): the nodes the
// registry knows, the history of every measured curve (with the planner's
// sequence: the order evidence is judged by), decisions, verifications and
// the audit log of what operators changed, the benchmark task queue
// (TaskStore, bench_tasks) and what verify runs taught the planner
// (KnowledgeStore, plan_knowledge). A restarted planner reloads nodes
// and curves, so agents resume with their heartbeats and measurements keep
// their evidence.
//
// The registry's state goes through the store seam (store.h), implemented for
// the single replica: the revision is a counter in store_meta committed with
// each transaction; the fence is a writer epoch in store_meta that Lead
// raises and every Commit compares in its transaction (so a second planner
// opened on the same file by mistake takes over and the first one's writes
// are refused, never interleaved); List holds only the newest revision; a
// watch sees the commits of this process (the newest kWatchHistory), from
// the revision the file had when it opened.
#ifndef MONTA_SERVER_STORE_SQLITE_STORE_H_
#define MONTA_SERVER_STORE_SQLITE_STORE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/registry/registry.h"
#include "server/store/audit_log.h"
#include "server/store/decision_log.h"
#include "server/store/knowledge_store.h"
#include "server/store/store.h"
#include "server/store/task_store.h"

struct sqlite3;

namespace monta::store {

class SqliteStore : public Store,
                    public TaskStore,
                    public KnowledgeStore,
                    public DecisionLog,
                    public AuditLog {
 public:
  // Commits a watch can still be started before (or fall behind by).
  // Bounded low: nothing watches a single replica but tests and tools, and
  // a commit of a registration storm holds whole topologies.
  static constexpr size_t kWatchHistory = 256;
  // The commits watches read (sqlite_store.cc).
  class History;

  // Opens (creating if needed) the database at `path` and its schema, and
  // refuses one the planner could not keep: each error is one line naming
  // `path` and the problem. FAILED_PRECONDITION: the path is a directory, its
  // directory is missing or not writable (SQLite creates its journal and WAL
  // files there: said so, never called corrupt), or the file is read-only (a
  // write probe fails);
  // DATA_LOSS: not a SQLite database, or `PRAGMA quick_check` finds it corrupt
  // (see MoveAside); UNAVAILABLE: anything else SQLite refuses. A database of
  // an older schema is migrated (Migrate).
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path);

  // Opens an existing database without writing to it (SQLITE_OPEN_READONLY:
  // no schema, no write probe, no upgrade; the file's bytes stay as they
  // are): the source of monta-planner --migrate_from_sqlite. Checked like
  // Open (quick_check); NOT_FOUND when missing; FAILED_PRECONDITION for an
  // older schema (it would need Migrate). Writes to it fail.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> OpenReadOnly(
      const std::string& path);

  // Renames the database at `path` (and its -wal and -shm files) aside to
  // "<path>.corrupt-<UTC time>" so a fresh one can be created there; returns
  // the new name of the main file. The old file is kept for inspection.
  static absl::StatusOr<std::string> MoveAside(const std::string& path);

  // Told of every failed write (status not OK, `operation` one of "node",
  // "curve" (registry::ChangeOperation of a Commit's failing mutation),
  // "task", "knowledge", "decision", "verification", "audit") and of the
  // first successful write after a failure (status OK), so health can follow
  // the store. Called under the store's lock (in write order): it must not
  // call back into the store. Null stops calls.
  using WriteListener = std::function<void(const std::string& operation,
                                           const absl::Status& status)>;
  void SetWriteListener(WriteListener listener);
  ~SqliteStore() override;

  // Store. Commit's mutations: kNode upserts the node (without its curves);
  // kCurve appends the curve; kNodeRemoved deletes the node's row and every
  // curve row that names it; kCurvesForgotten deletes every curve row it
  // selects (all of the task's, or all naming the node) and answers the
  // newest row left of each of its measurements. A failed Commit is reported
  // on stderr, counted and told to the listener, like every write.
  absl::StatusOr<Fence> Lead() override;
  absl::StatusOr<Snapshot> List(int64_t revision = 0) override;
  absl::StatusOr<int64_t> NewestRevision() override;
  absl::StatusOr<Committed> Commit(
      const Fence& fence, const std::vector<Mutation>& mutations) override;
  absl::StatusOr<std::unique_ptr<ChangeWatch>> Watch(
      int64_t after_revision) override;

  // TaskStore: the bench_tasks table, one transaction per call comparing the
  // writer epoch as Commit does (outside the revision and the watch). A
  // failed write is reported like every write ("task").
  absl::Status WriteTasks(const Fence& fence,
                          const TaskWrites& writes) override;
  absl::StatusOr<std::vector<std::string>> ListTasks() override;
  absl::StatusOr<std::optional<std::string>> GetTask(
      const std::string& task_id) override;

  // KnowledgeStore: the plan_knowledge table, as the task queue's (one
  // fenced transaction per call; failures reported as "knowledge"). Lists
  // carry no revision and nothing watches: one planner reads its own file.
  absl::Status WriteKnowledge(const Fence& fence,
                              const KnowledgeWrites& writes) override;
  absl::StatusOr<KnowledgeList> ListKnowledge() override;
  absl::StatusOr<std::unique_ptr<KnowledgeWatch>> WatchKnowledge(
      int64_t after_revision) override;

  // AuditLog: appends to the audit_log table, synchronously (the insert is
  // done before `stored` is told). A failed insert is logged and counted
  // (WriteDone) and `stored` still told OK: with SQLite the planner answers
  // from memory when its file refuses a write, as before issue 20.
  void RecordAudit(const AuditEntry& entry, RecordDone stored) override;
  void RecordAudit(const AuditEntry& entry);
  // The audit log, oldest first (tests, inspection).
  absl::StatusOr<std::vector<AuditEntry>> AuditEntries();

  // DecisionLog: appends the decision (request and reply kept whole), as
  // RecordAudit does (synchronous; `stored` told OK after the insert).
  void RecordDecision(const monta::v1::StrategyRequest& request,
                      const monta::v1::StrategyReply& reply,
                      RecordDone stored) override;
  void RecordVerification(const monta::v1::VerifyRequest& request,
                          const monta::v1::VerifyReply& reply,
                          RecordDone stored) override;
  void RecordDecision(const monta::v1::StrategyRequest& request,
                      const monta::v1::StrategyReply& reply);
  void RecordVerification(const monta::v1::VerifyRequest& request,
                          const monta::v1::VerifyReply& reply);

  // Deletes the decisions made before `older_than` (the stored wall time:
  // retention is about records, not about a lease) and then all but the
  // newest `max_rows`. Returns how many rows went.
  absl::StatusOr<int64_t> PruneDecisions(absl::Time older_than,
                                         int64_t max_rows);

  // Reading the whole file, to copy it elsewhere (monta-planner
  // --migrate_from_sqlite). Each stops at the first error of `visit`, or of
  // reading, and returns it.
  //
  // Every curve row, history included, oldest sequence first.
  absl::Status ForEachCurve(
      const std::function<absl::Status(monta::v1::BandwidthCurve)>& visit);
  // One row of the decisions, verifications or audit_log table.
  enum class LogTable { kDecisions, kVerifications, kAudit };
  struct LogRow {
    int64_t id = 0;
    double at_unix_seconds = 0;  // decided / verified / at
    // kDecisions: the StrategyRequest and StrategyReply (serialized);
    // kVerifications: the VerifyRequest and VerifyReply; kAudit: identity,
    // action, target, detail.
    std::vector<std::string> fields;
  };
  // The table's rows, oldest (lowest id) first.
  absl::Status ForEachLogRow(LogTable table,
                             const std::function<absl::Status(LogRow)>& visit);
  static const char* LogTableName(LogTable table);

  // Rows in the curve and decision history.
  absl::StatusOr<int64_t> CurveCount();
  absl::StatusOr<int64_t> DecisionCount();
  absl::StatusOr<int64_t> VerificationCount();
  int64_t write_errors() const;
  // The database file, as Open was given it.
  const std::string& path() const { return path_; }

 private:
  SqliteStore(sqlite3* db, std::string path);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> Count(const char* table);
  // The checks of Open after the file opened: writable, a database, intact.
  absl::Status CheckUsable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PRAGMA quick_check: DATA_LOSS when corrupt or not a database.
  absl::Status QuickCheck() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the curves table has the planner's sequence (issue 17's schema).
  absl::StatusOr<bool> HasCurveSequence() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings a database of an older schema up to this one, in one transaction:
  // curve rows without a planner sequence (before issue 17) get their row id
  // as sequence (the order the planner stored them in) and a received time of
  // their measured_at, but never later than now (a row dated in the future
  // is logged). Idempotent.
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails FAILED_PRECONDITION "fenced" unless `fence` is the writer epoch;
  // inside a transaction.
  absl::Status CheckFenceLocked(const Fence& fence)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A table of opaque records by id (bench_tasks, plan_knowledge): its name,
  // its id column, and what a record is called in errors.
  struct RecordTable {
    const char* name;
    const char* id;
    const char* what;
  };
  static const RecordTable kTaskRows;
  static const RecordTable kKnowledgeRows;
  // Puts and deletes `writes` in one transaction comparing the writer epoch.
  absl::Status WriteRowsLocked(const RecordTable& table, const Fence& fence,
                               const RecordWrites& writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every row of `table`, by id.
  absl::StatusOr<std::vector<KnowledgeRecord>> ListRows(
      const RecordTable& table) ABSL_LOCKS_EXCLUDED(mu_);
  // Commit's transaction; `operation` names the failing mutation's.
  absl::StatusOr<Committed> CommitLocked(const Fence& fence,
                                         const std::vector<Mutation>& mutations,
                                         const char** operation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One mutation, inside Commit's transaction; kCurvesForgotten appends the
  // newest rows left to `restored`.
  absl::Status Apply(const Mutation& mutation,
                     std::vector<monta::v1::BandwidthCurve>* restored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutNode(const monta::v1::NodeInfo& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendCurve(const monta::v1::BandwidthCurve& curve)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RemoveNode(const std::string& node_name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ForgetCurves(const registry::ForgetSelector& what,
                            const std::vector<std::string>& measurements,
                            std::vector<monta::v1::BandwidthCurve>* restored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // List's reads, inside its read transaction.
  absl::Status ReadNodes(Snapshot& snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadCurves(Snapshot& snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An integer of store_meta (0 when absent), and setting one.
  absl::StatusOr<int64_t> MetaInt(const char* key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetMetaInt(const char* key, int64_t value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest row of `measurement`, if any.
  std::optional<monta::v1::BandwidthCurve> NewestCurve(
      const std::string& measurement) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and logs a failed write, tells the listener of failures and of the
  // first success after one.
  void WriteDone(const std::string& operation, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  int64_t write_errors_ ABSL_GUARDED_BY(mu_) = 0;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;  // the last write failed
  WriteListener listener_ ABSL_GUARDED_BY(mu_);
  // The commits watches read; shared with them, so a watch may outlive the
  // store (it ends CANCELLED).
  std::shared_ptr<History> history_;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_SQLITE_STORE_H_
