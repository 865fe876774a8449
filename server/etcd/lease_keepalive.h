// Keeps one etcd lease alive (Client::KeepAlive) and says at once when it is
// lost.
//
// A thread of its own holds a LeaseKeepAlive stream to one member and sends a
// keepalive every TTL/3. Each answer moves the lease's local expiry to the time
// that keepalive was sent plus the TTL etcd answered, on the monotonic clock:
// etcd's own expiry is never earlier, so while this object says "alive" no
// one else can hold what the lease guards. When a member does not answer
// within TTL/3 (or the stream breaks) the next endpoint is tried.
//
// The lease is lost, and `on_lost` runs once from the keepalive's thread,
// when etcd answers TTL <= 0 (revoked, or expired in etcd) or when the local
// expiry passes without a renewal. Loss is final: grant a new lease.
#ifndef MONTA_SERVER_ETCD_LEASE_KEEPALIVE_H_
#define MONTA_SERVER_ETCD_LEASE_KEEPALIVE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "server/etcd/kv.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace monta::etcd {

class Client;
struct Endpoint;

class LeaseKeepAlive {
 public:
  // Stops keeping the lease alive; does not revoke it (Client::RevokeLease).
  ~LeaseKeepAlive();
  LeaseKeepAlive(const LeaseKeepAlive&) = delete;
  LeaseKeepAlive& operator=(const LeaseKeepAlive&) = delete;

  int64_t id() const { return id_; }
  // OK while the lease is held; why it was lost after.
  absl::Status status() const;
  bool lost() const { return !status().ok(); }
  // The lease holds at least until this point of the monotonic clock.
  MonoTime expiry() const;
  // Keepalives etcd answered with a positive TTL.
  int64_t renewals() const;
  // The member the keepalive stream is on now ("" between streams).
  std::string endpoint() const;
  // Waits up to `timeout` (monotonic) for the loss; true when lost.
  bool WaitLost(absl::Duration timeout) const;

 private:
  friend class Client;
  LeaseKeepAlive(Client* client, const Lease& lease,
                 std::function<void(const absl::Status&)> on_lost);

  void Run();
  // One stream at `endpoint`, until it breaks, a member stops answering, the
  // lease is lost or Stop; true when etcd renewed the lease on it.
  bool RunStream(Endpoint& endpoint);
  // Sends keepalives on the open stream and watches for answers and the
  // expiry; returns when the stream should end.
  void Supervise(const std::function<bool()>& write)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAnswer(int64_t ttl_seconds);
  void Lose(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits out a reconnect backoff, or until stopped, lost or expired.
  void WaitBackoff(absl::Duration backoff);
  absl::Duration answer_timeout() const;

  Client* const client_;
  // Reconnects when no member renews (the client's min_backoff doubling to
  // max_backoff, jittered).
  Backoff backoff_;
  const int64_t id_;
  const absl::Duration ttl_;
  const std::function<void(const absl::Status&)> on_lost_;

  mutable absl::Mutex mu_;
  mutable std::condition_variable_any cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  MonoTime expiry_ ABSL_GUARDED_BY(mu_);
  int64_t renewals_ ABSL_GUARDED_BY(mu_) = 0;
  // When each unanswered keepalive was sent (etcd answers in order).
  std::deque<MonoTime> sent_ ABSL_GUARDED_BY(mu_);
  bool stream_broken_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string endpoint_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace monta::etcd

#endif  // MONTA_SERVER_ETCD_LEASE_KEEPALIVE_H_
