// The values of the etcd client (server/etcd/client.h): keys, revisions,
// ranges, transactions, leases and watch events as plain C++ structs, so a
// caller needs neither protobuf nor gRPC headers. Keys and values are bytes
// (std::string).
#ifndef MONTA_SERVER_ETCD_KV_H_
#define MONTA_SERVER_ETCD_KV_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace monta::etcd {

// etcd's limits (etcd 3.4 defaults; ClientOptions can follow a cluster that
// changed them). A request over them is refused before it is sent.
inline constexpr int64_t kMaxRequestBytes = 1572864;  // --max-request-bytes
inline constexpr int kMaxTxnOps = 128;                // --max-txn-ops

// One key as etcd stores it. Revisions are the cluster's: create_revision is
// the revision that created the key (0: absent; the fencing and election
// primitive), mod_revision the last change, version the number of changes
// since creation.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;  // the lease the key is attached to; 0: none
};

// The range end that selects every key starting with `prefix` (etcd's
// "prefix end": the prefix with its last byte below 0xff incremented); "\0"
// (every key >= the start) for an empty prefix or one of 0xff bytes only.
std::string PrefixEnd(absl::string_view prefix);

// [key, range_end): range_end "" is the single key, "\0" every key >= key.
struct RangeRequest {
  std::string key;
  std::string range_end;
  int64_t revision = 0;  // 0: the newest; else the store as of this revision
  int64_t limit = 0;     // 0: no limit
  bool keys_only = false;
  bool count_only = false;
  // Served by the member asked from its local state, without a round through
  // the leader: cheaper, possibly stale.
  bool serializable = false;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  bool more = false;     // more keys in the range than `limit` returned
  int64_t count = 0;     // keys in the whole range (not only this page)
  int64_t revision = 0;  // the store's revision when served
};

// A paged list of [key, range_end) at one revision.
struct ListRequest {
  std::string key;
  std::string range_end;
  int64_t revision = 0;     // 0: the newest, fixed at the first page
  int64_t page_size = 500;  // keys per Range (1..10000)
};

struct PutResult {
  int64_t revision = 0;
  bool has_prev = false;  // with prev_kv: whether the key existed before
  KeyValue prev;
};

struct DeleteResult {
  int64_t revision = 0;
  int64_t deleted = 0;
  std::vector<KeyValue> prev;  // with prev_kv
};

// One comparison of a transaction, on the key (or [key, range_end)).
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };

  std::string key;
  std::string range_end;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  int64_t number = 0;  // version, revision or lease id
  std::string value;   // kValue

  static Compare Version(std::string key, Result result, int64_t version);
  // CreateRevision(key, kEqual, 0): the key is absent; CreateRevision(leader
  // key, kEqual, R): the key is still the one created at R (fencing).
  static Compare CreateRevision(std::string key, Result result,
                                int64_t revision);
  static Compare ModRevision(std::string key, Result result, int64_t revision);
  static Compare Value(std::string key, Result result, std::string value);
  static Compare Lease(std::string key, Result result, int64_t lease);
};

// One operation of a transaction's then or else branch.
struct Op {
  enum class Kind { kRange, kPut, kDelete };

  Kind kind = Kind::kRange;
  std::string key;
  std::string range_end;  // kRange and kDelete
  std::string value;      // kPut
  int64_t lease = 0;      // kPut
  bool prev_kv = false;   // kPut and kDelete
  int64_t limit = 0;      // kRange

  static Op Get(std::string key, std::string range_end = "");
  static Op Put(std::string key, std::string value, int64_t lease = 0);
  static Op Delete(std::string key, std::string range_end = "");
};

// If every compare holds, then `success`, else `failure`. etcd refuses two
// writes (puts or a put and a delete) of one key in one branch.
struct TxnRequest {
  std::vector<Compare> compares;
  std::vector<Op> success;
  std::vector<Op> failure;
};

struct OpResult {
  Op::Kind kind = Op::Kind::kRange;
  RangeResult range;  // kRange
  PutResult put;      // kPut
  DeleteResult del;   // kDelete
};

struct TxnResult {
  bool succeeded = false;  // the compares held and `success` ran
  int64_t revision = 0;
  std::vector<OpResult> results;  // one per operation of the branch that ran
};

// A lease as granted: its id, the TTL etcd granted, and when it expires at
// the latest on this process's monotonic clock (the time the grant was sent
// plus the TTL: etcd's own expiry is never earlier).
struct Lease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;
  MonoTime expiry;
};

struct LeaseStatus {
  int64_t id = 0;
  int64_t ttl_seconds =
      -1;  // remaining; -1: the lease is gone (expired or revoked)
  int64_t granted_ttl_seconds = 0;
  std::vector<std::string> keys;  // with keys = true
};

struct Event {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;            // a delete's kv has the key and its mod_revision only
  bool has_prev = false;  // with prev_kv, when etcd still had it
  KeyValue prev;
};

// What to watch (Client::OpenWatch).
struct WatchOptions {
  std::string key;
  std::string range_end;  // PrefixEnd(prefix) for a prefix
  // The first revision to deliver; 0: from the revision after the store's
  // current one when etcd creates the watch (Watch::next_revision() tells it
  // once known; a write before that may or may not be delivered). For a cache,
  // list at a revision and watch from that revision + 1.
  int64_t start_revision = 0;
  bool prev_kv = false;
  // etcd's periodic progress notifications while idle (every 10 minutes
  // unless etcd's --experimental-watch-progress-notify-interval says
  // otherwise).
  bool progress_notify = false;
  // Events queued for Next() at most (a single etcd response larger than
  // this is still queued whole); the watch stops reading from etcd while
  // the queue is full, so nothing is dropped.
  size_t max_queued_events = 4096;
};

// What a watch delivers: the events of one or more whole revisions in order,
// a progress notification, or the end of the watch because its revision was
// compacted.
struct WatchBatch {
  std::vector<Event> events;
  // The header revision of etcd's response.
  int64_t revision = 0;
  // A progress notification (no events). etcd 3.4.23 answers a requested
  // progress (Watch::RequestProgress) with the store's revision, which may be
  // ahead of events still queued for the watch (etcd issue 15220): it is not
  // proof that every event up to `revision` was delivered.
  bool progress = false;
  // > 0: etcd compacted the history the watch needed. Events between the
  // watch's next revision and this one are gone: list again (at a revision >=
  // compact_revision) and watch from that list's revision + 1. The watch ends.
  int64_t compact_revision = 0;
};

}  // namespace monta::etcd

#endif  // MONTA_SERVER_ETCD_KV_H_
