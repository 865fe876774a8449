// With --store=etcd, every replica's decisions (GetStrategy and admission),
// verifications and audit entries as etcd records (records.h; issue 20 item
// 3), instead of each replica's own SQLite file.
//
// The RPC path only enqueues: a bounded queue (records and bytes); when it is
// full the record is dropped and counted (on_dropped), never waited for. A
// background thread sends what is queued every flush_interval, or as soon as
// a Txn's worth (max_txn_ops records) is waiting, in Txns within etcd's limits
// (records.h RecordTxn). A failed Txn is kept at the front and sent again at
// the next flush (new records meanwhile fill the queue, then are dropped).
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

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/etcd/client.h"
#include "server/store/audit_log.h"
#include "server/store/decision_log.h"

namespace monta::etcd_store {

struct RecordWriterOptions {
  std::string prefix;  // the store's key prefix
  std::string origin;  // this replica's id (election::ValidateReplicaId)
  size_t max_queued_records = 10000;
  int64_t max_queued_bytes = 64 << 20;
  absl::Duration flush_interval = absl::Seconds(1);
  // A record dropped: "queue_full", or "too_large" (more than one Txn).
  std::function<void(const std::string& reason)> on_dropped;
  // A Txn etcd refused or that failed (logged by the writer too).
  std::function<void(const absl::Status&)> on_write_error;
};

class RecordWriter : public store::DecisionLog, public store::AuditLog {
 public:
  // Starts the flushing thread. `client` outlives the writer.
  RecordWriter(etcd::Client* client, RecordWriterOptions options);
  // Stops the thread after one last flush.
  ~RecordWriter() override;
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  void RecordDecision(const monta::v1::StrategyRequest& request,
                      const monta::v1::StrategyReply& reply) override;
  void RecordVerification(const monta::v1::VerifyRequest& request,
                          const monta::v1::VerifyReply& reply) override;
  void RecordAudit(const store::AuditEntry& entry) override;

  // Sends everything queued now (tests; the thread does this on its own).
  absl::Status Flush();

  // Deletes the decisions (of every replica) dated before `older_than`, then
  // all but the newest `max_records`, in deletes of at most kPruneBatch keys
  // and at most kPruneRounds of them per call (the rest next call). Returns
  // how many went. The leader's alone to call.
  static constexpr int64_t kPruneBatch = 1000;
  static constexpr int kPruneRounds = 20;
  absl::StatusOr<int64_t> PruneDecisions(absl::Time older_than,
                                         int64_t max_records);

  struct Stats {
    int64_t queued = 0;       // records waiting now
    int64_t written = 0;      // records in Txns etcd accepted
    int64_t dropped = 0;      // records dropped (queue full, too large)
    int64_t txns = 0;         // Txns etcd accepted
    int64_t failed_txns = 0;  // Txns that failed (their records kept)
  };
  Stats stats() const;

 private:
  struct Pending {
    std::string key;
    std::string value;
  };
  void Enqueue(const char* table, double at_unix_seconds,
               const std::vector<std::string>& fields);
  void Run();
  // Sends the queue's front in Txns until it is empty or a Txn fails.
  absl::Status SendQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // One bounded delete of the first `limit` keys of [key, range_end).
  absl::StatusOr<int64_t> DeleteFirst(const std::string& key,
                                      const std::string& range_end,
                                      int64_t limit);

  etcd::Client* const client_;
  const RecordWriterOptions options_;
  // Held while sending, so Flush and the thread never send the same records.
  absl::Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);
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
