// Fencing a leader's writes to etcd: every write of a leader is a transaction
// whose first compare is `create_revision(<its candidate key>) == epoch`. A
// leader that has lost its key (its lease expired while it was paused, the key
// was deleted, or it resigned) is refused by etcd itself, whatever it believes:
// the write lands nothing and comes back as "not leader (epoch E lost)".
//
// Election::FencedTxn (election.h) is the call a leader uses: it checks
// locally first and stops leading when etcd refuses. The functions here are
// the etcd side alone, for a layer that carries a `Fence` without the
// Election (a store that is handed the fence of the leader it writes for).
#ifndef MONTA_SERVER_ELECTION_FENCE_H_
#define MONTA_SERVER_ELECTION_FENCE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/etcd/client.h"
#include "server/etcd/kv.h"

namespace monta::election {

// A leader's fence: its candidate key and the key's create revision, which is
// the leader's epoch.
struct Fence {
  std::string key;
  int64_t epoch = 0;
};

// `txn` with the fence: the compare `create_revision(fence.key) == epoch`
// first, and a read of fence.key last in the failure branch (so one round
// trip tells a lost fence from a failed compare of the caller's).
// INVALID_ARGUMENT when the fence is empty, when the failure branch writes
// (it would run when the fence fails: only reads belong there), or when the
// fenced txn would exceed etcd's limit on compares or operations per list
// (`max_txn_ops`).
absl::StatusOr<etcd::TxnRequest> AddFence(const Fence& fence,
                                          etcd::TxnRequest txn,
                                          int max_txn_ops = etcd::kMaxTxnOps);

// Sends `txn` fenced (AddFence). When the fence held, the result is etcd's
// (succeeded false when a compare of the caller's failed; the failure
// results then carry the caller's reads only). When the fence failed,
// FAILED_PRECONDITION "not leader (epoch E lost: ...)" (IsNotLeader) and
// nothing was written. etcd's errors come back as they are: an
// OutcomeUnknown one may have landed (it was fenced, so only while the epoch
// still held), retry only a txn that is safe to repeat.
absl::StatusOr<etcd::TxnResult> FencedTxn(etcd::Client& client,
                                          const Fence& fence,
                                          const etcd::TxnRequest& txn);

// The FAILED_PRECONDITION a fenced write of a lost epoch gets (from etcd, or
// from Election before anything is sent): "not leader (epoch E lost: why)".
absl::Status NotLeaderError(int64_t epoch, absl::string_view why);
// True for a status made by NotLeaderError.
bool IsNotLeader(const absl::Status& status);

}  // namespace monta::election

#endif  // MONTA_SERVER_ELECTION_FENCE_H_
