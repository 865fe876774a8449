#include "server/etcd_store/record_writer.h"

#include <algorithm>
#include <iostream>
#include <vector>

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
                                  const monta::v1::StrategyReply& reply) {
  Enqueue(SqliteStore::LogTableName(SqliteStore::LogTable::kDecisions),
          NowSeconds(),
          {request.SerializeAsString(), reply.SerializeAsString()});
}

void RecordWriter::RecordVerification(const monta::v1::VerifyRequest& request,
                                      const monta::v1::VerifyReply& reply) {
  Enqueue(SqliteStore::LogTableName(SqliteStore::LogTable::kVerifications),
          NowSeconds(),
          {request.SerializeAsString(), reply.SerializeAsString()});
}

void RecordWriter::RecordAudit(const store::AuditEntry& entry) {
  Enqueue(SqliteStore::LogTableName(SqliteStore::LogTable::kAudit),
          NowSeconds(),
          {entry.identity, entry.action, entry.target, entry.detail});
}

void RecordWriter::Enqueue(const char* table, double at_unix_seconds,
                           const std::vector<std::string>& fields) {
  std::string value = EncodeRecord(at_unix_seconds, fields);
  const char* dropped = nullptr;
  {
    absl::MutexLock lock(&mu_);
    std::string key = RecordKey(options_.prefix, table, at_unix_seconds,
                                options_.origin, ++next_n_);
    const int64_t bytes = RecordTxn::PutBytes(key, value);
    if (bytes > RecordTxn(client_->options()).max_bytes()) {
      dropped = "too_large";
    } else if (queue_.size() >= options_.max_queued_records ||
               queued_bytes_ + bytes > options_.max_queued_bytes) {
      dropped = "queue_full";
    } else {
      queue_.push_back(Pending{std::move(key), std::move(value)});
      queued_bytes_ += bytes;
      return;
    }
    ++stats_.dropped;
  }
  if (options_.on_dropped) options_.on_dropped(dropped);
}

void RecordWriter::Run() {
  const size_t batch = static_cast<size_t>(client_->options().max_txn_ops);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || queue_.size() >= batch;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.flush_interval);
    }
    // Logged and counted by Flush; the records stay queued.
    (void)Flush();
    absl::MutexLock lock(&mu_);
    // One last flush was tried; what it could not send is lost with the
    // process.
    if (stopping_) return;
  }
}

absl::Status RecordWriter::Flush() {
  absl::MutexLock send_lock(&send_mu_);
  absl::Status sent = SendQueued();
  if (!sent.ok()) {
    std::cerr << "monta-planner: etcd records: " << sent.message()
              << " (kept, sent again at the next flush)" << std::endl;
    if (options_.on_write_error) options_.on_write_error(sent);
  }
  return sent;
}

absl::Status RecordWriter::SendQueued() {
  for (;;) {
    RecordTxn txn(client_->options());
    std::vector<Pending> taken;
    {
      absl::MutexLock lock(&mu_);
      while (!queue_.empty()) {
        const Pending& front = queue_.front();
        const int64_t bytes = RecordTxn::PutBytes(front.key, front.value);
        if (!txn.Fits(bytes)) break;
        txn.Add(front.key, front.value);
        queued_bytes_ -= bytes;
        taken.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (taken.empty()) return absl::OkStatus();
    absl::Status sent = txn.Send(*client_);
    absl::MutexLock lock(&mu_);
    if (!sent.ok()) {
      ++stats_.failed_txns;
      // Back to the front, in order: the next flush sends them first.
      for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
        queued_bytes_ += RecordTxn::PutBytes(it->key, it->value);
        queue_.push_front(std::move(*it));
      }
      return sent;
    }
    ++stats_.txns;
    stats_.written += static_cast<int64_t>(taken.size());
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
