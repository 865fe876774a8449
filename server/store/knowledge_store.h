// Where what verify runs taught the planner is kept (issue 20 item 3; the
// records of server/planning/calibration.h's PlanKnowledge: each node set's
// calibration and the runs it was fitted on, the newest verify reply per
// job), so that a restarted planner and every replica price with it: opaque
// records by id, written under the registry's fence, outside the registry's
// revisions and commit log.
//
// SqliteStore keeps them in its plan_knowledge table (one replica: nothing
// watches). EtcdStore keeps them under P knowledge/<id> and watches that key
// range for the replicas that follow (KnowledgeFollower): a watch of its own,
// not the registry's log, so the log's format and the registry's follower
// stay as they are, and a calibration lands in one fenced Txn of its own.
#ifndef MONTA_SERVER_STORE_KNOWLEDGE_STORE_H_
#define MONTA_SERVER_STORE_KNOWLEDGE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/store.h"
#include "server/store/task_store.h"

namespace monta::store {

// Bounds a write is checked against (INVALID_ARGUMENT naming the id): an id
// ("<table>/<name>", printable, no spaces), and one record.
inline constexpr size_t kMaxKnowledgeIdBytes = 128;
inline constexpr size_t kMaxKnowledgeRecordBytes = size_t{512} << 10;

// Id -> its new record, or nullopt: delete it.
using KnowledgeWrites = RecordWrites;

struct KnowledgeRecord {
  std::string id;
  std::string value;
};

// A put (value) or a delete (no value) a watch saw.
struct KnowledgeChange {
  std::string id;
  std::optional<std::string> value;
};

struct KnowledgeList {
  // The store's revision the records are as of (a watch after it follows
  // on); 0 where the store has no revisions of its own.
  int64_t revision = 0;
  std::vector<KnowledgeRecord> records;  // by id
};

class KnowledgeWatch {
 public:
  virtual ~KnowledgeWatch() = default;
  // The next changes in store order, waiting up to `timeout`:
  // DEADLINE_EXCEEDED when none came; OUT_OF_RANGE when the store no longer
  // holds the history the watch needs (list again); another error: the
  // watch ended (list again).
  virtual absl::StatusOr<std::vector<KnowledgeChange>> Next(
      absl::Duration timeout) = 0;
};

class KnowledgeStore {
 public:
  virtual ~KnowledgeStore() = default;
  // Puts and deletes `writes` while `fence` is the newest (FAILED_PRECONDITION
  // "fenced" otherwise), in one transaction when they fit one (etcd's
  // limits); a failure says how many parts landed.
  virtual absl::Status WriteKnowledge(const Fence& fence,
                                      const KnowledgeWrites& writes) = 0;
  virtual absl::StatusOr<KnowledgeList> ListKnowledge() = 0;
  // Every change after `after_revision` (a ListKnowledge's revision).
  // UNIMPLEMENTED where one process is the only reader (SqliteStore).
  virtual absl::StatusOr<std::unique_ptr<KnowledgeWatch>> WatchKnowledge(
      int64_t after_revision) = 0;
};

// INVALID_ARGUMENT naming the first write over the bounds above.
absl::Status ValidateKnowledgeWrites(const KnowledgeWrites& writes);

// A follower replica's copy of the knowledge (the registry's Follower's
// counterpart, on the store's knowledge watch): Step lists the records into
// `replace`, then hands every later change to `apply`, in order; a watch that
// fails or falls behind lists again. The leader pauses it (it holds the
// knowledge itself, listed when its term starts) and resumes it when it stops
// leading (the next Step lists again).
class KnowledgeFollower {
 public:
  struct Sink {
    std::function<void(const std::vector<KnowledgeRecord>&)> replace;
    std::function<void(const KnowledgeChange&)> apply;
  };
  // `store` is not owned and must outlive this.
  KnowledgeFollower(KnowledgeStore* store, Sink sink);

  // One step of the one thread that follows: lists when not in sync, else
  // applies the changes the watch returns within `wait`. The failure of a
  // list or a watch (it lists again at the next Step); OK otherwise.
  absl::Status Step(absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once no change is being applied; none is until Resume.
  void Pause() ABSL_LOCKS_EXCLUDED(mu_);
  void Resume() ABSL_LOCKS_EXCLUDED(mu_);
  // Listed, and the watch after the list runs (false while paused).
  bool in_sync() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t lists() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status Relist(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);

  KnowledgeStore* const store_;
  const Sink sink_;
  // Step's thread only.
  std::unique_ptr<KnowledgeWatch> watch_;
  uint64_t watched_generation_ = 0;

  mutable absl::Mutex mu_;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool in_sync_ ABSL_GUARDED_BY(mu_) = false;
  // Moves on every Pause and Resume: a Step that read an older one applies
  // nothing and lists again.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t lists_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_KNOWLEDGE_STORE_H_
