#include "agent/bench/report.h"

#include "absl/strings/str_cat.h"

namespace monta::bench {

absl::StatusOr<monta::v1::SeriesTimes> SeriesFromRanks(
    const std::vector<std::vector<SweepPoint>>& per_rank) {
  monta::v1::SeriesTimes series;
  if (per_rank.empty()) return series;
  const std::vector<SweepPoint>& first = per_rank.front();
  for (size_t i = 0; i < first.size(); ++i) {
    monta::v1::SizeTimes& size = *series.add_sizes();
    size.set_message_bytes(first[i].bytes);
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const std::vector<SweepPoint>& points = per_rank[r];
      if (points.size() != first.size() || points[i].bytes != first[i].bytes) {
        return absl::InternalError(absl::StrCat(
            "local rank ", r, " measured other sizes than local rank 0 (",
            points.size(), " sizes vs ", first.size(), ")"));
      }
      size.add_rank_seconds(points[i].time_us * 1e-6);
      size.add_rank_wrong_bytes(points[i].wrong);
    }
    // An inter-node sweep's chains, one per rank, when every rank timed one.
    bool chained = true;
    for (const std::vector<SweepPoint>& points : per_rank) {
      chained = chained && points[i].chain_time_us > 0;
    }
    for (size_t r = 0; chained && r < per_rank.size(); ++r) {
      size.add_rank_chain_seconds(per_rank[r][i].chain_time_us * 1e-6);
    }
    // A verify workload's iterations, rank after rank, when every rank has
    // the same number of them (a collective sweep keeps none).
    const size_t n = first[i].iteration_us.size();
    bool same = n > 0;
    for (const std::vector<SweepPoint>& points : per_rank) {
      same = same && points[i].iteration_us.size() == n;
    }
    if (!same) continue;
    for (const std::vector<SweepPoint>& points : per_rank) {
      for (double us : points[i].iteration_us) {
        size.add_rank_iteration_seconds(us * 1e-6);
      }
    }
  }
  return series;
}

}  // namespace monta::bench
