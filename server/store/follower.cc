#include "server/store/follower.h"

#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace monta::store {

Follower::Follower(Store* store, registry::Registry* registry,
                   FollowerOptions options)
    : store_(store), registry_(registry), options_(std::move(options)) {
  caught_up_at_ = options_.now();
  probed_at_ = caught_up_at_;
  next_probe_ = caught_up_at_;
}

absl::Duration Follower::Step() {
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (paused_) {
      watch_.reset();
      return options_.poll;
    }
    generation = generation_;
  }
  if (watch_ == nullptr) return Relist();
  Probe(generation);
  absl::StatusOr<std::vector<Event>> events = watch_->Next(options_.poll);
  if (!events.ok() &&
      events.status().code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::ZeroDuration();
  }
  absl::MutexLock lock(&mu_);
  if (paused_ || generation != generation_) {
    watch_.reset();
    return absl::ZeroDuration();
  }
  if (!events.ok()) {
    // OUT_OF_RANGE: compacted past this watch; anything else: list again too.
    std::cerr << "monta-planner: follower: watch after revision " << revision_
              << " ended (" << events.status() << "); listing again"
              << std::endl;
    watch_.reset();
    in_sync_ = false;
    return events.status().code() == absl::StatusCode::kOutOfRange
               ? absl::ZeroDuration()
               : options_.poll;
  }
  for (const Event& event : *events) {
    if (!Apply(event)) {
      watch_.reset();
      in_sync_ = false;
      return absl::ZeroDuration();
    }
    revision_ = event.revision;
  }
  Reached();
  return absl::ZeroDuration();
}

void Follower::Probe(uint64_t generation) {
  const MonoTime asked = options_.now();
  if (asked < next_probe_) return;
  next_probe_ = MonoAfter(asked, options_.probe);
  // Outside the lock: a network call on etcd. A failed probe changes
  // nothing: the lag grows until one answers.
  absl::StatusOr<int64_t> newest = store_->NewestRevision();
  if (!newest.ok()) return;
  absl::MutexLock lock(&mu_);
  if (paused_ || generation != generation_ || !in_sync_) return;
  probed_revision_ = *newest;
  probed_at_ = asked;
  Reached();
}

void Follower::Reached() {
  if (revision_ >= probed_revision_ && probed_at_ > caught_up_at_) {
    caught_up_at_ = probed_at_;
  }
  applied_.notify_all();
}

absl::Duration Follower::Relist() {
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (paused_) return options_.poll;
    in_sync_ = false;
    generation = generation_;
  }
  // The List holds every commit made before it started.
  const MonoTime started = options_.now();
  // Listed beside the registry, outside the lock (a network call on etcd):
  // readers keep the registry whole until Replace swaps the list in.
  registry::Registry listed(registry_->options());
  int64_t revision = 0;
  if (absl::Status loaded =
          LoadInto(*store_, listed, options_.on_discarded, &revision);
      !loaded.ok()) {
    std::cerr << "monta-planner: follower: list: " << loaded << std::endl;
    return options_.poll;
  }
  absl::StatusOr<std::unique_ptr<ChangeWatch>> watch = store_->Watch(revision);
  if (!watch.ok()) {
    std::cerr << "monta-planner: follower: watch after revision " << revision
              << ": " << watch.status() << std::endl;
    return options_.poll;
  }
  absl::MutexLock lock(&mu_);
  // Paused meanwhile: the registry is a leader's now.
  if (paused_ || generation != generation_) return absl::ZeroDuration();
  registry_->Replace(listed);
  watch_ = *std::move(watch);
  revision_ = revision;
  ++lists_;
  in_sync_ = true;
  caught_up_at_ = std::max(caught_up_at_, started);
  probed_revision_ = revision;
  probed_at_ = started;
  applied_.notify_all();
  return absl::ZeroDuration();
}

bool Follower::Apply(const Event& event) {
  const Instant now = Instant::Now();
  for (const Mutation& mutation : event.mutations) {
    switch (mutation.kind) {
      case Mutation::Kind::kNode:
        registry_->Restore(mutation.node, now);
        break;
      case Mutation::Kind::kCurve:
        if (absl::Status added = registry_->RestoreCurve(mutation.curve);
            !added.ok()) {
          std::cerr << "monta-planner: follower: curve of task "
                    << mutation.curve.task_id() << " at revision "
                    << event.revision << ": " << added << "; listing again"
                    << std::endl;
          return false;
        }
        break;
      case Mutation::Kind::kNodeRemoved:
      case Mutation::Kind::kCurvesForgotten:
        return false;
    }
  }
  return true;
}

void Follower::Pause() {
  absl::MutexLock lock(&mu_);
  PauseLocked();
}

void Follower::PauseLocked() {
  paused_ = true;
  in_sync_ = false;
  ++generation_;
  applied_.notify_all();
}

bool Follower::PauseWhenApplied(int64_t revision, absl::Duration timeout) {
  // The real clock: options_.now is lag()'s, which tests step by hand.
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), timeout);
  absl::MutexLock lock(&mu_);
  // Step applies a watch's commits and Relist swaps a List in under mu_, so
  // what holds here holds at the pause below.
  while (!paused_ && !(in_sync_ && revision_ >= revision)) {
    if (WaitUntil(mu_, applied_, deadline)) break;
  }
  const bool caught_up = !paused_ && in_sync_ && revision_ >= revision;
  PauseLocked();
  return caught_up;
}

void Follower::Resume() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
  // The registry was the leader's own until now.
  caught_up_at_ = std::max(caught_up_at_, options_.now());
}

bool Follower::in_sync() const {
  absl::MutexLock lock(&mu_);
  return in_sync_;
}

int64_t Follower::revision() const {
  absl::MutexLock lock(&mu_);
  return revision_;
}

Follower::Lag Follower::lag() const {
  absl::MutexLock lock(&mu_);
  if (paused_) return Lag{absl::ZeroDuration(), 0};
  return Lag{MonoSince(caught_up_at_, options_.now()),
             std::max<int64_t>(0, probed_revision_ - revision_)};
}

int64_t Follower::lists() const {
  absl::MutexLock lock(&mu_);
  return lists_;
}

}  // namespace monta::store
