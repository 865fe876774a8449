#include "server/etcd/lease_keepalive.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/etcd/client.h"
#include "server/etcd/internal.h"

namespace monta::etcd {
namespace {

MonoTime Now() { return std::chrono::steady_clock::now(); }

}  // namespace

LeaseKeepAlive::LeaseKeepAlive(Client* client, const Lease& lease,
                               std::function<void(const absl::Status&)> on_lost)
    : client_(client),
      backoff_(client->options().min_backoff, client->options().max_backoff),
      id_(lease.id),
      ttl_(absl::Seconds(lease.ttl_seconds)),
      on_lost_(std::move(on_lost)) {
  {
    absl::MutexLock lock(&mu_);
    expiry_ = lease.expiry;
  }
  thread_ = std::thread([this] { Run(); });
}

LeaseKeepAlive::~LeaseKeepAlive() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

absl::Status LeaseKeepAlive::status() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

MonoTime LeaseKeepAlive::expiry() const {
  absl::MutexLock lock(&mu_);
  return expiry_;
}

int64_t LeaseKeepAlive::renewals() const {
  absl::MutexLock lock(&mu_);
  return renewals_;
}

std::string LeaseKeepAlive::endpoint() const {
  absl::MutexLock lock(&mu_);
  return endpoint_;
}

bool LeaseKeepAlive::WaitLost(absl::Duration timeout) const {
  const MonoTime deadline = MonoAfter(Now(), timeout);
  absl::MutexLock lock(&mu_);
  while (lost_.ok()) {
    if (WaitUntil(mu_, cv_, deadline)) break;
  }
  return !lost_.ok();
}

absl::Duration LeaseKeepAlive::answer_timeout() const {
  // A renewal goes through etcd's leader; give it a third of the TTL (and at
  // least a second) before trying another member.
  return std::max(ttl_ / 3, absl::Seconds(1));
}

void LeaseKeepAlive::Lose(absl::Status why) {
  if (!lost_.ok()) return;
  lost_ = std::move(why);
  cv_.notify_all();
}

void LeaseKeepAlive::OnAnswer(int64_t ttl_seconds) {
  absl::MutexLock lock(&mu_);
  if (sent_.empty()) return;  // not an answer to us
  const MonoTime sent = sent_.front();
  sent_.pop_front();
  if (ttl_seconds <= 0) {
    Lose(absl::NotFoundError(absl::StrCat(
        "etcd lease ", id_, " is gone: etcd answered its keepalive with TTL ",
        ttl_seconds, " (revoked, or expired in etcd)")));
    return;
  }
  expiry_ = std::max(expiry_, MonoAfter(sent, absl::Seconds(ttl_seconds)));
  ++renewals_;
  cv_.notify_all();
}

void LeaseKeepAlive::Run() {
  size_t cursor = client_->preferred_index();
  int failures = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || !lost_.ok()) break;
    }
    const bool renewed = RunStream(client_->endpoint_at(cursor));
    // The next stream goes to the next member, at once after a stream that
    // renewed, after a growing backoff when none do.
    ++cursor;
    failures = renewed ? 0 : failures + 1;
    WaitBackoff(failures == 0 ? absl::ZeroDuration()
                              : backoff_.Delay(failures));
  }
  absl::Status lost;
  {
    absl::MutexLock lock(&mu_);
    // The owner is destroying this object: no callback into it.
    if (stop_) return;
    lost = lost_;
  }
  if (on_lost_) on_lost_(lost);
}

void LeaseKeepAlive::WaitBackoff(absl::Duration backoff) {
  absl::MutexLock lock(&mu_);
  const MonoTime until = std::min(MonoAfter(Now(), backoff), expiry_);
  while (!stop_ && lost_.ok()) {
    const bool timed_out = WaitUntil(mu_, cv_, until);
    if (Now() >= expiry_) {
      Lose(absl::DeadlineExceededError(absl::StrCat(
          "etcd lease ", id_,
          " not renewed before its TTL ran out: no etcd member answered its "
          "keepalives")));
    }
    if (timed_out) break;
  }
}

bool LeaseKeepAlive::RunStream(Endpoint& endpoint) {
  const int64_t renewals_before = renewals();
  // Not past the lease's expiry: its loss is reported then, not later.
  if (!client_->Connect(endpoint, expiry())) return false;
  grpc::ClientContext context;
  PrepareContext(context, absl::ZeroDuration());
  std::unique_ptr<
      grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                               etcdserverpb::LeaseKeepAliveResponse>>
      stream = endpoint.lease->LeaseKeepAlive(&context);
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    context_ = &context;
    endpoint_ = endpoint.address;
    sent_.clear();
    stream_broken_ = false;
  }
  std::thread reader([&] {
    etcdserverpb::LeaseKeepAliveResponse response;
    while (stream->Read(&response)) {
      if (response.id() == id_) OnAnswer(response.ttl());
    }
    absl::MutexLock lock(&mu_);
    stream_broken_ = true;
    cv_.notify_all();
  });
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(id_);
  {
    absl::MutexLock lock(&mu_);
    Supervise([&] { return stream->Write(request); });
    context_ = nullptr;
    endpoint_.clear();
  }
  context.TryCancel();
  reader.join();
  stream->Finish().IgnoreError();
  return renewals() > renewals_before;
}

void LeaseKeepAlive::Supervise(const std::function<bool()>& write) {
  const absl::Duration interval = std::max(ttl_ / 3, absl::Milliseconds(100));
  MonoTime next_send = Now();
  while (!stop_ && lost_.ok() && !stream_broken_) {
    const MonoTime now = Now();
    if (now >= expiry_) {
      Lose(absl::DeadlineExceededError(
          absl::StrCat("etcd lease ", id_,
                       " not renewed before its TTL ran out: its keepalives "
                       "went unanswered")));
      return;
    }
    MonoTime wake = std::min(next_send, expiry_);
    if (!sent_.empty()) {
      const MonoTime give_up = MonoAfter(sent_.front(), answer_timeout());
      if (now >= give_up) return;  // this member does not answer: next one
      wake = std::min(give_up, expiry_);
    } else if (now >= next_send) {
      sent_.push_back(now);
      next_send = MonoAfter(now, interval);
      mu_.Unlock();
      const bool written = write();
      mu_.Lock();
      if (!written) return;
      continue;
    }
    WaitUntil(mu_, cv_, wake);
  }
}

}  // namespace monta::etcd
