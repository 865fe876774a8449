#include "server/model/bandwidth_curve.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/bandwidth/bandwidth.h"
#include "common/schedule/schedule.h"

namespace monta::model {

using ::monta::bandwidth::Collective;

namespace {

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0; }

// Fraction of a rank's message that crosses the bottleneck link (see header).
double LinkShare(Collective collective, int nranks, int ranks_per_node) {
  if (collective == Collective::kCopy) return schedule::kCopyLinkShare;
  return schedule::LinkShare(nranks, ranks_per_node);
}

absl::Status CheckShape(Collective collective, int nranks, int ranks_per_node) {
  const int min_ranks = collective == Collective::kCopy ? 1 : 2;
  if (nranks < min_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve nranks: must be >= ", min_ranks, ", got ", nranks));
  }
  if (ranks_per_node < 1 || ranks_per_node > nranks ||
      nranks % ranks_per_node != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve ranks_per_node: must divide nranks (", nranks,
                     "), got ", ranks_per_node));
  }
  return absl::OkStatus();
}

// A measured time more than this many times what the curve's alpha-beta
// line predicts for its size is a stall, not the link (see DropStalls).
constexpr double kStallFactor = 1.5;

// Drops samples that took more than kStallFactor times the curve's robust
// alpha-beta line (schedule::RobustAlphaBeta). Such points come from
// scheduling, not from the link: on the emulated cluster (4 ranks on 2
// cores) a 64 KiB AllToAll measured 0.4 ms in one run and 3.9 ms in the
// next, and that one point, taken as the curve's latency, made every
// pipeline chunk cost 4 ms. The largest sample and at least two samples are
// always kept; a curve without a line (its largest samples do not rise) is
// left as it is.
std::vector<CurveSample> DropStalls(
    std::vector<CurveSample> samples,
    const std::optional<schedule::AlphaBetaLine>& line) {
  const size_t n = samples.size();
  if (n < 3 || !line) return samples;
  std::vector<CurveSample> kept;
  for (size_t k = 0; k < n; ++k) {
    const bool stall = samples[k].time_seconds >
                       kStallFactor * line->SecondsAt(samples[k].message_bytes);
    const size_t left = n - k;  // this one and those after it
    if (!stall || k + 1 == n || kept.size() + left <= 2) {
      kept.push_back(samples[k]);
    }
  }
  return kept;
}

}  // namespace

absl::StatusOr<BandwidthCurve> BandwidthCurve::FromSamples(
    Collective collective, int nranks, int ranks_per_node,
    std::vector<CurveSample> samples) {
  if (absl::Status s = CheckShape(collective, nranks, ranks_per_node);
      !s.ok()) {
    return s;
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError("curve points: need at least one point");
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const CurveSample& p = samples[i];
    if (!PositiveFinite(p.message_bytes) || !PositiveFinite(p.time_seconds)) {
      return absl::InvalidArgumentError(
          absl::StrCat("curve points[", i,
                       "]: message_bytes and time_seconds must be > 0, "
                       "got ",
                       p.message_bytes, " bytes in ", p.time_seconds, " s"));
    }
    if (i > 0 && p.message_bytes <= samples[i - 1].message_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "curve points[", i,
          "].message_bytes: must be strictly increasing, "
          "got ",
          p.message_bytes, " after ", samples[i - 1].message_bytes));
    }
  }
  BandwidthCurve curve;
  curve.collective_ = collective;
  curve.nranks_ = nranks;
  curve.ranks_per_node_ = ranks_per_node;
  curve.link_share_ = LinkShare(collective, nranks, ranks_per_node);
  // One robust line: it finds the stalls, and its latency is the curve's.
  const std::optional<schedule::AlphaBetaLine> line =
      schedule::RobustAlphaBeta(samples);
  const CurveSample swept_smallest = samples.front();
  samples = DropStalls(std::move(samples), line);
  if (samples.size() >= 2) {
    const double smallest = samples.front().time_seconds;
    curve.alpha_seconds_ =
        std::clamp(line ? line->alpha_seconds : smallest, 0.0, smallest);
    const double bandwidth_part =
        line ? line->seconds_per_byte * swept_smallest.message_bytes : 0.0;
    curve.launch_floor_seconds_ = std::max(
        curve.alpha_seconds_, swept_smallest.time_seconds - bandwidth_part);
  }
  curve.rate_alpha_seconds_ = curve.alpha_seconds_;
  curve.samples_ = std::move(samples);
  return curve;
}

absl::StatusOr<BandwidthCurve> BandwidthCurve::FromBothStatistics(
    Collective collective, int nranks, int ranks_per_node,
    std::vector<CurveSample> median, std::vector<CurveSample> chain) {
  if (median.size() != chain.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "curve points: the chain needs one time per median's size (",
        median.size(), " sizes), got ", chain.size()));
  }
  for (size_t i = 0; i < median.size(); ++i) {
    if (median[i].message_bytes != chain[i].message_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "curve points[", i, "]: the chain's size ", chain[i].message_bytes,
          " is not the median's ", median[i].message_bytes));
    }
  }
  absl::StatusOr<BandwidthCurve> by_median =
      FromSamples(collective, nranks, ranks_per_node, std::move(median));
  if (!by_median.ok()) return by_median.status();
  absl::StatusOr<BandwidthCurve> curve =
      FromSamples(collective, nranks, ranks_per_node, std::move(chain));
  if (!curve.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve chain_time_seconds: ", curve.status().message()));
  }
  // Rule (e): the chain's rates (beyond its own alpha), the smaller launch
  // latency, the larger launch floor for the chunk bound.
  curve->alpha_seconds_ =
      std::min(curve->alpha_seconds_, by_median->alpha_seconds_);
  curve->launch_floor_seconds_ =
      std::max(curve->launch_floor_seconds_, by_median->launch_floor_seconds_);
  return curve;
}

absl::StatusOr<BandwidthCurve> BandwidthCurve::FromAlphaBeta(
    Collective collective, int nranks, int ranks_per_node, double alpha_seconds,
    double link_bytes_per_second) {
  if (absl::Status s = CheckShape(collective, nranks, ranks_per_node);
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(alpha_seconds) || alpha_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve alpha_seconds: must be >= 0, got ", alpha_seconds));
  }
  if (!PositiveFinite(link_bytes_per_second)) {
    return absl::InvalidArgumentError(
        absl::StrCat("curve link_bytes_per_second: must be > 0, got ",
                     link_bytes_per_second));
  }
  BandwidthCurve curve;
  curve.collective_ = collective;
  curve.nranks_ = nranks;
  curve.ranks_per_node_ = ranks_per_node;
  curve.link_share_ = LinkShare(collective, nranks, ranks_per_node);
  curve.alpha_seconds_ = alpha_seconds;
  curve.rate_alpha_seconds_ = alpha_seconds;
  curve.launch_floor_seconds_ = alpha_seconds;
  curve.seconds_per_link_byte_ = 1.0 / link_bytes_per_second;
  return curve;
}

CurveTime BandwidthCurve::TimeSeconds(double x) const {
  if (x <= 0 || !valid()) return {0.0, false};
  if (samples_.empty()) {
    return {alpha_seconds_ + link_share_ * x * seconds_per_link_byte_, false};
  }
  const std::vector<CurveSample>& s = samples_;
  if (s.size() == 1) {
    // One point says nothing about latency: scale at its bandwidth.
    return {s[0].time_seconds * x / s[0].message_bytes,
            x != s[0].message_bytes};
  }
  if (x < s.front().message_bytes) {
    const CurveSample& a = s[0];
    const schedule::AlphaBetaLine fit = schedule::LineThrough(a, s[1]);
    const double line = fit.seconds_per_byte > 0 ? fit.SecondsAt(x) : 0.0;
    // A negative fitted latency would predict less than pure bandwidth.
    const double floor = a.time_seconds * x / a.message_bytes;
    return {std::max(line, floor), true};
  }
  if (x > s.back().message_bytes) {
    const CurveSample& b = s[s.size() - 1];
    const schedule::AlphaBetaLine fit =
        schedule::LineThrough(s[s.size() - 2], b);
    // A flat or falling tail (noise) must not make bigger messages free.
    const double floor = b.time_seconds * x / b.message_bytes;
    return {fit.seconds_per_byte > 0 ? std::max(fit.SecondsAt(x), 0.0) : floor,
            true};
  }
  auto it = std::lower_bound(
      s.begin(), s.end(), x,
      [](const CurveSample& p, double v) { return p.message_bytes < v; });
  if (it->message_bytes == x) return {it->time_seconds, false};
  const CurveSample& hi = *it;
  const CurveSample& lo = *(it - 1);
  const double w = std::log(x / lo.message_bytes) /
                   std::log(hi.message_bytes / lo.message_bytes);
  const double log_t =
      std::log(lo.time_seconds) +
      w * (std::log(hi.time_seconds) - std::log(lo.time_seconds));
  return {std::exp(log_t), false};
}

double BandwidthCurve::BusBandwidthAt(double message_bytes) const {
  return bandwidth::BusBwBytesPerSecond(collective_, nranks_, message_bytes,
                                        TimeSeconds(message_bytes).seconds);
}

LinkRate BandwidthCurve::LinkRateAt(double x) const {
  if (!valid() || x <= 0) return {0.0, false};
  if (samples_.empty()) return {1.0 / seconds_per_link_byte_, false};
  const CurveTime t = TimeSeconds(x);
  // Near the latency floor the busy time beyond alpha is tiny and noisy; keep
  // at least 1% of the time so the rate stays finite.
  const double busy =
      std::max(t.seconds - rate_alpha_seconds_, 0.01 * t.seconds);
  // Small messages never move faster than the link did at the largest
  // measured size (the most bandwidth-bound point): otherwise a chunk near
  // the latency floor would look nearly free on the link and the K search
  // would chase it (verify runs measured K = 64 at 4 MiB 40% slower than
  // predicted).
  const CurveSample& largest = samples_.back();
  const double largest_busy = std::max(
      largest.time_seconds - rate_alpha_seconds_, 0.01 * largest.time_seconds);
  const double cap = link_share_ * largest.message_bytes / largest_busy;
  return {std::min(link_share_ * x / busy, cap), t.extrapolated};
}

double BandwidthCurve::min_bytes() const {
  return samples_.empty() ? 0.0 : samples_.front().message_bytes;
}

double BandwidthCurve::max_bytes() const {
  return samples_.empty() ? 0.0 : samples_.back().message_bytes;
}

}  // namespace monta::model
