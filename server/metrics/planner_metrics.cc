#include "server/metrics/planner_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bandwidth/bandwidth.h"
#include "common/bandwidth/collective_proto.h"
#include "common/proto_names.h"
#include "common/strategy/strategy_proto.h"
#include "google/protobuf/util/time_util.h"
#include "server/model/hardware_profile.h"

namespace monta::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string ScopeLabel(monta::v1::Scope scope) {
  return scope == monta::v1::SCOPE_INTER_NODE ? "inter" : "intra";
}

ClientMetric Gauge(std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

MetricFamily Family(const std::string& name, const std::string& help) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = MetricType::Gauge;
  return f;
}

// The profile that describes a node: declared, or inferred from its GPUs
// (model::ProfileForNode, as the planner resolves it); null when none.
const monta::model::HardwareProfile* ProfileFor(
    const monta::v1::NodeTopology& topology) {
  absl::StatusOr<const monta::model::HardwareProfile*> p =
      monta::model::ProfileForNode(
          topology.profile_name(), topology.gpus_size(),
          topology.gpus().empty() ? "" : topology.gpus(0).name());
  return p.ok() ? *p : nullptr;
}

const prometheus::Histogram::BucketBoundaries& DecisionBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
      0.0025,  0.005,    0.01,    0.025,  0.05,    0.1};
  return *b;
}

const prometheus::Histogram::BucketBoundaries& CommitBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *b;
}

const prometheus::Histogram::BucketBoundaries& TxnRecordBuckets() {
  static const auto* b =
      new prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128};
  return *b;
}

const prometheus::Histogram::BucketBoundaries& SpeedupBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      1, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16};
  return *b;
}

}  // namespace

std::string MessageSizeBucket(uint64_t bytes) {
  static const char* kNames[] = {"64KiB", "256KiB", "1MiB",   "4MiB",
                                 "16MiB", "64MiB",  "256MiB", "1GiB"};
  uint64_t bound = uint64_t{64} << 10;
  if (bytes < bound) return "<64KiB";
  for (int i = 0; i < 7; ++i) {
    if (bytes < bound * 4) {
      // "64-256KiB" style when the unit is the same, else "256KiB-1MiB".
      std::string lo = kNames[i];
      std::string hi = kNames[i + 1];
      const std::string lo_unit = lo.substr(lo.size() - 3);
      const std::string hi_unit = hi.substr(hi.size() - 3);
      if (lo_unit == hi_unit)
        return absl::StrCat(lo.substr(0, lo.size() - 3), "-", hi);
      return absl::StrCat(lo, "-", hi);
    }
    bound *= 4;
  }
  return ">=1GiB";
}

double BottleneckLineRate(const monta::v1::NodeTopology& topology,
                          monta::v1::Scope scope, int ranks_per_node) {
  const monta::model::HardwareProfile* profile = ProfileFor(topology);
  if (scope != monta::v1::SCOPE_INTER_NODE) {
    return profile != nullptr ? profile->nvlink_bytes_per_second : 0;
  }
  const int ranks = std::max(1, ranks_per_node);
  const double nic_bytes_per_second = registry::NicLineRate(topology);
  if (nic_bytes_per_second > 0) return nic_bytes_per_second / ranks;
  // No NIC known: only a GPU node class (declared or recognised) says what its
  // network is. A CPU node's traffic may be loopback or any Ethernet: unknown,
  // so no efficiency rather than a ratio above 1.
  const bool gpu_class =
      !topology.gpus().empty() || !topology.profile_name().empty();
  if (!gpu_class || profile == nullptr || profile->gpus_per_node == 0) return 0;
  return profile->nics_per_node * profile->nic_bytes_per_second /
         profile->gpus_per_node;
}

void HeldBytesCollector::Add(std::string kind, Source source) {
  absl::MutexLock lock(&mu_);
  sources_.emplace_back(std::move(kind), std::move(source));
}

std::vector<MetricFamily> HeldBytesCollector::Collect() const {
  MetricFamily held = Family(
      "monta_planner_held_bytes",
      "Bytes the planner holds for its callers now, by kind (rendezvous: "
      "keys and values of unfinished benchmark tasks; task_reports: the "
      "nodes' reports of unfinished tasks, until their last node's)");
  absl::MutexLock lock(&mu_);
  for (const auto& [kind, source] : sources_) {
    held.metric.push_back(Gauge({{"kind", kind}}, source()));
  }
  return {std::move(held)};
}

ClusterCollector::ClusterCollector(const registry::Registry* registry)
    : registry_(registry) {}

std::vector<MetricFamily> ClusterCollector::Collect() const {
  using google::protobuf::util::TimeUtil;
  const Instant now = Instant::Now();
  MetricFamily state =
      Family("monta_node_state",
             "1 for the node's current state (alive, stale, gone), else 0");
  MetricFamily lease = Family(
      "monta_node_lease_age_seconds",
      "Seconds since the last heartbeat this replica heard; for a node "
      "heartbeating to another replica (--store=etcd), since this replica "
      "saw its attachment appear if that is later");
  MetricFamily busbw =
      Family("monta_collective_busbw_bytes_per_second",
             "Measured bus bandwidth (nccl-tests definition) of the latest "
             "curve, largest measured size in each message-size bucket");
  MetricFamily efficiency =
      Family("monta_alltoall_efficiency_ratio",
             "Measured AllToAll busbw over the bottleneck link's line rate");
  MetricFamily age =
      Family("monta_curve_age_seconds", "Age of the latest measured curve");
  for (const auto& node : registry_->List(now, /*include_gone=*/true)) {
    for (auto [s, name] : {std::pair{monta::v1::NODE_STATE_ALIVE, "alive"},
                           std::pair{monta::v1::NODE_STATE_STALE, "stale"},
                           std::pair{monta::v1::NODE_STATE_GONE, "gone"}}) {
      state.metric.push_back(Gauge({{"node", node.name()}, {"state", name}},
                                   node.state() == s ? 1 : 0));
    }
    lease.metric.push_back(
        Gauge({{"node", node.name()}}, node.lease_age_seconds()));
    for (const auto& curve : node.curves()) {
      const std::string scope = ScopeLabel(curve.scope());
      const std::string collective =
          bandwidth::CollectiveProtoName(curve.collective());
      // Strategy schedules other than the plain collective are evidence for the
      // model, not link health: only plain curves become series.
      if (curve.strategy_kind() != monta::v1::STRATEGY_KIND_UNSPECIFIED &&
          curve.strategy_kind() != monta::v1::STRATEGY_KIND_FLAT) {
        continue;
      }
      // From when the planner formed it (the agents' measured_at is display
      // only).
      if (curve.has_received_at()) {
        const absl::Time received = absl::FromUnixNanos(
            TimeUtil::TimestampToNanoseconds(curve.received_at()));
        age.metric.push_back(Gauge({{"node", node.name()},
                                    {"scope", scope},
                                    {"collective", collective}},
                                   absl::ToDoubleSeconds(now.wall - received)));
      }
      std::map<std::string, const monta::v1::CurvePoint*> by_bucket;
      for (const auto& p : curve.points())
        by_bucket[MessageSizeBucket(p.message_bytes())] = &p;
      const int ranks_per_node = curve.n_nodes() > 0
                                     ? curve.nranks() / curve.n_nodes()
                                     : curve.nranks();
      const double line_rate =
          BottleneckLineRate(node.topology(), curve.scope(), ranks_per_node);
      for (const auto& [bucket, point] : by_bucket) {
        busbw.metric.push_back(
            Gauge({{"node", node.name()},
                   {"scope", scope},
                   {"collective", collective},
                   {"nranks", absl::StrCat(curve.nranks())},
                   {"n_nodes", absl::StrCat(curve.n_nodes())},
                   {"message_size", bucket}},
                  point->busbw_bytes_per_second()));
        if (curve.collective() == monta::v1::COLLECTIVE_ALLTOALL &&
            line_rate > 0) {
          efficiency.metric.push_back(
              Gauge({{"node", node.name()},
                     {"scope", scope},
                     {"nranks", absl::StrCat(curve.nranks())},
                     {"message_size", bucket}},
                    point->busbw_bytes_per_second() / line_rate));
        }
      }
    }
  }
  return {state, lease, busbw, efficiency, age};
}

FabricCollector::FabricCollector(const registry::Registry* registry,
                                 const fabric::Fabric* fabric)
    : registry_(registry), fabric_(fabric) {}

std::vector<MetricFamily> FabricCollector::Collect() const {
  MetricFamily nodes =
      Family("monta_fabric_nodes",
             "Registered nodes by who placed them in the fabric (map, "
             "node_labels; none: outside it, priced by pair measurements)");
  MetricFamily disagreements = Family(
      "monta_fabric_hint_disagreement",
      "1 for each node whose agent's own labels claim another rack or block "
      "than the fabric map or node labels place it in (never used)");
  MetricFamily valid =
      Family("monta_fabric_source_valid",
             "1 while the fabric source's file in place is the one in use, 0 "
             "while it is unreadable or does not parse (the previous content "
             "stays in use)");
  MetricFamily loads =
      Family("monta_fabric_source_loads_total",
             "Reads of a fabric source's file (at start and each time it "
             "changed; map: --fabric_map_file, node_labels: "
             "--fabric_node_labels_file) by result (error: the previous "
             "content stays in use)");
  loads.type = MetricType::Counter;
  std::map<std::string, int> by_source = {
      {"map", 0}, {"node_labels", 0}, {"none", 0}};
  for (const auto& node : registry_->List(Instant::Now(), false)) {
    const monta::v1::FabricPosition p = fabric_->PositionOf(node);
    ++by_source[ShortName(p.source())];
    if (p.hint_disagrees()) {
      disagreements.metric.push_back(Gauge({{"node", node.name()}}, 1));
    }
  }
  for (const auto& [source, count] : by_source) {
    nodes.metric.push_back(Gauge({{"source", source}}, count));
  }
  for (const auto& status : fabric_->Sources()) {
    valid.metric.push_back(Gauge({{"source", ShortName(status.source())}},
                                 status.error().empty() ? 1 : 0));
  }
  for (const auto& count : fabric_->LoadCounts()) {
    for (const auto& [result, value] :
         {std::pair<const char*, int64_t>{"ok", count.ok},
          {"error", count.error}}) {
      ClientMetric m;
      m.label = {{"source", ShortName(count.source)}, {"result", result}};
      m.counter.value = static_cast<double>(value);
      loads.metric.push_back(std::move(m));
    }
  }
  return {nodes, disagreements, valid, loads};
}

std::string StrategyLabel(monta::v1::StrategyKind kind) {
  if (kind == monta::v1::STRATEGY_KIND_UNSPECIFIED) return "none";
  return ShortName(kind);
}

PlannerMetrics::PlannerMetrics(prometheus::Registry& registry)
    : decisions_(prometheus::BuildCounter()
                     .Name("monta_strategy_decisions_total")
                     .Help("Strategy decisions by chosen strategy and result")
                     .Register(registry)),
      decision_duration_(
          prometheus::BuildHistogram()
              .Name("monta_strategy_decision_duration_seconds")
              .Help("Time to validate, plan and answer one strategy request")
              .Register(registry)),
      predicted_speedup_(
          prometheus::BuildHistogram()
              .Name("monta_strategy_predicted_speedup_ratio")
              .Help(
                  "Predicted AllToAll speedup of the chosen strategy over flat")
              .Register(registry)),
      tasks_(prometheus::BuildCounter()
                 .Name("monta_benchmark_tasks_total")
                 .Help("Finished benchmark tasks by scope and result")
                 .Register(registry)),
      curves_excluded_(prometheus::BuildCounter()
                           .Name("monta_curves_excluded_total")
                           .Help("Curves the planner formed from a task's "
                                 "reports and did not plan with, by reason")
                           .Register(registry)),
      admissions_(prometheus::BuildCounter()
                      .Name("monta_admission_reviews_total")
                      .Help("Admission reviews by operation and result")
                      .Register(registry)),
      admission_duration_(prometheus::BuildHistogram()
                              .Name("monta_admission_duration_seconds")
                              .Help("Admission review handling time")
                              .Register(registry)),
      discarded_(prometheus::BuildCounter()
                     .Name("monta_discarded_errors_total")
                     .Help("Errors the planner logged and dropped, by site")
                     .Register(registry)),
      store_errors_(prometheus::BuildCounter()
                        .Name("monta_store_errors_total")
                        .Help("Failed writes to the planner's SQLite database "
                              "(--db), by operation")
                        .Register(registry)),
      records_refused_(
          prometheus::BuildCounter()
              .Name("monta_records_refused_total")
              .Help("Decision, verification and audit records not stored in "
                    "etcd (--store=etcd), their calls refused, by reason "
                    "(queue_full, too_large, not_stored, stopping)")
              .Register(registry)),
      record_commit_seconds_(
          prometheus::BuildHistogram()
              .Name("monta_record_commit_seconds")
              .Help("Time from a decision, verification or audit call to the "
                    "etcd Txn holding its record landing (--store=etcd; "
                    "the call is answered then)")
              .Register(registry)
              .Add({}, CommitBuckets())),
      record_txn_records_(
          prometheus::BuildHistogram()
              .Name("monta_record_txn_records")
              .Help("Records per etcd Txn of the record writer (group "
                    "commit: those that arrived while the previous Txn was "
                    "in flight; at most 128)")
              .Register(registry)
              .Add({}, TxnRecordBuckets())),
      verify_runs_(prometheus::BuildCounter()
                       .Name("monta_verify_runs_total")
                       .Help("montactl verify runs by result (ok, invalid, "
                             "failed) and scope (layer, op)")
                       .Register(registry)),
      prediction_error_(
          prometheus::BuildGauge()
              .Name("monta_prediction_error_ratio")
              .Help("Median |predicted / measured - 1| per strategy in the "
                    "latest verify run of each scope (layer: one MoE "
                    "layer's four ops; op: one dispatch op)")
              .Register(registry)),
      plan_regret_(prometheus::BuildGauge()
                       .Name("monta_plan_regret_ratio")
                       .Help("Measured time of the chosen candidate over the "
                             "fastest measured one, minus 1, in the latest "
                             "verify run of each scope")
                       .Register(registry)),
      denied_calls_(prometheus::BuildCounter()
                        .Name("monta_denied_calls_total")
                        .Help("Calls refused because the deny list "
                              "(--deny_list_file) names the caller, by the "
                              "entry that matched (node/<name>, "
                              "serial=<HEX>)")
                        .Register(registry)),
      deny_list_loads_(prometheus::BuildCounter()
                           .Name("monta_deny_list_loads_total")
                           .Help("Reads of the deny list (--deny_list_file) "
                                 "by result (ok; error: the previous list "
                                 "stays)")
                           .Register(registry)),
      deny_list_entries_(prometheus::BuildGauge()
                             .Name("monta_deny_list_entries")
                             .Help("Entries (node names and certificate "
                                   "serials) of the deny list in force")
                             .Register(registry)
                             .Add({})),
      follower_lag_seconds_(
          prometheus::BuildGauge()
              .Name("monta_store_follower_lag_seconds")
              .Help("How stale this follower replica's cache may be: every "
                    "commit older than this is applied (0 on the leader "
                    "and with SQLite)")
              .Register(registry)
              .Add({})),
      follower_revisions_behind_(
          prometheus::BuildGauge()
              .Name("monta_store_follower_revisions_behind")
              .Help("The store's newest commit minus the one this "
                    "follower's cache applied, at its last probe")
              .Register(registry)
              .Add({})),
      attachment_writes_(
          prometheus::BuildCounter()
              .Name("monta_liveness_attachment_writes_total")
              .Help("Attachments this replica wrote to etcd (--store=etcd: "
                    "put, an agent heartbeating here attached; delete, "
                    "detached), in batches every --liveness_publish_seconds")
              .Register(registry)),
      attachment_txns_(prometheus::BuildCounter()
                           .Name("monta_liveness_attachment_txns_total")
                           .Help("etcd Txns that carried this replica's "
                                 "attachment writes (each one etcd write)")
                           .Register(registry)
                           .Add({})) {
  CreateSeries();
}

void PlannerMetrics::RecordAttachmentWrites(int64_t puts, int64_t deletes,
                                            int64_t txns) {
  attachment_writes_.Add({{"operation", "put"}})
      .Increment(static_cast<double>(puts));
  attachment_writes_.Add({{"operation", "delete"}})
      .Increment(static_cast<double>(deletes));
  attachment_txns_.Increment(static_cast<double>(txns));
}

void PlannerMetrics::SetFollowerLag(double seconds, int64_t revisions) {
  follower_lag_seconds_.Set(seconds);
  follower_revisions_behind_.Set(static_cast<double>(revisions));
}

void PlannerMetrics::CreateSeries() {
  for (const char* result : {"ok", "error"}) {
    deny_list_loads_.Add({{"result", result}});
  }
  for (const char* result : {"ok", "invalid", "failed"}) {
    for (const char* scope : {"layer", "op"}) {
      verify_runs_.Add({{"result", result}, {"scope", scope}});
    }
  }
  for (const char* operation :
       {"node", "curve", "knowledge", "decision", "verification", "audit"}) {
    store_errors_.Add({{"operation", operation}});
  }
  for (const char* reason :
       {"queue_full", "too_large", "not_stored", "stopping"}) {
    records_refused_.Add({{"reason", reason}});
  }
  for (const char* operation : {"put", "delete"}) {
    attachment_writes_.Add({{"operation", operation}});
  }
  for (auto reason : {monta::v1::EXCLUSION_REASON_NODES_DISAGREE,
                      monta::v1::EXCLUSION_REASON_ABOVE_LINE_RATE,
                      monta::v1::EXCLUSION_REASON_DATA_CHECK}) {
    curves_excluded_.Add({{"reason", ShortName(reason)}});
  }
  std::vector<std::string> strategies;
  for (strategy::StrategyKind kind : strategy::kAllStrategyKinds) {
    strategies.push_back(StrategyLabel(strategy::StrategyToProto(kind)));
  }
  strategies.push_back(StrategyLabel(monta::v1::STRATEGY_KIND_UNSPECIFIED));
  for (const std::string& strategy : strategies) {
    for (const char* result : {"ok", "invalid", "error"}) {
      decision_counters_[{strategy, result}] =
          &decisions_.Add({{"strategy", strategy}, {"result", result}});
    }
    speedup_histograms_[strategy] =
        &predicted_speedup_.Add({{"strategy", strategy}}, SpeedupBuckets());
  }
  decision_seconds_ = &decision_duration_.Add({}, DecisionBuckets());
}

void PlannerMetrics::RecordDecision(const absl::Status& status,
                                    const monta::v1::StrategyReply* reply,
                                    double seconds) {
  std::string strategy = "none";
  std::string result = "ok";
  if (!status.ok()) {
    result = status.code() == absl::StatusCode::kInvalidArgument ||
                     status.code() == absl::StatusCode::kNotFound
                 ? "invalid"
                 : "error";
  } else if (reply != nullptr) {
    strategy = StrategyLabel(reply->chosen().kind());
    if (reply->chosen().speedup_over_flat() > 0) {
      speedup_histograms_.at(strategy)->Observe(
          reply->chosen().speedup_over_flat());
    }
  }
  decision_counters_.at({strategy, result})->Increment();
  decision_seconds_->Observe(seconds);
}

void PlannerMetrics::RecordBenchmarkTask(
    const monta::v1::BenchmarkTaskStatus& status) {
  tasks_
      .Add({{"scope", status.nodes_size() > 1 ? "inter" : "intra"},
            {"result", status.state() == monta::v1::TASK_STATE_SUCCEEDED
                           ? "succeeded"
                           : "failed"}})
      .Increment();
  for (const monta::v1::ExcludedCurve& excluded : status.excluded()) {
    curves_excluded_.Add({{"reason", ShortName(excluded.reason())}})
        .Increment();
  }
}

void PlannerMetrics::RecordAdmission(const std::string& operation,
                                     const std::string& result,
                                     double seconds) {
  admissions_.Add({{"operation", operation}, {"result", result}}).Increment();
  admission_duration_.Add({{"operation", operation}}, DecisionBuckets())
      .Observe(seconds);
}

void PlannerMetrics::RecordDiscardedError(const std::string& site) {
  discarded_.Add({{"site", site}}).Increment();
}

void PlannerMetrics::RecordVerify(const absl::Status& status,
                                  monta::v1::VerifyScope scope,
                                  const monta::v1::VerifyReply* reply) {
  const char* result = status.ok() ? "ok"
                       : status.code() == absl::StatusCode::kInvalidArgument
                           ? "invalid"
                           : "failed";
  const char* scope_label =
      scope == monta::v1::VERIFY_SCOPE_OP ? "op" : "layer";
  verify_runs_.Add({{"result", result}, {"scope", scope_label}}).Increment();
  if (reply == nullptr) return;
  std::map<std::string, std::vector<double>> errors;
  for (const monta::v1::VerifiedCandidate& c : reply->candidates()) {
    errors[StrategyLabel(c.kind())].push_back(std::abs(c.error_ratio()));
  }
  for (const auto& [strategy, e] : errors) {
    prediction_error_.Add({{"strategy", strategy}, {"scope", scope_label}})
        .Set(bandwidth::Median(e));
  }
  plan_regret_.Add({{"scope", scope_label}}).Set(reply->regret_ratio());
}

void PlannerMetrics::RecordDeniedCall(const std::string& entry) {
  denied_calls_.Add({{"entry", entry}}).Increment();
}

void PlannerMetrics::RecordDenyListLoad(bool ok, size_t entries) {
  deny_list_loads_.Add({{"result", ok ? "ok" : "error"}}).Increment();
  if (ok) deny_list_entries_.Set(static_cast<double>(entries));
}

void PlannerMetrics::RecordRecordRefused(const std::string& reason) {
  records_refused_.Add({{"reason", reason}}).Increment();
}

void PlannerMetrics::RecordRecordsCommitted(
    const std::vector<double>& commit_seconds) {
  for (double seconds : commit_seconds) record_commit_seconds_.Observe(seconds);
  record_txn_records_.Observe(static_cast<double>(commit_seconds.size()));
}

void PlannerMetrics::RecordStoreError(const std::string& operation) {
  store_errors_.Add({{"operation", operation}}).Increment();
}

}  // namespace monta::metrics
