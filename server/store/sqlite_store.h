// Durable planner state in an embedded SQLite file (WAL): the nodes the
// registry knows, the history of every measured curve (with the planner's
// sequence: the order evidence is judged by), decisions, verifications and
// the audit log of what operators changed. A restarted planner reloads nodes
// and curves, so agents resume with their heartbeats and measurements keep
// their evidence.
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

struct sqlite3;

namespace monta::store {

class SqliteStore : public registry::RegistryObserver,
                    public DecisionLog,
                    public AuditLog {
 public:
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

  // Renames the database at `path` (and its -wal and -shm files) aside to
  // "<path>.corrupt-<UTC time>" so a fresh one can be created there; returns
  // the new name of the main file. The old file is kept for inspection.
  static absl::StatusOr<std::string> MoveAside(const std::string& path);

  // Told of every failed write (status not OK, `operation` one of "node",
  // "curve", "decision") and of the first successful write after a failure
  // (status OK), so health can follow the store. Called under the store's lock
  // (in write order): it must not call back into the store. Null stops calls.
  using WriteListener = std::function<void(const std::string& operation,
                                           const absl::Status& status)>;
  void SetWriteListener(WriteListener listener);
  ~SqliteStore() override;

  // Restores every stored node (without a live lease) and the newest curve of
  // each measurement (registry::CurveKey, the highest sequence; the agents'
  // measured_at plays no part) with its sequence and received_at; the older
  // rows stay as history. Call it before making this store the registry's
  // observer. A stored curve the registry refuses (its node is no longer
  // stored: the row is history only) is logged and reported to
  // `on_discarded("load_curve")` when set.
  absl::Status LoadInto(
      registry::Registry& registry,
      const std::function<void(const std::string& site)>& on_discarded = {});

  // RegistryObserver: upserts the node (without its curves); appends the curve.
  // Write failures are reported on stderr and counted, never thrown: the
  // planner keeps serving from memory.
  void NodeChanged(const monta::v1::NodeInfo& node) override;
  void CurveAdded(const monta::v1::BandwidthCurve& curve) override;
  // Deletes the node's row and every curve row that names it.
  void NodeRemoved(const std::string& node_name) override;
  // Deletes every curve row `what` selects (all of the task's, or all naming
  // the node) and returns the newest row left of each of `measurements`.
  std::vector<monta::v1::BandwidthCurve> CurvesForgotten(
      const registry::ForgetSelector& what,
      const std::vector<std::string>& measurements) override;

  // AuditLog: appends to the audit_log table.
  void RecordAudit(const AuditEntry& entry) override;
  // The audit log, oldest first (tests, inspection).
  absl::StatusOr<std::vector<AuditEntry>> AuditEntries();

  // DecisionLog: appends the decision (request and reply kept whole).
  void RecordDecision(const monta::v1::StrategyRequest& request,
                      const monta::v1::StrategyReply& reply) override;
  void RecordVerification(const monta::v1::VerifyRequest& request,
                          const monta::v1::VerifyReply& reply) override;

  // Deletes the decisions made before `older_than` (the stored wall time:
  // retention is about records, not about a lease) and then all but the
  // newest `max_rows`. Returns how many rows went.
  absl::StatusOr<int64_t> PruneDecisions(absl::Time older_than,
                                         int64_t max_rows);

  // Rows in the curve and decision history.
  absl::StatusOr<int64_t> CurveCount();
  absl::StatusOr<int64_t> DecisionCount();
  absl::StatusOr<int64_t> VerificationCount();
  int64_t write_errors() const;

 private:
  explicit SqliteStore(sqlite3* db);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> Count(const char* table);
  // The checks of Open after the file opened: writable, a database, intact.
  absl::Status CheckUsable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings a database of an older schema up to this one, in one transaction:
  // curve rows without a planner sequence (before issue 17) get their row id
  // as sequence (the order the planner stored them in) and a received time of
  // their measured_at, but never later than now (a row dated in the future
  // is logged). Idempotent.
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest row of `measurement`, if any.
  std::optional<monta::v1::BandwidthCurve> NewestCurve(
      const std::string& measurement) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and logs a failed write, tells the listener of failures and of the
  // first success after one.
  void WriteDone(const std::string& operation, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  int64_t write_errors_ ABSL_GUARDED_BY(mu_) = 0;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;  // the last write failed
  WriteListener listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_SQLITE_STORE_H_
