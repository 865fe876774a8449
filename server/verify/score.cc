#include "server/verify/score.h"

#include <algorithm>
#include <cmath>

#include "common/bandwidth/bandwidth.h"
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

}  // namespace

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
    const MeasuredRun fastest = Measured(*reply, iteration_seconds, best);
    if (chosen >= 0) {
      // From iterations that ran side by side when the agents sent them.
      const Regret r =
          PlanRegret(Measured(*reply, iteration_seconds, chosen), fastest);
      reply->set_regret_ratio(r.ratio);
      reply->set_regret_within_noise(r.within_noise);
    }
    if (pick >= 0) {
      reply->mutable_candidates(pick)->set_uncalibrated_chosen(true);
      const Regret r =
          PlanRegret(Measured(*reply, iteration_seconds, pick), fastest);
      reply->set_uncalibrated_regret_ratio(r.ratio);
      reply->set_uncalibrated_regret_within_noise(r.within_noise);
    }
  }
  reply->set_median_error_ratio(bandwidth::Median(errors));
  reply->set_max_error_ratio(
      errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end()));
}

}  // namespace monta::verify
