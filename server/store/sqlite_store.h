// Durable planner state in an embedded SQLite file (WAL): the nodes the
// registry knows and the history of every measured curve. A restarted planner
// reloads both, so agents resume with their heartbeats and measurements keep
// their evidence.
#ifndef MONTA_SERVER_STORE_SQLITE_STORE_H_
#define MONTA_SERVER_STORE_SQLITE_STORE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/registry/registry.h"
#include "server/store/decision_log.h"

struct sqlite3;

namespace monta::store {

class SqliteStore : public registry::RegistryObserver, public DecisionLog {
 public:
  // Opens (creating if needed) the database at `path` and its schema.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path);
  ~SqliteStore() override;

  // Restores every stored node (without a live lease) and the newest curve of
  // each measurement (registry::CurveKey); the older rows stay as history. Call
  // it before making this store the registry's observer, or the rows are
  // written again. A stored curve the registry refuses (its node is no longer
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

  // DecisionLog: appends the decision (request and reply kept whole).
  void RecordDecision(const monta::v1::StrategyRequest& request,
                      const monta::v1::StrategyReply& reply) override;

  // Rows in the curve and decision history.
  absl::StatusOr<int64_t> CurveCount();
  absl::StatusOr<int64_t> DecisionCount();
  int64_t write_errors() const;

 private:
  explicit SqliteStore(sqlite3* db);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> Count(const char* table);
  // Counts a failed write and logs it with SQLite's message; the store's
  // writers never fail their caller (the registry stays authoritative).
  void WriteFailed(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  int64_t write_errors_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_SQLITE_STORE_H_
