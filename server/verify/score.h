// A verify run's scores from its measured candidates (docs/MODEL.md §11):
// the fastest, the plan's regret and the uncalibrated model's, and the
// prediction errors, filled into the reply.
#ifndef MONTA_SERVER_VERIFY_SCORE_H_
#define MONTA_SERVER_VERIFY_SCORE_H_

#include <vector>

#include "proto/monta/v1/planner.pb.h"

namespace monta::verify {

// `reply->candidates()` measured (measured_seconds, error_ratio, chosen,
// uncalibrated_seconds set) and `iteration_seconds[i]` the slowest rank's
// time per timed iteration of candidate i, in iteration order (empty when
// the agents sent none; missing entries count as empty). Marks the fastest
// candidate best and the uncalibrated model's pick (the smallest positive
// uncalibrated_seconds, the earlier row on a tie) uncalibrated_chosen, and
// fills regret_ratio / regret_within_noise (the chosen candidate against the
// best), uncalibrated_regret_ratio / uncalibrated_regret_within_noise (the
// pick against the best), both from paired iterations when both sides have
// them (PlanRegret), and the median and largest |error_ratio|. A candidate
// that runs the same schedule as the best (SameSchedule) has no regret: two
// runs of one schedule differ by noise alone, and verify runs each schedule
// once; a reply that holds both (older planners, a requested sweep) is
// scored as if it had run one.
void ScoreRun(const std::vector<std::vector<double>>& iteration_seconds,
              monta::v1::VerifyReply* reply);

// Whether the reply's rows `a` and `b` run one schedule
// (strategy::SameScheduleAs; every schedule of a layer drops duplicates when
// the reply's scope is LAYER and its plan priced experts not
// tensor-parallel).
bool SameSchedule(const monta::v1::VerifyReply& reply,
                  const monta::v1::VerifiedCandidate& a,
                  const monta::v1::VerifiedCandidate& b);

}  // namespace monta::verify

#endif  // MONTA_SERVER_VERIFY_SCORE_H_
