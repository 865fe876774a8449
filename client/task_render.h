// montactl bench and task: a benchmark task as text.
#ifndef MONTA_CLIENT_TASK_RENDER_H_
#define MONTA_CLIENT_TASK_RENDER_H_

#include <string>

#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/planner.pb.h"

namespace monta::client {

// "task bench-1-2 on a,b: TASK_STATE_FAILED (why)", then one line per
// excluded curve with why.
std::string TaskStatusText(const monta::v1::BenchmarkTaskStatus& status);

// montactl task ID: TaskStatusText, then the task's attempt and leader epoch,
// its ranks, times (UTC; "-" when unset) and where the answer came from
// (the leader, or a follower's read of the store).
std::string TaskText(const monta::v1::GetBenchmarkTaskReply& reply);

}  // namespace monta::client

#endif  // MONTA_CLIENT_TASK_RENDER_H_
