// Deterministic bytes for data checks: every byte a schedule moves is a
// function of (source EP rank, destination EP rank, capacity row, offset), so
// a byte that lands in the wrong rank, row, chunk or offset is caught.
//
// The source is the EP rank, not the global rank: TP ranks of one EP rank hold
// the same tokens (that is what tp_dedup removes), so every strategy must
// deliver exactly the same bytes.
#ifndef MONTA_AGENT_BENCH_DATA_PATTERN_H_
#define MONTA_AGENT_BENCH_DATA_PATTERN_H_

#include <cstddef>
#include <cstdint>

namespace monta::bench {

// Writes row `row` (row_bytes bytes) that `src` sends to `dst`.
void FillRow(uint8_t* out, int src, int dst, uint64_t row, size_t row_bytes);

// Number of bytes of `got` that differ from FillRow's bytes.
uint64_t CountWrongInRow(const uint8_t* got, int src, int dst, uint64_t row,
                         size_t row_bytes);

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_DATA_PATTERN_H_
