// A small etcd v3 client over gRPC: KV (Range with paging at one revision,
// Put, DeleteRange), Txn, Compact, Lease (Grant, Revoke, TimeToLive and a
// keepalive that reports the lease's loss) and Watch (with reconnect and a
// "relist" signal on compaction). Stubs are generated from Debian's etcd
// protos (third_party/etcd_configure.bzl); see server/etcd/README.md.
//
// Every request carries the `hasleader: true` metadata, so a member cut off
// from its cluster refuses (UNAVAILABLE "etcdserver: no leader") rather than
// serving stale data or waiting. Endpoints are tried in order from the
// preferred one (the last that answered; after a failure, the one after the
// endpoint that failed), those whose connection has failed last and, once
// another endpoint was reached, without waiting for them: a read moves on to
// the next endpoint on UNAVAILABLE or DEADLINE_EXCEEDED, a write only when it
// was certainly not applied (the endpoint was not connected, so nothing was
// sent, or etcd answered "no leader"); any other failure of a write is
// returned with "outcome unknown" in its message, and the caller decides (a
// fenced transaction re-reads).
// Each attempt's deadline is computed at call time from the monotonic
// `request_timeout` (GrpcDeadline).
//
// Thread-safe. Errors are absl::Status with gRPC's code and a message naming
// the call, the endpoint and etcd's answer.
#ifndef MONTA_SERVER_ETCD_CLIENT_H_
#define MONTA_SERVER_ETCD_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/grpc_security.h"
#include "server/etcd/kv.h"

namespace monta::etcd {

class LeaseKeepAlive;
class Watch;
struct Endpoint;

struct ClientOptions {
  // host:port of etcd members, tried in this order (then from the last one
  // that answered). 1..16 entries.
  std::vector<std::string> endpoints;
  // Mutual TLS to etcd with its own CA, certificate and key (re-read every
  // refresh_seconds), or plaintext when `insecure`. Errors name the flags
  // flag_prefix and insecure_flag (default here: --etcd_tls_*,
  // --etcd_insecure).
  GrpcSecurityOptions security = DefaultSecurity();
  // Deadline of one attempt at one endpoint.
  absl::Duration request_timeout = absl::Seconds(5);
  // How long an endpoint may take to connect before the next is tried.
  absl::Duration connect_timeout = absl::Seconds(2);
  // HTTP/2 keepalive pings while a call or stream is open: a member that
  // stops answering is given up after keepalive_time + keepalive_timeout.
  // etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time).
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // The cluster's limits: a request over them fails locally with
  // INVALID_ARGUMENT. A request may use max_request_bytes minus
  // kRaftEnvelopeBytes (etcd wraps it before comparing).
  int64_t max_request_bytes = kMaxRequestBytes;
  int max_txn_ops = kMaxTxnOps;
  // Largest response accepted (a Range page, a batch of watch events).
  int max_response_bytes = 64 << 20;
  // Bounds of the reconnect backoff of watches and keepalives.
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);

  static GrpcSecurityOptions DefaultSecurity();
};

// True for a write that failed after it was sent, without an answer saying
// whether etcd applied it (a deadline, a connection lost mid-call): the
// status carries a payload saying so. Re-read, or retry only what is safe to
// repeat (a create-if-absent, a fenced compare-and-put).
bool OutcomeUnknown(const absl::Status& status);

// etcd compares the request wrapped in its raft envelope (a header of <= 30
// bytes) with --max-request-bytes; the client keeps this much room.
inline constexpr int64_t kRaftEnvelopeBytes = 64;
// What a writer that packs operations into Txns within max_request_bytes
// keeps room for: a Txn's compares and framing, and each operation's own
// fields beside its key and value.
inline constexpr int64_t kTxnFramingBytes = 4096;
inline constexpr int64_t kOpOverheadBytes = 16;

class Client {
 public:
  // Validates the options (endpoints, TLS files) and makes one channel per
  // endpoint; connects lazily.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // KV. A linearizable Range (the default) reflects every write acknowledged
  // before it. OUT_OF_RANGE when `revision` was compacted.
  absl::StatusOr<RangeResult> Range(const RangeRequest& request);
  absl::StatusOr<RangeResult> Get(const std::string& key);
  // Every key of [key, range_end) at one revision, in pages of page_size
  // (each page its own Range at the revision of the first), handed to
  // `on_page` in key order; returns the revision. An error of `on_page` stops
  // the list and is returned. OUT_OF_RANGE when the revision is compacted
  // while paging: list again.
  absl::StatusOr<int64_t> ListPages(
      const ListRequest& request,
      const std::function<absl::Status(std::vector<KeyValue> page)>& on_page);
  // ListPages collected; RESOURCE_EXHAUSTED past `max_keys`.
  absl::StatusOr<RangeResult> List(const ListRequest& request, size_t max_keys);

  absl::StatusOr<PutResult> Put(const std::string& key,
                                const std::string& value, int64_t lease = 0,
                                bool prev_kv = false);
  absl::StatusOr<DeleteResult> Delete(const std::string& key,
                                      const std::string& range_end = "",
                                      bool prev_kv = false);
  // Refused locally (INVALID_ARGUMENT, before anything is sent) with more
  // than max_txn_ops compares or operations in one branch, or more than
  // max_request_bytes - kRaftEnvelopeBytes serialized.
  absl::StatusOr<TxnResult> Txn(const TxnRequest& txn);
  // The same, given up by `deadline` (monotonic): each attempt's deadline is
  // the earlier of request_timeout and it, and no endpoint is tried (or
  // waited for to connect) past it (DEADLINE_EXCEEDED, outcome unknown if
  // sent). For a writer that answers its callers within a bound
  // (etcd_store::RecordWriter).
  absl::StatusOr<TxnResult> Txn(const TxnRequest& txn, MonoTime deadline);
  // Discards the history before `revision` (Range and Watch before it fail
  // with OUT_OF_RANGE / a compacted batch). `physical`: returns once the
  // space is reclaimed.
  absl::Status Compact(int64_t revision, bool physical = false);

  // Leases. The TTL is whole seconds (>= 1; etcd raises it to its minimum,
  // about 1.5 election timeouts). etcd restarts a lease's TTL when its leader
  // changes, so a lease outlives its deadline then, never the reverse.
  absl::StatusOr<Lease> GrantLease(absl::Duration ttl);
  // NOT_FOUND when the lease is gone already.
  absl::Status RevokeLease(int64_t id);
  absl::StatusOr<LeaseStatus> LeaseTimeToLive(int64_t id, bool keys = false);
  // Keeps `lease` alive on its own stream (see lease_keepalive.h) until the
  // returned object is destroyed; `on_lost` runs once, from the keepalive's
  // thread, when the lease is lost.
  absl::StatusOr<std::unique_ptr<LeaseKeepAlive>> KeepAlive(
      const Lease& lease, std::function<void(const absl::Status&)> on_lost);

  // A watch on its own stream (see watch.h).
  absl::StatusOr<std::unique_ptr<Watch>> OpenWatch(const WatchOptions& options);

  // The endpoint the next request goes to first.
  std::string preferred_endpoint() const;
  const ClientOptions& options() const { return options_; }

 private:
  friend class LeaseKeepAlive;
  friend class Watch;
  enum class Retry { kRead, kWrite };

  explicit Client(ClientOptions options);
  // Runs `attempt` against the endpoints in turn (see the class comment),
  // none started past `deadline`.
  absl::Status Call(
      absl::string_view what, Retry retry,
      const std::function<absl::Status(Endpoint&, absl::Duration)>& attempt,
      MonoTime deadline = MonoTime::max());
  // Waits until `endpoint` is connected, up to connect_timeout or `deadline`
  // if earlier; false when it is not (its connection failed, or the time
  // passed). An endpoint already in TRANSIENT_FAILURE (a connection failed;
  // gRPC keeps it there until a reconnection succeeds) is waited for like any
  // other when `wait_in_failure` (streams, which have one endpoint to go to),
  // or false at once (Call, once another endpoint was reached).
  bool Connect(Endpoint& endpoint, MonoTime deadline = MonoTime::max(),
               bool wait_in_failure = true) const;
  // The order one call tries the endpoints in: from the preferred one on,
  // those in TRANSIENT_FAILURE last.
  std::vector<size_t> AttemptOrder() const;
  // After a failure at endpoint `index`: if it is the preferred one, the next
  // becomes preferred.
  void MoveOff(size_t index);
  // Streams (watches, keepalives) keep their own cursor into the endpoints,
  // starting at the preferred one and moving on when a stream breaks.
  size_t preferred_index() const;
  Endpoint& endpoint_at(size_t cursor) const;
  void Prefer(const Endpoint& endpoint);
  absl::Status CheckRequestSize(absl::string_view what, size_t bytes) const;

  const ClientOptions options_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  mutable absl::Mutex mu_;
  size_t preferred_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace monta::etcd

#endif  // MONTA_SERVER_ETCD_CLIENT_H_
