#include "server/verify/score.h"

#include <algorithm>
#include <cmath>

#include "common/bandwidth/bandwidth.h"
#include "common/strategy/strategy_proto.h"
#include "server/verify/regret.h"

namespace monta::verify {
namespace {

namespace v1 = ::monta::v1;

MeasuredRun Measured(const v1::VerifyReply& reply,
                     const std::vector<std::vector<double>>& iterations,
                     int i) {
  MeasuredRun run;
  run.median_seconds = reply.candidates(i).measured_seconds();
  if (static_cast<size_t>(i) < iterations.size()) {
    run.iteration_seconds = iterations[i];
  }
  return run;
}

// A regret of `row` against the fastest row: none when both run one
// schedule.
Regret RegretAgainstBest(const v1::VerifyReply& reply,
                         const std::vector<std::vector<double>>& iterations,
                         int row, int best) {
  if (SameSchedule(reply, reply.candidates(row), reply.candidates(best))) {
    return Regret{};
  }
  return PlanRegret(Measured(reply, iterations, row),
                    Measured(reply, iterations, best));
}

strategy::StrategyKind ScheduleOf(const v1::VerifyReply& reply,
                                  const v1::VerifiedCandidate& c) {
  const bool drops_everywhere =
      reply.scope() != v1::VERIFY_SCOPE_OP &&
      reply.plan().expert_layout() == v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL;
  return strategy::SameScheduleAs(
      strategy::StrategyFromProto(c.kind()).value_or(
          strategy::StrategyKind::kFlat),
      c.chunks_effective(), drops_everywhere);
}

}  // namespace

bool SameSchedule(const v1::VerifyReply& reply, const v1::VerifiedCandidate& a,
                  const v1::VerifiedCandidate& b) {
  const strategy::StrategyKind kind = ScheduleOf(reply, a);
  return kind == ScheduleOf(reply, b) &&
         (kind != strategy::StrategyKind::kTpDedupPipelined ||
          a.chunks_effective() == b.chunks_effective());
}

void ScoreRun(const std::vector<std::vector<double>>& iteration_seconds,
              v1::VerifyReply* reply) {
  int best = -1;
  int chosen = -1;
  int pick = -1;
  std::vector<double> errors;
  for (int i = 0; i < reply->candidates_size(); ++i) {
    const v1::VerifiedCandidate& c = reply->candidates(i);
    if (best < 0 ||
        c.measured_seconds() < reply->candidates(best).measured_seconds()) {
      best = i;
    }
    if (c.chosen()) chosen = i;
    if (c.uncalibrated_seconds() > 0 &&
        (pick < 0 || c.uncalibrated_seconds() <
                         reply->candidates(pick).uncalibrated_seconds())) {
      pick = i;
    }
    errors.push_back(std::abs(c.error_ratio()));
  }
  if (best >= 0) {
    reply->mutable_candidates(best)->set_best(true);
    if (chosen >= 0) {
      // From iterations that ran side by side when the agents sent them.
      const Regret r =
          RegretAgainstBest(*reply, iteration_seconds, chosen, best);
      reply->set_regret_ratio(r.ratio);
      reply->set_regret_within_noise(r.within_noise);
    }
    if (pick >= 0) {
      reply->mutable_candidates(pick)->set_uncalibrated_chosen(true);
      const Regret r = RegretAgainstBest(*reply, iteration_seconds, pick, best);
      reply->set_uncalibrated_regret_ratio(r.ratio);
      reply->set_uncalibrated_regret_within_noise(r.within_noise);
    }
  }
  reply->set_median_error_ratio(bandwidth::Median(errors));
  reply->set_max_error_ratio(
      errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end()));
}

}  // namespace monta::verify
