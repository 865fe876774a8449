// Sweep results as the wire type the agent reports (monta.v1.BandwidthCurve).
#ifndef MONTA_AGENT_BENCH_CURVE_H_
#define MONTA_AGENT_BENCH_CURVE_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/bench/sweep.h"
#include "common/bandwidth/bandwidth.h"
#include "proto/monta/v1/benchmark.pb.h"

namespace monta::bench {

struct CurveInfo {
  bandwidth::Collective collective = bandwidth::Collective::kAllToAll;
  monta::v1::Scope scope = monta::v1::SCOPE_INTRA_NODE;
  monta::v1::Backend backend = monta::v1::BACKEND_GLOO;
  int nranks = 0;
  int n_nodes = 1;
  std::vector<std::string> nodes;  // sorted by the converter
  // UNSPECIFIED for a plain collective.
  monta::v1::StrategyKind strategy = monta::v1::STRATEGY_KIND_UNSPECIFIED;
  int chunks = 1;
  std::string task_id;
  absl::Time measured_at = absl::UnixEpoch();
};

// Points whose size does not exceed the previous one (small sizes that round
// to the same dispatch shape) are dropped: the proto requires strictly
// increasing sizes.
monta::v1::BandwidthCurve ToBandwidthCurve(
    const std::vector<SweepPoint>& points, const CurveInfo& info);

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_CURVE_H_
