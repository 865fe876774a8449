// One leader among the planner's replicas, fenced (issue 20, item 5).
//
// Each replica runs one Election. It holds one etcd lease (granted by it, kept
// alive by etcd::LeaseKeepAlive) and puts its candidate key
// `<prefix>/election/<replica id>` on that lease with a create-if-absent
// transaction. The candidate with the lowest create revision leads; its epoch
// is that revision. A follower watches only the candidate just before it (no
// herd) and looks again when that key goes; the leader watches its own key.
//
// A leader stops leading AT ONCE, calling `on_stopped_leading` before
// anything else the library does, when its lease is lost (etcd says it is
// gone, or the lease's local expiry on the monotonic clock passed without a
// renewal: etcd unreachable), when its key is deleted, or when a fenced write
// is refused by etcd's compare. It never reports itself leader for that epoch
// again: the session (lease, key) that led is dropped, and the replica
// campaigns again with a new lease and key, at the back of the line.
//
// Every write of a leader goes through FencedTxn: its transaction compares
// `create_revision(<its key>) == epoch` first, so a leader that lost its key
// lands nothing (fence.h). The epoch (int64) also goes into commands to
// agents, which ignore an older one.
//
// Resign() hands over without waiting for the TTL: it stops leading, deletes
// the key and revokes the lease, and the next candidate leads as soon as its
// watch sees the delete.
//
// What it rests on (server/election/README.md): while leading() is true, the
// lease's local expiry (the send time of the last answered keepalive + TTL)
// has not passed, and etcd expires a lease no earlier than that; a candidate
// leads only after every older key is gone. etcd restarts a lease's TTL when
// it changes leader, so after an etcd leader change a dead replica's key
// may outlive its TTL (by up to a TTL plus an election), never the reverse.
//
// Thread-safe. The callbacks run on the library's threads (the campaign, the
// keepalive) or on the thread whose FencedTxn found the loss; they are never
// concurrent and always in order (on_leading(E) before
// on_stopped_leading(E)). A callback may call leading(), epoch(), state() and
// FencedTxn; it must not call Resign() (refused) or destroy the Election.
#ifndef MONTA_SERVER_ELECTION_ELECTION_H_
#define MONTA_SERVER_ELECTION_ELECTION_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/election/candidates.h"
#include "server/election/fence.h"
#include "server/etcd/client.h"
#include "server/etcd/kv.h"
#include "server/etcd/lease_keepalive.h"
#include "server/etcd/watch.h"

namespace monta::election {

struct ElectionOptions {
  // The key prefix of this planner's state in etcd, e.g. "/monta"
  // (ValidatePrefix).
  std::string prefix;
  // This replica's name, unique among the replicas (e.g. its pod name). A
  // second process with the same id waits until the first's key is gone.
  std::string replica_id;
  // What the candidate key holds for readers (e.g. the replica's address);
  // at most kMaxValueBytes.
  std::string value;
  // The lease's TTL: how long a dead or paused leader keeps leading at most
  // (plus etcd's expiry check; see the README). Whole seconds, 1 s .. 1 h;
  // etcd raises it to its minimum (about 1.5 election timeouts).
  absl::Duration lease_ttl = absl::Seconds(10);
  // Called when this replica starts leading with `epoch`.
  std::function<void(int64_t epoch)> on_leading;
  // Called when it stops: at once, before the library does anything else
  // about the loss. `why`: what ended it (the lease lost, the key deleted, a
  // fenced write refused, Resign, the Election destroyed).
  std::function<void(int64_t epoch, const absl::Status& why)>
      on_stopped_leading;
  // Backoff between attempts when etcd fails (doubling up to the max).
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
};

enum class Role {
  kCampaigning,  // no candidate key yet (starting, or etcd failing)
  kFollowing,    // a candidate behind another
  kLeading,
  kResigned,  // Resign() was called, or the Election is closing
};

// A snapshot for status pages and tests.
struct ElectionState {
  Role role = Role::kCampaigning;
  // Leading: the epoch; else 0.
  int64_t epoch = 0;
  // This replica's candidate key's create revision (0: none now).
  int64_t create_revision = 0;
  int64_t lease = 0;
  // Who leads according to this replica's last look (may be itself; empty
  // when unknown), and the candidate this one waits for (following).
  std::string leader_id;
  std::string predecessor_id;
  // Terms led and sessions (lease + key) opened since Start.
  int64_t terms = 0;
  int64_t sessions = 0;
  // The last etcd error the campaign met (OK when none since the last
  // success).
  absl::Status last_error;
};

class Election {
 public:
  // Validates the options and starts campaigning on a thread of its own.
  // `client` must outlive the Election.
  static absl::StatusOr<std::unique_ptr<Election>> Start(
      etcd::Client* client, ElectionOptions options);
  // Stops campaigning. A leader stops leading (on_stopped_leading, "closed")
  // first. Sends nothing to etcd: the key stays until the lease's TTL runs
  // out, as after a crash; call Resign() to hand over at once.
  ~Election();
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  // True while this replica leads: it was elected and has not lost its key
  // or lease, and the lease's local expiry has not passed (checked here, on
  // the monotonic clock).
  bool leading() const;
  // The epoch while leading(); nullopt otherwise.
  std::optional<int64_t> epoch() const;
  ElectionState state() const;
  // This replica's candidate key.
  const std::string& key() const { return key_; }

  // A write of the leader of `epoch`: `txn` with the fence (AddFence). Refused
  // before sending (NotLeaderError) when this replica does not lead with
  // `epoch` now. When etcd refuses the fence this replica stops leading
  // (on_stopped_leading runs before this returns, unless called from inside
  // a callback: then right after that callback) and the NotLeaderError comes
  // back. With `retry_for` > 0, a txn that ended UNAVAILABLE or with an
  // unknown outcome (etcd lost its leader mid-call) is sent again while this
  // replica still leads with `epoch`, for up to that long: only for a txn that
  // is safe to repeat (a put of a whole value, a create-if-absent, a compare
  // on a mod revision).
  absl::StatusOr<etcd::TxnResult> FencedTxn(
      int64_t epoch, const etcd::TxnRequest& txn,
      absl::Duration retry_for = absl::ZeroDuration());

  // Stops campaigning for good and hands over: a leader stops leading
  // (on_stopped_leading, CANCELLED "resigned") first, then the key is deleted
  // (only if it is still this session's) and the lease revoked. Returns
  // etcd's error if either failed (the key then goes when the lease's TTL
  // runs out). Idempotent. FAILED_PRECONDITION from inside a callback.
  absl::Status Resign();

 private:
  struct Session;
  struct Notice {
    bool leading = false;
    int64_t epoch = 0;
    absl::Status why;
    uint64_t seq = 0;
  };
  enum class Wake { kNone, kDeleted, kRecheck, kEnd };

  Election(etcd::Client* client, ElectionOptions options);

  void Run();
  // Grants a lease, keeps it alive and creates the candidate key; waits while
  // an older key of the same id exists.
  absl::StatusOr<std::unique_ptr<Session>> OpenSession();
  absl::Status CreateKey(Session& session);
  // Follows and leads with `session` until it ends (lost, key gone, stop).
  void Campaign(Session& session);
  // One look at the candidates: leads, or waits for the predecessor; false
  // when the session is over.
  bool Step(Session& session);
  void Lead(Session& session, int64_t revision);
  // Watches `key` from `revision` until it is deleted (kDeleted), the
  // watch ends or the etcd answer needs a fresh look (kRecheck), or the
  // session is over (kEnd). The leader's wait also ends at its lease's
  // local expiry.
  Wake WatchKey(Session& session, const std::string& key, int64_t revision);
  // How a session ends: revoked (lost; the replica campaigns again),
  // deleted and revoked (Resign), or without a word to etcd (destructor).
  enum class Close { kRevoke, kResign, kQuiet };
  Close HowToCloseLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseSession(std::unique_ptr<Session> session, Close how);
  // The session's key, if it is still the one it created (Resign).
  absl::Status DeleteKey(const Session& session);
  // Revokes the session's lease, retrying transient failures until
  // `give_up` unless the Election is closing.
  absl::Status Revoke(const Session& session, MonoTime give_up);

  // Stops leading `epoch` (if this replica leads with it) and delivers
  // on_stopped_leading; the session that led is over.
  void Lose(int64_t epoch, absl::Status why);
  // Lose while mu_ is held: returns the notice's sequence number to Deliver
  // (0: nothing to deliver).
  uint64_t LoseLocked(int64_t epoch, absl::Status why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLeaseLost(uint64_t session_id, const absl::Status& why);
  // Leading and the lease's local expiry not passed; false after calling
  // LoseLocked when it has.
  bool CheckLeadingLocked(int64_t epoch, uint64_t* notice)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the queued callbacks in order until `seq` is delivered (see the
  // class comment).
  void Deliver(uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t Enqueue(bool leading, int64_t epoch, absl::Status why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current wait of the campaign thread (its watch, its backoff).
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SessionOverLocked(const Session& session) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits up to `d` or until woken; false when stopping.
  bool Sleep(absl::Duration d);
  void RecordError(const absl::Status& error);
  // The role after a session's key is made or lost (kResigned stays).
  void SetRoleLocked(Role role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  etcd::Client* const client_;
  const ElectionOptions options_;
  const std::string key_;

  mutable absl::Mutex mu_;
  mutable std::condition_variable_any cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool resigned_ ABSL_GUARDED_BY(mu_) = false;
  // The campaign's current session (null between sessions); over once it
  // lost its lease or key, or stopped leading: it never leads again.
  Session* session_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t session_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool session_over_ ABSL_GUARDED_BY(mu_) = false;
  ElectionState state_ ABSL_GUARDED_BY(mu_);
  // The last epoch lost and why (for NotLeaderError).
  int64_t lost_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string lost_why_ ABSL_GUARDED_BY(mu_);
  // The watch the campaign thread waits on (cancelled to wake it).
  etcd::Watch* watch_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Callbacks to run, in order; one thread runs them at a time.
  std::deque<Notice> notices_ ABSL_GUARDED_BY(mu_);
  uint64_t notice_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t delivered_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id deliverer_ ABSL_GUARDED_BY(mu_);
  absl::Status resign_status_ ABSL_GUARDED_BY(mu_);
  // Serializes Resign (it joins the campaign thread).
  absl::Mutex resign_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  std::thread thread_;
};

}  // namespace monta::election

#endif  // MONTA_SERVER_ELECTION_ELECTION_H_
