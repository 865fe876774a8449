// Bandwidth curves: how long a collective takes at a given message size.
//
// The nccl-tests bandwidth definitions (algbw, busbw) are common/bandwidth's;
// this file only builds curves on them. A measured curve and a hardware
// profile's alpha-beta constants produce the same type, so the cost model
// never knows which one it was given.

#ifndef MONTA_SERVER_MODEL_BANDWIDTH_CURVE_H_
#define MONTA_SERVER_MODEL_BANDWIDTH_CURVE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/bandwidth/bandwidth.h"
#include "common/schedule/alpha_beta.h"

namespace monta::model {

// One measured point: `message_bytes` per rank took `time_seconds`.
using CurveSample = schedule::Sample;

// A time, and whether the size lay outside the measured range (then the time
// comes from an alpha-beta fit and the caller must say so in its evidence).
struct CurveTime {
  double seconds = 0;
  bool extrapolated = false;
};

// A bandwidth of the curve's bottleneck link at some message size.
struct LinkRate {
  double bytes_per_second = 0;
  bool extrapolated = false;
};

class BandwidthCurve {
 public:
  // An empty curve; valid() is false. Exists so aggregates can hold curves.
  BandwidthCurve() = default;

  // A measured curve over `nranks` ranks, `ranks_per_node` of them per node
  // (nranks for an intra-node curve). Needs nranks >= 2 (>= 1 for copies),
  // ranks_per_node dividing nranks, at least one sample, sizes strictly
  // increasing and every size and time > 0 and finite. Samples more than
  // 1.5x as slow as the curve's robust alpha-beta line
  // (schedule::RobustAlphaBeta: slope from the two largest, latency the
  // median) are stalls (scheduling, not the link) and are dropped; the
  // largest is kept. The same line's latency is the curve's alpha.
  static absl::StatusOr<BandwidthCurve> FromSamples(
      bandwidth::Collective collective, int nranks, int ranks_per_node,
      std::vector<CurveSample> samples);

  // A measured curve from both statistics of one sweep (rule (e), docs/MODEL.md
  // §4 "A chunk's price"): per size the slowest rank's median of iterations
  // timed alone (`median`) and its time of one op in a warm back-to-back
  // chain (`chain`), the same sizes in both. Each is fitted as FromSamples;
  // the curve's times and link rates are the chain's (LinkRateAt beyond the
  // chain's own alpha), its alpha_seconds() the smaller of the two fits'
  // alphas and its launch_floor_seconds() the larger of the two floors.
  // perf/layer_pipe_replay.py --both_from computes the same.
  static absl::StatusOr<BandwidthCurve> FromBothStatistics(
      bandwidth::Collective collective, int nranks, int ranks_per_node,
      std::vector<CurveSample> median, std::vector<CurveSample> chain);

  // A profile curve: T(x) = alpha + link_share * x / link_bytes_per_second,
  // i.e. a latency plus the bytes on the bottleneck link at its line rate.
  // Never extrapolated. Needs alpha >= 0 and a rate > 0.
  static absl::StatusOr<BandwidthCurve> FromAlphaBeta(
      bandwidth::Collective collective, int nranks, int ranks_per_node,
      double alpha_seconds, double link_bytes_per_second);

  // T(x). Between samples: linear interpolation of log(time) over log(size)
  // (a power law per segment, so the time stays monotone when the samples
  // are). Beyond them: alpha-beta line through the two nearest samples.
  CurveTime TimeSeconds(double message_bytes) const;

  // nccl-tests busbw at x, from TimeSeconds.
  double BusBandwidthAt(double message_bytes) const;

  // Bandwidth of the bottleneck link at message size x: the bytes a rank puts
  // on that link (link_share() * x) over the time beyond the launch latency.
  // For a profile curve this is exactly the profile's link rate.
  LinkRate LinkRateAt(double message_bytes) const;

  // Fraction of a rank's message that crosses the curve's bottleneck link:
  // AllToAll/AllGather inside one node (n-1)/n (NVLink), AllToAll across
  // nodes (n - ranks_per_node)/n (the NIC), copies 1. Relating the curve to
  // the link is what lets one curve answer for groups of another shape.
  double link_share() const { return link_share_; }

  // Fixed cost per launch: the profile's alpha, or the latency of the
  // measured curve's robust alpha-beta line (clamped to [0, smallest time];
  // the smallest time when the largest samples do not rise, one sample: 0).
  double alpha_seconds() const { return alpha_seconds_; }

  // What one launch measured at the smallest size swept, beyond the bytes:
  // that sample's time less the robust line's bandwidth part there, at least
  // alpha_seconds() (docs/MODEL.md §5, the chunk bound). Taken before the
  // stall filter: a small AllToAll that is slow because each launch waits on
  // the host or the shaped link is exactly what a pipeline chunk pays, and
  // the fitted alpha cannot see it (on the emulated 400 Mbit/s link the
  // 4-rank AllToAll at 64 KiB took 3.98 ms where the line says 0.74 ms; the
  // fitted alpha is 0). The profile's alpha for a profile curve; 0 with one
  // sample.
  double launch_floor_seconds() const { return launch_floor_seconds_; }

  bool valid() const { return nranks_ > 0; }
  bool measured() const { return !samples_.empty(); }
  bandwidth::Collective collective() const { return collective_; }
  int nranks() const { return nranks_; }
  int ranks_per_node() const { return ranks_per_node_; }
  // Measured size range; 0 for a profile curve.
  double min_bytes() const;
  double max_bytes() const;

 private:
  bandwidth::Collective collective_ = bandwidth::Collective::kAllToAll;
  int nranks_ = 0;
  int ranks_per_node_ = 0;
  double link_share_ = 1;
  double alpha_seconds_ = 0;
  // LinkRateAt's latency: alpha_seconds_, but the chain's own fitted alpha
  // for a curve FromBothStatistics (the rates are the chain's).
  double rate_alpha_seconds_ = 0;
  double launch_floor_seconds_ = 0;
  // Profile curves: 1 / link rate; unused when samples_ is non-empty.
  double seconds_per_link_byte_ = 0;
  // Measured samples, sizes strictly increasing; empty for a profile curve.
  std::vector<CurveSample> samples_;
};

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_BANDWIDTH_CURVE_H_
