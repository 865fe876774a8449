// One benchmark task as the task queue stores it (issue 20 item 3): the task
// as handed out, its status and how often it was handed out. Encoded in the
// protobuf wire format (field 1: the BenchmarkTask, 2: the
// BenchmarkTaskStatus, 3: attempts) without a message of the contract's: it is
// the planner's private record, read only by planners (unknown fields are
// skipped, so a later field is read by older ones as absent).
#ifndef MONTA_SERVER_BENCH_TASK_RECORD_H_
#define MONTA_SERVER_BENCH_TASK_RECORD_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "proto/monta/v1/benchmark.pb.h"

namespace monta::coordination {

// A record's bound (server/store/task_store.h's kMaxTaskRecordBytes): a larger
// one drops its excluded curves' points, then its excluded list.
inline constexpr size_t kMaxTaskRecordBytes = size_t{256} << 10;

struct TaskRecord {
  monta::v1::BenchmarkTask spec;
  monta::v1::BenchmarkTaskStatus status;
  // Times the task was handed out: 1, plus one per leader that re-issued it.
  int attempts = 1;
};

// Within kMaxTaskRecordBytes (trimming as said above).
std::string EncodeTaskRecord(const TaskRecord& record);
// DATA_LOSS naming what is malformed.
absl::StatusOr<TaskRecord> DecodeTaskRecord(const std::string& data);

}  // namespace monta::coordination

#endif  // MONTA_SERVER_BENCH_TASK_RECORD_H_
