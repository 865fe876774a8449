#include "server/bench/task_record.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace monta::coordination {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kSpecField = 1;
constexpr int kStatusField = 2;
constexpr int kAttemptsField = 3;

std::string Encode(const TaskRecord& record) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    WireFormatLite::WriteString(kSpecField, record.spec.SerializeAsString(),
                                &coded);
    WireFormatLite::WriteString(kStatusField, record.status.SerializeAsString(),
                                &coded);
    WireFormatLite::WriteInt32(kAttemptsField, record.attempts, &coded);
  }
  return out;
}

}  // namespace

std::string EncodeTaskRecord(const TaskRecord& record) {
  std::string out = Encode(record);
  if (out.size() <= kMaxTaskRecordBytes) return out;
  TaskRecord trimmed = record;
  for (auto& excluded : *trimmed.status.mutable_excluded()) {
    excluded.mutable_curve()->clear_points();
  }
  out = Encode(trimmed);
  if (out.size() <= kMaxTaskRecordBytes) return out;
  trimmed.status.clear_excluded();
  return Encode(trimmed);
}

absl::StatusOr<TaskRecord> DecodeTaskRecord(const std::string& data) {
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(data.data()),
      static_cast<int>(data.size()));
  TaskRecord record;
  bool has_spec = false;
  bool has_status = false;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    std::string bytes;
    bool ok = true;
    if (field == kSpecField || field == kStatusField) {
      ok = WireFormatLite::ReadString(&in, &bytes) &&
           (field == kSpecField ? record.spec.ParseFromString(bytes)
                                : record.status.ParseFromString(bytes));
      (field == kSpecField ? has_spec : has_status) = ok;
    } else if (field == kAttemptsField) {
      uint32_t attempts = 0;
      ok = in.ReadVarint32(&attempts);
      record.attempts = static_cast<int>(attempts);
    } else {
      ok = WireFormatLite::SkipField(&in, tag);
    }
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat("task record: field ", field, " is malformed"));
    }
  }
  if (!in.ConsumedEntireMessage() || !has_spec || !has_status ||
      record.spec.task_id().empty() ||
      record.spec.task_id() != record.status.task_id() || record.attempts < 1) {
    return absl::DataLossError(
        "task record: expected a task, its status (same task id) and "
        "attempts >= 1");
  }
  return record;
}

}  // namespace monta::coordination
