#include "server/bench/rendezvous.h"

#include "absl/strings/str_cat.h"

namespace monta::coordination {
namespace {

constexpr size_t kMaxKeyBytes = 512;

}  // namespace

absl::Status RendezvousStore::CheckKeyValue(const std::string& key,
                                            const std::string& value) const {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: expected 1..", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "value: ", value.size(), " bytes, at most ", limits_.max_value_bytes,
        " (--max_rendezvous_value_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(const std::string& task_id,
                                  const std::string& key,
                                  const std::string& value,
                                  const std::string& setter) {
  if (absl::Status s = CheckKeyValue(key, value); !s.ok()) return s;
  auto found = tasks_.find(task_id);
  static const TaskKeys kNone;
  if (absl::Status s =
          CheckBounds(task_id, found == tasks_.end() ? kNone : found->second,
                      key, value, setter);
      !s.ok()) {
    return s;
  }
  TaskKeys& task = tasks_[task_id];
  auto [it, is_new] = task.kv.try_emplace(key);
  if (!is_new) {
    // The old value's bytes leave its setter (who may be another node).
    const size_t old_bytes = key.size() + it->second.value.size();
    Count(it->second.setter, -static_cast<int64_t>(old_bytes));
    task.bytes -= old_bytes;
  }
  it->second.value = value;
  it->second.setter = setter;
  const size_t bytes = key.size() + value.size();
  task.bytes += bytes;
  Count(setter, static_cast<int64_t>(bytes));
  return absl::OkStatus();
}

std::optional<std::string> RendezvousStore::Get(const std::string& task_id,
                                                const std::string& key) const {
  auto task = tasks_.find(task_id);
  if (task == tasks_.end()) return std::nullopt;
  auto kv = task->second.kv.find(key);
  if (kv == task->second.kv.end()) return std::nullopt;
  return kv->second.value;
}

void RendezvousStore::Drop(const std::string& task_id) {
  auto task = tasks_.find(task_id);
  if (task == tasks_.end()) return;
  for (const auto& [key, stored] : task->second.kv) {
    Count(stored.setter,
          -static_cast<int64_t>(key.size() + stored.value.size()));
  }
  tasks_.erase(task);
}

size_t RendezvousStore::bytes_of(const std::string& setter) const {
  auto it = bytes_of_.find(setter);
  return it == bytes_of_.end() ? 0 : it->second;
}

void RendezvousStore::Count(const std::string& setter, int64_t bytes) {
  bytes_ = static_cast<size_t>(static_cast<int64_t>(bytes_) + bytes);
  size_t& of_setter = bytes_of_[setter];
  of_setter = static_cast<size_t>(static_cast<int64_t>(of_setter) + bytes);
  if (of_setter == 0) bytes_of_.erase(setter);
}

absl::Status RendezvousStore::CheckBounds(const std::string& task_id,
                                          const TaskKeys& task,
                                          const std::string& key,
                                          const std::string& value,
                                          const std::string& setter) const {
  auto old = task.kv.find(key);
  const bool is_new = old == task.kv.end();
  if (is_new && static_cast<int>(task.kv.size()) >= limits_.max_keys_per_task) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "task ", task_id, " has ", task.kv.size(), " rendezvous keys, at most ",
        limits_.max_keys_per_task, " (--max_rendezvous_keys_per_task)"));
  }
  const size_t bytes = key.size() + value.size();
  const size_t old_bytes = is_new ? 0 : key.size() + old->second.value.size();
  const size_t task_after = task.bytes + bytes - old_bytes;
  if (task_after > limits_.max_bytes_per_task) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "task ", task_id, " would hold ", task_after,
        " bytes of rendezvous keys and values, at most ",
        limits_.max_bytes_per_task, " (--max_rendezvous_bytes_per_task)"));
  }
  // The old value's bytes come off its own setter, who may be someone else.
  const size_t own_old =
      !is_new && old->second.setter == setter ? old_bytes : 0;
  const size_t setter_after = bytes_of(setter) + bytes - own_old;
  if (setter_after > limits_.max_bytes_per_node) {
    return absl::ResourceExhaustedError(absl::StrCat(
        setter, " would hold ", setter_after,
        " bytes of rendezvous keys and values across its tasks, at most ",
        limits_.max_bytes_per_node, " (--max_rendezvous_bytes_per_node)"));
  }
  const size_t planner_after = bytes_ + bytes - old_bytes;
  if (planner_after > limits_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the planner would hold ", planner_after,
        " bytes of rendezvous keys and values of all tasks, at most ",
        limits_.max_bytes, " (--max_rendezvous_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace monta::coordination
