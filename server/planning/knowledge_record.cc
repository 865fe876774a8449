#include "server/planning/knowledge_record.h"

#include <openssl/sha.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/strategy/strategy_proto.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;
using google::protobuf::internal::WireFormatLite;

constexpr char kNodeSetDir[] = "nodesets/";
constexpr char kJobDir[] = "jobs/";

// Fields of both records: the format's version.
constexpr int kFormatMajorField = 14;
constexpr int kFormatMinorField = 15;
// A node set record.
constexpr int kNodeSetField = 1;
constexpr int kUpdatedAtField = 2;
constexpr int kCalibrationField = 3;
constexpr int kFittedAtField = 4;
constexpr int kRunField = 5;
// A run: its request, and its observations (each with a request of its own
// only where it differs from the run's).
constexpr int kRunRequestField = 1;
constexpr int kRunObservationField = 2;
constexpr int kKindField = 1;
constexpr int kChunksField = 2;
constexpr int kMeasuredField = 3;
constexpr int kScopeField = 4;
constexpr int kObservationRequestField = 5;
// A job record.
constexpr int kJobRequestField = 1;
constexpr int kJobAtField = 2;
constexpr int kJobReplyField = 3;

std::string Sha128Hex(const std::string& key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(),
         digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), 16));
}

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }

// One message of fields, written by `fill`.
std::string Message(
    const std::function<void(google::protobuf::io::CodedOutputStream*)>& fill) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    fill(&coded);
  }
  return out;
}

void WriteVersion(google::protobuf::io::CodedOutputStream* out) {
  WireFormatLite::WriteInt32(kFormatMajorField, kKnowledgeFormatMajor, out);
  WireFormatLite::WriteInt32(kFormatMinorField, kKnowledgeFormatMinor, out);
}

std::string EncodeRun(const std::vector<Observation>& run) {
  const std::string request = run.front().request.SerializeAsString();
  return Message([&](google::protobuf::io::CodedOutputStream* out) {
    WireFormatLite::WriteString(kRunRequestField, request, out);
    for (const Observation& o : run) {
      const std::string own = o.request.SerializeAsString();
      WireFormatLite::WriteString(
          kRunObservationField,
          Message([&](google::protobuf::io::CodedOutputStream* field) {
            WireFormatLite::WriteInt32(
                kKindField, strategy::StrategyToProto(o.kind), field);
            WireFormatLite::WriteInt32(kChunksField, o.chunks, field);
            WireFormatLite::WriteDouble(kMeasuredField, o.measured_seconds,
                                        field);
            WireFormatLite::WriteInt32(kScopeField,
                                       o.scope == MeasuredScope::kLayer
                                           ? v1::VERIFY_SCOPE_LAYER
                                           : v1::VERIFY_SCOPE_OP,
                                       field);
            if (own != request) {
              WireFormatLite::WriteString(kObservationRequestField, own, field);
            }
          }),
          out);
    }
  });
}

// Reads the fields of `data`, handing each to `field` (its number, and the
// stream positioned at its value); skips the fields `field` does not take
// (returns false for). DATA_LOSS naming `what` when malformed.
absl::Status ReadFields(
    const std::string& data, absl::string_view what,
    const std::function<bool(int field,
                             google::protobuf::io::CodedInputStream* in,
                             bool* ok)>& field) {
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(data.data()),
      static_cast<int>(data.size()));
  while (uint32_t tag = in.ReadTag()) {
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    bool ok = true;
    if (!field(number, &in, &ok)) ok = WireFormatLite::SkipField(&in, tag);
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat(what, ": field ", number, " is malformed"));
    }
  }
  if (!in.ConsumedEntireMessage()) {
    return absl::DataLossError(absl::StrCat(what, ": truncated"));
  }
  return absl::OkStatus();
}

bool ReadInt64(google::protobuf::io::CodedInputStream* in, int64_t* out) {
  uint64_t v = 0;
  if (!in->ReadVarint64(&v)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool ReadInt32(google::protobuf::io::CodedInputStream* in, int* out) {
  int64_t v = 0;
  if (!ReadInt64(in, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool ReadBytes(google::protobuf::io::CodedInputStream* in, std::string* out) {
  return WireFormatLite::ReadString(in, out);
}

// The version fields; true when the field was one of them.
bool VersionField(int field, google::protobuf::io::CodedInputStream* in,
                  bool* ok, int* major) {
  int ignored = 0;
  if (field == kFormatMajorField) *ok = ReadInt32(in, major);
  if (field == kFormatMinorField) *ok = ReadInt32(in, &ignored);
  return field == kFormatMajorField || field == kFormatMinorField;
}

absl::Status CheckMajor(int major) {
  if (major >= 1 && major <= kKnowledgeFormatMajor) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "format major version ", major, ": this planner reads 1..",
      kKnowledgeFormatMajor, major > kKnowledgeFormatMajor ? " (newer)" : ""));
}

bool Positive(double v) { return std::isfinite(v) && v > 0; }

absl::StatusOr<Observation> DecodeObservation(
    const std::string& data, const v1::StrategyRequest& run_request) {
  Observation o;
  o.request = run_request;
  int kind = 0;
  int scope = 0;
  bool has_measured = false;
  absl::Status read = ReadFields(
      data, "observation",
      [&](int field, google::protobuf::io::CodedInputStream* in, bool* ok) {
        std::string bytes;
        switch (field) {
          case kKindField:
            *ok = ReadInt32(in, &kind);
            return true;
          case kChunksField:
            *ok = ReadInt32(in, &o.chunks);
            return true;
          case kMeasuredField:
            *ok = WireFormatLite::ReadPrimitive<double,
                                                WireFormatLite::TYPE_DOUBLE>(
                in, &o.measured_seconds);
            has_measured = *ok;
            return true;
          case kScopeField:
            *ok = ReadInt32(in, &scope);
            return true;
          case kObservationRequestField:
            *ok = ReadBytes(in, &bytes) && o.request.ParseFromString(bytes);
            return true;
          default:
            return false;
        }
      });
  if (!read.ok()) return read;
  std::optional<strategy::StrategyKind> k = strategy::StrategyFromProto(kind);
  if (!k.has_value() || o.chunks < 1 || !has_measured ||
      !Positive(o.measured_seconds) ||
      (scope != v1::VERIFY_SCOPE_OP && scope != v1::VERIFY_SCOPE_LAYER)) {
    return absl::DataLossError(
        "observation: expected a known strategy, K >= 1, a measured time "
        "finite and > 0 and a scope of op or layer");
  }
  o.kind = *k;
  o.scope = scope == v1::VERIFY_SCOPE_LAYER ? MeasuredScope::kLayer
                                            : MeasuredScope::kDispatchOp;
  return o;
}

absl::StatusOr<std::vector<Observation>> DecodeRun(
    const std::string& data, const std::string& node_set) {
  v1::StrategyRequest request;
  std::vector<std::string> observations;
  bool has_request = false;
  absl::Status read = ReadFields(
      data, "run",
      [&](int field, google::protobuf::io::CodedInputStream* in, bool* ok) {
        std::string bytes;
        if (field == kRunRequestField) {
          *ok = ReadBytes(in, &bytes) && request.ParseFromString(bytes);
          has_request = *ok;
          return true;
        }
        if (field == kRunObservationField) {
          *ok = ReadBytes(in, &bytes);
          observations.push_back(std::move(bytes));
          return true;
        }
        return false;
      });
  if (!read.ok()) return read;
  if (!has_request || observations.empty()) {
    return absl::DataLossError("run: expected a request and observations");
  }
  std::vector<Observation> run;
  for (const std::string& bytes : observations) {
    absl::StatusOr<Observation> o = DecodeObservation(bytes, request);
    if (!o.ok()) return o.status();
    if (NodeSetKey(o->request) != node_set) {
      return absl::DataLossError("run: an observation of another node set");
    }
    run.push_back(*std::move(o));
  }
  return run;
}

// The calibration an evidence message carries; DATA_LOSS when out of range.
absl::StatusOr<PlanCalibration> CalibrationOf(const v1::Calibration& ev) {
  PlanCalibration c;
  c.evidence = ev;
  c.model.network_scale = ev.network_scale_ratio();
  c.model.local_scale = ev.local_scale_ratio();
  c.model.latency_scale = ev.latency_scale_ratio();
  c.model.per_chunk_overhead_seconds = ev.per_chunk_overhead_seconds();
  c.contention_factor = ev.contention_factor();
  if (!Positive(c.model.network_scale) || !Positive(c.model.local_scale) ||
      !Positive(c.model.latency_scale) ||
      !std::isfinite(c.model.per_chunk_overhead_seconds) ||
      c.model.per_chunk_overhead_seconds < 0 ||
      !std::isfinite(c.contention_factor) || c.contention_factor < 1) {
    return absl::DataLossError(
        "calibration: expected scales finite and > 0, a per-chunk overhead "
        "finite and >= 0 and a contention factor finite and >= 1");
  }
  return c;
}

}  // namespace

std::string NodeSetRecordId(const std::string& node_set) {
  return absl::StrCat(kNodeSetDir, Sha128Hex(node_set));
}

std::string JobRecordId(const std::string& job_key) {
  return absl::StrCat(kJobDir, Sha128Hex(job_key));
}

bool IsNodeSetRecordId(const std::string& id) {
  return absl::StartsWith(id, kNodeSetDir);
}

bool IsJobRecordId(const std::string& id) {
  return absl::StartsWith(id, kJobDir);
}

std::optional<std::string> EncodeNodeSetRecord(const NodeSetRecord& record,
                                               size_t max_bytes) {
  std::vector<std::string> runs;
  for (const auto& run : record.runs) {
    if (!run.empty()) runs.push_back(EncodeRun(run));
  }
  // The newest runs that fit, the oldest left out first.
  for (size_t first = 0; first <= runs.size(); ++first) {
    std::string out = Message([&](google::protobuf::io::CodedOutputStream* o) {
      WriteVersion(o);
      WireFormatLite::WriteString(kNodeSetField, record.node_set, o);
      WireFormatLite::WriteInt64(kUpdatedAtField, Micros(record.updated_at), o);
      if (record.calibration.has_value()) {
        WireFormatLite::WriteString(
            kCalibrationField, record.calibration->evidence.SerializeAsString(),
            o);
        WireFormatLite::WriteInt64(kFittedAtField, Micros(record.fitted_at), o);
      }
      for (size_t i = first; i < runs.size(); ++i) {
        WireFormatLite::WriteString(kRunField, runs[i], o);
      }
    });
    if (out.size() <= max_bytes) return out;
  }
  return std::nullopt;
}

// long-function: one switch over the record's fields, then its checks.
absl::StatusOr<NodeSetRecord> DecodeNodeSetRecord(const std::string& id,
                                                  const std::string& data) {
  NodeSetRecord record;
  int major = 0;
  int64_t updated = 0;
  int64_t fitted = 0;
  std::optional<v1::Calibration> evidence;
  std::vector<std::string> runs;
  absl::Status read = ReadFields(
      data, "node set record",
      [&](int field, google::protobuf::io::CodedInputStream* in, bool* ok) {
        std::string bytes;
        if (VersionField(field, in, ok, &major)) return true;
        switch (field) {
          case kNodeSetField:
            *ok = ReadBytes(in, &record.node_set);
            return true;
          case kUpdatedAtField:
            *ok = ReadInt64(in, &updated);
            return true;
          case kCalibrationField:
            evidence.emplace();
            *ok = ReadBytes(in, &bytes) && evidence->ParseFromString(bytes);
            return true;
          case kFittedAtField:
            *ok = ReadInt64(in, &fitted);
            return true;
          case kRunField:
            *ok = ReadBytes(in, &bytes);
            runs.push_back(std::move(bytes));
            return true;
          default:
            return false;
        }
      });
  if (!read.ok()) return read;
  if (absl::Status s = CheckMajor(major); !s.ok()) return s;
  if (record.node_set.empty() || NodeSetRecordId(record.node_set) != id) {
    return absl::DataLossError(
        "node set record: its node set is missing or not its id's");
  }
  if (updated <= 0 || (evidence.has_value() && fitted <= 0)) {
    return absl::DataLossError(
        "node set record: expected an update time (and a fit time with a "
        "calibration) after 1970");
  }
  record.updated_at = absl::FromUnixMicros(updated);
  record.fitted_at = absl::FromUnixMicros(fitted);
  if (evidence.has_value()) {
    absl::StatusOr<PlanCalibration> c = CalibrationOf(*evidence);
    if (!c.ok()) return c.status();
    record.calibration = *std::move(c);
  }
  for (const std::string& bytes : runs) {
    absl::StatusOr<std::vector<Observation>> run =
        DecodeRun(bytes, record.node_set);
    if (!run.ok()) return run.status();
    record.runs.push_back(*std::move(run));
  }
  return record;
}

std::optional<std::string> EncodeJobRecord(const JobRecord& record,
                                           size_t max_bytes) {
  std::string out = Message([&](google::protobuf::io::CodedOutputStream* o) {
    WriteVersion(o);
    WireFormatLite::WriteString(kJobRequestField,
                                record.request.SerializeAsString(), o);
    WireFormatLite::WriteInt64(kJobAtField, Micros(record.at), o);
    WireFormatLite::WriteString(kJobReplyField,
                                record.reply.SerializeAsString(), o);
  });
  if (out.size() > max_bytes) return std::nullopt;
  return out;
}

absl::StatusOr<JobRecord> DecodeJobRecord(const std::string& id,
                                          const std::string& data) {
  JobRecord record;
  int major = 0;
  int64_t at = 0;
  bool has_request = false;
  bool has_reply = false;
  absl::Status read = ReadFields(
      data, "job record",
      [&](int field, google::protobuf::io::CodedInputStream* in, bool* ok) {
        std::string bytes;
        if (VersionField(field, in, ok, &major)) return true;
        switch (field) {
          case kJobRequestField:
            *ok =
                ReadBytes(in, &bytes) && record.request.ParseFromString(bytes);
            has_request = *ok;
            return true;
          case kJobAtField:
            *ok = ReadInt64(in, &at);
            return true;
          case kJobReplyField:
            *ok = ReadBytes(in, &bytes) && record.reply.ParseFromString(bytes);
            has_reply = *ok;
            return true;
          default:
            return false;
        }
      });
  if (!read.ok()) return read;
  if (absl::Status s = CheckMajor(major); !s.ok()) return s;
  if (!has_request || !has_reply || at <= 0) {
    return absl::DataLossError(
        "job record: expected a request, a verify reply and a time after "
        "1970");
  }
  if (JobRecordId(JobKey(record.request)) != id) {
    return absl::DataLossError("job record: its job is not its id's");
  }
  record.at = absl::FromUnixMicros(at);
  return record;
}

}  // namespace monta::planning
