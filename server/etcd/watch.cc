#include "server/etcd/watch.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/etcd/client.h"
#include "server/etcd/internal.h"

namespace monta::etcd {
namespace {

MonoTime Now() { return std::chrono::steady_clock::now(); }

constexpr size_t kMaxReasonBytes = 256;

}  // namespace

Watch::Watch(Client* client, WatchOptions options)
    : client_(client),
      options_(std::move(options)),
      backoff_(client->options().min_backoff, client->options().max_backoff) {
  {
    absl::MutexLock lock(&mu_);
    next_revision_ = options_.start_revision;
  }
  thread_ = std::thread([this] { Run(); });
}

Watch::~Watch() {
  Cancel();
  thread_.join();
}

void Watch::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (ended_.ok()) ended_ = absl::CancelledError("etcd watch cancelled");
  if (context_ != nullptr) context_->TryCancel();
  cv_.notify_all();
}

int64_t Watch::next_revision() const {
  absl::MutexLock lock(&mu_);
  return next_revision_;
}

std::string Watch::endpoint() const {
  absl::MutexLock lock(&mu_);
  return endpoint_;
}

size_t Watch::queued_events() const {
  absl::MutexLock lock(&mu_);
  return queued_events_;
}

int Watch::reconnects() const {
  absl::MutexLock lock(&mu_);
  return reconnects_;
}

absl::StatusOr<WatchBatch> Watch::Next(absl::Duration timeout) {
  const MonoTime deadline = MonoAfter(Now(), timeout);
  absl::MutexLock lock(&mu_);
  while (queue_.empty() && ended_.ok()) {
    if (WaitUntil(mu_, cv_, deadline)) break;
  }
  if (!queue_.empty()) {
    WatchBatch batch = std::move(queue_.front());
    queue_.pop_front();
    queued_events_ -= batch.events.size();
    return batch;
  }
  if (!ended_.ok()) return ended_;
  return absl::DeadlineExceededError(absl::StrCat(
      "etcd watch: nothing within ", absl::FormatDuration(timeout)));
}

void Watch::RequestProgress() {
  absl::MutexLock lock(&write_mu_);
  if (!write_) return;
  etcdserverpb::WatchRequest request;
  request.mutable_progress_request();
  write_(request);
}

void Watch::End(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (ended_.ok()) ended_ = std::move(why);
  cv_.notify_all();
}

bool Watch::HasRoom() const {
  return cancelled_ || queue_.empty() ||
         queued_events_ + pending_events_ <= options_.max_queued_events;
}

bool Watch::Push(WatchBatch batch) {
  absl::MutexLock lock(&mu_);
  pending_events_ = batch.events.size();
  mu_.Await(absl::Condition(this, &Watch::HasRoom));
  if (cancelled_) return false;
  if (!batch.events.empty()) {
    next_revision_ = batch.events.back().kv.mod_revision + 1;
  }
  queued_events_ += batch.events.size();
  queue_.push_back(std::move(batch));
  cv_.notify_all();
  return true;
}

bool Watch::OnResponse(const etcdserverpb::WatchResponse& response) {
  if (response.compact_revision() > 0) {
    WatchBatch batch;
    batch.revision = response.header().revision();
    batch.compact_revision = response.compact_revision();
    const int64_t needed = next_revision();
    if (!Push(std::move(batch))) return false;
    End(absl::FailedPreconditionError(absl::StrCat(
        "etcd watch: revision ", needed, " was compacted (compact revision ",
        response.compact_revision(),
        "): list again at a revision >= ", response.compact_revision(),
        " and watch from that list's revision + 1")));
    return false;
  }
  if (response.canceled()) {
    End(absl::FailedPreconditionError(
        absl::StrCat("etcd cancelled the watch: ",
                     response.cancel_reason().substr(0, kMaxReasonBytes))));
    return false;
  }
  if (response.created()) {
    // Watching from "now": the first revision is the one after the store's
    // when the watch was created; a reconnect resumes there.
    absl::MutexLock lock(&mu_);
    if (next_revision_ == 0) next_revision_ = response.header().revision() + 1;
    return true;
  }
  WatchBatch batch;
  batch.revision = response.header().revision();
  batch.progress = response.events_size() == 0;
  batch.events.reserve(response.events_size());
  for (const mvccpb::Event& event : response.events()) {
    batch.events.push_back(FromProto(event));
  }
  return Push(std::move(batch));
}

Watch::StreamEnd Watch::RunStream(Endpoint& endpoint) {
  if (!client_->Connect(endpoint)) return StreamEnd::kFailed;
  grpc::ClientContext context;
  PrepareContext(context, absl::ZeroDuration());
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                           etcdserverpb::WatchResponse>>
      stream = endpoint.watch->Watch(&context);
  etcdserverpb::WatchRequest create;
  {
    absl::MutexLock write_lock(&write_mu_);
    absl::MutexLock lock(&mu_);
    context_ = &context;
    endpoint_ = endpoint.address;
    if (cancelled_) context.TryCancel();
    etcdserverpb::WatchCreateRequest* c = create.mutable_create_request();
    c->set_key(options_.key);
    c->set_range_end(options_.range_end);
    c->set_start_revision(next_revision_);
    c->set_prev_kv(options_.prev_kv);
    c->set_progress_notify(options_.progress_notify);
    write_ = [&stream](const etcdserverpb::WatchRequest& request) {
      return stream->Write(request);
    };
  }
  bool written;
  {
    absl::MutexLock write_lock(&write_mu_);
    written = stream->Write(create);
  }
  bool created = false;
  bool ended = false;
  etcdserverpb::WatchResponse response;
  while (written && !ended && stream->Read(&response)) {
    created = created || response.created();
    ended = !OnResponse(response);
  }
  {
    absl::MutexLock write_lock(&write_mu_);
    write_ = nullptr;
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    endpoint_.clear();
    ended = ended || cancelled_;
  }
  context.TryCancel();
  while (stream->Read(&response)) {
  }
  stream->Finish().IgnoreError();
  if (ended) return StreamEnd::kEnded;
  return created ? StreamEnd::kBroken : StreamEnd::kFailed;
}

void Watch::WaitBackoff(absl::Duration backoff) {
  const MonoTime until = MonoAfter(Now(), backoff);
  absl::MutexLock lock(&mu_);
  while (!cancelled_ && ended_.ok()) {
    if (WaitUntil(mu_, cv_, until)) break;
  }
}

void Watch::Run() {
  size_t cursor = client_->preferred_index();
  int failures = 0;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_ || !ended_.ok()) return;
      if (!first) ++reconnects_;
    }
    const StreamEnd end = RunStream(client_->endpoint_at(cursor));
    if (end == StreamEnd::kEnded) return;
    // A stream that broke after working resumes on the next member at once;
    // members that cannot be reached are retried with a growing backoff.
    ++cursor;
    failures = end == StreamEnd::kBroken ? 0 : failures + 1;
    WaitBackoff(backoff_.Delay(failures));
  }
}

}  // namespace monta::etcd
