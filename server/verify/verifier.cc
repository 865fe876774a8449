#include "server/verify/verifier.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/bandwidth/bandwidth.h"
#include "common/proto_names.h"
#include "common/schedule/schedule.h"
#include "common/strategy/strategy_proto.h"
#include "server/model/cost_model.h"
#include "server/model/traffic.h"
#include "server/planning/decide_strategy.h"
#include "server/planning/strategy_planner.h"
#include "server/store/record_done.h"
#include "server/verify/regret.h"
#include "server/verify/score.h"

namespace monta::verify {
namespace {

namespace v1 = ::monta::v1;

absl::Status ValidateRequest(const v1::VerifyRequest& request) {
  if (request.request().placement().node_names().empty()) {
    return absl::InvalidArgumentError(
        "request.placement.node_names: verify runs on registered nodes; name "
        "them (a profile placement cannot be measured)");
  }
  if (request.chunks_size() > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks: at most 16 values, got ", request.chunks_size()));
  }
  for (int k : request.chunks()) {
    if (k < 1 || k > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunks: each must be in 1..1024, got ", k));
    }
  }
  if (request.iterations() < 0 || request.iterations() > 100 ||
      request.warmup_iterations() < 0 || request.warmup_iterations() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("iterations/warmup_iterations: must be in 0..100, got ",
                     request.iterations(), "/", request.warmup_iterations()));
  }
  if (!v1::VerifyScope_IsValid(request.scope())) {
    return absl::InvalidArgumentError(
        absl::StrCat("scope: expected LAYER, OP or unspecified (LAYER), got ",
                     static_cast<int>(request.scope())));
  }
  if (!(request.timeout_seconds() >= 0 && request.timeout_seconds() <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_seconds: must be in 0..3600, got ",
                     request.timeout_seconds()));
  }
  return absl::OkStatus();
}

// One candidate to run: the workload the agents get and the row of the reply.
struct Run {
  v1::DispatchWorkload workload;
  v1::VerifiedCandidate row;
  // The slowest rank's time per timed iteration, in iteration order.
  std::vector<double> iteration_seconds;
};

bool Runnable(v1::StrategyKind kind) {
  return kind == v1::STRATEGY_KIND_FLAT || kind == v1::STRATEGY_KIND_TP_DEDUP ||
         kind == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED ||
         kind == v1::STRATEGY_KIND_HIERARCHICAL;
}

bool Dedup(v1::StrategyKind kind) {
  return kind == v1::STRATEGY_KIND_TP_DEDUP ||
         kind == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED;
}

// What the model and the agents need to agree on for one job.
struct JobShape {
  planning::PreparedPlan prepared;
  model::Traffic traffic;
  std::optional<planning::PlanCalibration> calibration;
  // What each candidate runs, and the layout the plan priced (the job's,
  // or the planner's default: StrategyReply.expert_layout).
  planning::MeasuredScope scope = planning::MeasuredScope::kLayer;
  v1::ExpertLayout layout = v1::EXPERT_LAYOUT_TENSOR_PARALLEL;
};

// A layer in the whole-experts layout drops duplicates in every strategy
// (agent/bench/layer.h): each TP rank sends ceil(C/t) rows.
bool DropsEverywhere(const JobShape& job) {
  return job.scope == planning::MeasuredScope::kLayer &&
         job.layout == v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL &&
         job.traffic.tensor_parallel_size > 1;
}

// The workload of `kind` with `chunks`: the job's rows (padded up to a
// multiple of t for the dedup strategies, as the planner offers, and for
// every strategy of a whole-experts layer, which drops everywhere) of the
// job's row size, and the model's prediction for what the scope runs.
std::optional<Run> MakeRun(const JobShape& job, v1::StrategyKind kind,
                           int chunks) {
  const model::Traffic& tr = job.traffic;
  const int t = std::max(1, tr.tensor_parallel_size);
  const int e = std::max(1, tr.ep_group_size);
  const int64_t rows = std::max<int64_t>(1, tr.split_rows);
  const int64_t run_rows = Dedup(kind) || DropsEverywhere(job)
                               ? schedule::PaddedRows(rows, t)
                               : rows;
  const uint64_t row_bytes = static_cast<uint64_t>(std::max<int64_t>(
      1, std::llround(tr.dispatch_bytes / (static_cast<double>(e) * rows))));
  const strategy::StrategyKind model_kind =
      strategy::StrategyFromProto(kind).value_or(strategy::StrategyKind::kFlat);
  const planning::PlanCalibration none;
  const planning::PlanCalibration& c =
      job.calibration ? *job.calibration : none;
  std::optional<double> predicted =
      planning::PredictMeasuredSeconds(job.prepared, job.scope, model_kind,
                                       chunks, c.model, c.contention_factor);
  if (!predicted) return std::nullopt;
  Run run;
  run.workload.set_strategy_kind(kind);
  run.workload.set_chunks(chunks);
  run.workload.set_rows(static_cast<uint64_t>(run_rows));
  run.workload.set_row_bytes(row_bytes);
  run.workload.set_tensor_parallel_size(t);
  if (job.scope == planning::MeasuredScope::kLayer) {
    run.workload.set_scope(v1::VERIFY_SCOPE_LAYER);
    run.workload.set_expert_layout(job.layout);
  } else {
    run.workload.set_scope(v1::VERIFY_SCOPE_OP);
  }
  run.row.set_kind(kind);
  run.row.set_chunks_requested(chunks);
  run.row.set_chunks_effective(
      kind == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED
          ? static_cast<int>(schedule::EffectiveChunks(run_rows / t, chunks))
          : 1);
  run.row.set_predicted_seconds(*predicted);
  run.row.set_uncalibrated_seconds(
      planning::PredictMeasuredSeconds(job.prepared, job.scope, model_kind,
                                       chunks, {}, 1)
          .value_or(0));
  run.row.set_dispatch_bytes(static_cast<uint64_t>(e) * run_rows * row_bytes);
  return run;
}

// The sweep's K that the planner offers for the pipeline: those at or under
// its chunk bound (docs/MODEL.md §5; every K when the bound does not cut).
// A K the planner never chooses is not a candidate to verify; a sweep the
// request names is measured as asked.
std::vector<int> OfferedChunks(const JobShape& job,
                               const std::vector<int>& sweep,
                               bool sweep_requested) {
  if (sweep_requested) return sweep;
  const planning::PlanCalibration none;
  const planning::PlanCalibration& c =
      job.calibration ? *job.calibration : none;
  const int bound = planning::ChunkBound(
      job.prepared, job.scope, strategy::StrategyKind::kTpDedupPipelined,
      c.model, c.contention_factor);
  if (bound <= 0) return sweep;
  std::vector<int> offered;
  for (int k : sweep) {
    if (k <= bound) offered.push_back(k);
  }
  return offered;
}

// The simplest kind that runs the same schedule as `kind` in
// `chunks_effective` chunks in this job's scope and layout
// (strategy::SameScheduleAs).
v1::StrategyKind ScheduleKind(const JobShape& job, v1::StrategyKind kind,
                              int chunks_effective) {
  const std::optional<strategy::StrategyKind> k =
      strategy::StrategyFromProto(kind);
  if (!k) return kind;
  return strategy::StrategyToProto(
      strategy::SameScheduleAs(*k, chunks_effective, DropsEverywhere(job)));
}

// Every feasible, runnable strategy of the plan; the pipeline at every K of
// the sweep and the chosen K; one run per schedule: a K with the K_eff of
// another runs once, and a candidate that runs the same schedule as a simpler
// one (tp_dedup_pipelined in one chunk is tp_dedup; with whole experts
// tp_dedup is flat) is run once as the simpler, chosen when the plan's
// choice is either (docs/MODEL.md §11).
std::vector<Run> PlanRuns(const JobShape& job, const v1::StrategyReply& plan,
                          const std::vector<int>& sweep) {
  std::vector<Run> runs;
  std::set<std::pair<int, int>> seen;  // (schedule kind, K_eff)
  const v1::StrategyKind chosen =
      ScheduleKind(job, plan.chosen().kind(), plan.chosen().chunks_effective());
  for (const v1::Candidate& c : plan.candidates()) {
    if (!c.feasible() || !Runnable(c.kind())) continue;
    std::vector<int> ks = {1};
    if (c.kind() == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED) {
      ks = sweep;
      ks.push_back(c.chunks_requested());
    }
    for (int k : ks) {
      std::optional<Run> run = MakeRun(job, c.kind(), k);
      if (!run) continue;
      const v1::StrategyKind kind =
          ScheduleKind(job, c.kind(), run->row.chunks_effective());
      if (kind != c.kind()) run = MakeRun(job, kind, 1);
      if (!run || !seen.insert({kind, run->row.chunks_effective()}).second) {
        continue;
      }
      run->row.set_chosen(kind == chosen &&
                          run->row.chunks_effective() ==
                              plan.chosen().chunks_effective());
      runs.push_back(*std::move(run));
    }
  }
  return runs;
}

// p10, p90 and spread of the slowest rank's time per iteration; noisy when
// the spread is above `max_spread_ratio` or the agents sent no iterations.
void FillSpread(const v1::CurvePoint& point, double max_spread_ratio,
                v1::VerifiedCandidate* row) {
  std::vector<double> v(point.iteration_seconds().begin(),
                        point.iteration_seconds().end());
  if (v.empty()) {
    row->set_noisy(true);
    return;
  }
  std::sort(v.begin(), v.end());
  const double median = bandwidth::Median(v);
  row->set_p10_seconds(Quantile(v, 0.1));
  row->set_p90_seconds(Quantile(v, 0.9));
  row->set_spread_ratio(
      median > 0 ? (row->p90_seconds() - row->p10_seconds()) / median : 0);
  row->set_noisy(!(row->spread_ratio() <= max_spread_ratio));
}

// Fills measured times from the task's curves (one per run, in run order).
// A run whose curve the planner excluded (nodes disagree, wrong bytes) has no
// measurement: the verification fails, naming why.
absl::Status FillMeasured(const v1::BenchmarkTaskStatus& status,
                          const std::vector<v1::BandwidthCurve>& curves,
                          double max_spread_ratio, std::vector<Run>* runs) {
  if (status.excluded_size() > 0) {
    return absl::AbortedError(absl::StrCat(
        "verify task ", status.task_id(), ": ", status.excluded_size(),
        " dispatch measurement(s) excluded; the first: ",
        ShortName(status.excluded(0).reason()), ": ",
        status.excluded(0).detail()));
  }
  if (curves.size() != runs->size()) {
    return absl::InternalError(absl::StrCat("verify task returned ",
                                            curves.size(), " curves for ",
                                            runs->size(), " dispatches"));
  }
  for (size_t i = 0; i < runs->size(); ++i) {
    v1::VerifiedCandidate& row = (*runs)[i].row;
    const v1::BandwidthCurve& curve = curves[i];
    if (curve.strategy_kind() != row.kind() ||
        curve.chunks() != row.chunks_requested() || curve.points().empty()) {
      return absl::InternalError(absl::StrCat("verify task curve ", i,
                                              " does not match dispatch ", i));
    }
    row.set_measured_seconds(curve.points(0).time_seconds());
    (*runs)[i].iteration_seconds.assign(
        curve.points(0).iteration_seconds().begin(),
        curve.points(0).iteration_seconds().end());
    row.set_wrong_bytes(curve.points(0).wrong_bytes());
    row.set_error_ratio(row.predicted_seconds() / row.measured_seconds() - 1);
    FillSpread(curve.points(0), max_spread_ratio, &row);
  }
  return absl::OkStatus();
}

// Runs the dispatches as one benchmark task on the job's nodes and fills
// the runs' measured times; the task's status goes to the reply.
absl::Status Execute(coordination::Coordinator& coordinator,
                     const VerifierOptions& options,
                     const v1::VerifyRequest& request, const JobShape& job,
                     absl::Duration max_wait, std::vector<Run>* runs,
                     v1::VerifyReply* reply) {
  v1::RunBenchmarkRequest bench;
  *bench.mutable_nodes() = request.request().placement().node_names();
  bench.set_ranks_per_node(job.prepared.shape.gpus_per_node);
  bench.set_timeout_seconds(
      request.timeout_seconds() > 0
          ? request.timeout_seconds()
          : absl::ToDoubleSeconds(options.default_timeout));
  std::vector<v1::DispatchWorkload> workloads;
  for (const Run& r : *runs) workloads.push_back(r.workload);
  const int iterations = request.iterations() > 0 ? request.iterations()
                                                  : options.default_iterations;
  const int warmup = request.warmup_iterations() > 0
                         ? request.warmup_iterations()
                         : options.default_warmup_iterations;
  // The task's curves, handed over when it finishes (the coordinator keeps
  // none); filled before the finished status is visible to WaitFinished.
  struct Results {
    absl::Mutex mu;
    std::vector<v1::BandwidthCurve> curves ABSL_GUARDED_BY(mu);
  };
  auto results = std::make_shared<Results>();
  absl::StatusOr<v1::BenchmarkTaskStatus> status =
      coordinator.ScheduleDispatches(
          bench, workloads, iterations, warmup, Instant::Now(),
          [results](const v1::BenchmarkTaskStatus&,
                    std::vector<v1::BandwidthCurve> curves) {
            absl::MutexLock lock(&results->mu);
            results->curves = std::move(curves);
          });
  if (!status.ok()) return status.status();
  const absl::Duration wait =
      std::min(max_wait, absl::Seconds(bench.timeout_seconds() + 5));
  status = coordinator.WaitFinished(status->task_id(), wait);
  if (!status.ok()) return status.status();
  *reply->mutable_task() = *status;
  for (const std::string& n : bench.nodes()) reply->add_nodes(n);
  reply->set_ranks_per_node(bench.ranks_per_node());
  if (status->state() == v1::TASK_STATE_FAILED) {
    return absl::AbortedError(absl::StrCat("verify task ", status->task_id(),
                                           " failed: ", status->reason()));
  }
  if (status->state() != v1::TASK_STATE_SUCCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        "verify task ", status->task_id(), " did not finish in time"));
  }
  absl::MutexLock lock(&results->mu);
  return FillMeasured(*status, results->curves, options.max_spread_ratio, runs);
}

// The reply's measured candidates as observations for a fit (`quiet_only`:
// only those whose spread is small).
std::vector<planning::Observation> Observations(
    const v1::VerifyRequest& request, const JobShape& job,
    const v1::VerifyReply& reply, bool quiet_only) {
  std::vector<planning::Observation> out;
  for (const v1::VerifiedCandidate& row : reply.candidates()) {
    if (row.wrong_bytes() != 0 || !(row.measured_seconds() > 0)) continue;
    if (quiet_only && row.noisy()) continue;
    planning::Observation o;
    o.request = request.request();
    o.kind = strategy::StrategyFromProto(row.kind())
                 .value_or(strategy::StrategyKind::kFlat);
    o.chunks = row.chunks_requested();
    o.measured_seconds = row.measured_seconds();
    o.scope = job.scope;
    out.push_back(std::move(o));
  }
  return out;
}

// Whether this run may teach the model at all; sets the outcome when not.
bool MayCalibrate(const v1::VerifyRequest& request, v1::VerifyReply* reply) {
  if (request.skip_calibration()) {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_SKIPPED);
    reply->set_calibration_note(
        "skip_calibration: the nodes' calibration stays as it was");
    return false;
  }
  if (reply->loopback_only() && !request.calibrate_on_loopback()) {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_LOOPBACK);
    reply->set_calibration_note(absl::StrCat(
        reply->calibration_note(),
        ": the benchmark traffic never crosses a link, so this run is "
        "measured but neither calibrates nor answers later plans "
        "(calibrate_on_loopback overrides)"));
    return false;
  }
  return true;
}

// Fits the node set's calibration on this run's quiet candidates and the
// earlier runs kept for it, guarded so that no candidate's |error| grows by
// more than the options allow, stores it (planning::CalibrateRun), and fills
// the reply's calibration, outcome and calibrated times.
void Calibrate(const v1::VerifyRequest& request,
               const planning::NodeLookup& lookup, const JobShape& job,
               const VerifierOptions& options, absl::Time now,
               planning::PlanKnowledge* knowledge, v1::VerifyReply* reply) {
  if (!MayCalibrate(request, reply)) return;
  std::vector<planning::Observation> quiet =
      Observations(request, job, *reply, /*quiet_only=*/true);
  if (quiet.empty()) {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_TOO_NOISY);
    reply->set_calibration_note(absl::StrFormat(
        "no candidate ran with a spread of at most %.0f%% (p90 - p10 over "
        "the median): the nodes' calibration stays as it was",
        options.max_spread_ratio * 100));
    return;
  }
  const planning::RunCalibration calibrated = planning::CalibrateRun(
      Observations(request, job, *reply, /*quiet_only=*/false),
      std::move(quiet), job.calibration ? &*job.calibration : nullptr, &lookup,
      reply->task().task_id(), now, options.max_calibration_error_growth_ratio,
      knowledge);
  if (!calibrated.status.ok()) {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_REFUSED);
    reply->set_calibration_note(std::string(calibrated.status.message()));
    return;
  }
  const planning::GuardedFit& guarded = calibrated.guarded;
  const std::string limit = absl::StrFormat(
      "%.0f points", options.max_calibration_error_growth_ratio * 100);
  if (!guarded.calibration) {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_REFUSED);
    reply->set_calibration_note(absl::StrCat(
        "every step towards the fit grows some candidate's |error| by more "
        "than ",
        limit, " (", guarded.worst, "): the previous calibration stays"));
    return;
  }
  const planning::PlanCalibration& c = *guarded.calibration;
  if (guarded.outcome == planning::GuardedFit::Outcome::kShrunk) {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_SHRUNK);
    reply->set_calibration_note(absl::StrFormat(
        "applied %.0f%% of the way from the previous calibration: the whole "
        "fit grows a candidate's |error| by more than %s (%s)",
        guarded.step * 100, limit, guarded.worst));
  } else {
    reply->set_calibration_outcome(v1::CALIBRATION_OUTCOME_FITTED);
  }
  *reply->mutable_calibration() = c.evidence;
  for (v1::VerifiedCandidate& row : *reply->mutable_candidates()) {
    std::optional<double> p = planning::PredictMeasuredSeconds(
        job.prepared, job.scope,
        strategy::StrategyFromProto(row.kind())
            .value_or(strategy::StrategyKind::kFlat),
        row.chunks_requested(), c.model, c.contention_factor);
    if (p) row.set_calibrated_seconds(*p);
  }
}

// The host of a benchmark address ("10.0.0.1", "10.0.0.1:5000", "[::1]:5").
std::string HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return std::string(address.substr(
        1, close == absl::string_view::npos ? close : close - 1));
  }
  if (std::count(address.begin(), address.end(), ':') == 1) {
    return std::string(address.substr(0, address.find(':')));
  }
  return std::string(address);
}

// Whether the nodes' benchmark traffic never crosses a link: two or more
// nodes whose bench addresses are all loopback ones or all one host (agents
// sharing a host). One node has no traffic between nodes to judge. Fills
// the reply's loopback_only and, when so, the start of its note.
void JudgeLinks(const registry::Registry& registry, Instant now,
                v1::VerifyReply* reply) {
  if (reply->nodes_size() < 2) return;
  std::set<std::string> hosts;
  bool all_loopback = true;
  std::vector<std::string> named;
  for (const std::string& node : reply->nodes()) {
    absl::StatusOr<v1::NodeInfo> info = registry.Get(node, now);
    const std::string address = info.ok() ? info->bench_address() : "";
    if (address.empty()) return;  // unknown: not judged
    hosts.insert(HostOf(address));
    all_loopback = all_loopback && registry::IsLoopbackAddress(address);
    named.push_back(absl::StrCat(node, " (", address, ")"));
  }
  if (!all_loopback && hosts.size() > 1) return;
  reply->set_loopback_only(true);
  reply->set_calibration_note(absl::StrCat(
      "nodes ", absl::StrJoin(named, ", "),
      all_loopback ? " benchmark over loopback" : " share one host"));
}

// The job's model inputs on its nodes, with the node set's calibration.
absl::StatusOr<JobShape> ShapeJob(const v1::StrategyRequest& request,
                                  const planning::NodeLookup& lookup,
                                  const planning::PlanKnowledge& knowledge,
                                  absl::Time now) {
  absl::StatusOr<planning::PreparedPlan> prepared =
      planning::PreparePlan(request, &lookup);
  if (!prepared.ok()) return prepared.status();
  absl::StatusOr<model::Traffic> traffic =
      model::ComputeTraffic(prepared->job, prepared->shape);
  if (!traffic.ok()) {
    return absl::InvalidArgumentError(traffic.status().message());
  }
  JobShape job{*std::move(prepared), *traffic,
               knowledge.Calibration(planning::NodeSetKey(request), now)};
  return job;
}

}  // namespace

Verifier::Verifier(registry::Registry* registry,
                   coordination::Coordinator* coordinator,
                   planning::PlanKnowledge* knowledge,
                   metrics::PlannerMetrics* metrics, store::DecisionLog* log,
                   VerifierOptions options)
    : registry_(registry),
      coordinator_(coordinator),
      knowledge_(knowledge),
      metrics_(metrics),
      log_(log),
      options_(std::move(options)) {}

absl::StatusOr<v1::VerifyReply> Verifier::Verify(
    const v1::VerifyRequest& request, absl::Duration max_wait) {
  if (absl::Status s = ValidateRequest(request); !s.ok()) return s;
  const v1::VerifyScope scope = request.scope() == v1::VERIFY_SCOPE_OP
                                    ? v1::VERIFY_SCOPE_OP
                                    : v1::VERIFY_SCOPE_LAYER;
  // Node states on the monotonic clock; curve and calibration ages (stored
  // records) on the wall clock.
  const Instant now = Instant::Now();
  // The fabric tree as it stands at the start of the run prices the plan,
  // every prediction and the fit, as GetStrategy prices it.
  std::optional<v1::FabricReply> tree;
  if (options_.fabric_tree) tree = options_.fabric_tree();
  const planning::RegistryNodeLookup lookup(registry_, now,
                                            tree ? &*tree : nullptr);
  absl::StatusOr<JobShape> job =
      ShapeJob(request.request(), lookup, *knowledge_, now.wall);
  if (!job.ok()) return job.status();
  if (job->traffic.dispatch_bytes > options_.max_dispatch_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request.job: dispatch of ", job->traffic.dispatch_bytes,
        " bytes per rank; verify runs at most ", options_.max_dispatch_bytes));
  }
  v1::VerifyReply reply;
  reply.set_scope(scope);
  reply.set_max_calibration_spread_ratio(options_.max_spread_ratio);
  absl::StatusOr<v1::StrategyReply> plan =
      planning::PlanStrategy(request.request(), &lookup, now.wall,
                             job->calibration ? &*job->calibration : nullptr);
  if (!plan.ok()) return plan.status();
  *reply.mutable_plan() = *plan;
  job->scope = scope == v1::VERIFY_SCOPE_OP
                   ? planning::MeasuredScope::kDispatchOp
                   : planning::MeasuredScope::kLayer;
  job->layout = plan->expert_layout();
  std::vector<int> sweep(request.chunks().begin(), request.chunks().end());
  const bool sweep_requested = !sweep.empty();
  if (!sweep_requested) sweep = options_.default_chunks;
  std::vector<Run> runs =
      PlanRuns(*job, *plan, OfferedChunks(*job, sweep, sweep_requested));
  if (runs.empty()) {
    return absl::FailedPreconditionError(
        "request: no strategy the agents can run is feasible for this job");
  }
  absl::Status ran =
      Execute(*coordinator_, options_, request, *job, max_wait, &runs, &reply);
  if (!ran.ok()) {
    if (metrics_ != nullptr) metrics_->RecordVerify(ran, scope, nullptr);
    return ran;
  }
  std::vector<std::vector<double>> iterations;
  for (Run& r : runs) {
    *reply.add_candidates() = std::move(r.row);
    iterations.push_back(std::move(r.iteration_seconds));
  }
  ScoreRun(iterations, &reply);
  JudgeLinks(*registry_, now, &reply);
  Calibrate(request, lookup, *job, options_, absl::Now(), knowledge_, &reply);
  // A run that may not calibrate on loopback does not answer later plans
  // either: its times are the host's, not the network's.
  if (!reply.loopback_only() || request.calibrate_on_loopback()) {
    knowledge_->SetVerified(request.request(), reply, absl::Now());
  }
  if (metrics_ != nullptr) metrics_->RecordVerify(ran, scope, &reply);
  if (log_ != nullptr) {
    // Answered only once its record is stored (on this run's own thread).
    store::RecordWait stored;
    log_->RecordVerification(request, reply, stored.done());
    if (absl::Status s = stored.Wait(); !s.ok()) return s;
  }
  return reply;
}

}  // namespace monta::verify
