// Golden vectors of the chunk rule (schedule.h): for a grid of capacity
// rows, requested chunks K and TP sizes t, the padded axis, the rows each TP
// rank keeps, K_eff and the rows of every chunk. testdata/golden_chunks.tsv
// is this text, committed; common/schedule:golden_chunks_test fails when it
// is stale, and python/tests checks python/monta's chunk rule against it.
#ifndef MONTA_COMMON_SCHEDULE_GOLDEN_CHUNKS_H_
#define MONTA_COMMON_SCHEDULE_GOLDEN_CHUNKS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace monta::schedule {

struct GoldenCase {
  int64_t rows = 0;    // the capacity axis C (or k*S rows, dropless)
  int64_t chunks = 0;  // K asked for
  int tp = 1;          // t
};

// The grid: >= 1,000 cases, every combination of its rows, K and t.
std::vector<GoldenCase> GoldenCases();

// One case's line: rows, chunks, tp, padded_rows, rows_per_tp_rank,
// effective_chunks, chunk_rows (tab-separated; chunk_rows run-length
// encoded: "3*3,1" is 3, 3, 3, 1).
std::string GoldenLine(const GoldenCase& c);

// The whole file: a comment header, the column names, one line per case.
std::string GoldenChunksTsv();

// Where the file lives in the repository.
inline constexpr char kGoldenChunksPath[] =
    "common/schedule/testdata/golden_chunks.tsv";

}  // namespace monta::schedule

#endif  // MONTA_COMMON_SCHEDULE_GOLDEN_CHUNKS_H_
