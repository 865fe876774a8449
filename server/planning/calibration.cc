#include "server/planning/calibration.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/bandwidth/bandwidth.h"
#include "common/strategy/strategy_proto.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/planning/knowledge_record.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;

// One observation the model can predict: its prepared plan (shared by the
// observations of one job) and what it measured.
struct Point {
  const PreparedPlan* plan;
  MeasuredScope scope;
  strategy::StrategyKind kind;
  int chunks;
  double measured_seconds;
  // Times the per-chunk overhead enters the prediction (K of each dedup op,
  // 1 of a dropped AllToAll, summed over what `scope` runs), read off the
  // model: the prediction is linear in the overhead.
  double overhead_chunks;
};

// How many times the model charges the per-chunk overhead for `scope` of
// `kind` at `chunks`; nullopt when it cannot predict it.
std::optional<double> OverheadChunks(const PreparedPlan& plan,
                                     MeasuredScope scope,
                                     strategy::StrategyKind kind, int chunks) {
  constexpr double kProbeSeconds = 1e-3;
  model::ModelCalibration probe;
  probe.per_chunk_overhead_seconds = kProbeSeconds;
  std::optional<double> with =
      PredictMeasuredSeconds(plan, scope, kind, chunks, probe, 1);
  std::optional<double> without =
      PredictMeasuredSeconds(plan, scope, kind, chunks, {}, 1);
  if (!with || !without) return std::nullopt;
  return std::round((*with - *without) / kProbeSeconds);
}

// Predictions of every point with `calibration` and gamma; empty when one
// of them cannot be predicted.
std::vector<double> Predict(const std::vector<Point>& points,
                            const model::ModelCalibration& calibration,
                            double gamma) {
  std::vector<double> out;
  out.reserve(points.size());
  for (const Point& p : points) {
    std::optional<double> s = PredictMeasuredSeconds(
        *p.plan, p.scope, p.kind, p.chunks, calibration, gamma);
    if (!s) return {};
    out.push_back(*s);
  }
  return out;
}

std::vector<double> RelativeErrors(const std::vector<Point>& points,
                                   const std::vector<double>& predicted) {
  std::vector<double> e;
  for (size_t i = 0; i < points.size(); ++i) {
    e.push_back(std::abs(predicted[i] / points[i].measured_seconds - 1));
  }
  return e;
}

// A relative error's share of the fit's objective: squared, but capped at
// 25% so that one wild measurement (a stalled run on a loaded host) cannot
// drag the calibration away from every other point.
constexpr double kRobustCap = 0.25;
double Loss(double relative_error) {
  return std::min(relative_error * relative_error, kRobustCap * kRobustCap);
}

// The per-chunk overhead o >= 0 minimising sum(((p + c*o) - m) / m)^2 for
// predictions p without overhead; and the robust loss there.
std::pair<double, double> BestOverhead(const std::vector<Point>& points,
                                       const std::vector<double>& predicted) {
  double num = 0;
  double den = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const double m = points[i].measured_seconds;
    const double c = points[i].overhead_chunks;
    num += c * (m - predicted[i]) / (m * m);
    den += c * c / (m * m);
  }
  const double o = den > 0 ? std::max(0.0, num / den) : 0;
  double sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const double m = points[i].measured_seconds;
    sum += Loss((predicted[i] + points[i].overhead_chunks * o - m) / m);
  }
  return {o, sum};
}

// Prepares every distinct job once; observations the model cannot plan are
// skipped.
std::vector<Point> PreparePoints(const std::vector<Observation>& observations,
                                 const NodeLookup* lookup,
                                 std::map<std::string, PreparedPlan>* plans) {
  std::vector<Point> points;
  for (const Observation& o : observations) {
    if (!(o.measured_seconds > 0) || !std::isfinite(o.measured_seconds)) {
      continue;
    }
    const std::string key = JobKey(o.request);
    auto it = plans->find(key);
    if (it == plans->end()) {
      absl::StatusOr<PreparedPlan> plan = PreparePlan(o.request, lookup);
      if (!plan.ok()) continue;
      it = plans->emplace(key, *std::move(plan)).first;
    }
    const int k = std::max(1, o.chunks);
    std::optional<double> overhead =
        OverheadChunks(it->second, o.scope, o.kind, k);
    if (!overhead) continue;
    points.push_back(
        Point{&it->second, o.scope, o.kind, k, o.measured_seconds, *overhead});
  }
  return points;
}

}  // namespace

absl::StatusOr<CalibrationFit> FitCalibration(
    const std::vector<Observation>& observations, const NodeLookup* lookup) {
  std::map<std::string, PreparedPlan> plans;
  const std::vector<Point> points = PreparePoints(observations, lookup, &plans);
  if (points.empty()) {
    return absl::InvalidArgumentError(
        "calibration: no observation the model can predict");
  }
  CalibrationFit fit;
  fit.points = static_cast<int>(points.size());
  fit.error_before_ratio =
      bandwidth::Median(RelativeErrors(points, Predict(points, {}, 1)));
  // Coordinate descent over the grids (network and local scale 0.25..4 in
  // steps of 2^(1/8), gamma 1..3 in steps of 0.1, latency scale 1/16..4 in
  // steps of 2^(1/4)), the per-chunk overhead
  // solved in closed form at each point; a few rounds settle it.
  std::vector<double> scales;
  for (int i = -16; i <= 16; ++i) scales.push_back(std::pow(2.0, i / 8.0));
  std::vector<double> gammas;
  for (int i = 0; i <= 20; ++i) gammas.push_back(1 + 0.1 * i);
  // The latency scale is tried after the others in each round, so it moves
  // only when they cannot explain the runs.
  std::vector<double> latencies;
  for (int i = -16; i <= 8; ++i) latencies.push_back(std::pow(2.0, i / 4.0));
  double best_sum = std::numeric_limits<double>::infinity();
  auto consider = [&](model::ModelCalibration c, double gamma) {
    const std::vector<double> p = Predict(points, c, gamma);
    if (p.empty()) return;
    const auto [overhead, sum] = BestOverhead(points, p);
    if (sum < best_sum * (1 - 1e-12)) {
      best_sum = sum;
      fit.model = c;
      fit.model.per_chunk_overhead_seconds = overhead;
      fit.contention_factor = gamma;
    }
  };
  consider(fit.model, 1);
  for (int round = 0; round < 4; ++round) {
    const double before = best_sum;
    for (double v : scales) {
      model::ModelCalibration c = fit.model;
      c.per_chunk_overhead_seconds = 0;
      c.network_scale = v;
      consider(c, fit.contention_factor);
    }
    for (double v : scales) {
      model::ModelCalibration c = fit.model;
      c.per_chunk_overhead_seconds = 0;
      c.local_scale = v;
      consider(c, fit.contention_factor);
    }
    for (double g : gammas) {
      model::ModelCalibration c = fit.model;
      c.per_chunk_overhead_seconds = 0;
      consider(c, g);
    }
    for (double v : latencies) {
      model::ModelCalibration c = fit.model;
      c.per_chunk_overhead_seconds = 0;
      c.latency_scale = v;
      consider(c, fit.contention_factor);
    }
    if (!(best_sum < before)) break;
  }
  fit.error_after_ratio = bandwidth::Median(RelativeErrors(
      points, Predict(points, fit.model, fit.contention_factor)));
  return fit;
}

namespace {

// `from` moved `step` of the way to `to`: scales geometrically, the overhead
// and gamma linearly.
PlanCalibration Blend(const PlanCalibration& from, const PlanCalibration& to,
                      double step) {
  auto geometric = [step](double a, double b) {
    return std::exp((1 - step) * std::log(a) + step * std::log(b));
  };
  auto linear = [step](double a, double b) { return a + step * (b - a); };
  PlanCalibration out = to;
  out.model.network_scale =
      geometric(from.model.network_scale, to.model.network_scale);
  out.model.local_scale =
      geometric(from.model.local_scale, to.model.local_scale);
  out.model.latency_scale =
      geometric(from.model.latency_scale, to.model.latency_scale);
  out.model.per_chunk_overhead_seconds =
      linear(from.model.per_chunk_overhead_seconds,
             to.model.per_chunk_overhead_seconds);
  out.contention_factor = linear(from.contention_factor, to.contention_factor);
  return out;
}

// |error| of every point under `c`; empty when one cannot be predicted.
std::vector<double> AbsErrors(const std::vector<Point>& points,
                              const PlanCalibration& c) {
  const std::vector<double> p = Predict(points, c.model, c.contention_factor);
  return p.empty() ? p : RelativeErrors(points, p);
}

}  // namespace

GuardedFit GuardFit(const std::vector<Observation>& run,
                    const PlanCalibration* previous, const CalibrationFit& fit,
                    const NodeLookup* lookup, double max_growth_ratio) {
  std::map<std::string, PreparedPlan> plans;
  const std::vector<Point> points = PreparePoints(run, lookup, &plans);
  const PlanCalibration none;
  const PlanCalibration& from = previous != nullptr ? *previous : none;
  PlanCalibration to;
  to.model = fit.model;
  to.contention_factor = fit.contention_factor;
  GuardedFit out;
  const std::vector<double> before = AbsErrors(points, from);
  if (before.empty() && !points.empty()) return out;
  for (double step : {1.0, 0.75, 0.5, 0.25}) {
    const PlanCalibration c = Blend(from, to, step);
    const std::vector<double> after = AbsErrors(points, c);
    if (after.size() != before.size()) continue;
    double growth = 0;
    size_t worst = 0;
    for (size_t i = 0; i < after.size(); ++i) {
      if (after[i] - before[i] > growth) {
        growth = after[i] - before[i];
        worst = i;
      }
    }
    if (step == 1.0 && growth > 0) {
      const Point& p = points[worst];
      out.worst = absl::StrFormat(
          "%s K=%d: |error| %.1f%% -> %.1f%% with the whole fit",
          strategy::StrategyName(p.kind), p.chunks, before[worst] * 100,
          after[worst] * 100);
    }
    if (growth <= max_growth_ratio) {
      out.outcome = step == 1.0 ? GuardedFit::Outcome::kFitted
                                : GuardedFit::Outcome::kShrunk;
      out.calibration = c;
      out.step = step;
      return out;
    }
  }
  return out;
}

PlanCalibration WithEvidence(PlanCalibration c, const CalibrationFit& fit,
                             const std::string& task_id) {
  v1::Calibration& ev = c.evidence;
  ev.set_per_chunk_overhead_seconds(c.model.per_chunk_overhead_seconds);
  ev.set_contention_factor(c.contention_factor);
  ev.set_network_scale_ratio(c.model.network_scale);
  ev.set_local_scale_ratio(c.model.local_scale);
  ev.set_latency_scale_ratio(c.model.latency_scale);
  ev.set_task_id(task_id);
  ev.set_error_before_ratio(fit.error_before_ratio);
  ev.set_error_after_ratio(fit.error_after_ratio);
  return c;
}

std::optional<double> MedianErrorRatio(
    const std::vector<Observation>& observations, const PlanCalibration& c,
    const NodeLookup* lookup) {
  std::map<std::string, PreparedPlan> plans;
  const std::vector<double> errors =
      AbsErrors(PreparePoints(observations, lookup, &plans), c);
  if (errors.empty()) return std::nullopt;
  return bandwidth::Median(errors);
}

RunCalibration CalibrateRun(const std::vector<Observation>& run,
                            std::vector<Observation> quiet,
                            const PlanCalibration* previous,
                            const NodeLookup* lookup,
                            const std::string& task_id, absl::Time now,
                            double max_growth_ratio, PlanKnowledge* knowledge) {
  RunCalibration out;
  const std::string node_set = NodeSetKey(quiet.front().request);
  const std::vector<Observation> fitted = knowledge->AddRun(std::move(quiet));
  absl::StatusOr<CalibrationFit> fit = FitCalibration(fitted, lookup);
  if (!fit.ok()) {
    out.status = fit.status();
    return out;
  }
  out.fit = *fit;
  out.guarded = GuardFit(run, previous, *fit, lookup, max_growth_ratio);
  if (!out.guarded.calibration) return out;
  CalibrationFit stored = *fit;
  if (out.guarded.outcome == GuardedFit::Outcome::kShrunk) {
    stored.error_after_ratio =
        MedianErrorRatio(fitted, *out.guarded.calibration, lookup)
            .value_or(fit->error_after_ratio);
  }
  out.guarded.calibration =
      WithEvidence(*out.guarded.calibration, stored, task_id);
  knowledge->SetCalibration(node_set, *out.guarded.calibration, now);
  return out;
}

std::string NodeSetKey(const v1::StrategyRequest& request) {
  std::vector<std::string> names(request.placement().node_names().begin(),
                                 request.placement().node_names().end());
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ",");
}

std::string JobKey(const v1::StrategyRequest& request) {
  v1::StrategyRequest copy = request;
  copy.mutable_job()->clear_name();
  std::string key;
  google::protobuf::io::StringOutputStream stream(&key);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  copy.SerializeToCodedStream(&coded);
  return key;
}

namespace {

// Drops the oldest keys of `map` beyond `max` entries; returns them.
template <typename Map>
std::vector<std::string> BoundEntries(Map& map, std::deque<std::string>& order,
                                      size_t max) {
  std::vector<std::string> dropped;
  while (order.size() > max) {
    map.erase(order.front());
    dropped.push_back(std::move(order.front()));
    order.pop_front();
  }
  return dropped;
}

void Remember(std::deque<std::string>& order, const std::string& key) {
  order.erase(std::remove(order.begin(), order.end(), key), order.end());
  order.push_back(key);
}

void Forget(std::deque<std::string>& order, const std::string& key) {
  order.erase(std::remove(order.begin(), order.end(), key), order.end());
}

void TrimRuns(NodeSetRecord& set, int max_runs) {
  while (set.runs.size() > static_cast<size_t>(std::max(1, max_runs))) {
    set.runs.pop_front();
  }
}

void LogSkipped(const std::string& id, const absl::Status& why) {
  std::cerr << "monta-planner: knowledge record " << id
            << " skipped: " << why.message() << std::endl;
}

}  // namespace

std::vector<std::string> PlanKnowledge::KeepNodeSetLocked(
    NodeSetRecord record) {
  TrimRuns(record, options_.max_runs_per_node_set);
  const std::string key = record.node_set;
  node_sets_[key] = std::move(record);
  Remember(node_set_order_, key);
  return BoundEntries(node_sets_, node_set_order_, options_.max_entries);
}

std::vector<std::string> PlanKnowledge::KeepJobLocked(const std::string& key,
                                                      JobRecord record) {
  verified_[key] = std::move(record);
  Remember(verified_order_, key);
  return BoundEntries(verified_, verified_order_, options_.max_entries);
}

store::KnowledgeWrites PlanKnowledge::NodeSetWritesLocked(
    const std::string& key, const std::vector<std::string>& dropped_sets) {
  store::KnowledgeWrites writes;
  for (const std::string& d : dropped_sets) {
    writes[NodeSetRecordId(d)] = std::nullopt;
  }
  auto it = node_sets_.find(key);
  if (it == node_sets_.end()) return writes;
  std::optional<std::string> value =
      EncodeNodeSetRecord(it->second, store::kMaxKnowledgeRecordBytes);
  if (value.has_value()) {
    writes[NodeSetRecordId(key)] = *std::move(value);
  } else {
    std::cerr << "monta-planner: the calibration of node set " << key.size()
              << " bytes long is over a stored record's "
              << store::kMaxKnowledgeRecordBytes
              << " bytes: kept in memory only" << std::endl;
  }
  return writes;
}

void PlanKnowledge::Write(const store::KnowledgeWrites& writes) {
  if (writer_ && !writes.empty()) writer_(writes);
}

void PlanKnowledge::SetWriter(Writer writer) {
  absl::MutexLock write(&write_mu_);
  writer_ = std::move(writer);
}

void PlanKnowledge::ChangeNodeSet(
    const std::string& key, const std::function<void(NodeSetRecord&)>& change) {
  absl::MutexLock write(&write_mu_);
  store::KnowledgeWrites writes;
  {
    absl::MutexLock lock(&mu_);
    NodeSetRecord set;
    set.node_set = key;
    if (auto it = node_sets_.find(key); it != node_sets_.end()) {
      set = std::move(it->second);
    }
    change(set);
    writes = NodeSetWritesLocked(key, KeepNodeSetLocked(std::move(set)));
  }
  Write(writes);
}

std::vector<Observation> PlanKnowledge::AddRun(std::vector<Observation> run) {
  if (run.empty()) return {};
  std::vector<Observation> all;
  ChangeNodeSet(NodeSetKey(run.front().request), [&](NodeSetRecord& set) {
    set.runs.push_back(std::move(run));
    TrimRuns(set, options_.max_runs_per_node_set);
    set.updated_at = absl::Now();
    for (const auto& r : set.runs) all.insert(all.end(), r.begin(), r.end());
  });
  return all;
}

void PlanKnowledge::SetCalibration(const std::string& node_set,
                                   PlanCalibration fit, absl::Time fitted_at) {
  ChangeNodeSet(node_set, [&](NodeSetRecord& set) {
    set.calibration = std::move(fit);
    set.fitted_at = fitted_at;
    set.updated_at = std::max(fitted_at, set.updated_at);
  });
}

std::optional<PlanCalibration> PlanKnowledge::Calibration(
    const std::string& node_set, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = node_sets_.find(node_set);
  if (it == node_sets_.end() || !it->second.calibration) return std::nullopt;
  PlanCalibration c = *it->second.calibration;
  c.evidence.set_age_seconds(
      std::max(0.0, absl::ToDoubleSeconds(now - it->second.fitted_at)));
  return c;
}

void PlanKnowledge::SetVerified(const v1::StrategyRequest& request,
                                const v1::VerifyReply& reply, absl::Time at) {
  const std::string key = JobKey(request);
  JobRecord record{request, reply, at};
  record.request.mutable_job()->clear_name();
  absl::MutexLock write(&write_mu_);
  store::KnowledgeWrites writes;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& d : KeepJobLocked(key, record)) {
      writes[JobRecordId(d)] = std::nullopt;
    }
    if (std::optional<std::string> value =
            EncodeJobRecord(record, store::kMaxKnowledgeRecordBytes)) {
      writes[JobRecordId(key)] = *std::move(value);
    } else {
      std::cerr << "monta-planner: the verify reply of task "
                << reply.task().task_id() << " is over a stored record's "
                << store::kMaxKnowledgeRecordBytes
                << " bytes: kept in memory only" << std::endl;
    }
  }
  Write(writes);
}

std::optional<PlanKnowledge::Verified> PlanKnowledge::FreshVerified(
    const v1::StrategyRequest& request, absl::Time now) const {
  const std::string key = JobKey(request);
  absl::MutexLock lock(&mu_);
  auto it = verified_.find(key);
  if (it == verified_.end()) return std::nullopt;
  if (now - it->second.at > options_.verified_ttl) return std::nullopt;
  return Verified{it->second.reply, it->second.at};
}

PlanKnowledge::Loaded PlanKnowledge::Replace(
    const std::vector<store::KnowledgeRecord>& records) {
  Loaded loaded;
  std::vector<NodeSetRecord> sets;
  std::vector<JobRecord> jobs;
  for (const store::KnowledgeRecord& r : records) {
    absl::Status status = absl::DataLossError("an id of no known kind");
    if (IsNodeSetRecordId(r.id)) {
      absl::StatusOr<NodeSetRecord> set = DecodeNodeSetRecord(r.id, r.value);
      status = set.status();
      if (set.ok()) sets.push_back(*std::move(set));
    } else if (IsJobRecordId(r.id)) {
      absl::StatusOr<JobRecord> job = DecodeJobRecord(r.id, r.value);
      status = job.status();
      if (job.ok()) jobs.push_back(*std::move(job));
    }
    if (!status.ok()) {
      LogSkipped(r.id, status);
      ++loaded.malformed;
    }
  }
  // Oldest first, so the bounds keep the newest, as on the replica that
  // wrote them.
  std::stable_sort(sets.begin(), sets.end(), [](const auto& a, const auto& b) {
    return a.updated_at < b.updated_at;
  });
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const auto& a, const auto& b) { return a.at < b.at; });
  absl::MutexLock lock(&mu_);
  node_sets_.clear();
  node_set_order_.clear();
  verified_.clear();
  verified_order_.clear();
  for (NodeSetRecord& set : sets) KeepNodeSetLocked(std::move(set));
  for (JobRecord& job : jobs) {
    const std::string key = JobKey(job.request);
    KeepJobLocked(key, std::move(job));
  }
  loaded.node_sets = static_cast<int>(node_sets_.size());
  loaded.jobs = static_cast<int>(verified_.size());
  return loaded;
}

bool PlanKnowledge::Apply(const store::KnowledgeChange& change) {
  if (!change.value.has_value()) {
    absl::MutexLock lock(&mu_);
    for (auto it = node_sets_.begin(); it != node_sets_.end(); ++it) {
      if (NodeSetRecordId(it->first) != change.id) continue;
      Forget(node_set_order_, it->first);
      node_sets_.erase(it);
      return true;
    }
    for (auto it = verified_.begin(); it != verified_.end(); ++it) {
      if (JobRecordId(it->first) != change.id) continue;
      Forget(verified_order_, it->first);
      verified_.erase(it);
      return true;
    }
    return true;  // not held (dropped by the bound already)
  }
  absl::Status status = absl::DataLossError("an id of no known kind");
  if (IsNodeSetRecordId(change.id)) {
    absl::StatusOr<NodeSetRecord> set =
        DecodeNodeSetRecord(change.id, *change.value);
    status = set.status();
    if (set.ok()) {
      absl::MutexLock lock(&mu_);
      KeepNodeSetLocked(*std::move(set));
    }
  } else if (IsJobRecordId(change.id)) {
    absl::StatusOr<JobRecord> job = DecodeJobRecord(change.id, *change.value);
    status = job.status();
    if (job.ok()) {
      const std::string key = JobKey(job->request);
      absl::MutexLock lock(&mu_);
      KeepJobLocked(key, *std::move(job));
    }
  }
  if (!status.ok()) LogSkipped(change.id, status);
  return status.ok();
}

size_t PlanKnowledge::node_sets() const {
  absl::MutexLock lock(&mu_);
  return node_sets_.size();
}

size_t PlanKnowledge::jobs() const {
  absl::MutexLock lock(&mu_);
  return verified_.size();
}

namespace {

// The fastest measured run of each strategy.
std::map<int, const v1::VerifiedCandidate*> FastestByKind(
    const v1::VerifyReply& reply) {
  std::map<int, const v1::VerifiedCandidate*> best;
  for (const v1::VerifiedCandidate& c : reply.candidates()) {
    if (c.wrong_bytes() != 0 || !(c.measured_seconds() > 0)) continue;
    auto& slot = best[c.kind()];
    if (slot == nullptr || c.measured_seconds() < slot->measured_seconds()) {
      slot = &c;
    }
  }
  return best;
}

// Ranks feasible candidates by total time, then the infeasible ones.
void Rerank(v1::StrategyReply* reply) {
  auto* cs = reply->mutable_candidates();
  std::stable_sort(cs->begin(), cs->end(),
                   [](const v1::Candidate& a, const v1::Candidate& b) {
                     if (a.feasible() != b.feasible()) return a.feasible();
                     if (!a.feasible()) return false;
                     return a.total_seconds_per_layer() <
                            b.total_seconds_per_layer();
                   });
  double flat = 0;
  double dedup = 0;
  for (const v1::Candidate& c : *cs) {
    if (c.kind() == v1::STRATEGY_KIND_FLAT) flat = c.total_seconds_per_layer();
    if (c.kind() == v1::STRATEGY_KIND_TP_DEDUP)
      dedup = c.total_seconds_per_layer();
  }
  int rank = 0;
  for (v1::Candidate& c : *cs) {
    if (!c.feasible()) continue;
    c.set_rank(++rank);
    const double total = c.total_seconds_per_layer();
    c.set_speedup_over_flat(total > 0 && flat > 0 ? flat / total : 0);
    c.set_speedup_over_tp_dedup(total > 0 && dedup > 0 ? dedup / total : 0);
  }
  if (!cs->empty() && cs->Get(0).feasible()) {
    *reply->mutable_chosen() = cs->Get(0);
  }
}

}  // namespace

void ApplyVerified(const PlanKnowledge::Verified& verified, absl::Time now,
                   v1::StrategyReply* reply) {
  const auto fastest = FastestByKind(verified.reply);
  for (v1::Candidate& c : *reply->mutable_candidates()) {
    auto it = fastest.find(c.kind());
    if (!c.feasible() || it == fastest.end()) continue;
    const v1::VerifiedCandidate& m = *it->second;
    // Forward is the dispatch and the combine; backward scales with the
    // measured / predicted ratio of the run it is taken from.
    const double ratio = m.predicted_seconds() > 0
                             ? m.measured_seconds() / m.predicted_seconds()
                             : 1;
    c.set_chunks_requested(m.chunks_requested());
    c.set_chunks_effective(m.chunks_effective());
    if (verified.reply.scope() == v1::VERIFY_SCOPE_LAYER) {
      // Verify ran the layer itself (in the layout priced): forward and
      // backward keep the model's split of the measured total.
      c.set_forward_seconds_per_layer(c.forward_seconds_per_layer() * ratio);
    } else {
      // The tensor-parallel layout's dispatch op: for that layout forward
      // is two of it; whole experts run other ops forward (an AllToAll
      // without its gather), scaled like the backward.
      c.set_forward_seconds_per_layer(
          reply->expert_layout() == v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL
              ? c.forward_seconds_per_layer() * ratio
              : 2 * m.measured_seconds());
    }
    c.set_backward_seconds_per_layer(c.backward_seconds_per_layer() * ratio);
    const double total =
        c.forward_seconds_per_layer() + c.backward_seconds_per_layer();
    if (c.total_seconds_per_layer() > 0) {
      c.set_step_seconds(c.step_seconds() * total /
                         c.total_seconds_per_layer());
    }
    c.set_total_seconds_per_layer(total);
  }
  Rerank(reply);
  v1::Evidence* ev = reply->mutable_evidence();
  ev->set_origin(v1::EVIDENCE_SOURCE_VERIFIED);
  ev->mutable_verified()->set_task_id(verified.reply.task().task_id());
  ev->mutable_verified()->set_age_seconds(
      std::max(0.0, absl::ToDoubleSeconds(now - verified.at)));
  ev->add_notes(absl::StrCat(
      "candidate times are measured: verify task ",
      verified.reply.task().task_id(), " ran this job on these nodes ",
      static_cast<int64_t>(absl::ToDoubleSeconds(now - verified.at)),
      " s ago"));
}

}  // namespace monta::planning
