// The rendezvous store (issue 20 item 7: a room of its own beside the task
// queue): per-task keys and values the agents of one task exchange (NCCL
// unique ids, Gloo store keys), with their byte bounds. Leader memory only,
// never stored: a task handed out again by a new leader starts with none.
//
// Not thread-safe: the coordinator holds it under its state lock (a key is
// set only while its task runs, and freed when it finishes).
#ifndef MONTA_SERVER_BENCH_RENDEZVOUS_H_
#define MONTA_SERVER_BENCH_RENDEZVOUS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace monta::coordination {

// Bounds a client cannot exceed (RESOURCE_EXHAUSTED naming the planner flag).
struct RendezvousLimits {
  // Keys of one task, bytes of one value, and bytes of all its keys and
  // values together.
  int max_keys_per_task = 4096;
  size_t max_value_bytes = 1 << 20;
  size_t max_bytes_per_task = 64 << 20;
  // Bytes of keys and values of all tasks together, and the share of it one
  // setter (a node, by the identity of its certificate) may hold across its
  // tasks.
  size_t max_bytes = size_t{256} << 20;
  size_t max_bytes_per_node = size_t{64} << 20;
};

class RendezvousStore {
 public:
  explicit RendezvousStore(RendezvousLimits limits) : limits_(limits) {}

  // The key's and value's own bounds, before any task is looked at:
  // INVALID_ARGUMENT for a key outside 1..512 bytes, RESOURCE_EXHAUSTED for a
  // value over max_value_bytes.
  absl::Status CheckKeyValue(const std::string& key,
                             const std::string& value) const;
  // Stores `value` under `key` of `task_id` for `setter`: its bytes count
  // against the setter's share, the task's bound and the cap until Drop or
  // another setter overwrites the key. RESOURCE_EXHAUSTED naming the flag
  // beyond any of them (nothing stored).
  absl::Status Set(const std::string& task_id, const std::string& key,
                   const std::string& value, const std::string& setter);
  std::optional<std::string> Get(const std::string& task_id,
                                 const std::string& key) const;
  // Frees every key of the task.
  void Drop(const std::string& task_id);

  // Bytes of keys and values held now: in all, and set by `setter`.
  size_t bytes() const { return bytes_; }
  size_t bytes_of(const std::string& setter) const;

 private:
  struct Value {
    std::string value;
    std::string setter;  // its bytes count against this setter
  };
  struct TaskKeys {
    std::map<std::string, Value> kv;
    size_t bytes = 0;  // keys and values in kv
  };
  absl::Status CheckBounds(const std::string& task_id, const TaskKeys& task,
                           const std::string& key, const std::string& value,
                           const std::string& setter) const;
  // Adds `bytes` to (or, negative, takes them from) `setter` and the total.
  void Count(const std::string& setter, int64_t bytes);

  const RendezvousLimits limits_;
  std::map<std::string, TaskKeys> tasks_;
  size_t bytes_ = 0;
  // Per setter; entries at 0 are erased.
  std::map<std::string, size_t> bytes_of_;
};

}  // namespace monta::coordination

#endif  // MONTA_SERVER_BENCH_RENDEZVOUS_H_
