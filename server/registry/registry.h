// Cluster state: which nodes exist, whether their agents are alive, and what
// they reported (topology, measured curves, topology change events).
#ifndef MONTA_SERVER_REGISTRY_REGISTRY_H_
#define MONTA_SERVER_REGISTRY_REGISTRY_H_

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/proto_names.h"
#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/topology.pb.h"
#include "server/registry/topology_validation.h"

namespace monta::registry {

struct RegistryOptions {
  // How long a node stays alive without a heartbeat (monotonic clock).
  absl::Duration lease = absl::Seconds(15);
  // A node not heard from this long (no heartbeat, or deregistered) is
  // removed, curves included (RemoveGone; the planner calls it in the
  // background). Longer than `lease`.
  absl::Duration gone_after = absl::Hours(1);
  // How often agents are asked to heartbeat (well inside the lease).
  absl::Duration heartbeat_interval = absl::Seconds(5);
  // Topology events kept per node, a ring: the oldest is dropped first.
  int max_events_per_node = 64;
  // Nodes in one ListNodes page: the default and the most a caller gets.
  int max_nodes_per_page = 500;
  // Curves kept per node (each distinct collective, scope, backend, strategy,
  // chunks, ranks and node set is one; a new one over it is
  // RESOURCE_EXHAUSTED, a re-measured one replaces its predecessor).
  int max_curves_per_node = 1024;
  // Excluded curves remembered per node (the newest; ListCurves shows them,
  // plans note them), in memory only.
  int max_exclusions_per_node = 8;
  // Sizes of a reported topology (Register, Heartbeat).
  TopologyLimits topology_limits;
  // Changes made but not yet persisted (queued for the observer, or in its
  // hands) at most: an agent's Register, Deregister or topology-carrying
  // Heartbeat, or a benchmark's curves (AddCurves: the task's last report),
  // that would queue one more is refused RESOURCE_EXHAUSTED before it changes
  // anything, so a slow store sheds load instead of growing
  // memory. A retried change of a node whose change still waits replaces it
  // and is never refused. 0: no bound.
  int max_pending_changes = 4096;
  // Changes handed to the observer in one call at most. The RegisterThen
  // callers whose changes went in a call are answered when it returns, so a
  // registration storm is answered batch by batch as the store catches up,
  // not once the whole queue has drained (which, while registrations keep
  // arriving, is never: every agent's call timed out and was retried).
  // 0: no bound.
  int max_changes_per_delivery = 512;
  // How long the oldest change not yet persisted may have waited for the
  // store before an agent's Register, Deregister or topology-carrying
  // Heartbeat is refused RESOURCE_EXHAUSTED (as over max_pending_changes):
  // the queue is bounded by the store's pace, so an admitted registration is
  // answered well inside the agent's 5 s deadline instead of timing out and
  // being sent (and written) again. Timed on the callers' `now` (changes
  // queued by AddCurve or Forget, which take none, do not count). 0: no
  // bound.
  absl::Duration max_pending_wait = absl::Seconds(2);
};

// Computes the events between two topologies of the same node (e.g. a NIC that
// renegotiated its rate). Injected so the registry does not depend on the
// agent.
using TopologyDiffer = std::function<std::vector<monta::v1::TopologyEvent>(
    const monta::v1::NodeTopology& before,
    const monta::v1::NodeTopology& after)>;

// Which curves an operator drops (Registry::Forget): exactly one is set.
struct ForgetSelector {
  std::string task_id;    // every curve this task produced
  std::string node_name;  // every curve that names this node
};
bool Selects(const ForgetSelector& what, const monta::v1::BandwidthCurve& c);

// One change of the registry's durable state (what a store persists).
struct Change {
  enum class Kind {
    kNode,             // `node` registered, changed or deregistered
    kCurve,            // `curve` added, with its sequence
    kNodeRemoved,      // `node_name` and every curve naming it are gone
    kCurvesForgotten,  // an operator dropped the curves `forget` selects
  };
  Kind kind = Kind::kNode;
  // kNode: the node as List shows it (its curves are persisted on their own).
  monta::v1::NodeInfo node;
  monta::v1::BandwidthCurve curve;  // kCurve
  std::string node_name;            // kNodeRemoved
  ForgetSelector forget;            // kCurvesForgotten
  // kCurvesForgotten: the measurements (CurveKey) of the curves dropped.
  std::vector<std::string> measurements;
};
// "node" (kNode, kNodeRemoved) or "curve": the operation a store reports.
const char* ChangeOperation(Change::Kind kind);

// Told of every change that should be persisted, outside the registry's lock:
// one call at a time, in the order the changes happened, before the call that
// made them returns (so a caller's change is persisted when it returns).
class RegistryObserver {
 public:
  virtual ~RegistryObserver() = default;
  // Persists `changes` (in order). Returns, of each measurement of a
  // kCurvesForgotten change among them, the newest persisted curve left, if
  // any: it is current again. Failures are the observer's to report: the
  // registry (memory) stays the source of truth.
  virtual std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<Change>& changes) = 0;
};

// A change of the attachments of the planner replicas on etcd
// (server/etcd_store/attachments.h): `instance` of `node` attached at its
// first replica, or detached from its last.
struct AttachmentChange {
  std::string node;
  std::string instance;
  bool attached = true;
  bool operator==(const AttachmentChange& other) const {
    return node == other.node && instance == other.instance &&
           attached == other.attached;
  }
};
// Node name -> instance id of the nodes alive by this process's own
// heartbeats.
using HeardNodes = std::map<std::string, std::string, std::less<>>;

// Thread-safe. Every method takes the current time (both clocks: leases run on
// `now.mono`, `now.wall` is only reported and stored) so tests control, and
// step, each clock.
class Registry {
 public:
  explicit Registry(RegistryOptions options, TopologyDiffer differ = nullptr);
  // Hands the changes still queued to the observer, then stops its thread.
  ~Registry();

  // Sets the observer (not owned; must outlive the registry). Call before use.
  void SetObserver(RegistryObserver* observer)
      ABSL_LOCKS_EXCLUDED(deliver_mu_, mu_);

  // Registers or re-registers `node_name`. Refused with ALREADY_EXISTS when
  // another instance id holds a live lease on the name; a stale or gone holder
  // is replaced.
  absl::Status Register(const monta::v1::RegisterRequest& request, Instant now);
  // Register without blocking the caller's thread on the store: `done` gets
  // its status once the change is persisted (or at once when refused, or when
  // nothing was queued), on this thread or the registry's delivery thread
  // (started by SetObserver). `done` must not block. Concurrent registrations
  // reach the observer as one batch: a store's round trip is paid per batch,
  // not per agent (a blocking Register holds one of gRPC's few callback
  // threads per round trip).
  void RegisterThen(const monta::v1::RegisterRequest& request, Instant now,
                    std::function<void(absl::Status)> done)
      ABSL_LOCKS_EXCLUDED(deliver_mu_, mu_);

  // Renews the lease. NOT_FOUND for an unknown node (the agent must register
  // again), FAILED_PRECONDITION when the instance id does not hold the name.
  absl::Status Heartbeat(const monta::v1::HeartbeatRequest& request,
                         Instant now);

  // Marks the node gone. Same errors as Heartbeat.
  absl::Status Deregister(absl::string_view node_name,
                          absl::string_view instance_id, Instant now);

  // The nodes alive by their heartbeats to this process (not through an
  // attachment): what this replica attaches.
  HeardNodes Heard(Instant now) const;
  // Every replica's attachments (a planner on etcd), as changes in order: a
  // node whose instance is attached anywhere is alive, whether or not this
  // process hears it. A node alive only through an attachment that went is
  // quiet from `now` (RemoveGone counts gone_after from then). The work is
  // per change, not per node held.
  void ApplyAttached(const std::vector<AttachmentChange>& changes, Instant now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // True when `instance_id` holds a live lease on `node_name`.
  bool IsAlive(absl::string_view node_name, absl::string_view instance_id,
               Instant now) const;

  // Snapshot of every node (gone ones only when asked), sorted by name. Read
  // in pages of a few hundred nodes, the lock let go between them (heartbeats
  // wait for a page, not for the fleet): a node that changes meanwhile shows
  // its state when its page was read. So do Heard and StaleNodes.
  std::vector<monta::v1::NodeInfo> List(Instant now, bool include_gone) const;

  // One page of List, sorted by name: `page_size` nodes (0 or more than
  // max_nodes_per_page: that many) after the node named in `page_token`, and
  // the token of the next page ("" after the last). INVALID_ARGUMENT names a
  // negative page_size or a page_token ListNodes did not make.
  absl::StatusOr<monta::v1::ListNodesReply> ListNodes(
      const monta::v1::ListNodesRequest& request, Instant now) const;

  // Names of the nodes whose lease expired (not deregistered ones).
  std::vector<std::string> StaleNodes(Instant now) const;

  // Removes every node not heard from for options().gone_after (stale or
  // deregistered that long), its curves and the curves of other nodes that
  // name it; tells the observer. Returns the names removed.
  std::vector<std::string> RemoveGone(Instant now);

  // One node, NOT_FOUND when unknown.
  absl::StatusOr<monta::v1::NodeInfo> Get(absl::string_view node_name,
                                          Instant now) const;

  // Stores a measured curve under every node it names, replacing the curve of
  // the same measurement (collective, scope, strategy, chunks, node set,
  // nranks: CurveKey). The registry gives it the next sequence: the planner's
  // order of evidence, never the agents' clocks (an etcd store would give its
  // revision here). RESOURCE_EXHAUSTED, adding nothing, while
  // options().max_pending_changes changes wait for the store (as Register;
  // curves take no `now`, so max_pending_wait does not apply).
  absl::Status AddCurve(const monta::v1::BandwidthCurve& curve);
  // AddCurve of each of `curves` (a benchmark task's), admitted together:
  // RESOURCE_EXHAUSTED over max_pending_changes (naming `what`, the caller's
  // call) adds none (no curves: never refused). Admitted, each curve is
  // added or fails on its own (its error appended to `errors`), and it
  // returns once the added ones are persisted.
  absl::Status AddCurves(const std::vector<monta::v1::BandwidthCurve>& curves,
                         absl::string_view what,
                         std::vector<absl::Status>* errors);

  // A curve read back from the store, with its sequence; later AddCurve calls
  // number above it. Not told to the observer.
  absl::Status RestoreCurve(const monta::v1::BandwidthCurve& curve);
  // Later AddCurve calls number above `sequence` (the store's highest, also of
  // rows it could not restore).
  void AdvanceSequence(uint64_t sequence);

  // Remembers a curve the planner excluded, under every node it names (the
  // newest options().max_exclusions_per_node per node).
  void AddExcluded(const monta::v1::ExcludedCurve& excluded);

  // The evidence on one node: its curves by sequence, newest first, and its
  // exclusions, newest first. NOT_FOUND for an unknown node.
  absl::StatusOr<monta::v1::ListCurvesReply> ListCurves(
      absl::string_view node_name) const;
  // The node's exclusions, newest first (none for an unknown node).
  std::vector<monta::v1::ExcludedCurve> Excluded(
      absl::string_view node_name) const;

  // Drops every curve `what` selects, from every node, and the matching
  // exclusions; the observer deletes them from the store and hands back the
  // older curves of the same measurements, which become current again.
  // INVALID_ARGUMENT unless exactly one of task_id and node_name is set;
  // NOT_FOUND for an unknown node_name.
  absl::StatusOr<monta::v1::ForgetCurvesReply> Forget(
      const ForgetSelector& what);

  // Restores a node read back from the store (no lease: it starts stale, and
  // is removed options().gone_after after `now` unless its agent returns;
  // a node this process heard, as the same instance, before a Replace or
  // Clear forgot it keeps its lease).
  // `node`'s curves are ignored: the curves a known node holds stay (a
  // follower applies a node's change without losing them); RestoreCurve adds
  // curves.
  void Restore(const monta::v1::NodeInfo& node, Instant now);
  // Swaps in every node, curve and exclusion `loaded` holds (a registry
  // filled by Restore and RestoreCurve, left empty) for this registry's, at
  // once: a reader sees the registry before or after, never emptied and being
  // refilled (a replica that starts leading, or whose cache lists again,
  // server/store/follower.h). The changes not yet handed to the observer are
  // dropped without telling it (Replace waits for a hand-over in flight); a
  // RegisterThen still waiting for its change is answered UNAVAILABLE (not
  // stored; the agent registers again, with whichever replica leads). Kept:
  // the attachments (ApplyAttached), and the leases of the nodes this
  // process heard: such a node, as the same instance, keeps its lease, now
  // if `loaded` holds it, else at its Restore before the next Replace. Later
  // AddCurve calls number above both registries'.
  void Replace(Registry& loaded) ABSL_LOCKS_EXCLUDED(deliver_mu_, mu_);
  // Replace with an empty registry: every node, curve and exclusion and the
  // changes not yet stored are forgotten, with what Replace keeps kept. The
  // planner itself reloads by Replace; tests use Clear to pin what a reload
  // keeps and drops.
  void Clear() ABSL_LOCKS_EXCLUDED(deliver_mu_, mu_);

  const RegistryOptions& options() const { return options_; }

  // Changes not yet persisted: queued for the observer or in its hands.
  int PendingChanges() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    monta::v1::NodeInfo info;  // state/lease fields are recomputed on read
    // Wall times: reported and stored, never compared.
    absl::Time registered_at;
    absl::Time last_heartbeat;
    // Monotonic: the last Register or Heartbeat of this process's lifetime
    // (none for a node restored from the store), and since when the node has
    // been quiet (that heartbeat, its deregistration or its restoration).
    std::optional<MonoTime> heard;
    MonoTime quiet_since;
    bool gone = false;
    // Curves of its tasks the planner excluded, oldest first.
    std::deque<monta::v1::ExcludedCurve> excluded;
  };
  // Alive by this process's heartbeats, or by an attachment.
  bool Alive(const Entry& entry, Instant now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool HeardAlive(const Entry& entry, Instant now) const;
  // Not alive, and quiet for options().gone_after: RemoveGone's to remove.
  bool GoneFor(const Entry& entry, Instant now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Calls `visit` on every node in name order, under the shared lock taken
  // for a few hundred nodes at a time (let go between them: a full scan
  // never holds heartbeats, which take it exclusively, for the whole fleet).
  void VisitInPages(
      const std::function<void(const std::string&, const Entry&)>& visit) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Since when `entry`'s instance has been attached (nothing: it is not).
  std::optional<MonoTime> AttachedSince(const Entry& entry) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The bodies of Register, Heartbeat and RemoveGone; `queued`: a change
  // waits for Deliver.
  absl::Status RegisterLocked(const monta::v1::RegisterRequest& request,
                              Instant now, bool* queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HeartbeatLocked(const monta::v1::HeartbeatRequest& request,
                               Instant now, bool* queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> RemoveGoneLocked(Instant now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forget's change in memory: drops the curves and exclusions `what`
  // selects, lists the dropped in `reply`; returns their measurements.
  std::vector<std::string> DropSelected(const ForgetSelector& what,
                                        monta::v1::ForgetCurvesReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A curve of `older`'s measurement with its sequence or a later one is held.
  bool Superseded(const monta::v1::BandwidthCurve& older) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  monta::v1::NodeInfo Snapshot(const Entry& entry, Instant now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RecordTopology(Entry& entry, const monta::v1::NodeTopology& topology,
                      Instant now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the node's change for the observer (when there is one); true when
  // it queued: the caller delivers once it has let go of mu_.
  bool Notify(const Entry& entry, Instant now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Queue(Change change) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The delivery thread: delivers while RegisterThen callers wait.
  void DeliveryLoop() ABSL_LOCKS_EXCLUDED(deliver_mu_, mu_);
  bool DeliveryDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the RegisterThen callers whose changes were all handed over.
  void RunDelivered() ABSL_LOCKS_EXCLUDED(mu_);
  // The next changes for the observer (at most max_changes_per_delivery,
  // oldest first), taken out of pending_.
  std::vector<Change> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when one more change of `node_name` would pass
  // options().max_pending_changes (a queued change of the node that one more
  // would replace does not count); `what` names the call.
  // Also when the oldest change stamped in queued_at_ has waited past
  // options().max_pending_wait at `now`.
  absl::Status Admit(absl::string_view node_name, absl::string_view what,
                     Instant now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Admit's bound on the count alone (max_pending_changes), for any change.
  absl::Status AdmitCount(absl::string_view what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Queue, stamping a change that took a new place in the queue with `now`.
  bool QueueAt(Change change, Instant now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the stamps of the changes persisted (or cleared) so far.
  void DropDeliveredStampsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands every queued change to the observer, outside mu_, in order.
  void Deliver() ABSL_LOCKS_EXCLUDED(deliver_mu_, mu_);
  // Hands the next batch (TakeBatchLocked) to the observer, its answer to a
  // kCurvesForgotten change appended to `restored`; false when none waited.
  bool DeliverBatchLocked(std::vector<monta::v1::BandwidthCurve>& restored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(deliver_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Deliver, for a caller holding deliver_mu_; returns the observer's answer
  // to the kCurvesForgotten change among them (at most one can be queued:
  // Forget holds deliver_mu_ until its change is delivered).
  std::vector<monta::v1::BandwidthCurve> DeliverLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(deliver_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Puts back the older curves a Forget left current, unless a newer curve of
  // the measurement came meanwhile; adds each one put back to `reply`.
  void PutBack(const ForgetSelector& what,
               const std::vector<monta::v1::BandwidthCurve>& older,
               monta::v1::ForgetCurvesReply& reply) ABSL_LOCKS_EXCLUDED(mu_);
  // Stores `curve` under each node it names (all must exist; the per-node
  // bound holds), replacing its measurement's earlier curve.
  absl::Status PutCurve(const monta::v1::BandwidthCurve& curve)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RegistryOptions options_;
  const TopologyDiffer differ_;

  mutable absl::Mutex mu_;
  // Held while changes are handed to the observer (never with mu_ held: a
  // slow store never blocks readers or heartbeats), so they reach it one
  // batch at a time, in order. Taken before mu_.
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  RegistryObserver* observer_ ABSL_GUARDED_BY(deliver_mu_) = nullptr;
  bool observed_ ABSL_GUARDED_BY(mu_) = false;  // observer_ is set
  // Changes made under mu_, in order, not yet handed to the observer.
  std::vector<Change> pending_ ABSL_GUARDED_BY(mu_);
  // Of the nodes whose newest change in pending_ is a kNode with only kNode
  // changes after it: its index there (a newer change of the node replaces
  // it in place; any other kind of change, or a hand-over, clears this).
  std::map<std::string, size_t, std::less<>> pending_node_ ABSL_GUARDED_BY(mu_);
  // Changes taken from pending_ and not yet persisted by the observer.
  size_t delivering_ ABSL_GUARDED_BY(mu_) = 0;
  // Entries ever added to pending_, and of them handed over (or cleared).
  uint64_t queued_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t delivered_total_ ABSL_GUARDED_BY(mu_) = 0;
  // (queued_total_ after it, `now`) of the changes QueueAt queued and not yet
  // persisted, oldest first: the front's age is how far the store is behind.
  std::deque<std::pair<uint64_t, MonoTime>> queued_at_ ABSL_GUARDED_BY(mu_);
  // RegisterThen callers: done once delivered_total_ reaches the first.
  std::deque<std::pair<uint64_t, std::function<void(absl::Status)>>> waiters_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool threaded_ ABSL_GUARDED_BY(mu_) = false;  // delivery_thread_ runs
  // Started once, by SetObserver; joined by the destructor.
  std::thread delivery_thread_;
  std::map<std::string, Entry, std::less<>> nodes_ ABSL_GUARDED_BY(mu_);
  // Node -> instance id -> since when this process has seen it attached.
  std::map<std::string, std::map<std::string, MonoTime>, std::less<>> attached_
      ABSL_GUARDED_BY(mu_);
  // What Clear forgot of the nodes this process heard (instance id, last
  // heartbeat on both clocks): Restore of the same instance keeps it, so a
  // replica that reloads its registry does not count its own agents stale.
  struct HeardBefore {
    std::string instance_id;
    MonoTime heard;
    absl::Time last_heartbeat;
  };
  std::map<std::string, HeardBefore, std::less<>> heard_before_clear_
      ABSL_GUARDED_BY(mu_);
  // `entry` (restored, not gone) keeps the lease `heard` gave it.
  static void KeepHeard(const HeardBefore& heard, Entry& entry);
  // The sequence of the next curve AddCurve accepts.
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

using ::monta::NodeStateName;

// A node name as Kubernetes has them, a DNS subdomain (RFC 1123): 1..253
// characters of [a-z0-9.-], starting and ending with [a-z0-9].
// INVALID_ARGUMENT naming node_name otherwise.
absl::Status ValidateNodeName(absl::string_view name);

// Identity of a measurement: curves with the same key replace each other
// (collective, scope, backend, strategy, chunks, nranks and node set).
std::string CurveKey(const monta::v1::BandwidthCurve& curve);

// Sum of the line rates of a node's NIC ports that pass traffic
// (nic_state::CountsAsUp: ACTIVE, or no state known), in bytes per second; 0
// when it reports none.
double NicLineRate(const monta::v1::NodeTopology& topology);

// "127.x.y.z", "::1", "localhost" (with or without a port or brackets): an
// address whose traffic never leaves the host.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace monta::registry

#endif  // MONTA_SERVER_REGISTRY_REGISTRY_H_
