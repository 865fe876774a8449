#include "common/schedule/alpha_beta.h"

#include <algorithm>
#include <utility>

#include "common/bandwidth/bandwidth.h"

namespace monta::schedule {

AlphaBetaLine LineThrough(const Sample& a, const Sample& b) {
  AlphaBetaLine line;
  line.seconds_per_byte =
      (b.time_seconds - a.time_seconds) / (b.message_bytes - a.message_bytes);
  line.alpha_seconds = a.time_seconds - line.seconds_per_byte * a.message_bytes;
  return line;
}

std::optional<AlphaBetaLine> RobustAlphaBeta(
    const std::vector<Sample>& samples) {
  const size_t n = samples.size();
  if (n < 2) return std::nullopt;
  const double beta =
      LineThrough(samples[n - 2], samples[n - 1]).seconds_per_byte;
  if (!(beta > 0)) return std::nullopt;
  std::vector<double> beyond;
  beyond.reserve(n);
  for (const Sample& p : samples) {
    beyond.push_back(p.time_seconds - beta * p.message_bytes);
  }
  AlphaBetaLine line;
  line.seconds_per_byte = beta;
  line.alpha_seconds = std::max(0.0, bandwidth::Median(std::move(beyond)));
  return line;
}

}  // namespace monta::schedule
