// One EtcdStore commit cut into etcd Txns within etcd's limits (operations
// per Txn, bytes per request): the net puts and deletes of the mutations,
// split between mutations, each part with the log of its own mutations.
#ifndef MONTA_SERVER_ETCD_STORE_TXN_BATCH_H_
#define MONTA_SERVER_ETCD_STORE_TXN_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/etcd/kv.h"
#include "server/store/store.h"

namespace monta::etcd_store {

class TxnBatch {
 public:
  struct Part {
    std::vector<etcd::Op> ops;
    // Its log; none: deletes ahead of a part.
    std::vector<store::Mutation> mutations;
  };

  // At most `max_ops` operations and `max_bytes` bytes per Txn, the log put
  // (EncodeMutations of the part's mutations) included.
  TxnBatch(size_t max_ops, int64_t max_bytes)
      : max_ops_(max_ops), max_bytes_(max_bytes) {}

  // The current mutation's writes (the last one of a key counts).
  void Put(const std::string& key, std::string value) {
    current_[key] = std::move(value);
  }
  void Delete(const std::string& key) { current_[key] = std::nullopt; }

  // Closes the current mutation `m` (at `index` of the batch): its writes
  // join the pending part when they fit, else the pending part is cut and
  // they start the next one. A mutation too large for one Txn sends its
  // deletes first, in Txns of their own; one whose puts alone do not fit is
  // INVALID_ARGUMENT.
  absl::Status EndMutation(const store::Mutation& m, size_t index);

  // The parts, in order (the pending one cut).
  std::vector<Part> Finish();

 private:
  using Writes = std::map<std::string, std::optional<std::string>>;

  // A write's bytes in a Txn (a delete: its key and the overhead).
  static int64_t Bytes(const std::string& key,
                       const std::optional<std::string>& value);
  static int64_t Bytes(const Writes& writes);
  // Whether `writes` writes of `write_bytes` and a log of `log_bytes` +
  // `more_log_bytes` fit one Txn.
  bool Fits(size_t writes, int64_t write_bytes, int64_t log_bytes,
            int64_t more_log_bytes) const;
  void Flush();

  const size_t max_ops_;
  const int64_t max_bytes_;
  Writes current_;
  // The part being filled: its writes, their bytes (kept as writes join,
  // so a mutation costs its own writes, not the part's), its log's bytes.
  Writes pending_;
  int64_t pending_bytes_ = 0;
  int64_t pending_log_bytes_ = 0;
  std::vector<store::Mutation> pending_mutations_;
  std::vector<Part> parts_;
};

}  // namespace monta::etcd_store

#endif  // MONTA_SERVER_ETCD_STORE_TXN_BATCH_H_
