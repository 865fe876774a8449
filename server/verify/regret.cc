#include "server/verify/regret.h"

#include <algorithm>
#include <cmath>

#include "common/bandwidth/bandwidth.h"

namespace monta::verify {

double Quantile(const std::vector<double>& v, double q) {
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

namespace {

// The p10..p90 range of `v` (unsorted), or {0, 0} when empty.
std::pair<double, double> Range(std::vector<double> v) {
  if (v.empty()) return {0, 0};
  std::sort(v.begin(), v.end());
  return {Quantile(v, 0.1), Quantile(v, 0.9)};
}

}  // namespace

Regret PlanRegret(const MeasuredRun& chosen, const MeasuredRun& best) {
  Regret r;
  const size_t n = chosen.iteration_seconds.size();
  if (n > 0 && n == best.iteration_seconds.size()) {
    std::vector<double> ratios;
    for (size_t i = 0; i < n; ++i) {
      const double b = best.iteration_seconds[i];
      if (!(b > 0)) break;
      ratios.push_back(chosen.iteration_seconds[i] / b);
    }
    if (ratios.size() == n) {
      r.paired = true;
      r.ratio = std::max(0.0, bandwidth::Median(ratios) - 1);
      std::sort(ratios.begin(), ratios.end());
      r.within_noise = Quantile(ratios, 0.1) <= 1;
      return r;
    }
  }
  if (best.median_seconds > 0) {
    r.ratio = std::max(0.0, chosen.median_seconds / best.median_seconds - 1);
  }
  const auto [a10, a90] = Range(chosen.iteration_seconds);
  const auto [b10, b90] = Range(best.iteration_seconds);
  r.within_noise = a90 > 0 && b90 > 0 && a10 <= b90 && b10 <= a90;
  return r;
}

}  // namespace monta::verify
