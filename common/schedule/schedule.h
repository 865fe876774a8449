// The schedule arithmetic every room shares (docs/MODEL.md §2, §4): how a
// capacity axis is padded, split over the TP ranks and cut into pipeline
// chunks, which share of a message crosses a curve's bottleneck link, and how
// an AllToAll launch latency moves from the group it was measured on to
// another. The model prices these schedules, the agent runs them, the fuzz
// fixtures and perf tools build curves with them, and python/monta's chunk
// rule is checked against golden vectors generated from here
// (testdata/golden_chunks.tsv). Pure C++: no protobuf, no I/O.
#ifndef MONTA_COMMON_SCHEDULE_SCHEDULE_H_
#define MONTA_COMMON_SCHEDULE_SCHEDULE_H_

#include <cstdint>
#include <vector>

namespace monta::schedule {

// ---- Rows: padding, the TP split, pipeline chunks ----

// Rows each TP rank keeps when `rows` are split over `t` ranks: ceil(rows/t)
// (DeepSpeed's drop_tokens on the axis padded to a multiple of t). 0 rows
// give 0; t < 1 counts as 1.
int64_t RowsPerTpRank(int64_t rows, int t);

// The axis padded up to a multiple of t: t * RowsPerTpRank(rows, t).
int64_t PaddedRows(int64_t rows, int t);

// Chunks a split really yields: `rows` cut into pieces of ceil(rows/K) rows
// give ceil(rows / ceil(rows/K)) pieces (rows 6, K 4: pieces of 2, so 3).
// K is clamped to [1, rows]; fewer than one row gives 1.
int64_t EffectiveChunks(int64_t rows, int64_t requested);

// Rows of every chunk but possibly the last: ceil(rows/K) for K clamped as
// in EffectiveChunks (0 when rows < 1).
int64_t RowsPerChunk(int64_t rows, int64_t requested);

// One chunk: rows [first, first + count).
struct RowRange {
  int64_t first = 0;
  int64_t count = 0;
  bool operator==(const RowRange& o) const {
    return first == o.first && count == o.count;
  }
};

// The chunks of a split, in order: EffectiveChunks(rows, requested) ranges
// of RowsPerChunk rows, the last one shorter when they do not divide; they
// cover [0, rows) exactly. Empty when rows < 1.
std::vector<RowRange> ChunkRows(int64_t rows, int64_t requested);

// ---- Links ----

// Fraction of a rank's message that crosses the bottleneck link of an
// AllToAll or AllGather over `nranks` ranks, `ranks_per_node` of them per
// node: (n-1)/n inside one node (the intra-node fabric), (n-G)/n across
// nodes (the NIC). A device copy puts every byte on its link: kCopyLinkShare.
// 0 when nranks < 1.
double LinkShare(int nranks, int ranks_per_node);
inline constexpr double kCopyLinkShare = 1.0;

// ---- Latency ----

// An AllToAll launch latency quoted for `source_ranks` ranks, moved to a
// group of `group` ranks by the per-peer latency (one send/recv pair each):
// alpha'(g) = max(alpha + per_peer * (g - n), alpha / 4). Fewer peers cannot
// make a launch free.
double LatencyForGroupSeconds(double alpha_seconds, int source_ranks, int group,
                              double per_peer_seconds);

// The group sizes a per-peer latency was sourced on: [min_ranks, max_ranks];
// 0 for a bound means none is known (an assumption with no range).
struct LatencySourceRange {
  int min_ranks = 0;
  int max_ranks = 0;
  bool known() const { return min_ranks > 0 || max_ranks > 0; }
  // Whether moving the latency to `group` extrapolates the per-peer law
  // below or above the groups it was measured on.
  bool Below(int group) const { return min_ranks > 0 && group < min_ranks; }
  bool Above(int group) const { return max_ranks > 0 && group > max_ranks; }
};

}  // namespace monta::schedule

#endif  // MONTA_COMMON_SCHEDULE_SCHEDULE_H_
