// Replays a finished perf/verify_bench.sh configuration through this build's
// planning code, offline (issue 18): the planner's --db of that cluster
// (verify_bench.sh keeps it as <config>-planner.db) holds the curves every
// prediction was priced from and every verify request and reply in order.
// For each verify run, as the verifier did: the node set's calibration at
// that point, the plan and the K sweep verify would offer with it (the
// default sweep under the chunk bound, and the chosen K), every recorded
// candidate still offered re-predicted calibrated and uncalibrated
// (candidates no longer offered are left out: the run would not measure
// them), the run's quiet candidates fitted into the node set's calibration
// (FitCalibration, GuardFit) unless it ran with --skip_calibration, and the
// run scored as verify scores it (server/verify/score.h; the replies carry
// no iterations, so a regret is the medians' unless the replay picks the
// same chosen and best candidates as the recorded run, whose paired regret
// is then kept). Writes each replayed reply
// where perf/verify_summary.py reads it:
//
//   calibration_replay --db=DIR/2x1gbit-planner.db --config=2x1gbit --out=OUT
//   perf/verify_summary.py OUT
//
// A replay, not a measurement: the measured times are the recorded ones.
// Prints per run the recorded and replayed calibration and, per candidate,
// the recorded and replayed prediction (equal when nothing priced changed).
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/proto_json.h"
#include "common/strategy/strategy_proto.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "server/planning/calibration.h"
#include "server/planning/strategy_planner.h"
#include "server/verify/score.h"

ABSL_FLAG(std::string, db, "",
          "the planner's SQLite file of one configuration");
ABSL_FLAG(std::string, config, "",
          "the configuration's name in the output files, e.g. 2x1gbit");
ABSL_FLAG(std::string, out, "", "directory for the replayed replies");

namespace monta::perf {
namespace {

namespace v1 = ::monta::v1;
using planning::MeasuredScope;

// verify's defaults (server/verify/verifier.h VerifierOptions).
const std::vector<int> kSweep = {1, 2, 4, 8, 16, 32};
constexpr double kMaxGrowthRatio = 0.05;

// Rows of `sql`, each column as bytes.
absl::StatusOr<std::vector<std::vector<std::string>>> Rows(sqlite3* db,
                                                           const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("--db: ", sql, ": ", sqlite3_errmsg(db)));
  }
  std::vector<std::vector<std::string>> rows;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
      const void* blob = sqlite3_column_blob(stmt, i);
      row.emplace_back(static_cast<const char*>(blob),
                       blob ? sqlite3_column_bytes(stmt, i) : 0);
    }
    rows.push_back(std::move(row));
  }
  sqlite3_finalize(stmt);
  return rows;
}

// The registry as the file holds it: every node with the newest curve of
// each measurement naming it.
class RecordedLookup : public planning::NodeLookup {
 public:
  std::optional<planning::NodeFacts> Find(
      absl::string_view name) const override {
    auto it = nodes_.find(std::string(name));
    if (it == nodes_.end()) return std::nullopt;
    return it->second;
  }
  absl::Status Load(sqlite3* db) {
    auto nodes = Rows(db, "SELECT name, info FROM nodes");
    if (!nodes.ok()) return nodes.status();
    for (const auto& row : *nodes) {
      v1::NodeInfo info;
      if (!info.ParseFromString(row[1])) {
        return absl::DataLossError(absl::StrCat("--db: node ", row[0]));
      }
      planning::NodeFacts& f = nodes_[row[0]];
      f.name = row[0];
      f.gpu_count = info.topology().gpus_size();
      f.gpu_name = f.gpu_count > 0 ? info.topology().gpus(0).name() : "";
      f.profile_name = info.topology().profile_name();
    }
    auto curves = Rows(db,
                       "SELECT curve FROM curves c WHERE sequence = (SELECT "
                       "MAX(sequence) FROM curves d WHERE d.measurement = "
                       "c.measurement)");
    if (!curves.ok()) return curves.status();
    for (const auto& row : *curves) {
      v1::BandwidthCurve curve;
      if (!curve.ParseFromString(row[0])) {
        return absl::DataLossError("--db: a curve does not parse");
      }
      for (const std::string& n : curve.nodes()) {
        auto it = nodes_.find(n);
        if (it != nodes_.end()) it->second.curves.push_back(curve);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::map<std::string, planning::NodeFacts> nodes_;
};

strategy::StrategyKind KindOf(v1::StrategyKind kind) {
  return strategy::StrategyFromProto(kind).value_or(
      strategy::StrategyKind::kFlat);
}

// The K verify would run for the pipeline: the default sweep under the
// chunk bound, and the plan's chosen K.
std::set<int> OfferedChunks(const planning::PreparedPlan& plan,
                            MeasuredScope scope,
                            const planning::PlanCalibration& c,
                            const v1::StrategyReply& reply) {
  const int bound = planning::ChunkBound(
      plan, scope, strategy::StrategyKind::kTpDedupPipelined, c.model,
      c.contention_factor);
  std::set<int> offered;
  for (int k : kSweep) {
    if (bound <= 0 || k <= bound) offered.insert(k);
  }
  for (const v1::Candidate& cand : reply.candidates()) {
    if (cand.kind() == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED) {
      offered.insert(cand.chunks_requested());
    }
  }
  return offered;
}

std::string CalibrationText(const v1::Calibration& c) {
  return absl::StrFormat(
      "overhead %.4f ms, network x%.4f, local x%.4f, latency x%.4f, gamma "
      "%.2f",
      c.per_chunk_overhead_seconds() * 1e3, c.network_scale_ratio(),
      c.local_scale_ratio(), c.latency_scale_ratio(), c.contention_factor());
}

// The job file's name verify_bench.sh gives (verify-2n-<MiB>mib-<layout>)
// as <config>-<layout>-<role>-<MiB>mib.json.
std::string OutName(const std::string& config, const v1::VerifyRequest& r) {
  std::vector<std::string> parts =
      absl::StrSplit(r.request().job().name(), '-');
  const std::string mib = parts.size() >= 3 ? parts[2] : "0mib";
  const std::string layout = parts.size() >= 4 ? parts[3] : "tp";
  return absl::StrCat(config, "-", layout, "-",
                      r.skip_calibration() ? "score" : "calibrate", "-", mib,
                      ".json");
}

// The candidate of `reply` flagged by `flag` (kind and K), if any.
std::optional<std::pair<int, int>> Flagged(const v1::VerifyReply& reply,
                                           bool (v1::VerifiedCandidate::*flag)()
                                               const) {
  for (const v1::VerifiedCandidate& c : reply.candidates()) {
    if ((c.*flag)()) return std::make_pair(c.kind(), c.chunks_effective());
  }
  return std::nullopt;
}

// ScoreRun without iterations takes the regrets from the medians; where the
// replay picks the same candidates as the recorded run, the recorded regret
// (from paired iterations) is the same estimate of the same pair: kept.
// A pick that runs the best's schedule keeps ScoreRun's none (the recorded
// reply may predate one schedule, one candidate).
void KeepPairedRegrets(const v1::VerifyReply& recorded, v1::VerifyReply* out) {
  using C = v1::VerifiedCandidate;
  const bool same_best = Flagged(recorded, &C::best) == Flagged(*out, &C::best);
  if (same_best && out->regret_ratio() > 0 &&
      Flagged(recorded, &C::chosen) == Flagged(*out, &C::chosen)) {
    out->set_regret_ratio(recorded.regret_ratio());
    out->set_regret_within_noise(recorded.regret_within_noise());
  }
  if (same_best && out->uncalibrated_regret_ratio() > 0 &&
      Flagged(recorded, &C::uncalibrated_chosen) ==
          Flagged(*out, &C::uncalibrated_chosen)) {
    out->set_uncalibrated_regret_ratio(recorded.uncalibrated_regret_ratio());
    out->set_uncalibrated_regret_within_noise(
        recorded.uncalibrated_regret_within_noise());
  }
}

// Fits the node set's calibration on this run as the verifier does
// (planning::CalibrateRun on its quiet and all its measured candidates); the
// outcome for the reply.
void Calibrate(const v1::VerifyRequest& request, const v1::VerifyReply& reply,
               MeasuredScope scope, const planning::NodeLookup& lookup,
               const std::optional<planning::PlanCalibration>& previous,
               planning::PlanKnowledge* knowledge, v1::VerifyReply* out) {
  std::vector<planning::Observation> all;
  std::vector<planning::Observation> quiet;
  for (const v1::VerifiedCandidate& c : reply.candidates()) {
    if (c.wrong_bytes() != 0 || !(c.measured_seconds() > 0)) continue;
    planning::Observation o{request.request(), KindOf(c.kind()),
                            c.chunks_requested(), c.measured_seconds(), scope};
    all.push_back(o);
    if (!c.noisy()) quiet.push_back(o);
  }
  if (quiet.empty()) return;
  const planning::RunCalibration calibrated = planning::CalibrateRun(
      all, std::move(quiet), previous ? &*previous : nullptr, &lookup,
      reply.task().task_id(), absl::Now(), kMaxGrowthRatio, knowledge);
  const planning::GuardedFit& guarded = calibrated.guarded;
  if (!calibrated.status.ok() || !guarded.calibration) {
    out->set_calibration_outcome(v1::CALIBRATION_OUTCOME_REFUSED);
    return;
  }
  out->set_calibration_outcome(guarded.outcome ==
                                       planning::GuardedFit::Outcome::kShrunk
                                   ? v1::CALIBRATION_OUTCOME_SHRUNK
                                   : v1::CALIBRATION_OUTCOME_FITTED);
  *out->mutable_calibration() = guarded.calibration->evidence;
}

// long-function: one verify run replayed, step by step as the verifier
// runs it, with the print of each step beside it.
absl::Status ReplayRun(const v1::VerifyRequest& request,
                       const v1::VerifyReply& recorded,
                       const RecordedLookup& lookup,
                       planning::PlanKnowledge* knowledge,
                       const std::string& out_path) {
  const MeasuredScope scope = recorded.scope() == v1::VERIFY_SCOPE_OP
                                  ? MeasuredScope::kDispatchOp
                                  : MeasuredScope::kLayer;
  absl::StatusOr<planning::PreparedPlan> plan =
      planning::PreparePlan(request.request(), &lookup);
  if (!plan.ok()) return plan.status();
  const std::optional<planning::PlanCalibration> previous =
      knowledge->Calibration(planning::NodeSetKey(request.request()),
                             absl::Now());
  const planning::PlanCalibration c =
      previous.value_or(planning::PlanCalibration{});
  absl::StatusOr<v1::StrategyReply> decided = planning::PlanStrategy(
      request.request(), &lookup, absl::Now(), previous ? &*previous : nullptr);
  if (!decided.ok()) return decided.status();
  const std::set<int> offered = OfferedChunks(*plan, scope, c, *decided);
  v1::VerifyReply out = recorded;
  *out.mutable_plan() = *decided;
  out.clear_candidates();
  out.clear_calibration();
  std::cout << "== " << out_path << "\n   calibration before the run: "
            << (previous ? CalibrationText(previous->evidence) : "none")
            << "\n   "
            << absl::StrFormat("%-24s %9s %9s %9s %9s %9s", "candidate",
                               "measured", "recorded", "replayed", "unc rec",
                               "unc rep")
            << "\n";
  for (const v1::VerifiedCandidate& rc : recorded.candidates()) {
    const bool pipelined = rc.kind() == v1::STRATEGY_KIND_TP_DEDUP_PIPELINED;
    const std::string name =
        absl::StrCat(strategy::StrategyName(KindOf(rc.kind())),
                     " K=", rc.chunks_requested());
    if (pipelined && offered.count(rc.chunks_requested()) == 0) {
      std::cout << "   "
                << absl::StrFormat("%-24s %9.1f %9.1f", name,
                                   rc.measured_seconds() * 1e3,
                                   rc.predicted_seconds() * 1e3)
                << "   not offered: above the chunk bound\n";
      continue;
    }
    v1::VerifiedCandidate row = rc;
    const auto kind = KindOf(rc.kind());
    const int k = rc.chunks_requested();
    row.set_predicted_seconds(
        planning::PredictMeasuredSeconds(*plan, scope, kind, k, c.model,
                                         c.contention_factor)
            .value_or(0));
    row.set_uncalibrated_seconds(
        planning::PredictMeasuredSeconds(*plan, scope, kind, k, {}, 1)
            .value_or(0));
    row.set_error_ratio(row.predicted_seconds() / row.measured_seconds() - 1);
    row.set_chosen(rc.kind() == decided->chosen().kind() &&
                   rc.chunks_effective() ==
                       decided->chosen().chunks_effective());
    row.clear_calibrated_seconds();
    std::cout << "   "
              << absl::StrFormat("%-24s %9.1f %9.1f %9.1f %9.1f %9.1f%s", name,
                                 rc.measured_seconds() * 1e3,
                                 rc.predicted_seconds() * 1e3,
                                 row.predicted_seconds() * 1e3,
                                 rc.uncalibrated_seconds() * 1e3,
                                 row.uncalibrated_seconds() * 1e3,
                                 row.chosen() ? "  chosen" : "")
              << "\n";
    *out.add_candidates() = row;
  }
  verify::ScoreRun({}, &out);
  KeepPairedRegrets(recorded, &out);
  if (!request.skip_calibration()) {
    Calibrate(request, out, scope, lookup, previous, knowledge, &out);
    std::cout << "   fitted: " << CalibrationText(out.calibration())
              << "\n   recorded: " << CalibrationText(recorded.calibration())
              << "\n";
  }
  absl::StatusOr<std::string> json = ToJson(out);
  if (!json.ok()) return json.status();
  FILE* f = std::fopen(out_path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out: cannot write ", out_path));
  }
  std::fputs(json->c_str(), f);
  std::fclose(f);
  return absl::OkStatus();
}

int Main() {
  const std::string path = absl::GetFlag(FLAGS_db);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string config = absl::GetFlag(FLAGS_config);
  if (path.empty() || out.empty() || config.empty()) {
    std::cerr << "calibration_replay: --db, --config and --out are required\n";
    return 2;
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) !=
      SQLITE_OK) {
    std::cerr << "calibration_replay: --db: cannot open " << path << "\n";
    sqlite3_close(db);
    return 2;
  }
  RecordedLookup lookup;
  absl::Status loaded = lookup.Load(db);
  auto runs = Rows(db, "SELECT request, reply FROM verifications ORDER BY id");
  sqlite3_close(db);
  if (!loaded.ok() || !runs.ok()) {
    std::cerr << "calibration_replay: "
              << (loaded.ok() ? runs.status() : loaded) << "\n";
    return 2;
  }
  planning::PlanKnowledge knowledge;
  for (const auto& row : *runs) {
    v1::VerifyRequest request;
    v1::VerifyReply reply;
    if (!request.ParseFromString(row[0]) || !reply.ParseFromString(row[1])) {
      std::cerr << "calibration_replay: --db: a verification does not parse\n";
      return 2;
    }
    absl::Status s =
        ReplayRun(request, reply, lookup, &knowledge,
                  absl::StrCat(out, "/", OutName(config, request)));
    if (!s.ok()) {
      std::cerr << "calibration_replay: " << request.request().job().name()
                << ": " << s << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace monta::perf

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return monta::perf::Main();
}
