// The planner's Prometheus metrics (names and labels in docs/ARCHITECTURE.md's
// conventions): cluster state and measured bandwidth read from the registry at
// scrape time, plus counters and histograms of decisions, benchmark tasks and
// admission reviews.
#ifndef MONTA_SERVER_METRICS_PLANNER_METRICS_H_
#define MONTA_SERVER_METRICS_PLANNER_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/fabric/fabric.h"
#include "server/registry/registry.h"

namespace monta::metrics {

// Bucket label for a message size, powers of 4 from 64 KiB to 1 GiB
// ("<64KiB", "64-256KiB", ..., "256MiB-1GiB", ">=1GiB"): bounded cardinality.
std::string MessageSizeBucket(uint64_t bytes);

// Line rate (bytes per second per rank, one direction) of the link that bounds
// a curve of `scope` on this node: NVLink (or loopback) inside a node, the
// node's NIC share per rank across nodes (discovered or declared NICs, else a
// GPU node class's profile). A NIC port counts when its state is ACTIVE or not
// known at all (common/nic_state.h, CountsAsUp). 0 when unknown, e.g. across
// CPU nodes with no NIC known.
double BottleneckLineRate(const monta::v1::NodeTopology& topology,
                          monta::v1::Scope scope, int ranks_per_node);

// Exposes the registry's view at scrape time:
//   monta_node_state{node,state}, monta_node_lease_age_seconds{node},
//   monta_collective_busbw_bytes_per_second{node,scope,collective,nranks,n_nodes,message_size},
//   monta_alltoall_efficiency_ratio{node,scope,nranks,message_size},
//   monta_curve_age_seconds{node,scope,collective}.
class ClusterCollector : public prometheus::Collectable {
 public:
  // `registry` is not owned and must outlive the collector.
  explicit ClusterCollector(const registry::Registry* registry);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const registry::Registry* registry_;
};

// monta_planner_held_bytes{kind}: bytes the planner holds for its callers,
// read from their owners at scrape time, one series per kind
// ("rendezvous": the rendezvous keys and values of unfinished benchmark
// tasks; "task_reports": the nodes' reports of unfinished tasks, held until
// the last node's arrives).
class HeldBytesCollector : public prometheus::Collectable {
 public:
  using Source = std::function<double()>;
  // `source` is called at every scrape (from the metrics endpoint's thread)
  // and must outlive the collector's registration.
  void Add(std::string kind, Source source) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<prometheus::MetricFamily> Collect() const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<std::string, Source>> sources_ ABSL_GUARDED_BY(mu_);
};

// Exposes where the registered nodes sit, and the fabric sources' reads, at
// scrape time (server/fabric/fabric.h):
//   monta_fabric_nodes{source}: registered nodes (not gone) the fabric map,
//     the node labels or nothing ("none") places;
//   monta_fabric_hint_disagreement{node}: 1 for each registered node whose
//     agent's labels claim another rack or block than it was placed in;
//   monta_fabric_source_valid{source}: 1 while the configured file in place
//     is the one in use, 0 while it does not parse (the previous content
//     stays in use) or cannot be read;
//   monta_fabric_source_loads_total{source,result}: reads of a source's file
//     (at start and each time it changed), ok or error.
class FabricCollector : public prometheus::Collectable {
 public:
  // Neither is owned; both must outlive the collector.
  FabricCollector(const registry::Registry* registry,
                  const fabric::Fabric* fabric);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const registry::Registry* registry_;
  const fabric::Fabric* fabric_;
};

// Event metrics the planner records as it works.
class PlannerMetrics {
 public:
  explicit PlannerMetrics(prometheus::Registry& registry);

  // One GetStrategy (or admission) decision: the chosen strategy and its
  // predicted speedup, or the error class.
  void RecordDecision(const absl::Status& status,
                      const monta::v1::StrategyReply* reply, double seconds);
  // A finished task; scope follows its node count. Its excluded curves count
  // in monta_curves_excluded_total{reason}.
  void RecordBenchmarkTask(const monta::v1::BenchmarkTaskStatus& status);
  // operation: "mutate" | "validate"; result:
  // patched|allowed|denied|skipped|error.
  void RecordAdmission(const std::string& operation, const std::string& result,
                       double seconds);
  // monta_discarded_errors_total{site}: an error that was logged and dropped
  // at `site` because nobody could act on it (e.g. a periodic benchmark that
  // could not be scheduled).
  void RecordDiscardedError(const std::string& site);
  // monta_store_errors_total{operation}: a failed SQLite write ("node",
  // "curve", "decision"); the series exist at 0 from the start so that
  // increase() sees the first error.
  void RecordStoreError(const std::string& operation);
  // monta_records_refused_total{reason}: a decision, verification or audit
  // record the etcd record writer did not store, so its call was refused
  // (--store=etcd; reason "queue_full", "too_large", "not_stored": its Txn
  // did not land within --record_commit_timeout_seconds, "stopping"); the
  // series exist at 0 from the start.
  void RecordRecordRefused(const std::string& reason);
  // One etcd Txn of records landed: monta_record_commit_seconds (each
  // record's time from its call to the Txn's answer; what a decision waits
  // for) and monta_record_txn_records (how many records the Txn carried).
  void RecordRecordsCommitted(const std::vector<double>& commit_seconds);
  // monta_denied_calls_total{entry}: a call refused because the deny list
  // names the caller; `entry` is the matching entry (bounded by the list).
  void RecordDeniedCall(const std::string& entry);
  // monta_store_follower_lag_seconds: how stale a follower replica's cache
  // may be (every commit older than this is applied; store::Follower::lag);
  // monta_store_follower_revisions_behind: the store's newest commit minus
  // the one applied, at the last probe. Both 0 on the leader and with SQLite.
  void SetFollowerLag(double seconds, int64_t revisions);
  // monta_liveness_attachment_writes_total{operation}: attachments one
  // Publish wrote (operation "put" or "delete"; server/etcd_store/
  // attachments.h), and monta_liveness_attachment_txns_total: the Txns that
  // carried them. The series exist at 0 from the start.
  void RecordAttachmentWrites(int64_t puts, int64_t deletes, int64_t txns);
  // monta_deny_list_loads_total{result}: a read of --deny_list_file; when
  // `ok`, monta_deny_list_entries becomes `entries`.
  void RecordDenyListLoad(bool ok, size_t entries);
  // One verify run: monta_verify_runs_total{result,scope}; with its reply,
  // monta_prediction_error_ratio{strategy,scope} (median |error| of the
  // strategy's candidates) and monta_plan_regret_ratio{scope}; scope "layer"
  // or "op".
  void RecordVerify(const absl::Status& status, monta::v1::VerifyScope scope,
                    const monta::v1::VerifyReply* reply);

 private:
  // Every series that should exist at 0 from the start (so that increase()
  // sees the first event), and the decision series of the hot path.
  void CreateSeries();

  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Histogram>& decision_duration_;
  prometheus::Family<prometheus::Histogram>& predicted_speedup_;
  // Every decision series, created up front: a decision is a hot path, and this
  // read-only map saves Family::Add's label hashing under its lock per call.
  std::map<std::pair<std::string, std::string>, prometheus::Counter*>
      decision_counters_;
  std::map<std::string, prometheus::Histogram*> speedup_histograms_;
  prometheus::Histogram* decision_seconds_ = nullptr;
  prometheus::Family<prometheus::Counter>& tasks_;
  prometheus::Family<prometheus::Counter>& curves_excluded_;
  prometheus::Family<prometheus::Counter>& admissions_;
  prometheus::Family<prometheus::Histogram>& admission_duration_;
  prometheus::Family<prometheus::Counter>& discarded_;
  prometheus::Family<prometheus::Counter>& store_errors_;
  prometheus::Family<prometheus::Counter>& records_refused_;
  prometheus::Histogram& record_commit_seconds_;
  prometheus::Histogram& record_txn_records_;
  prometheus::Family<prometheus::Counter>& verify_runs_;
  prometheus::Family<prometheus::Gauge>& prediction_error_;
  prometheus::Family<prometheus::Gauge>& plan_regret_;
  prometheus::Family<prometheus::Counter>& denied_calls_;
  prometheus::Family<prometheus::Counter>& deny_list_loads_;
  prometheus::Gauge& deny_list_entries_;
  prometheus::Gauge& follower_lag_seconds_;
  prometheus::Gauge& follower_revisions_behind_;
  prometheus::Family<prometheus::Counter>& attachment_writes_;
  prometheus::Counter& attachment_txns_;
};

// "flat", "tp_dedup", ... for a StrategyKind; "none" for unspecified.
std::string StrategyLabel(monta::v1::StrategyKind kind);

}  // namespace monta::metrics

#endif  // MONTA_SERVER_METRICS_PLANNER_METRICS_H_
