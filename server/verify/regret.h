// The plan's regret in a verify run (docs/MODEL.md §11): how much slower the
// chosen candidate ran than the fastest one, and whether the run can tell.
#ifndef MONTA_SERVER_VERIFY_REGRET_H_
#define MONTA_SERVER_VERIFY_REGRET_H_

#include <vector>

namespace monta::verify {

// One candidate's measurement: the slowest rank's median and, per timed
// iteration in iteration order, the slowest rank's time
// (CurvePoint.iteration_seconds; empty when the agents sent none).
struct MeasuredRun {
  double median_seconds = 0;
  std::vector<double> iteration_seconds;
};

struct Regret {
  // >= 0.
  double ratio = 0;
  // The difference is inside the run's noise.
  bool within_noise = false;
  // From paired iterations (else from the medians and their p10..p90).
  bool paired = false;
};

// The agents time a task's candidates round robin, so iteration i of the two
// ran side by side and a slow period of the host falls on both. When both
// have the same number of iterations: the median over i of chosen_i / best_i
// - 1 (not below 0), within the noise when the ratios' p10 is at most 1 (in
// one pair of ten or more the chosen candidate was as fast). Otherwise
// (an agent that sent no iterations): median(chosen) / median(best) - 1,
// within the noise when the two p10..p90 ranges overlap.
Regret PlanRegret(const MeasuredRun& chosen, const MeasuredRun& best);

// The q-quantile (0..1) of sorted, non-empty `v`, interpolated linearly.
double Quantile(const std::vector<double>& v, double q);

}  // namespace monta::verify

#endif  // MONTA_SERVER_VERIFY_REGRET_H_
