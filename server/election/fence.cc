#include "server/election/fence.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace monta::election {
namespace {

constexpr char kNotLeaderUrl[] = "monta.election/not-leader";

}  // namespace

absl::Status NotLeaderError(int64_t epoch, absl::string_view why) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat("not leader (epoch ", epoch, " lost: ", why, ")"));
  status.SetPayload(kNotLeaderUrl, absl::Cord("1"));
  return status;
}

bool IsNotLeader(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kNotLeaderUrl).has_value();
}

absl::StatusOr<etcd::TxnRequest> AddFence(const Fence& fence,
                                          etcd::TxnRequest txn,
                                          int max_txn_ops) {
  if (fence.key.empty() || fence.epoch <= 0) {
    return absl::InvalidArgumentError(
        "fenced txn: the fence needs the leader's key and its epoch (> 0)");
  }
  for (const etcd::Op& op : txn.failure) {
    if (op.kind != etcd::Op::Kind::kRange) {
      return absl::InvalidArgumentError(
          "fenced txn: the failure branch may only read (it runs when the "
          "fence fails too); put the writes in the success branch");
    }
  }
  const size_t limit = static_cast<size_t>(max_txn_ops);
  if (txn.compares.size() + 1 > limit || txn.failure.size() + 1 > limit ||
      txn.success.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fenced txn: ", txn.compares.size(), " compares, ", txn.success.size(),
        " success and ", txn.failure.size(),
        " failure operations, plus the fence's compare and read, exceed "
        "etcd's limit of ",
        max_txn_ops, " per list; split the transaction"));
  }
  txn.compares.insert(
      txn.compares.begin(),
      etcd::Compare::CreateRevision(fence.key, etcd::Compare::Result::kEqual,
                                    fence.epoch));
  txn.failure.push_back(etcd::Op::Get(fence.key));
  return txn;
}

absl::StatusOr<etcd::TxnResult> FencedTxn(etcd::Client& client,
                                          const Fence& fence,
                                          const etcd::TxnRequest& txn) {
  absl::StatusOr<etcd::TxnRequest> fenced =
      AddFence(fence, txn, client.options().max_txn_ops);
  if (!fenced.ok()) return fenced.status();
  absl::StatusOr<etcd::TxnResult> result = client.Txn(*fenced);
  if (!result.ok() || result->succeeded) return result;
  // The failure branch ran: its last result is the fence key as it is now.
  if (result->results.empty() ||
      result->results.back().kind != etcd::Op::Kind::kRange) {
    return absl::InternalError(
        "fenced txn: etcd's answer lacks the fence key's read");
  }
  const etcd::RangeResult& key = result->results.back().range;
  if (key.kvs.empty()) {
    return NotLeaderError(
        fence.epoch,
        absl::StrCat("the leader key is gone at revision ", result->revision));
  }
  if (key.kvs[0].create_revision != fence.epoch) {
    return NotLeaderError(fence.epoch,
                          absl::StrCat("the leader key was created again at "
                                       "revision ",
                                       key.kvs[0].create_revision));
  }
  result->results.pop_back();
  return result;
}

}  // namespace monta::election
