// Liveness without per-heartbeat writes (issue 20 item 4): which agents are
// alive, as every planner replica sees it, while heartbeats go to any replica
// and write nothing to etcd.
//
// Each replica holds one etcd lease of its own (not the election's: the
// election drops its lease whenever this replica stops leading and campaigns
// with a new one, which would take the attachments of agents still
// heartbeating here with it). An agent alive by its heartbeats to this replica
// is attached here: the key `<prefix>attach/<node>/<replica id>` (value: the
// agent's instance id) on that lease. Publish() writes the difference between
// the nodes alive here now and what it wrote before: a put when a node starts
// heartbeating here (attach, or alive again), a delete when its lease here
// expired or it deregistered (stale, detached), in as few Txns as etcd's
// limits allow. The planner calls it every --liveness_publish_seconds, never
// per heartbeat: a steady fleet costs no etcd writes at all, and a replica
// at most one batch per interval.
//
// A replica that dies takes its attachments with its lease (after the lease's
// TTL); its agents' heartbeats fail meanwhile and they attach to another
// replica. A lease lost while this replica lives (etcd unreachable past the
// TTL) is replaced by a new one, and every attachment is written again.
//
// Follow() keeps every replica's attachments (a list of `attach/` at one
// revision, then a watch after it; a compacted watch lists again) and hands
// `on_attached` what changed: a node's instance attached at its first
// replica, detached when its last attachment went (a list again hands the
// difference from what it had). A node attached anywhere is alive for every
// replica (registry::Registry::ApplyAttached); the work per watch event is
// that event's, not the fleet's.
//
// Thread-safe; Publish and Follow are each called from one thread (the
// planner's, or Run's).
#ifndef MONTA_SERVER_ETCD_STORE_ATTACHMENTS_H_
#define MONTA_SERVER_ETCD_STORE_ATTACHMENTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/etcd/client.h"
#include "server/etcd/lease_keepalive.h"
#include "server/etcd/watch.h"
#include "server/registry/registry.h"

namespace monta::etcd_store {

using registry::AttachmentChange;
// Node name -> instance id of the agents alive here by their heartbeats.
using OwnNodes = std::map<std::string, std::string, std::less<>>;

struct AttachmentsOptions {
  // The store's prefix, e.g. "/monta/v1/".
  std::string prefix;
  // This replica's id ([A-Za-z0-9._-], no '/').
  std::string replica_id;
  // The TTL of this replica's attachment lease: how long a dead replica's
  // agents still count as alive at most (plus etcd's expiry check).
  absl::Duration lease_ttl = absl::Seconds(10);
  // Told what changed after every watch batch or list Follow applied that
  // changed anything (its thread), in order.
  std::function<void(const std::vector<AttachmentChange>&)> on_attached;
};

// "<prefix>attach/"
std::string AttachPrefix(const std::string& prefix);
// "<prefix>attach/<node>/<replica id>"
std::string AttachKey(const std::string& prefix, const std::string& node,
                      const std::string& replica_id);

class Attachments {
 public:
  // Grants the lease and keeps it alive. `client` must outlive this.
  static absl::StatusOr<std::unique_ptr<Attachments>> Start(
      etcd::Client* client, AttachmentsOptions options);
  // Stops the keepalive without revoking the lease: the attachments outlive
  // this replica by the TTL, time for its agents to move without a moment
  // stale.
  ~Attachments();
  Attachments(const Attachments&) = delete;
  Attachments& operator=(const Attachments&) = delete;

  // Writes what changed since the last Publish: `own` is every node alive
  // here now. With `defer`, a node another replica has attached (as the
  // same instance, as Follow last saw it) is not attached here: the leader
  // hears agents through their registrations and topology refreshes, and
  // leaves them to their home replica (were every replica to defer, two
  // replicas hearing one agent would each leave it to the other). A failure
  // leaves the difference for the next call.
  absl::Status Publish(const OwnNodes& own, bool defer = false)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Lists when needed, then applies what the watch returns within `wait`.
  absl::Status Follow(absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);

  // The lease the attachments are on now.
  int64_t lease() const ABSL_LOCKS_EXCLUDED(mu_);
  // Txns Publish sent (each one etcd write), and attachments written
  // (puts) and removed (deletes).
  int64_t writes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t puts() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t deletes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Nodes attached anywhere, as Follow last saw them.
  size_t attached_nodes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Attachments(etcd::Client* client, AttachmentsOptions options);
  // A lease and its keepalive (a new one after a loss).
  absl::Status Renew() ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);
  absl::Status Relist() ABSL_EXCLUSIVE_LOCKS_REQUIRED(follow_mu_);
  // Drops from `own` the nodes another replica has attached as the same
  // instance.
  void DropAttachedElsewhere(OwnNodes& own) ABSL_LOCKS_EXCLUDED(follow_mu_);
  // keys_ and counts_ with `key` attaching (node, instance), or no longer
  // (Drop); a first attachment or a last detachment of an instance of a node
  // is added to `changes`.
  void Add(const std::string& key, std::string node, std::string instance,
           std::vector<AttachmentChange>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(follow_mu_);
  void Drop(const std::string& key, std::vector<AttachmentChange>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(follow_mu_);
  // One key of (node, instance) fewer in counts_.
  void Uncount(const std::string& node, const std::string& instance,
               std::vector<AttachmentChange>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(follow_mu_);
  void Tell(const std::vector<AttachmentChange>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(follow_mu_);

  etcd::Client* const client_;
  const AttachmentsOptions options_;

  // Publish's state.
  absl::Mutex publish_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<etcd::LeaseKeepAlive> keepalive_ ABSL_GUARDED_BY(publish_mu_);
  // What etcd holds of this replica's attachments (on keepalive_'s lease).
  OwnNodes published_ ABSL_GUARDED_BY(publish_mu_);

  // Follow's state: every replica's attachments, key -> (node, instance).
  mutable absl::Mutex follow_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<etcd::Watch> watch_ ABSL_GUARDED_BY(follow_mu_);
  std::map<std::string, std::pair<std::string, std::string>> keys_
      ABSL_GUARDED_BY(follow_mu_);
  // Node -> instance -> its keys in keys_ (at how many replicas).
  using Counts = std::map<std::string, std::map<std::string, int>, std::less<>>;
  Counts counts_ ABSL_GUARDED_BY(follow_mu_);

  mutable absl::Mutex mu_;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t puts_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t deletes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t attached_nodes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace monta::etcd_store

#endif  // MONTA_SERVER_ETCD_STORE_ATTACHMENTS_H_
