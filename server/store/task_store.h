// Where the benchmark task queue (server/bench/coordinator.h) keeps its tasks
// so that a new leader, or a restarted planner, lists them (issue 20 item 3):
// one opaque record per task id, written under the registry's fence, outside
// the registry's revisions and watch (a follower's cache never sees them).
//
// SqliteStore keeps them in its bench_tasks table, EtcdStore under
// P tasks/<id> (server/etcd_store/README.md).
#ifndef MONTA_SERVER_STORE_TASK_STORE_H_
#define MONTA_SERVER_STORE_TASK_STORE_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/store.h"

namespace monta::store {

// Id -> its new record, or nullopt: delete it (the task queue's and the
// plan knowledge's writes, knowledge_store.h).
using RecordWrites = std::map<std::string, std::optional<std::string>>;
// Task id -> its new record, or nullopt: delete it.
using TaskWrites = RecordWrites;

// Bounds a write is checked against (INVALID_ARGUMENT naming the task):
// an id, and one record (etcd's 1.5 MiB request holds several).
inline constexpr size_t kMaxTaskIdBytes = 256;
inline constexpr size_t kMaxTaskRecordBytes = size_t{256} << 10;

class TaskStore {
 public:
  virtual ~TaskStore() = default;
  // Puts and deletes `writes` while `fence` is the newest (FAILED_PRECONDITION
  // "fenced" otherwise). Not one transaction: a store may split a large batch
  // (each part fenced); a failure says so, the parts before it stay.
  virtual absl::Status WriteTasks(const Fence& fence,
                                  const TaskWrites& writes) = 0;
  // Every stored record, by task id.
  virtual absl::StatusOr<std::vector<std::string>> ListTasks() = 0;
  // The record of `task_id` (nullopt: none stored), for any replica: what a
  // follower answers GetBenchmarkTask with. INVALID_ARGUMENT for an id
  // ValidateTaskId refuses.
  virtual absl::StatusOr<std::optional<std::string>> GetTask(
      const std::string& task_id) = 0;
};

// INVALID_ARGUMENT "<field>: expected 1..256 bytes without '/'" unless `id`
// is within kMaxTaskIdBytes and has no '/' (a key's separator on etcd).
absl::Status ValidateTaskId(const std::string& id, absl::string_view field);

// INVALID_ARGUMENT naming the first write over the bounds above.
absl::Status ValidateTaskWrites(const TaskWrites& writes);

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_TASK_STORE_H_
