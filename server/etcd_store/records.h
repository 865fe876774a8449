// The records kept beside the etcd store's state (issue 20 item 3): decisions
// (GetStrategy and admission), verifications and the audit log, one etcd key
// each, written by --migrate_from_sqlite (migrate.h) and by every replica on
// --store=etcd (record_writer.h) in this one format:
//
//   key    P records/<table>/<at, unix microseconds, 20 digits>/<origin>/<n, 20
//   digits> value  EncodeRecord(at, fields): the time and the fields, each
//          length-prefixed (4 bytes little-endian, then the bytes)
//
// table: decisions, verifications, audit_log (SqliteStore::LogTableName);
// origin: the replica id that wrote it, or "sqlite" for a migrated row (n is
// then its row id; for a replica, a counter of the process). Keys of one
// table sort by time across replicas (retention deletes from the front), and
// two replicas never write the same key. Fields as SqliteStore keeps them:
// decisions the StrategyRequest and StrategyReply serialized, verifications
// the VerifyRequest and VerifyReply, audit identity, action, target, detail.
#ifndef MONTA_SERVER_ETCD_STORE_RECORDS_H_
#define MONTA_SERVER_ETCD_STORE_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/etcd/client.h"
#include "server/store/sqlite_store.h"

namespace monta::etcd_store {

// The origin of migrated rows.
inline constexpr char kSqliteOrigin[] = "sqlite";

// P records/<table>/ : every record of the table.
std::string RecordTablePrefix(const std::string& prefix,
                              const std::string& table);
// P records/<table>/<at, 20 digits>: the table's records before `at` sort
// below it.
std::string RecordTimeKey(const std::string& prefix, const std::string& table,
                          double at_unix_seconds);
std::string RecordKey(const std::string& prefix, const std::string& table,
                      double at_unix_seconds, const std::string& origin,
                      int64_t n);
std::string EncodeRecord(double at_unix_seconds,
                         const std::vector<std::string>& fields);
// DATA_LOSS when malformed; the row's id is not in the value (0).
absl::StatusOr<store::SqliteStore::LogRow> DecodeRecord(
    const std::string& value);

// A Txn of record puts (or any puts and deletes: attachments.h) within the
// client's limits (max_txn_ops operations, max_request_bytes less etcd's
// envelope and room for the framing).
class RecordTxn {
 public:
  explicit RecordTxn(const etcd::ClientOptions& limits);
  // The bytes one put of key and value counts for.
  static int64_t PutBytes(const std::string& key, const std::string& value);
  // The bytes `op` counts for (its key and value).
  static int64_t OpBytes(const etcd::Op& op);
  // The most one Txn may carry; a record over it can never be written.
  int64_t max_bytes() const { return max_bytes_; }
  // Whether a put of `bytes` still fits beside what is added.
  bool Fits(int64_t bytes) const;
  void Add(std::string key, std::string value);
  void AddOp(etcd::Op op);
  bool empty() const { return txn_.success.empty(); }
  size_t size() const { return txn_.success.size(); }
  // Sends what was added (nothing when empty) and starts a new Txn.
  absl::Status Send(etcd::Client& client);

 private:
  int max_ops_;
  int64_t max_bytes_;
  etcd::TxnRequest txn_;
  int64_t bytes_ = 0;
};

}  // namespace monta::etcd_store

#endif  // MONTA_SERVER_ETCD_STORE_RECORDS_H_
