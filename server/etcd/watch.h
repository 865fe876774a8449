// A watch on a key or range of etcd (Client::OpenWatch): every put and delete
// from a revision on, in revision order, each exactly once, across member
// failures.
//
// A thread of its own holds a Watch stream to one member. When the stream
// breaks (the member died, lost its leader: `hasleader`, or stopped answering
// HTTP/2 pings) it reconnects to the next member and resumes from the
// revision after the last event it queued, so nothing is lost or repeated.
// etcd sends whole revisions in a response, and a response is queued whole.
//
// When etcd has compacted the revision the watch needs (the watch fell behind,
// or it was started from an old revision), Next() returns one batch with
// compact_revision R, then FAILED_PRECONDITION: the caller lists again at a
// revision >= R and opens a new watch from that revision + 1.
//
// The queue holds at most max_queued_events (or one response when a single
// response is larger); while it is full the watch stops reading, and etcd
// holds the rest.
#ifndef MONTA_SERVER_ETCD_WATCH_H_
#define MONTA_SERVER_ETCD_WATCH_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "server/etcd/kv.h"

namespace etcdserverpb {
class WatchRequest;
class WatchResponse;
}  // namespace etcdserverpb

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace monta::etcd {

class Client;
struct Endpoint;

class Watch {
 public:
  // Cancels the watch and waits for its thread.
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // The next batch, waiting up to `timeout` on the monotonic clock:
  // DEADLINE_EXCEEDED when none came. Once the watch has ended (after the
  // compacted batch, when etcd cancelled it, or after Cancel) and the queue
  // is empty, the reason: FAILED_PRECONDITION or CANCELLED.
  absl::StatusOr<WatchBatch> Next(absl::Duration timeout);

  // Asks etcd for a progress notification (a batch with progress = true); a
  // no-op while the watch is between streams.
  // etcd 3.4.23 answers with the store's current revision, which is not
  // proof that every event up to it was delivered (see WatchBatch).
  void RequestProgress();

  // Ends the watch: Next returns what is queued, then CANCELLED.
  void Cancel();

  // The revision a reconnect resumes from: the last queued event's + 1 (0
  // until known when the watch started from "now").
  int64_t next_revision() const;
  // The member the stream is on now ("" while reconnecting).
  std::string endpoint() const;
  // Streams opened after the first.
  int reconnects() const;
  // Events queued for Next() now.
  size_t queued_events() const;

 private:
  friend class Client;
  Watch(Client* client, WatchOptions options);

  enum class StreamEnd { kFailed, kBroken, kEnded };
  void Run();
  StreamEnd RunStream(Endpoint& endpoint);
  // Handles one response; false when the watch ended or was cancelled.
  bool OnResponse(const etcdserverpb::WatchResponse& response);
  // Queues `batch`, waiting for room; false when cancelled.
  bool Push(WatchBatch batch);
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void End(absl::Status why);
  void WaitBackoff(absl::Duration backoff);

  Client* const client_;
  const WatchOptions options_;
  // Reconnects to members that cannot be reached (the client's min_backoff
  // doubling to max_backoff, jittered).
  Backoff backoff_;

  mutable absl::Mutex mu_;
  mutable std::condition_variable_any cv_;
  std::deque<WatchBatch> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_events_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_events_ ABSL_GUARDED_BY(mu_) =
      0;  // of the batch Push waits with
  int64_t next_revision_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Set once the watch has ended for good (non-OK: why).
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
  std::string endpoint_ ABSL_GUARDED_BY(mu_);
  int reconnects_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;

  // Serializes writes on the open stream (the create request, progress
  // requests) and its teardown. Taken before mu_.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The open stream's write, as a callable (nullptr between streams).
  std::function<bool(const etcdserverpb::WatchRequest&)> write_
      ABSL_GUARDED_BY(write_mu_);

  std::thread thread_;
};

}  // namespace monta::etcd

#endif  // MONTA_SERVER_ETCD_WATCH_H_
