// The seam between the planner's registry and where its state is kept (issue
// 20 item 1): the three things a replica needs of a store, whatever it is.
//
// - List at a revision: the nodes and the current curve of each measurement,
//   as of one revision (a replica's cache starts from it).
// - A fenced transaction (Commit): the registry's changes, all or none, only
//   while the writer's fence is current; one new revision.
// - Watch from a revision: every commit after it, in order, each once; a
//   watch too far behind is told to list again.
//
// SqliteStore implements it for the single replica (sqlite_store.h): the
// revision is a counter persisted with the data, the fence a writer epoch in
// the same file, the watch history the commits of this process. EtcdStore
// (server/etcd_store) is the second: etcd's revision, one etcd Txn comparing
// the fence (the leader key's create revision with server/election), etcd's
// watch. store_contract.h is the suite both run.
//
// The registry (memory) stays the source of truth of a running replica:
// RegistryWriter hands its changes to Commit outside the registry's lock, and
// LoadInto fills a registry from List at start; a follower replica keeps one
// in step with Watch (follower.h).
#ifndef MONTA_SERVER_STORE_STORE_H_
#define MONTA_SERVER_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/monta/v1/planner.pb.h"
#include "server/registry/registry.h"

namespace monta::store {

// One change of the registry's durable state.
using Mutation = registry::Change;

// The stored state as of one revision.
struct Snapshot {
  int64_t revision = 0;
  // Every stored node, by name, without curves.
  std::vector<monta::v1::NodeInfo> nodes;
  // The newest curve (highest sequence) of each measurement, by sequence.
  std::vector<monta::v1::BandwidthCurve> curves;
  // The highest sequence of any stored curve, history included: later curves
  // number above it.
  uint64_t max_curve_sequence = 0;
};

// Who may write: a Commit lands only while its fence is the newest one Lead
// handed out (for etcd: while its replica leads).
struct Fence {
  int64_t epoch = 0;
};

struct Committed {
  int64_t revision = 0;
  // Of each measurement of the kCurvesForgotten mutations committed, the
  // newest stored curve left, if any.
  std::vector<monta::v1::BandwidthCurve> restored;
};

// One commit, as a watch sees it.
struct Event {
  int64_t revision = 0;
  std::vector<Mutation> mutations;
};

class ChangeWatch {
 public:
  virtual ~ChangeWatch() = default;
  // The next commits (revision order, each once), waiting up to `timeout`:
  // DEADLINE_EXCEEDED when none came. OUT_OF_RANGE when the store no longer
  // holds the revisions this watch needs (it started, or fell, behind what
  // the store keeps): List again and watch from the snapshot's revision.
  // CANCELLED once the store is closed and every commit before was returned.
  virtual absl::StatusOr<std::vector<Event>> Next(absl::Duration timeout) = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Makes the caller the writer: returns a fence newer than every earlier one,
  // whose commits are refused from now on.
  virtual absl::StatusOr<Fence> Lead() = 0;

  // The state at `revision` (0: the newest). OUT_OF_RANGE for a revision the
  // store does not hold (compacted, or not reached yet), naming the ones it
  // has.
  virtual absl::StatusOr<Snapshot> List(int64_t revision = 0) = 0;

  // Applies `mutations` (at least one, in order) as one transaction under
  // one new revision, if `fence` is still the newest: FAILED_PRECONDITION
  // ("fenced") otherwise, with nothing applied. INVALID_ARGUMENT names a
  // malformed mutation (nothing applied either).
  virtual absl::StatusOr<Committed> Commit(
      const Fence& fence, const std::vector<Mutation>& mutations) = 0;

  // Every commit after `after_revision` (which may be ahead of the store: the
  // watch waits for it).
  virtual absl::StatusOr<std::unique_ptr<ChangeWatch>> Watch(
      int64_t after_revision) = 0;

  // The revision of the newest commit (the last Committed.revision; 0 before
  // any), at most a List's revision: a follower that applied it holds every
  // commit (how far behind a cache is: store::Follower).
  virtual absl::StatusOr<int64_t> NewestRevision() = 0;
};

// Checks one mutation's shape (what a Commit refuses with INVALID_ARGUMENT).
absl::Status ValidateMutation(const Mutation& mutation);

// The registry's observer: commits each batch of its changes under `fence`.
// A failed commit is the store's to report (SqliteStore's write listener and
// log); the registry keeps serving from memory.
class RegistryWriter : public registry::RegistryObserver {
 public:
  RegistryWriter(Store* store, Fence fence) : store_(store), fence_(fence) {}
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<registry::Change>& changes) override;

 private:
  Store* const store_;
  const Fence fence_;
};

// Restores the store's newest state into `registry` (nodes without a live
// lease; the current curve of each measurement; the curve sequence moved past
// every stored one). A stored curve the registry refuses (its node is no
// longer stored: history only) is logged and reported to
// `on_discarded("load_curve")` when set. Call it before the registry writes
// through a RegistryWriter. Restores nothing when List fails. With
// `revision`, sets it to the listed revision (a Watch after it follows on).
absl::Status LoadInto(
    Store& store, registry::Registry& registry,
    const std::function<void(const std::string& site)>& on_discarded = {},
    int64_t* revision = nullptr);

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_STORE_H_
