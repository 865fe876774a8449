// With --store=etcd, every replica's decisions (GetStrategy and admission),
// verifications and audit entries as etcd records (records.h; issue 20 item
// 3), instead of each replica's own SQLite file.
//
// Group commit: a record's caller is told it is stored (store::RecordDone)
// only once the etcd Txn holding it has landed, and the decision is answered
// only then. One thread sends: when nothing is in flight a record goes at once;
// the records that arrive while a Txn is in flight form the next Txn (within
// etcd's limits, records.h RecordTxn: 128 operations, 1.5 MiB). Each record
// has a deadline (commit_timeout from its call); a Txn is tried
// (attempt_timeout per member, the next member after a failure, a short
// backoff) until its earliest record's deadline, then its records are told
// UNAVAILABLE "not stored" (the client asks another replica). A full queue
// (records or bytes) refuses at once. Nothing is told OK unless etcd
// acknowledged its Txn; a Txn that timed out may still have landed (a record of
// a decision not answered: harmless, and the key is never reused).
//
// Not fenced: every replica writes its own records (followers answer
// GetStrategy and admission too), under keys naming it, so no two writers
// share a key and nothing a deposed leader writes can overwrite another's.
// Only retention (PruneDecisions) deletes, and the planner runs it on the
// leader alone.
#ifndef MONTA_SERVER_ETCD_STORE_RECORD_WRITER_H_
#define MONTA_SERVER_ETCD_STORE_RECORD_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/etcd/client.h"
#include "server/store/audit_log.h"
#include "server/store/decision_log.h"

namespace monta::etcd_store {

struct RecordWriterOptions {
  std::string prefix;  // the store's key prefix
  std::string origin;  // this replica's id (election::ValidateReplicaId)
  size_t max_queued_records = 10000;
  int64_t max_queued_bytes = 64 << 20;
  // How long a caller waits for its record's Txn at most
  // (--record_commit_timeout_seconds); an etcd leader election takes ~2 s.
  absl::Duration commit_timeout = absl::Seconds(5);
  // One Txn attempt at one member at most this long (then the next member,
  // within commit_timeout): a member that hangs (SIGSTOPped) costs this, not
  // the whole bound.
  absl::Duration attempt_timeout = absl::Seconds(2);
  // A record refused (its caller told so): "queue_full", "too_large" (more
  // than one Txn), "not_stored" (its Txn did not land by its deadline), or
  // "stopping" (the writer is being destroyed).
  std::function<void(const std::string& reason)> on_refused;
  // A Txn attempt that failed (retried while its records have time).
  std::function<void(const absl::Status&)> on_write_error;
  // A Txn landed: each of its records' seconds from its call to then.
  std::function<void(const std::vector<double>& commit_seconds)> on_committed;
  // Tests: runs on the writer's thread before each Txn attempt is sent.
  std::function<void()> before_send;
};

class RecordWriter : public store::DecisionLog, public store::AuditLog {
 public:
  // Starts the sending thread. `client` outlives the writer.
  RecordWriter(etcd::Client* client, RecordWriterOptions options);
  // Refuses new records ("stopping"), sends what is queued (each within its
  // caller's deadline, so at most about commit_timeout), tells every caller,
  // then joins the thread.
  ~RecordWriter() override;
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  void RecordDecision(const monta::v1::StrategyRequest& request,
                      const monta::v1::StrategyReply& reply,
                      store::RecordDone stored) override;
  void RecordVerification(const monta::v1::VerifyRequest& request,
                          const monta::v1::VerifyReply& reply,
                          store::RecordDone stored) override;
  void RecordAudit(const store::AuditEntry& entry,
                   store::RecordDone stored) override;

  // Deletes the decisions (of every replica) dated before `older_than`, then
  // all but the newest `max_records`, in deletes of at most kPruneBatch keys
  // and at most kPruneRounds of them per call (the rest next call). Returns
  // how many went. The leader's alone to call.
  static constexpr int64_t kPruneBatch = 1000;
  static constexpr int kPruneRounds = 20;
  absl::StatusOr<int64_t> PruneDecisions(absl::Time older_than,
                                         int64_t max_records);

  struct Stats {
    int64_t queued = 0;       // records waiting now (not in flight)
    int64_t written = 0;      // records in Txns etcd accepted (told OK)
    int64_t refused = 0;      // records whose callers were told not stored
    int64_t txns = 0;         // Txns etcd accepted
    int64_t failed_txns = 0;  // Txn attempts that failed
  };
  Stats stats() const;

 private:
  struct Pending {
    std::string key;
    std::string value;
    const char* what;  // "decision", "verification", "audit entry"
    MonoTime called;
    MonoTime deadline;
    store::RecordDone stored;
  };
  void Enqueue(const char* table, const char* what,
               const std::vector<std::string>& fields,
               store::RecordDone stored);
  void Run();
  // The queue's front, up to one Txn; those past their deadline go to
  // `expired` instead.
  std::vector<Pending> TakeBatch(std::vector<Pending>* expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `batch` as one Txn, tried until its earliest deadline; tells each
  // record's caller.
  void Commit(std::vector<Pending> batch);
  // Tells every record of `records` it was not stored (`reason` counted).
  void Refuse(std::vector<Pending> records, const std::string& reason,
              const absl::Status& why);
  // One bounded delete of the first `limit` keys of [key, range_end).
  absl::StatusOr<int64_t> DeleteFirst(const std::string& key,
                                      const std::string& range_end,
                                      int64_t limit);

  etcd::Client* const client_;
  const RecordWriterOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_n_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace monta::etcd_store

#endif  // MONTA_SERVER_ETCD_STORE_RECORD_WRITER_H_
