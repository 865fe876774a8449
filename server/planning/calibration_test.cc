#include "server/planning/calibration.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/paper_job.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;
using strategy::StrategyKind;

// The paper's job on its profile (no registry needed), at a given sequence
// length so that observations span sizes.
v1::StrategyRequest PaperAt(int64_t sequence_length) {
  v1::StrategyRequest r = monta::testing::PaperJobRequest();
  r.mutable_job()->set_sequence_length(sequence_length);
  return r;
}

struct Run {
  StrategyKind kind;
  int chunks;
};

// "Measurements" made by the model itself under a known calibration: a fit
// must find it again.
std::vector<Observation> Synthetic(
    const model::ModelCalibration& truth, double gamma,
    MeasuredScope scope = MeasuredScope::kDispatchOp,
    std::optional<bool> experts_tensor_parallel = std::nullopt) {
  std::vector<Observation> out;
  const std::vector<Run> runs = {{StrategyKind::kFlat, 1},
                                 {StrategyKind::kTpDedup, 1},
                                 {StrategyKind::kTpDedupPipelined, 2},
                                 {StrategyKind::kTpDedupPipelined, 4},
                                 {StrategyKind::kTpDedupPipelined, 8},
                                 {StrategyKind::kTpDedupPipelined, 16}};
  for (int64_t seq : {4096, 16384}) {
    v1::StrategyRequest request = PaperAt(seq);
    if (experts_tensor_parallel) {
      request.mutable_job()->set_experts_tensor_parallel(
          *experts_tensor_parallel);
    }
    absl::StatusOr<PreparedPlan> plan = PreparePlan(request, nullptr);
    EXPECT_TRUE(plan.ok()) << plan.status();
    for (const Run& run : runs) {
      std::optional<double> s = PredictMeasuredSeconds(
          *plan, scope, run.kind, run.chunks, truth, gamma);
      EXPECT_TRUE(s.has_value());
      out.push_back(Observation{request, run.kind, run.chunks, *s, scope});
    }
  }
  return out;
}

TEST(CalibrationTest, FitFindsTheCalibrationThatMadeTheMeasurements) {
  model::ModelCalibration truth;
  truth.network_scale = std::pow(2.0, 3 / 8.0);  // on the grid: ~1.30
  truth.local_scale = std::pow(2.0, -2 / 8.0);   // ~0.84
  truth.per_chunk_overhead_seconds = 200e-6;
  const double gamma = 1.3;
  absl::StatusOr<CalibrationFit> fit =
      FitCalibration(Synthetic(truth, gamma), nullptr);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->points, 12);
  EXPECT_NEAR(fit->model.network_scale, truth.network_scale, 1e-9);
  EXPECT_NEAR(fit->model.local_scale, truth.local_scale, 1e-9);
  EXPECT_NEAR(fit->contention_factor, gamma, 1e-9);
  EXPECT_NEAR(fit->model.per_chunk_overhead_seconds, 200e-6, 1e-9);
  EXPECT_GT(fit->error_before_ratio, 0.15);
  EXPECT_LT(fit->error_after_ratio, 1e-6);
}

// Layer runs (the four ops, forward and backward) in both layouts: the
// same calibration is found, the per-chunk overhead counted as often as the
// layer's ops pay it (each dedup op K times, each dropped AllToAll once).
TEST(CalibrationTest, FitFindsTheCalibrationOnLayerRunsInBothLayouts) {
  model::ModelCalibration truth;
  truth.network_scale = std::pow(2.0, 3 / 8.0);
  truth.local_scale = std::pow(2.0, -2 / 8.0);
  truth.per_chunk_overhead_seconds = 100e-6;
  for (bool tp : {true, false}) {
    std::vector<Observation> runs =
        Synthetic(truth, 1.3, MeasuredScope::kLayer, tp);
    absl::StatusOr<CalibrationFit> fit = FitCalibration(runs, nullptr);
    ASSERT_TRUE(fit.ok()) << fit.status();
    EXPECT_NEAR(fit->model.network_scale, truth.network_scale, 1e-9) << tp;
    EXPECT_NEAR(fit->model.local_scale, truth.local_scale, 1e-9) << tp;
    EXPECT_NEAR(fit->model.per_chunk_overhead_seconds, 100e-6, 1e-9) << tp;
    EXPECT_NEAR(fit->contention_factor, 1.3, 1e-9) << tp;
    EXPECT_LT(fit->error_after_ratio, 1e-6) << tp;
  }
  // A layer measurement read as one op would be four times too slow: the
  // scope is what the model predicts.
  const std::vector<Observation> layer =
      Synthetic({}, 1, MeasuredScope::kLayer, true);
  absl::StatusOr<PreparedPlan> plan = PreparePlan(layer[0].request, nullptr);
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(*PredictMeasuredSeconds(*plan, MeasuredScope::kDispatchOp,
                                      StrategyKind::kFlat, 1, {}, 1) *
                  4,
              layer[0].measured_seconds, 1e-12);
}

// A fit that would make some candidate of the run worse by more than 5
// points is taken only part of the way, or not at all.
TEST(CalibrationTest, AFitMayNotGrowAnyErrorByMoreThanFivePoints) {
  // The run measured exactly what the uncalibrated model predicts.
  const std::vector<Observation> run = Synthetic({}, 1);
  CalibrationFit exact;
  GuardedFit same = GuardFit(run, nullptr, exact, nullptr);
  EXPECT_EQ(same.outcome, GuardedFit::Outcome::kFitted);
  EXPECT_DOUBLE_EQ(same.step, 1);
  ASSERT_TRUE(same.calibration.has_value());
  EXPECT_TRUE(same.worst.empty());

  CalibrationFit far;
  far.model.network_scale = 4;
  GuardedFit refused = GuardFit(run, nullptr, far, nullptr);
  EXPECT_EQ(refused.outcome, GuardedFit::Outcome::kRefused);
  EXPECT_FALSE(refused.calibration.has_value());
  EXPECT_NE(refused.worst.find("|error| 0.0% -> "), std::string::npos)
      << refused.worst;

  CalibrationFit near;
  near.model.network_scale = 1.2;
  GuardedFit shrunk = GuardFit(run, nullptr, near, nullptr);
  EXPECT_EQ(shrunk.outcome, GuardedFit::Outcome::kShrunk) << shrunk.worst;
  EXPECT_LT(shrunk.step, 1);
  EXPECT_GT(shrunk.step, 0);
  ASSERT_TRUE(shrunk.calibration.has_value());
  EXPECT_GT(shrunk.calibration->model.network_scale, 1);
  EXPECT_LT(shrunk.calibration->model.network_scale, 1.2);

  // From a previous calibration the run agrees with, moving away is refused
  // the same way; staying is fitted.
  PlanCalibration previous;
  previous.model.network_scale = 1.5;
  const std::vector<Observation> at_previous = Synthetic(previous.model, 1);
  CalibrationFit back;  // identity: every network-bound error grows
  EXPECT_EQ(GuardFit(at_previous, &previous, back, nullptr).outcome,
            GuardedFit::Outcome::kRefused);
  CalibrationFit stay;
  stay.model = previous.model;
  EXPECT_EQ(GuardFit(at_previous, &previous, stay, nullptr).outcome,
            GuardedFit::Outcome::kFitted);
}

// A verify run's calibration step: the fit over the node set's kept runs,
// guarded on this run. An earlier run measured the network 20% slower than
// this one; the fit between the two would grow this run's errors by more than
// five points, so it is shrunk, and the stored evidence's error after is the
// stored (shrunk) calibration's over every fitted observation, not the whole
// fit's (issue 18: the 8 MiB SHRUNK rows reported the whole fit's).
TEST(CalibrationTest, AShrunkCalibrationReportsItsOwnError) {
  model::ModelCalibration slower;
  slower.network_scale = 1.2;
  PlanKnowledge knowledge;
  const std::vector<Observation> earlier = Synthetic(slower, 1);
  knowledge.AddRun(earlier);
  const std::vector<Observation> run = Synthetic({}, 1);
  const RunCalibration c =
      CalibrateRun(run, run, nullptr, nullptr, "task-7", absl::Now(),
                   /*max_growth_ratio=*/0.05, &knowledge);
  ASSERT_TRUE(c.status.ok()) << c.status;
  ASSERT_EQ(c.guarded.outcome, GuardedFit::Outcome::kShrunk) << c.guarded.worst;
  ASSERT_TRUE(c.guarded.calibration.has_value());
  const PlanCalibration& stored = *c.guarded.calibration;
  EXPECT_LT(stored.model.network_scale, c.fit.model.network_scale);
  // Its own median |error| over the 24 fitted observations, computed here.
  std::vector<Observation> fitted = earlier;
  fitted.insert(fitted.end(), run.begin(), run.end());
  std::vector<double> errors;
  for (const Observation& o : fitted) {
    absl::StatusOr<PreparedPlan> plan = PreparePlan(o.request, nullptr);
    ASSERT_TRUE(plan.ok()) << plan.status();
    errors.push_back(std::abs(
        *PredictMeasuredSeconds(*plan, o.scope, o.kind, o.chunks, stored.model,
                                stored.contention_factor) /
            o.measured_seconds -
        1));
  }
  std::sort(errors.begin(), errors.end());
  const double median = (errors[11] + errors[12]) / 2;
  EXPECT_NEAR(stored.evidence.error_after_ratio(), median, 1e-12);
  EXPECT_GT(
      std::abs(stored.evidence.error_after_ratio() - c.fit.error_after_ratio),
      1e-6);
  EXPECT_DOUBLE_EQ(stored.evidence.error_before_ratio(),
                   c.fit.error_before_ratio);
  EXPECT_EQ(stored.evidence.task_id(), "task-7");
  EXPECT_DOUBLE_EQ(stored.evidence.network_scale_ratio(),
                   stored.model.network_scale);
  // And it is the node set's calibration now.
  const std::optional<PlanCalibration> kept =
      knowledge.Calibration(NodeSetKey(run.front().request), absl::Now());
  ASSERT_TRUE(kept.has_value());
  EXPECT_DOUBLE_EQ(kept->model.network_scale, stored.model.network_scale);
}

// Runs whose ops cost a quarter of the curves' latency (back-to-back chunks
// on a host where the benchmark's isolated small ops stalled): only the
// latency scale can explain them, the per-chunk overhead being >= 0.
TEST(CalibrationTest, FitScalesTheLatencyDownWhenChunksCostLess) {
  model::ModelCalibration truth;
  truth.latency_scale = 0.25;
  absl::StatusOr<CalibrationFit> fit =
      FitCalibration(Synthetic(truth, 1), nullptr);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->model.latency_scale, 0.25, 1e-9);
  EXPECT_LT(fit->error_after_ratio, fit->error_before_ratio);
  EXPECT_LT(fit->error_after_ratio, 0.01);
}

TEST(CalibrationTest, UncalibratedMeasurementsFitToIdentity) {
  absl::StatusOr<CalibrationFit> fit =
      FitCalibration(Synthetic({}, 1), nullptr);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_DOUBLE_EQ(fit->model.network_scale, 1);
  EXPECT_DOUBLE_EQ(fit->model.local_scale, 1);
  EXPECT_DOUBLE_EQ(fit->contention_factor, 1);
  EXPECT_DOUBLE_EQ(fit->model.latency_scale, 1);
  EXPECT_NEAR(fit->model.per_chunk_overhead_seconds, 0, 1e-12);
  EXPECT_LT(fit->error_before_ratio, 1e-9);
}

TEST(CalibrationTest, NothingToFitIsAnError) {
  std::vector<Observation> none;
  EXPECT_EQ(FitCalibration(none, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Unmeasured (0 s) observations are not usable either.
  Observation zero{PaperAt(4096), StrategyKind::kFlat, 1, 0};
  EXPECT_FALSE(FitCalibration({zero}, nullptr).ok());
}

TEST(CalibrationTest, CalibratedPlanReportsItAndPredictsTheMeasurements) {
  model::ModelCalibration truth;
  truth.network_scale = 1.5;
  truth.local_scale = 1.5;
  const v1::StrategyRequest request = PaperAt(8192);
  PlanCalibration c;
  c.model = truth;
  c.contention_factor = 1;
  c.evidence.set_task_id("bench-9");
  absl::StatusOr<v1::StrategyReply> plain =
      PlanStrategy(request, nullptr, absl::Now());
  absl::StatusOr<v1::StrategyReply> calibrated =
      PlanStrategy(request, nullptr, absl::Now(), &c);
  ASSERT_TRUE(plain.ok() && calibrated.ok());
  EXPECT_EQ(calibrated->evidence().calibration().task_id(), "bench-9");
  EXPECT_FALSE(plain->evidence().has_calibration());
  // Slower links: every feasible candidate's time grows.
  EXPECT_GT(calibrated->chosen().total_seconds_per_layer(),
            plain->chosen().total_seconds_per_layer());
}

v1::VerifyReply VerifiedRun() {
  v1::VerifyReply r;
  r.mutable_task()->set_task_id("bench-3");
  auto add = [&](v1::StrategyKind kind, int k, double pred, double meas) {
    v1::VerifiedCandidate* c = r.add_candidates();
    c->set_kind(kind);
    c->set_chunks_requested(k);
    c->set_chunks_effective(k);
    c->set_predicted_seconds(pred);
    c->set_measured_seconds(meas);
  };
  // The model ranks the pipeline first; the measurements say tp_dedup.
  add(v1::STRATEGY_KIND_FLAT, 1, 0.30, 0.31);
  add(v1::STRATEGY_KIND_TP_DEDUP, 1, 0.20, 0.10);
  add(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 2, 0.15, 0.16);
  add(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED, 8, 0.12, 0.14);
  return r;
}

TEST(CalibrationTest, FreshVerifiedRunAnswersWithMeasuredTimes) {
  PlanKnowledge::Options options;
  options.verified_ttl = absl::Minutes(10);
  PlanKnowledge knowledge(options);
  const v1::StrategyRequest request = PaperAt(8192);
  const absl::Time t0 = absl::FromUnixSeconds(1000000);
  knowledge.SetVerified(request, VerifiedRun(), t0);
  // Another job name is the same job; another size is not.
  v1::StrategyRequest renamed = request;
  renamed.mutable_job()->set_name("other");
  EXPECT_TRUE(knowledge.FreshVerified(renamed, t0 + absl::Minutes(1)));
  EXPECT_FALSE(knowledge.FreshVerified(PaperAt(4096), t0));
  EXPECT_FALSE(knowledge.FreshVerified(request, t0 + absl::Minutes(11)));

  absl::StatusOr<v1::StrategyReply> reply = PlanStrategy(request, nullptr, t0);
  ASSERT_TRUE(reply.ok());
  ApplyVerified(*knowledge.FreshVerified(request, t0 + absl::Seconds(30)),
                t0 + absl::Seconds(30), &*reply);
  EXPECT_EQ(reply->evidence().origin(), v1::EVIDENCE_SOURCE_VERIFIED);
  EXPECT_EQ(reply->evidence().verified().task_id(), "bench-3");
  EXPECT_DOUBLE_EQ(reply->evidence().verified().age_seconds(), 30);
  EXPECT_EQ(reply->chosen().kind(), v1::STRATEGY_KIND_TP_DEDUP);
  EXPECT_DOUBLE_EQ(reply->chosen().forward_seconds_per_layer(), 0.2);
  for (const v1::Candidate& c : reply->candidates()) {
    if (c.kind() == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED) {
      EXPECT_EQ(c.chunks_effective(), 8);  // its fastest measured K
      EXPECT_EQ(c.rank(), 2);
    }
  }
}

TEST(CalibrationTest, KnowledgeIsBounded) {
  PlanKnowledge::Options options;
  options.max_entries = 2;
  options.max_runs_per_node_set = 2;
  PlanKnowledge knowledge(options);
  v1::StrategyRequest r = PaperAt(4096);
  r.mutable_placement()->clear_profile();
  r.mutable_placement()->add_node_names("a");
  Observation o{r, StrategyKind::kFlat, 1, 0.1};
  EXPECT_EQ(knowledge.AddRun({o}).size(), 1u);
  EXPECT_EQ(knowledge.AddRun({o, o}).size(), 3u);
  EXPECT_EQ(knowledge.AddRun({o}).size(), 3u);  // the first run dropped
  const absl::Time now = absl::Now();
  for (const char* set : {"x", "y", "z"}) {
    knowledge.SetCalibration(set, PlanCalibration{}, now);
  }
  EXPECT_FALSE(knowledge.Calibration("x", now));
  EXPECT_TRUE(knowledge.Calibration("z", now + absl::Seconds(5)));
  EXPECT_DOUBLE_EQ(knowledge.Calibration("z", now + absl::Seconds(5))
                       ->evidence.age_seconds(),
                   5);
}

}  // namespace
}  // namespace monta::planning
