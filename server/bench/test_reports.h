// Reports as an agent sends them, for tests and fuzz targets of the planner's
// report path (not linked into the planner).
#ifndef MONTA_SERVER_BENCH_TEST_REPORTS_H_
#define MONTA_SERVER_BENCH_TEST_REPORTS_H_

#include <string>

#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"

namespace monta::coordination {

// A benchmark of nodes "a" and "b" (rank order) with a 30 s deadline.
monta::v1::RunBenchmarkRequest PairForTesting();

// `node`'s OK report for `task`: its ranks, one series per series of the task
// with exactly its sizes, its local rank r taking `seconds` + r * `rank_step`
// at every size, no wrong byte; measured_at 2100-01-01 (a claim the planner
// only shows).
monta::v1::ReportBenchmarkRequest ReportForTesting(
    const monta::v1::BenchmarkTask& task, const std::string& node,
    double seconds, double rank_step = 0);

}  // namespace monta::coordination

#endif  // MONTA_SERVER_BENCH_TEST_REPORTS_H_
