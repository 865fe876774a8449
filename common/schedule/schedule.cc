#include "common/schedule/schedule.h"

#include <algorithm>

namespace monta::schedule {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// K clamped to [1, rows] for rows >= 1.
int64_t ClampChunks(int64_t rows, int64_t requested) {
  return std::clamp<int64_t>(requested, 1, rows);
}

}  // namespace

int64_t RowsPerTpRank(int64_t rows, int t) {
  if (rows < 1) return 0;
  return CeilDiv(rows, std::max(1, t));
}

int64_t PaddedRows(int64_t rows, int t) {
  return RowsPerTpRank(rows, t) * std::max(1, t);
}

int64_t RowsPerChunk(int64_t rows, int64_t requested) {
  if (rows < 1) return 0;
  return CeilDiv(rows, ClampChunks(rows, requested));
}

int64_t EffectiveChunks(int64_t rows, int64_t requested) {
  if (rows < 1) return 1;
  return CeilDiv(rows, RowsPerChunk(rows, requested));
}

std::vector<RowRange> ChunkRows(int64_t rows, int64_t requested) {
  std::vector<RowRange> out;
  const int64_t size = RowsPerChunk(rows, requested);
  for (int64_t first = 0; first < rows; first += size) {
    out.push_back({first, std::min(size, rows - first)});
  }
  return out;
}

double LinkShare(int nranks, int ranks_per_node) {
  if (nranks < 1) return 0;
  const double n = nranks;
  if (ranks_per_node >= nranks) return (n - 1) / n;  // one node
  return (n - ranks_per_node) / n;                   // several: the NIC
}

double LatencyForGroupSeconds(double alpha_seconds, int source_ranks, int group,
                              double per_peer_seconds) {
  const double moved =
      alpha_seconds + per_peer_seconds * (group - source_ranks);
  return std::max(moved, 0.25 * alpha_seconds);
}

}  // namespace monta::schedule
