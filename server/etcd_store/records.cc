#include "server/etcd_store/records.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace monta::etcd_store {
namespace {

std::string Digits20(int64_t n) {
  char digits[24];
  std::snprintf(digits, sizeof(digits), "%020lld",
                static_cast<long long>(n < 0 ? 0 : n));
  return digits;
}

int64_t Micros(double at_unix_seconds) {
  if (!(at_unix_seconds > 0)) return 0;
  return static_cast<int64_t>(std::llround(at_unix_seconds * 1e6));
}

void AppendField(std::string& out, const std::string& bytes) {
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  }
  out.append(bytes);
}

}  // namespace

std::string RecordTablePrefix(const std::string& prefix,
                              const std::string& table) {
  return absl::StrCat(prefix, "records/", table, "/");
}

std::string RecordTimeKey(const std::string& prefix, const std::string& table,
                          double at_unix_seconds) {
  return absl::StrCat(RecordTablePrefix(prefix, table),
                      Digits20(Micros(at_unix_seconds)));
}

std::string RecordKey(const std::string& prefix, const std::string& table,
                      double at_unix_seconds, const std::string& origin,
                      int64_t n) {
  return absl::StrCat(RecordTimeKey(prefix, table, at_unix_seconds), "/",
                      origin, "/", Digits20(n));
}

std::string EncodeRecord(double at_unix_seconds,
                         const std::vector<std::string>& fields) {
  char at[32];
  std::snprintf(at, sizeof(at), "%.6f", at_unix_seconds);
  std::string out;
  AppendField(out, at);
  for (const std::string& field : fields) AppendField(out, field);
  return out;
}

absl::StatusOr<store::SqliteStore::LogRow> DecodeRecord(
    const std::string& value) {
  std::vector<std::string> fields;
  size_t pos = 0;
  while (pos < value.size()) {
    if (value.size() - pos < 4) break;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(value[pos + i]))
           << (8 * i);
    }
    pos += 4;
    if (value.size() - pos < n) break;
    fields.push_back(value.substr(pos, n));
    pos += n;
  }
  store::SqliteStore::LogRow row;
  if (pos != value.size() || fields.empty() ||
      !absl::SimpleAtod(fields.front(), &row.at_unix_seconds)) {
    return absl::DataLossError("etcd store: a malformed record value");
  }
  row.fields.assign(fields.begin() + 1, fields.end());
  return row;
}

RecordTxn::RecordTxn(const etcd::ClientOptions& limits)
    : max_ops_(limits.max_txn_ops),
      max_bytes_(limits.max_request_bytes - etcd::kRaftEnvelopeBytes -
                 etcd::kTxnFramingBytes) {}

int64_t RecordTxn::PutBytes(const std::string& key, const std::string& value) {
  return static_cast<int64_t>(key.size() + value.size()) +
         etcd::kOpOverheadBytes;
}

bool RecordTxn::Fits(int64_t bytes) const {
  return txn_.success.size() + 1 <= static_cast<size_t>(max_ops_) &&
         bytes_ + bytes <= max_bytes_;
}

int64_t RecordTxn::OpBytes(const etcd::Op& op) {
  return PutBytes(op.key, op.value);
}

void RecordTxn::Add(std::string key, std::string value) {
  AddOp(etcd::Op::Put(std::move(key), std::move(value)));
}

void RecordTxn::AddOp(etcd::Op op) {
  bytes_ += OpBytes(op);
  txn_.success.push_back(std::move(op));
}

absl::Status RecordTxn::Send(etcd::Client& client) {
  if (txn_.success.empty()) return absl::OkStatus();
  absl::StatusOr<etcd::TxnResult> result = client.Txn(txn_);
  txn_.success.clear();
  bytes_ = 0;
  return result.status();
}

}  // namespace monta::etcd_store
