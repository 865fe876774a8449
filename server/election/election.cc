#include "server/election/election.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace monta::election {
namespace {

MonoTime Now() { return std::chrono::steady_clock::now(); }

// How long the campaign thread waits on a watch before looking at its flags
// again (a wake-up cancels the watch at once; this only bounds a missed one).
constexpr absl::Duration kWatchPoll = absl::Seconds(1);
// Attempts at deleting the key on Resign when etcd's answer is lost.
constexpr int kResignAttempts = 3;
constexpr absl::Duration kFencedRetryPause = absl::Milliseconds(100);

absl::Status ValidateOptions(const ElectionOptions& o) {
  if (absl::Status s = ValidatePrefix(o.prefix, "ElectionOptions.prefix");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ValidateReplicaId(o.replica_id, "ElectionOptions.replica_id");
      !s.ok()) {
    return s;
  }
  if (o.value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ElectionOptions.value: at most ", kMaxValueBytes,
                     " bytes (got ", o.value.size(), ")"));
  }
  if (o.lease_ttl < absl::Seconds(1) || o.lease_ttl > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ElectionOptions.lease_ttl: expected 1s..1h, got ",
                     absl::FormatDuration(o.lease_ttl)));
  }
  if (o.min_backoff <= absl::ZeroDuration() || o.max_backoff < o.min_backoff) {
    return absl::InvalidArgumentError(
        "ElectionOptions.min_backoff / max_backoff: expected 0 < min <= max");
  }
  return absl::OkStatus();
}

bool Transient(const absl::Status& s) {
  return etcd::OutcomeUnknown(s) || absl::IsUnavailable(s) ||
         absl::IsDeadlineExceeded(s);
}

}  // namespace

struct Election::Session {
  uint64_t id = 0;
  etcd::Lease lease;
  std::unique_ptr<etcd::LeaseKeepAlive> keepalive;
  // The candidate key's create revision (0 until created).
  int64_t create_revision = 0;
};

Election::Election(etcd::Client* client, ElectionOptions options)
    : client_(client),
      options_(std::move(options)),
      key_(CandidateKey(options_.prefix, options_.replica_id)) {}

absl::StatusOr<std::unique_ptr<Election>> Election::Start(
    etcd::Client* client, ElectionOptions options) {
  if (client == nullptr) {
    return absl::InvalidArgumentError("Election::Start: client is null");
  }
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  std::unique_ptr<Election> election(new Election(client, std::move(options)));
  election->thread_ = std::thread([e = election.get()] { e->Run(); });
  return election;
}

Election::~Election() {
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (state_.role == Role::kLeading) {
      seq = LoseLocked(state_.epoch,
                       absl::CancelledError("the election was closed"));
    }
    WakeLocked();
  }
  Deliver(seq);
  if (thread_.joinable()) thread_.join();
}

// ---- Queries ----

bool Election::leading() const { return epoch().has_value(); }

std::optional<int64_t> Election::epoch() const {
  absl::MutexLock lock(&mu_);
  if (state_.role != Role::kLeading || session_ == nullptr) return std::nullopt;
  if (Now() >= session_->keepalive->expiry()) return std::nullopt;
  return state_.epoch;
}

ElectionState Election::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

// ---- Callbacks ----

uint64_t Election::Enqueue(bool leading, int64_t epoch, absl::Status why) {
  Notice notice;
  notice.leading = leading;
  notice.epoch = epoch;
  notice.why = std::move(why);
  notice.seq = ++notice_seq_;
  notices_.push_back(std::move(notice));
  return notice_seq_;
}

void Election::Deliver(uint64_t seq) {
  if (seq == 0) return;
  mu_.Lock();
  if (delivering_) {
    if (deliverer_ == std::this_thread::get_id()) {
      // From inside a callback: the deliverer runs it when that returns.
      mu_.Unlock();
      return;
    }
    while (delivering_ && delivered_seq_ < seq) {
      WaitUntil(mu_, cv_, MonoTime::max());
    }
    if (delivered_seq_ >= seq) {
      mu_.Unlock();
      return;
    }
  }
  delivering_ = true;
  deliverer_ = std::this_thread::get_id();
  while (!notices_.empty()) {
    Notice notice = std::move(notices_.front());
    notices_.pop_front();
    mu_.Unlock();
    if (notice.leading) {
      if (options_.on_leading) options_.on_leading(notice.epoch);
    } else if (options_.on_stopped_leading) {
      options_.on_stopped_leading(notice.epoch, notice.why);
    }
    mu_.Lock();
    delivered_seq_ = notice.seq;
    cv_.notify_all();
  }
  delivering_ = false;
  deliverer_ = std::thread::id();
  cv_.notify_all();
  mu_.Unlock();
}

// ---- Losing ----

void Election::WakeLocked() {
  if (watch_ != nullptr) watch_->Cancel();
  cv_.notify_all();
}

bool Election::SessionOverLocked(const Session& session) const {
  return stopping_ || session_over_ || session_id_ != session.id;
}

uint64_t Election::LoseLocked(int64_t epoch, absl::Status why) {
  if (state_.role != Role::kLeading || state_.epoch != epoch) return 0;
  // First of all: nothing reports this replica leader from here on.
  SetRoleLocked(Role::kCampaigning);
  state_.epoch = 0;
  lost_epoch_ = epoch;
  lost_why_ = std::string(why.message());
  session_over_ = true;
  WakeLocked();
  return Enqueue(false, epoch, std::move(why));
}

void Election::Lose(int64_t epoch, absl::Status why) {
  uint64_t seq;
  {
    absl::MutexLock lock(&mu_);
    seq = LoseLocked(epoch, std::move(why));
  }
  Deliver(seq);
}

void Election::OnLeaseLost(uint64_t session_id, const absl::Status& why) {
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    if (session_id != session_id_) return;
    if (state_.role == Role::kLeading) seq = LoseLocked(state_.epoch, why);
    session_over_ = true;
    state_.last_error = why;
    WakeLocked();
  }
  Deliver(seq);
}

bool Election::CheckLeadingLocked(int64_t epoch, uint64_t* notice) {
  if (state_.role != Role::kLeading || state_.epoch != epoch ||
      session_ == nullptr) {
    return false;
  }
  if (Now() >= session_->keepalive->expiry()) {
    *notice = LoseLocked(
        epoch, absl::DeadlineExceededError(
                   "the lease's local expiry passed without a renewal (etcd "
                   "unreachable, or this process was paused)"));
    return false;
  }
  return true;
}

// ---- Fenced writes ----

absl::StatusOr<etcd::TxnResult> Election::FencedTxn(int64_t epoch,
                                                    const etcd::TxnRequest& txn,
                                                    absl::Duration retry_for) {
  const MonoTime give_up = MonoAfter(Now(), retry_for);
  while (true) {
    uint64_t seq = 0;
    std::string why;
    {
      absl::MutexLock lock(&mu_);
      if (!CheckLeadingLocked(epoch, &seq)) {
        why = lost_epoch_ == epoch ? lost_why_
                                   : "this replica does not lead with it";
        // Another thread may be delivering the loss: the refusal returns
        // after on_stopped_leading has.
        seq = notice_seq_;
      }
    }
    if (!why.empty()) {
      Deliver(seq);
      return NotLeaderError(epoch, why);
    }
    Fence fence;
    fence.key = key_;
    fence.epoch = epoch;
    absl::StatusOr<etcd::TxnResult> result =
        election::FencedTxn(*client_, fence, txn);
    if (result.ok()) return result;
    if (IsNotLeader(result.status())) {
      Lose(epoch, result.status());
      return result.status();
    }
    const absl::Duration left = MonoSince(Now(), give_up);
    if (!Transient(result.status()) || left <= absl::ZeroDuration()) {
      return result.status();
    }
    absl::SleepFor(std::min(kFencedRetryPause, left));
  }
}

// ---- Resign ----

absl::Status Election::Resign() {
  {
    absl::MutexLock lock(&mu_);
    // A callback runs on the thread delivering it (possibly inside Resign).
    if (delivering_ && deliverer_ == std::this_thread::get_id()) {
      return absl::FailedPreconditionError(
          "Election::Resign from inside an election callback");
    }
  }
  absl::MutexLock resign_lock(&resign_mu_);
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!resigned_) {
      resigned_ = true;
      stopping_ = true;
      if (state_.role == Role::kLeading) {
        seq = LoseLocked(state_.epoch, absl::CancelledError("resigned"));
      }
      state_.role = Role::kResigned;
      WakeLocked();
    }
  }
  Deliver(seq);
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  return resign_status_;
}

absl::Status Election::DeleteKey(const Session& session) {
  if (session.create_revision == 0) return absl::OkStatus();
  // Only this session's key, never a newer one of the same id: safe to repeat.
  etcd::TxnRequest txn;
  txn.compares = {etcd::Compare::CreateRevision(
      key_, etcd::Compare::Result::kEqual, session.create_revision)};
  txn.success = {etcd::Op::Delete(key_)};
  absl::Status deleted;
  for (int attempt = 0; attempt < kResignAttempts; ++attempt) {
    deleted = client_->Txn(txn).status();
    if (deleted.ok() || !Transient(deleted)) break;
  }
  return deleted;
}

absl::Status Election::Revoke(const Session& session, MonoTime give_up) {
  absl::Duration backoff = options_.min_backoff;
  while (true) {
    const absl::Status revoked = client_->RevokeLease(session.lease.id);
    if (revoked.ok() || absl::IsNotFound(revoked)) return absl::OkStatus();
    // etcd unreachable, or its leader changing: the old key would keep its
    // place in line (its TTL restarts with a new etcd leader), so try again
    // while it can matter, unless the Election is closing.
    if (!Transient(revoked) || Now() >= give_up || !Sleep(backoff)) {
      return revoked;
    }
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

// ---- The campaign ----

bool Election::Sleep(absl::Duration d) {
  const MonoTime until = MonoAfter(Now(), d);
  absl::MutexLock lock(&mu_);
  while (!stopping_ && !(session_ != nullptr && session_over_)) {
    if (WaitUntil(mu_, cv_, until)) break;
  }
  return !stopping_;
}

void Election::SetRoleLocked(Role role) {
  state_.role = stopping_ ? Role::kResigned : role;
}

void Election::RecordError(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  state_.last_error = error;
}

void Election::Run() {
  absl::Duration backoff = options_.min_backoff;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    absl::StatusOr<std::unique_ptr<Session>> session = OpenSession();
    if (!session.ok()) {
      RecordError(session.status());
      if (!Sleep(backoff)) break;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    backoff = options_.min_backoff;
    Campaign(**session);
    Close how;
    {
      absl::MutexLock lock(&mu_);
      how = HowToCloseLocked();
    }
    CloseSession(*std::move(session), how);
  }
}

absl::StatusOr<std::unique_ptr<Election::Session>> Election::OpenSession() {
  absl::StatusOr<etcd::Lease> lease = client_->GrantLease(options_.lease_ttl);
  if (!lease.ok()) return lease.status();
  auto session = std::make_unique<Session>();
  session->lease = *lease;
  {
    absl::MutexLock lock(&mu_);
    session->id = ++session_id_;
    session_over_ = false;
  }
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeepAlive>> keepalive =
      client_->KeepAlive(*lease,
                         [this, id = session->id](const absl::Status& why) {
                           OnLeaseLost(id, why);
                         });
  if (!keepalive.ok()) {
    client_->RevokeLease(lease->id).IgnoreError();
    return keepalive.status();
  }
  session->keepalive = *std::move(keepalive);
  {
    absl::MutexLock lock(&mu_);
    session_ = session.get();
    state_.lease = lease->id;
    state_.create_revision = 0;
    ++state_.sessions;
  }
  if (absl::Status created = CreateKey(*session); !created.ok()) {
    Close how;
    {
      absl::MutexLock lock(&mu_);
      how = HowToCloseLocked();
    }
    CloseSession(std::move(session), how);
    return created;
  }
  return session;
}

absl::Status Election::CreateKey(Session& session) {
  etcd::TxnRequest txn;
  txn.compares = {
      etcd::Compare::CreateRevision(key_, etcd::Compare::Result::kEqual, 0)};
  txn.success = {etcd::Op::Put(key_, options_.value, session.lease.id)};
  txn.failure = {etcd::Op::Get(key_)};
  absl::Duration backoff = options_.min_backoff;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (SessionOverLocked(session)) {
        return absl::CancelledError(
            "the session ended before its key was made");
      }
    }
    absl::StatusOr<etcd::TxnResult> result = client_->Txn(txn);
    if (!result.ok()) {
      // A lost answer: the put may have landed; the next attempt's failure
      // branch tells (the key on this session's lease is ours).
      if (!Transient(result.status())) return result.status();
      RecordError(result.status());
      Sleep(backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    if (result->succeeded) {
      session.create_revision = result->revision;
      break;
    }
    const std::vector<etcd::KeyValue>& kvs = result->results.empty()
                                                 ? std::vector<etcd::KeyValue>()
                                                 : result->results[0].range.kvs;
    if (!kvs.empty() && kvs[0].lease == session.lease.id) {
      session.create_revision = kvs[0].create_revision;
      break;
    }
    // An older key of this id (a previous process of this replica whose
    // lease has not run out, or a second process with the same id): wait
    // until it goes.
    RecordError(absl::AlreadyExistsError(
        "the candidate key of this replica id is held by another lease; "
        "waiting until it goes"));
    if (WatchKey(session, key_, result->revision + 1) == Wake::kEnd) {
      return absl::CancelledError("the session ended before its key was made");
    }
  }
  absl::MutexLock lock(&mu_);
  state_.create_revision = session.create_revision;
  SetRoleLocked(Role::kFollowing);
  state_.last_error = absl::OkStatus();
  return absl::OkStatus();
}

Election::Close Election::HowToCloseLocked() const {
  if (!stopping_) return Close::kRevoke;
  // Closing without Resign sends nothing (as a crash would).
  return resigned_ ? Close::kResign : Close::kQuiet;
}

void Election::CloseSession(std::unique_ptr<Session> session, Close how) {
  {
    absl::MutexLock lock(&mu_);
    if (session_ == session.get()) session_ = nullptr;
    session_over_ = true;
    state_.lease = 0;
    state_.create_revision = 0;
    SetRoleLocked(Role::kCampaigning);
  }
  // No keepalive past this point: the lease's loss is not news.
  session->keepalive.reset();
  if (how == Close::kQuiet) return;
  // The owner has stopped leading before its key goes (Resign, or a lease
  // etcd may still hold): on_stopped_leading has returned, whichever thread
  // runs it.
  uint64_t pending;
  {
    absl::MutexLock lock(&mu_);
    pending = notice_seq_;
  }
  Deliver(pending);
  absl::Status status;
  if (how == Close::kResign) {
    // The key first, so the next candidate's watch fires even if the
    // revoke fails; the revoke takes the key too.
    status = DeleteKey(*session);
    status.Update(Revoke(*session, Now()));
  } else {
    status = Revoke(*session, MonoAfter(Now(), 2 * options_.lease_ttl));
  }
  absl::MutexLock lock(&mu_);
  if (how == Close::kResign) resign_status_ = status;
  if (!status.ok()) state_.last_error = status;
}

void Election::Campaign(Session& session) {
  while (Step(session)) {
  }
}

bool Election::Step(Session& session) {
  {
    absl::MutexLock lock(&mu_);
    if (SessionOverLocked(session)) return false;
  }
  absl::StatusOr<Candidates> candidates =
      ListCandidates(*client_, options_.prefix);
  if (!candidates.ok()) {
    RecordError(candidates.status());
    return Sleep(options_.min_backoff);
  }
  const std::vector<Candidate>& all = candidates->by_age;
  auto mine = std::find_if(all.begin(), all.end(), [&](const Candidate& c) {
    return c.replica_id == options_.replica_id;
  });
  {
    absl::MutexLock lock(&mu_);
    if (SessionOverLocked(session)) return false;
    if (mine == all.end() || mine->create_revision != session.create_revision) {
      // The key is gone (deleted, or expired in etcd): this session is over.
      session_over_ = true;
      state_.last_error = absl::NotFoundError(
          "this replica's candidate key is gone; campaigning again");
      return false;
    }
    state_.leader_id = all.front().replica_id;
    state_.predecessor_id =
        mine == all.begin() ? "" : std::prev(mine)->replica_id;
    state_.last_error = absl::OkStatus();
  }
  if (mine == all.begin()) {
    Lead(session, candidates->revision);
    return false;
  }
  const std::string predecessor =
      CandidateKey(options_.prefix, std::prev(mine)->replica_id);
  return WatchKey(session, predecessor, candidates->revision + 1) != Wake::kEnd;
}

void Election::Lead(Session& session, int64_t revision) {
  const int64_t epoch = session.create_revision;
  uint64_t seq;
  {
    absl::MutexLock lock(&mu_);
    if (SessionOverLocked(session)) return;
    state_.role = Role::kLeading;
    state_.epoch = epoch;
    ++state_.terms;
    seq = Enqueue(true, epoch, absl::OkStatus());
  }
  Deliver(seq);
  while (true) {
    const Wake wake = WatchKey(session, key_, revision + 1);
    if (wake == Wake::kEnd) return;
    if (wake == Wake::kDeleted) {
      Lose(epoch, absl::NotFoundError("the leader key was deleted"));
      return;
    }
    // The watch ended (compaction): look at the key itself.
    absl::StatusOr<etcd::RangeResult> key = client_->Get(key_);
    if (!key.ok()) {
      RecordError(key.status());
      if (!Sleep(options_.min_backoff)) return;
      continue;
    }
    if (key->kvs.empty() || key->kvs[0].create_revision != epoch) {
      Lose(epoch, absl::NotFoundError("the leader key was deleted"));
      return;
    }
    revision = key->revision;
  }
}

Election::Wake Election::WatchKey(Session& session, const std::string& key,
                                  int64_t revision) {
  etcd::WatchOptions options;
  options.key = key;
  options.start_revision = revision;
  absl::StatusOr<std::unique_ptr<etcd::Watch>> watch =
      client_->OpenWatch(options);
  if (!watch.ok()) {
    RecordError(watch.status());
    return Sleep(options_.min_backoff) ? Wake::kRecheck : Wake::kEnd;
  }
  {
    absl::MutexLock lock(&mu_);
    if (SessionOverLocked(session)) return Wake::kEnd;
    watch_ = watch->get();
  }
  Wake wake = Wake::kNone;
  while (wake == Wake::kNone) {
    absl::Duration timeout = kWatchPoll;
    uint64_t seq = 0;
    {
      absl::MutexLock lock(&mu_);
      if (state_.role == Role::kLeading) {
        // The leader also wakes at its lease's local expiry.
        CheckLeadingLocked(state_.epoch, &seq);
        timeout = std::clamp(MonoSince(Now(), session.keepalive->expiry()),
                             absl::Milliseconds(1), kWatchPoll);
      }
      if (SessionOverLocked(session)) wake = Wake::kEnd;
    }
    Deliver(seq);
    if (wake != Wake::kNone) break;
    absl::StatusOr<etcd::WatchBatch> batch = (*watch)->Next(timeout);
    if (!batch.ok()) {
      if (!absl::IsDeadlineExceeded(batch.status())) wake = Wake::kRecheck;
      continue;
    }
    for (const etcd::Event& event : batch->events) {
      if (event.type == etcd::Event::Type::kDelete) {
        wake = Wake::kDeleted;
      }
    }
    if (batch->compact_revision > 0) wake = Wake::kRecheck;
  }
  {
    absl::MutexLock lock(&mu_);
    watch_ = nullptr;
    if (wake != Wake::kEnd && SessionOverLocked(session)) wake = Wake::kEnd;
  }
  watch->reset();
  return wake;
}

}  // namespace monta::election
