// A follower replica's watch-fed cache (issue 20 item 6): keeps a registry in
// step with a store. Step lists the store at one revision into the registry
// (LoadInto), then applies the mutations of every later commit the store's
// watch returns, in order. A watch that fell behind what the store keeps
// (OUT_OF_RANGE), or any other watch failure, lists again; so do the rare
// mutations a cache cannot apply on its own (a node removed with its curves,
// curves an operator forgot: the store alone knows which older curve is
// current again).
//
// in_sync(): the registry holds a listed revision and the watch after it
// runs. It is false from the start, while paused, and from a failed watch or
// a relist until the next List landed: readers refuse then (UNAVAILABLE), so
// a client moves to another replica. A List fills a registry of its own,
// outside the lock, and Registry::Replace swaps it in at once: a read let in
// before the relist (its readiness checked, then the registry read) finds the
// registry whole, never emptied and being refilled.
//
// A leader pauses its follower (Pause: returns once no change is being
// applied, so the leader may reload the registry itself) and resumes it when
// it stops leading (the next Step lists again). A new leader that wants to
// lead from the cache instead uses PauseWhenApplied(N), N the store's newest
// commit read after it was elected: it pauses once the registry holds every
// commit up to N (the cache is then what the store holds, as nobody else may
// commit) and says whether it did; when it could not (a List in progress or
// failing, a watch behind, a commit the cache cannot apply on its own) the
// caller reloads.
//
// Lag (lag()): how stale the cache may be. Every options.probe Step asks the
// store its newest commit (Store::NewestRevision); the registry is caught up
// as of the instant a probe started once it applied that revision (a List
// catches it up as of the List's start). lag().seconds is the time since the
// newest such instant, so every commit made before now - lag is applied: it
// grows while the watch falls behind, while the store cannot be asked (a
// replica cut off from etcd) and until the first List, and stays below about
// options.probe while following. lag().revisions is the newest probe's commit
// minus the revision applied. Zero while paused (a leader writes the store
// itself).
#ifndef MONTA_SERVER_STORE_FOLLOWER_H_
#define MONTA_SERVER_STORE_FOLLOWER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/registry/registry.h"
#include "server/store/store.h"

namespace monta::store {

struct FollowerOptions {
  // How long one Step waits for the watch's next commits.
  absl::Duration poll = absl::Milliseconds(200);
  // How often Step asks the store its newest commit (lag()).
  absl::Duration probe = absl::Seconds(1);
  // The monotonic clock lag() is measured on (tests step their own).
  std::function<MonoTime()> now = [] {
    return std::chrono::steady_clock::now();
  };
  // Told of a stored curve the registry refused (LoadInto's on_discarded).
  std::function<void(const std::string& site)> on_discarded;
};

class Follower {
 public:
  // `store` and `registry` are not owned and must outlive this.
  Follower(Store* store, registry::Registry* registry,
           FollowerOptions options = {});

  // One step of the one thread that follows: lists when not in sync, else
  // applies the commits the watch returns within options.poll. Returns how
  // long the caller should wait before the next Step (zero after a watch
  // wait; options.poll while paused or after a failure).
  absl::Duration Step() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops applying (waits for a change being applied); in_sync() is false
  // until Resume and the next List.
  void Pause() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `timeout` (monotonic) until the registry is in sync and holds
  // every commit up to `revision` (Step's thread applies them), then Pauses.
  // True when it paused so: the registry then holds exactly the commits up
  // to its revision() >= `revision`. False when the wait ran out, or another
  // Pause came first: it is paused all the same, and the registry may lag
  // the store (the caller reloads it).
  bool PauseWhenApplied(int64_t revision, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Resume() ABSL_LOCKS_EXCLUDED(mu_);

  bool in_sync() const ABSL_LOCKS_EXCLUDED(mu_);
  // The store revision the registry holds (0 before the first List).
  int64_t revision() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many times it listed (the first List included).
  int64_t lists() const ABSL_LOCKS_EXCLUDED(mu_);

  struct Lag {
    absl::Duration seconds;  // the cache holds every commit before now - this
    int64_t revisions = 0;   // the newest probed commit minus the applied one
  };
  Lag lag() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Lists the store into a fresh registry and swaps it in (unless paused
  // meanwhile), then watches after the listed revision.
  absl::Duration Relist() ABSL_LOCKS_EXCLUDED(mu_);
  // Applies `event` unless it needs a List: false then.
  bool Apply(const Event& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the store its newest commit when a probe is due (Step's thread).
  void Probe(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  // The registry holds revision_ now: a probe it reached is caught up (and
  // PauseWhenApplied's wait looks again).
  void Reached() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PauseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  registry::Registry* const registry_;
  const FollowerOptions options_;
  // Step's thread only.
  std::unique_ptr<ChangeWatch> watch_;

  mutable absl::Mutex mu_;
  // Told of every revision applied and every List landed
  // (PauseWhenApplied's wait).
  std::condition_variable_any applied_;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool in_sync_ ABSL_GUARDED_BY(mu_) = false;
  // Moves on every Pause: a Step that read an older one applies nothing.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lists_ ABSL_GUARDED_BY(mu_) = 0;
  // Every commit made before caught_up_at_ is applied.
  MonoTime caught_up_at_ ABSL_GUARDED_BY(mu_);
  // The newest probe (the store's newest commit, and when it was asked), not
  // reached yet when probed_revision_ > revision_.
  int64_t probed_revision_ ABSL_GUARDED_BY(mu_) = 0;
  MonoTime probed_at_ ABSL_GUARDED_BY(mu_);
  // Step's thread only.
  MonoTime next_probe_;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_FOLLOWER_H_
