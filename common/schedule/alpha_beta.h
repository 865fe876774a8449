// Alpha-beta lines through measured (size, time) samples: T(x) = alpha +
// beta * x, a launch latency plus a time per byte (docs/MODEL.md §2). One
// robust fit serves both the stall filter and the latency a measured curve
// stores, and one two-point line serves every extrapolation. Pure C++.
#ifndef MONTA_COMMON_SCHEDULE_ALPHA_BETA_H_
#define MONTA_COMMON_SCHEDULE_ALPHA_BETA_H_

#include <optional>
#include <vector>

namespace monta::schedule {

// One measured point: `message_bytes` per rank took `time_seconds`.
struct Sample {
  double message_bytes = 0;
  double time_seconds = 0;
};

struct AlphaBetaLine {
  double alpha_seconds = 0;
  double seconds_per_byte = 0;  // beta
  double SecondsAt(double message_bytes) const {
    return alpha_seconds + seconds_per_byte * message_bytes;
  }
};

// The line through two samples of different sizes.
AlphaBetaLine LineThrough(const Sample& a, const Sample& b);

// The curve's robust line, for samples in increasing size: its slope from
// the two largest samples (the bandwidth-bound end, where one stall matters
// least), its latency the median over every sample of the time beyond that
// slope (so one outlier cannot move it), at least 0. nullopt with fewer than
// two samples or when the two largest do not rise (nothing bandwidth-bound
// to fit).
std::optional<AlphaBetaLine> RobustAlphaBeta(
    const std::vector<Sample>& samples);

}  // namespace monta::schedule

#endif  // MONTA_COMMON_SCHEDULE_ALPHA_BETA_H_
