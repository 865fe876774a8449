#include "server/etcd_store/record_writer.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "server/etcd_store/records.h"
#include "server/store/sqlite_store.h"

namespace monta::etcd_store {
namespace {

using store::SqliteStore;

double UnixSeconds(absl::Time t) {
  return static_cast<double>(absl::ToUnixMicros(t)) * 1e-6;
}

double NowSeconds() { return UnixSeconds(absl::Now()); }

}  // namespace

RecordWriter::RecordWriter(etcd::Client* client, RecordWriterOptions options)
    : client_(client), options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

RecordWriter::~RecordWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void RecordWriter::RecordDecision(const monta::v1::StrategyRequest& request,
                                  const monta::v1::StrategyReply& reply,
                                  store::RecordDone stored) {
  Enqueue(SqliteStore::LogTableName(SqliteStore::LogTable::kDecisions),
          "decision", {request.SerializeAsString(), reply.SerializeAsString()},
          std::move(stored));
}

void RecordWriter::RecordVerification(const monta::v1::VerifyRequest& request,
                                      const monta::v1::VerifyReply& reply,
                                      store::RecordDone stored) {
  Enqueue(SqliteStore::LogTableName(SqliteStore::LogTable::kVerifications),
          "verification",
          {request.SerializeAsString(), reply.SerializeAsString()},
          std::move(stored));
}

void RecordWriter::RecordAudit(const store::AuditEntry& entry,
                               store::RecordDone stored) {
  Enqueue(SqliteStore::LogTableName(SqliteStore::LogTable::kAudit),
          "audit entry",
          {entry.identity, entry.action, entry.target, entry.detail},
          std::move(stored));
}

void RecordWriter::Enqueue(const char* table, const char* what,
                           const std::vector<std::string>& fields,
                           store::RecordDone stored) {
  const MonoTime called = std::chrono::steady_clock::now();
  const double at_unix_seconds = NowSeconds();
  std::string value = EncodeRecord(at_unix_seconds, fields);
  const char* refused = nullptr;
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    std::string key = RecordKey(options_.prefix, table, at_unix_seconds,
                                options_.origin, ++next_n_);
    const int64_t bytes = RecordTxn::PutBytes(key, value);
    const int64_t max_bytes = RecordTxn(client_->options()).max_bytes();
    if (bytes > max_bytes) {
      refused = "too_large";
      why = absl::ResourceExhaustedError(
          absl::StrCat("the ", what, " was not stored: its record of ", bytes,
                       " bytes exceeds one etcd request (", max_bytes, ")"));
    } else if (stopping_) {
      refused = "stopping";
      why = absl::UnavailableError(absl::StrCat(
          "the ", what, " was not stored: this replica is shutting down"));
    } else if (queue_.size() >= options_.max_queued_records ||
               queued_bytes_ + bytes > options_.max_queued_bytes) {
      refused = "queue_full";
      why = absl::UnavailableError(absl::StrCat(
          "the ", what,
          " was not stored: this replica's etcd record queue is full (",
          queue_.size(), " records, ", queued_bytes_,
          " bytes waiting); ask another replica"));
    } else {
      queue_.push_back(Pending{std::move(key), std::move(value), what, called,
                               MonoAfter(called, options_.commit_timeout),
                               std::move(stored)});
      queued_bytes_ += bytes;
      return;
    }
    ++stats_.refused;
  }
  if (options_.on_refused) options_.on_refused(refused);
  stored(why);
}

void RecordWriter::Run() {
  for (;;) {
    std::vector<Pending> batch;
    std::vector<Pending> expired;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      // Stopping: what is queued is still sent, each within its deadline.
      if (queue_.empty()) return;
      batch = TakeBatch(&expired);
    }
    if (!expired.empty()) {
      Refuse(std::move(expired), "not_stored",
             absl::DeadlineExceededError("its deadline passed in the queue"));
    }
    if (!batch.empty()) Commit(std::move(batch));
  }
}

std::vector<RecordWriter::Pending> RecordWriter::TakeBatch(
    std::vector<Pending>* expired) {
  const MonoTime now = std::chrono::steady_clock::now();
  RecordTxn txn(client_->options());
  std::vector<Pending> batch;
  while (!queue_.empty()) {
    Pending& front = queue_.front();
    const int64_t bytes = RecordTxn::PutBytes(front.key, front.value);
    if (front.deadline > now) {
      if (!txn.Fits(bytes)) break;
      txn.Add(front.key, front.value);  // counted only: Commit sends
      batch.push_back(std::move(front));
    } else {
      expired->push_back(std::move(front));
    }
    queued_bytes_ -= bytes;
    queue_.pop_front();
  }
  return batch;
}

void RecordWriter::Commit(std::vector<Pending> batch) {
  etcd::TxnRequest txn;
  MonoTime deadline = MonoTime::max();
  for (Pending& record : batch) {
    txn.success.push_back(
        etcd::Op::Put(std::move(record.key), std::move(record.value)));
    deadline = std::min(deadline, record.deadline);
  }
  Backoff retry(absl::Milliseconds(50), absl::Milliseconds(500));
  absl::Status sent;
  for (;;) {
    if (options_.before_send) options_.before_send();
    const MonoTime now = std::chrono::steady_clock::now();
    sent = client_
               ->Txn(txn, std::min(deadline,
                                   MonoAfter(now, options_.attempt_timeout)))
               .status();
    if (sent.ok()) break;
    {
      absl::MutexLock lock(&mu_);
      ++stats_.failed_txns;
    }
    if (options_.on_write_error) options_.on_write_error(sent);
    // A Txn etcd refused as such (too large, malformed) fails again.
    const bool transient =
        absl::IsUnavailable(sent) || absl::IsDeadlineExceeded(sent);
    const absl::Duration wait = retry.Next();
    if (!transient ||
        MonoAfter(std::chrono::steady_clock::now(), wait) >= deadline) {
      break;
    }
    absl::SleepFor(wait);
  }
  if (!sent.ok()) {
    std::cerr << "monta-planner: etcd records: " << batch.size()
              << " record(s) not stored within "
              << absl::FormatDuration(options_.commit_timeout) << ": "
              << sent.message() << " (their calls answered UNAVAILABLE)"
              << std::endl;
    Refuse(std::move(batch), "not_stored", sent);
    return;
  }
  const MonoTime landed = std::chrono::steady_clock::now();
  std::vector<double> commit_seconds;
  commit_seconds.reserve(batch.size());
  for (const Pending& record : batch) {
    commit_seconds.push_back(
        absl::ToDoubleSeconds(MonoSince(record.called, landed)));
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.txns;
    stats_.written += static_cast<int64_t>(batch.size());
  }
  if (options_.on_committed) options_.on_committed(commit_seconds);
  for (Pending& record : batch) record.stored(absl::OkStatus());
}

void RecordWriter::Refuse(std::vector<Pending> records,
                          const std::string& reason, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    stats_.refused += static_cast<int64_t>(records.size());
  }
  for (Pending& record : records) {
    if (options_.on_refused) options_.on_refused(reason);
    record.stored(absl::UnavailableError(
        absl::StrCat("the ", record.what, " was not stored in etcd within ",
                     absl::FormatDuration(options_.commit_timeout),
                     " (--record_commit_timeout_seconds): ", why.message())));
  }
}

absl::StatusOr<int64_t> RecordWriter::DeleteFirst(const std::string& key,
                                                  const std::string& range_end,
                                                  int64_t limit) {
  etcd::RangeRequest range;
  range.key = key;
  range.range_end = range_end;
  range.limit = limit;
  range.keys_only = true;
  absl::StatusOr<etcd::RangeResult> keys = client_->Range(range);
  if (!keys.ok()) return keys.status();
  if (keys->kvs.empty()) return 0;
  // [first, last] as one DeleteRange: etcd deletes only these (keys sort).
  absl::StatusOr<etcd::DeleteResult> deleted = client_->Delete(
      keys->kvs.front().key, keys->kvs.back().key + std::string(1, '\0'));
  if (!deleted.ok()) return deleted.status();
  return deleted->deleted;
}

absl::StatusOr<int64_t> RecordWriter::PruneDecisions(absl::Time older_than,
                                                     int64_t max_records) {
  const std::string table =
      SqliteStore::LogTableName(SqliteStore::LogTable::kDecisions);
  const std::string start = RecordTablePrefix(options_.prefix, table);
  const std::string end = etcd::PrefixEnd(start);
  const std::string cutoff =
      RecordTimeKey(options_.prefix, table, UnixSeconds(older_than));
  int64_t pruned = 0;
  int rounds = 0;
  for (; rounds < kPruneRounds; ++rounds) {
    absl::StatusOr<int64_t> n = DeleteFirst(start, cutoff, kPruneBatch);
    if (!n.ok()) return n.status();
    pruned += *n;
    if (*n < kPruneBatch) break;
  }
  etcd::RangeRequest count;
  count.key = start;
  count.range_end = end;
  count.count_only = true;
  absl::StatusOr<etcd::RangeResult> counted = client_->Range(count);
  if (!counted.ok()) return counted.status();
  int64_t excess = counted->count - std::max<int64_t>(max_records, 0);
  for (; excess > 0 && rounds < kPruneRounds; ++rounds) {
    absl::StatusOr<int64_t> n =
        DeleteFirst(start, end, std::min(excess, kPruneBatch));
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    pruned += *n;
    excess -= *n;
  }
  return pruned;
}

RecordWriter::Stats RecordWriter::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats = stats_;
  stats.queued = static_cast<int64_t>(queue_.size());
  return stats;
}

}  // namespace monta::etcd_store
