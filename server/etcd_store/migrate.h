// Copying a single replica's SQLite file into an etcd store (issue 20 item 8,
// `monta-planner --migrate_from_sqlite=FILE --store=etcd`): the way from
// --store=sqlite to replicas on etcd.
//
// What is copied, under the store's prefix P:
//   nodes      every node row, as the planner commits it (P nodes/<name>)
//   curves     the newest `curve_history` rows of each measurement (the
//              history the etcd store keeps; P curves/...), committed in
//              sequence order through EtcdStore, so the layout is the
//              planner's own; older rows are counted as not copied
//   knowledge  every plan knowledge record (calibrations and verify runs
//              per node set, verified replies per job; P knowledge/<id>),
//              as it is, under the store's fence
//   decisions, verifications, audit
//              every row, as a record of origin "sqlite" numbered by its
//              row id (records.h: the format the replicas write theirs in);
//              the planner does not read them: they are kept for audit
// Every write is an etcd Txn within the client's limits (max_txn_ops
// operations, max_request_bytes): nodes and curves split by EtcdStore's
// Commit, records batched here. The counts written are read back from etcd
// (count-only ranges), not counted while sending.
//
// A prefix that holds any key but `schema` (a planner's state, election
// keys of running replicas, an earlier migration) is refused unless
// `into_nonempty`: then nodes and records are put over what is there and
// curves added beside it.
#ifndef MONTA_SERVER_ETCD_STORE_MIGRATE_H_
#define MONTA_SERVER_ETCD_STORE_MIGRATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/etcd/client.h"
#include "server/etcd_store/etcd_store.h"
#include "server/etcd_store/records.h"
#include "server/store/sqlite_store.h"

namespace monta::etcd_store {

struct KindCount {
  std::string kind;     // nodes, curves, knowledge, decisions, verifications,
                        // audit
  int64_t read = 0;     // rows in the file
  int64_t written = 0;  // keys of the kind in etcd afterwards
  int64_t not_copied = 0;  // curves: rows older than the kept history
};

struct MigrationReport {
  std::vector<KindCount> kinds;
  int curve_history = 0;  // curves kept per measurement
  // One line per kind: "nodes: read 3, in etcd 3".
  std::string Summary() const;
};

struct MigrationOptions {
  EtcdStoreOptions store;  // prefix and curve_history
  bool into_nonempty = false;
};

absl::StatusOr<MigrationReport> MigrateFromSqlite(
    store::SqliteStore& from, etcd::Client& client,
    const MigrationOptions& options);

}  // namespace monta::etcd_store

#endif  // MONTA_SERVER_ETCD_STORE_MIGRATE_H_
