#include "server/etcd_store/txn_batch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/etcd/client.h"
#include "server/etcd_store/etcd_store.h"

namespace monta::etcd_store {

using store::Mutation;

absl::Status TxnBatch::EndMutation(const Mutation& m, size_t index) {
  // Its log entry's bytes (without the count ahead of the entries), encoded
  // from `m` itself: no copy of the mutation for it.
  const int64_t log_bytes =
      static_cast<int64_t>(EncodeMutations(absl::MakeConstSpan(&m, 1)).size()) -
      8;
  if (Fits(current_.size(), Bytes(current_), 0, log_bytes)) {
    // What joining the pending part adds (per write of this mutation, not
    // per write pending): its new keys, and the size change of the keys it
    // writes again (the last write of a key counts).
    size_t new_keys = 0;
    int64_t more_bytes = 0;
    for (const auto& [key, value] : current_) {
      auto it = pending_.find(key);
      more_bytes += Bytes(key, value);
      if (it == pending_.end()) {
        ++new_keys;
      } else {
        more_bytes -= Bytes(it->first, it->second);
      }
    }
    if (!Fits(pending_.size() + new_keys, pending_bytes_ + more_bytes,
              pending_log_bytes_, log_bytes)) {
      Flush();  // this mutation starts the next part (it fits alone)
    }
    while (!current_.empty()) {
      auto write = current_.extract(current_.begin());
      pending_bytes_ += Bytes(write.key(), write.mapped());
      auto it = pending_.find(write.key());
      if (it == pending_.end()) {
        pending_.insert(std::move(write));
      } else {
        pending_bytes_ -= Bytes(it->first, it->second);
        it->second = std::move(write.mapped());
      }
    }
    pending_log_bytes_ += log_bytes;
    pending_mutations_.push_back(m);
    return absl::OkStatus();
  }
  // Too large for one Txn: its deletes go first, in Txns of their own.
  Flush();
  Writes puts;
  Part deletes;
  int64_t delete_bytes = 0;
  for (auto& [key, value] : current_) {
    if (value.has_value()) {
      puts[key] = std::move(value);
      continue;
    }
    const int64_t bytes =
        static_cast<int64_t>(key.size()) + etcd::kOpOverheadBytes;
    if (deletes.ops.size() + 1 > max_ops_ ||
        delete_bytes + bytes > max_bytes_) {
      parts_.push_back(std::move(deletes));
      deletes = Part{};
      delete_bytes = 0;
    }
    deletes.ops.push_back(etcd::Op::Delete(key));
    delete_bytes += bytes;
  }
  if (!deletes.ops.empty()) parts_.push_back(std::move(deletes));
  current_.clear();
  const int64_t put_bytes = Bytes(puts);
  if (!Fits(puts.size(), put_bytes, 0, log_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mutations[", index, "]: larger than one etcd request (",
                     max_bytes_, " bytes, ", max_ops_, " operations)"));
  }
  pending_ = std::move(puts);
  pending_bytes_ = put_bytes;
  pending_log_bytes_ = log_bytes;
  pending_mutations_.push_back(m);
  return absl::OkStatus();
}

std::vector<TxnBatch::Part> TxnBatch::Finish() {
  Flush();
  return std::move(parts_);
}

int64_t TxnBatch::Bytes(const std::string& key,
                        const std::optional<std::string>& value) {
  return static_cast<int64_t>(key.size()) + etcd::kOpOverheadBytes +
         (value.has_value() ? static_cast<int64_t>(value->size()) : 0);
}

int64_t TxnBatch::Bytes(const Writes& writes) {
  int64_t bytes = 0;
  for (const auto& [key, value] : writes) bytes += Bytes(key, value);
  return bytes;
}

bool TxnBatch::Fits(size_t writes, int64_t write_bytes, int64_t log_bytes,
                    int64_t more_log_bytes) const {
  return writes + 1 <= max_ops_ &&
         log_bytes + more_log_bytes + etcd::kOpOverheadBytes + write_bytes <=
             max_bytes_;
}

void TxnBatch::Flush() {
  if (pending_mutations_.empty()) return;
  Part part;
  part.ops.reserve(pending_.size());
  for (auto& [key, value] : pending_) {
    part.ops.push_back(value.has_value() ? etcd::Op::Put(key, std::move(*value))
                                         : etcd::Op::Delete(key));
  }
  part.mutations = std::move(pending_mutations_);
  parts_.push_back(std::move(part));
  pending_.clear();
  pending_mutations_.clear();
  pending_bytes_ = 0;
  pending_log_bytes_ = 0;
}

}  // namespace monta::etcd_store
