// A node's report of what its ranks measured (monta.v1.SeriesTimes): each
// rank's own median time and wrong bytes per size. The planner agrees them
// (the slowest rank bounds a collective) and forms the curves.
#ifndef MONTA_AGENT_BENCH_REPORT_H_
#define MONTA_AGENT_BENCH_REPORT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "agent/bench/sweep.h"
#include "proto/monta/v1/benchmark.pb.h"

namespace monta::bench {

// One series from the node's ranks: `per_rank[i]` holds local rank i's own
// points (SweepOptions::agree_across_ranks off), every rank the same sizes in
// the same order; their timed iterations go along, rank after rank, when
// every rank has as many, and their chain times (SweepPoint::chain_time_us)
// when every rank timed one. The caller sets the series' collective or
// dispatch_index.
// INTERNAL when the ranks measured different sizes.
absl::StatusOr<monta::v1::SeriesTimes> SeriesFromRanks(
    const std::vector<std::vector<SweepPoint>>& per_rank);

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_REPORT_H_
