// The store seam (server/store/store.h) on etcd (issue 20 item 2): the
// registry's durable state under one key prefix of an etcd cluster, so that
// the planner's replicas share it.
//
// Keys under the prefix P (default "/monta/v1/"; values are the contract's
// messages serialized):
//   P schema                  "<major>.<minor>": the layout's version (below)
//   P writer                  the standalone writer fence (Lead)
//   P nodes/<name>            NodeInfo without curves, put only on change
//   P curves/<hex measurement>/<sequence, 20 digits>
//                             BandwidthCurve: the newest curve_history curves
//                             of each measurement (older ones are deleted in
//                             the commit that adds a newer one)
//   P log                     the mutations of the last commit (encoded by
//                             this file): Watch reads its puts
//   P records/<table>/...     decisions, verifications and audit entries
//                             (records.h), written by every replica
//                             (record_writer.h) and by --migrate_from_sqlite
//                             (migrate.h); not read here
//   P tasks/<task id>         the benchmark task queue's records (TaskStore,
//                             server/bench/task_record.h): written under the
//                             same fence, outside the log (no watch sees
//                             them), listed by the leader that takes over
//   P knowledge/<id>          what verify runs taught the planner
//                             (KnowledgeStore; server/planning's
//                             knowledge_record.h): written under the same
//                             fence, outside the log; followers list and
//                             watch this range (store::KnowledgeFollower)
//
// List is a paged list of P curves/ and P nodes/ at one etcd revision. Commit
// is ONE etcd Txn: its compare is the fence, its operations the net puts and
// deletes of the batch and the log put; the revision is etcd's. The writer
// keeps a mirror of what it stored (loaded after Lead, by WarmUp or the first
// commit; updated by its own commits;
// dropped and listed again after any failed commit), so a commit reads nothing:
// while its fence holds nobody else writes. Watch is etcd's watch of P log from
// the revision after: every commit in revision order; a compacted revision is
// OUT_OF_RANGE ("list again").
//
// The fence. Standalone (no fence_key): Lead puts P writer, the epoch is that
// put's revision and every commit compares mod_revision(P writer) == epoch,
// so the newest Lead fences every older one. With server/election (fence_key
// set to the leader's candidate key, leader_epoch answering the election's
// epoch): Lead takes the election's epoch and every commit compares
// create_revision(fence_key) == epoch, etcd's own fencing of a leader that
// lost its key.
//
// etcd's limits (128 operations, 1.5 MiB per request): a batch that does not
// fit one Txn is committed as several fenced Txns, in order, split between
// mutations (a mutation that deletes more keys than fit sends its deletes in
// Txns of their own first). Each Txn is atomic and carries the log of its own
// mutations, so a watch sees each part as one event at its revision, and a
// List may see the state between two parts. If a part fails, the parts before
// it stay: Commit's error says how many of how many landed. Committed.revision
// is the last part's. A single node or curve larger than one request is
// refused (INVALID_ARGUMENT).
//
// The schema version: Open writes P schema when the prefix holds none, and
// refuses (FAILED_PRECONDITION naming both versions) a store whose major
// version differs from this build's: a newer major is a layout this replica
// does not know; an older one would need a migration none exists for. Minor
// versions only add keys old replicas ignore, so replicas of one major run
// side by side during a rolling update.
//
// Thread-safe.
#ifndef MONTA_SERVER_ETCD_STORE_ETCD_STORE_H_
#define MONTA_SERVER_ETCD_STORE_ETCD_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/etcd/client.h"
#include "server/etcd_store/txn_batch.h"
#include "server/store/knowledge_store.h"
#include "server/store/store.h"
#include "server/store/task_store.h"

namespace monta::etcd_store {

struct SchemaVersion {
  int major = 1;
  int minor = 0;
};
// This build's layout.
// 1.1 added P tasks/, 1.2 P knowledge/, 1.3 P attach/ (older replicas ignore
// all three).
inline constexpr SchemaVersion kEtcdSchemaVersion{1, 3};

struct EtcdStoreOptions {
  // Every key lives under it: non-empty, starting and ending with '/', at
  // most 128 bytes.
  std::string prefix = "/monta/v1/";
  // Curves kept per measurement (the newest is current): 1..64.
  int curve_history = 8;
  // The layout this replica writes and accepts (tests set older and newer).
  SchemaVersion schema = kEtcdSchemaVersion;
  // With an election: the leader's candidate key, whose create revision is
  // the epoch, and the epoch this replica leads with now (an error when it
  // does not lead). Both empty: the standalone fence (P writer).
  std::string fence_key;
  std::function<absl::StatusOr<int64_t>()> leader_epoch;
  // Keys a List may hold at most (RESOURCE_EXHAUSTED past it).
  size_t max_keys = 1 << 20;
};

class EtcdStore : public store::Store,
                  public store::TaskStore,
                  public store::KnowledgeStore {
 public:
  // Checks the options and the schema version (writing it when the prefix
  // has none). `client` must outlive the store.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(
      etcd::Client* client, EtcdStoreOptions options);
  ~EtcdStore() override = default;

  // The fence; the writer's mirror is listed again after it, by WarmUp or
  // by the first Commit (a new leader serves before that list).
  absl::StatusOr<store::Fence> Lead() override;
  // Lists the writer's mirror now unless it is loaded, so that the next
  // Commit does not wait for it (a Commit running meanwhile waits for it).
  absl::Status WarmUp();
  absl::StatusOr<store::Snapshot> List(int64_t revision = 0) override;
  absl::StatusOr<store::Committed> Commit(
      const store::Fence& fence,
      const std::vector<store::Mutation>& mutations) override;
  absl::StatusOr<std::unique_ptr<store::ChangeWatch>> Watch(
      int64_t after_revision) override;
  // P log's mod revision (its key only, not the mutations it holds).
  absl::StatusOr<int64_t> NewestRevision() override;

  // TaskStore: P tasks/<id>, in fenced Txns within etcd's limits (one Txn
  // for a small batch); a failure is told to the write listener ("task").
  absl::Status WriteTasks(const store::Fence& fence,
                          const store::TaskWrites& writes) override;
  absl::StatusOr<std::vector<std::string>> ListTasks() override;
  // One Range of `tasks/<id>` (a linearizable read: any replica, leading or
  // not, sees the newest record).
  absl::StatusOr<std::optional<std::string>> GetTask(
      const std::string& task_id) override;

  // KnowledgeStore: P knowledge/<id>, written as the tasks are (fenced Txns
  // within etcd's limits, outside the log; a failure is told to the write
  // listener as "knowledge"); listed at one revision and watched from the
  // revision after (the replicas that follow: store::KnowledgeFollower).
  absl::Status WriteKnowledge(const store::Fence& fence,
                              const store::KnowledgeWrites& writes) override;
  absl::StatusOr<store::KnowledgeList> ListKnowledge() override;
  absl::StatusOr<std::unique_ptr<store::KnowledgeWatch>> WatchKnowledge(
      int64_t after_revision) override;

  // Told of every failed Commit (`operation`: registry::ChangeOperation of
  // its first mutation) and of the first successful one after a failure
  // (status OK), so health can follow the store, as SqliteStore's. Called
  // under the store's lock: it must not call back into the store. Null stops
  // calls.
  using WriteListener = std::function<void(const std::string& operation,
                                           const absl::Status& status)>;
  void SetWriteListener(WriteListener listener);

  const EtcdStoreOptions& options() const { return options_; }
  // The etcd Txns the last successful Commit took (1 unless it was split).
  int last_commit_txns() const;

  // "<major>.<minor>"; and its parse (INVALID_ARGUMENT naming the text).
  static std::string FormatVersion(SchemaVersion version);
  static absl::StatusOr<SchemaVersion> ParseVersion(const std::string& text);

 private:
  // What the writer stored: node key -> value, measurement -> sequence ->
  // curve.
  struct Mirror {
    bool valid = false;
    std::map<std::string, std::string> nodes;
    std::map<std::string, std::map<uint64_t, monta::v1::BandwidthCurve>> curves;
  };

  EtcdStore(etcd::Client* client, EtcdStoreOptions options);
  absl::Status CheckSchema();
  // Lists the prefix at `revision` (0: the newest) into `out`; the revision.
  absl::StatusOr<int64_t> ReadInto(int64_t revision, Mirror& out) const;
  absl::Status LoadMirrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  etcd::Compare FenceCompare(const store::Fence& fence) const;
  absl::StatusOr<store::Committed> CommitLocked(
      const store::Fence& fence, const std::vector<store::Mutation>& mutations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One mutation against the mirror: its puts and deletes go to `batch`.
  absl::Status Apply(const store::Mutation& mutation, TxnBatch& batch,
                     std::vector<monta::v1::BandwidthCurve>* restored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteCurvesLocked(
      const std::function<bool(const monta::v1::BandwidthCurve&)>& which,
      TxnBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Puts and deletes P <dir><id> under the fence (tasks/, knowledge/), in
  // as few Txns as etcd's limits allow; failures logged and told to the
  // listener as `operation`.
  absl::Status WriteRecords(const store::Fence& fence, const std::string& dir,
                            const store::RecordWrites& writes,
                            const std::string& operation)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WriteRecordsLocked(const store::Fence& fence,
                                  const std::string& dir,
                                  const store::RecordWrites& writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every key of P <dir> at one revision (ids without P <dir>).
  absl::StatusOr<store::KnowledgeList> ListRecords(const std::string& dir);
  std::string NodeKey(const std::string& name) const;
  std::string CurveKey(const std::string& measurement, uint64_t seq) const;

  etcd::Client* const client_;
  const EtcdStoreOptions options_;
  mutable absl::Mutex mu_;
  Mirror mirror_ ABSL_GUARDED_BY(mu_);
  int last_commit_txns_ ABSL_GUARDED_BY(mu_) = 0;
  WriteListener listener_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
};

// True for the FAILED_PRECONDITION a Commit under a fence that no longer
// holds gets (the replica lost its leadership, or a newer Lead took over).
bool IsFenced(const absl::Status& status);

// The log value of one commit, and back (DATA_LOSS when malformed).
std::string EncodeMutations(absl::Span<const store::Mutation> mutations);
absl::StatusOr<std::vector<store::Mutation>> DecodeMutations(
    const std::string& data);

}  // namespace monta::etcd_store

#endif  // MONTA_SERVER_ETCD_STORE_ETCD_STORE_H_
