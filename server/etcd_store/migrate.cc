#include "server/etcd_store/migrate.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/registry/registry.h"

namespace monta::etcd_store {
namespace {

using store::SqliteStore;

// Mutations per Commit (EtcdStore splits a commit further at etcd's limits).
constexpr size_t kMutationsPerCommit = 64;
absl::StatusOr<int64_t> CountKeys(etcd::Client& client,
                                  const std::string& prefix) {
  etcd::RangeRequest request;
  request.key = prefix;
  request.range_end = etcd::PrefixEnd(prefix);
  request.count_only = true;
  absl::StatusOr<etcd::RangeResult> result = client.Range(request);
  if (!result.ok()) return result.status();
  return result->count;
}

// Refuses a prefix holding anything but the schema version.
absl::Status CheckEmpty(etcd::Client& client, const std::string& prefix) {
  absl::StatusOr<int64_t> all = CountKeys(client, prefix);
  if (!all.ok()) return all.status();
  absl::StatusOr<etcd::RangeResult> schema = client.Get(prefix + "schema");
  if (!schema.ok()) return schema.status();
  const int64_t others = *all - static_cast<int64_t>(schema->kvs.size());
  if (others == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "etcd prefix ", prefix, " is not empty (", others,
      " keys: a planner's state, running replicas' election keys or an "
      "earlier migration): refusing to copy into it; name an empty one with "
      "--etcd_prefix, or pass --migrate_into_nonempty to put the file's "
      "records over what is there"));
}

class Committer {
 public:
  Committer(EtcdStore& store, store::Fence fence)
      : store_(store), fence_(fence) {}
  absl::Status Add(store::Mutation mutation) {
    pending_.push_back(std::move(mutation));
    return pending_.size() >= kMutationsPerCommit ? Flush() : absl::OkStatus();
  }
  absl::Status Flush() {
    if (pending_.empty()) return absl::OkStatus();
    absl::StatusOr<store::Committed> committed =
        store_.Commit(fence_, pending_);
    pending_.clear();
    return committed.status();
  }

 private:
  EtcdStore& store_;
  const store::Fence fence_;
  std::vector<store::Mutation> pending_;
};

absl::Status CopyNodesAndCurves(SqliteStore& from, EtcdStore& to,
                                MigrationReport& report) {
  absl::StatusOr<store::Fence> fence = to.Lead();
  if (!fence.ok()) return fence.status();
  Committer committer(to, *fence);
  absl::StatusOr<store::Snapshot> snapshot = from.List();
  if (!snapshot.ok()) return snapshot.status();
  report.kinds.push_back(KindCount{"nodes"});
  for (monta::v1::NodeInfo& node : snapshot->nodes) {
    ++report.kinds.back().read;
    store::Mutation m;
    m.kind = store::Mutation::Kind::kNode;
    m.node = std::move(node);
    if (absl::Status s = committer.Add(std::move(m)); !s.ok()) return s;
  }
  if (absl::Status s = committer.Flush(); !s.ok()) return s;
  // Rows per measurement first: only the newest curve_history are sent.
  std::map<std::string, int64_t> rows;
  absl::Status counted = from.ForEachCurve([&](monta::v1::BandwidthCurve c) {
    ++rows[registry::CurveKey(c)];
    return absl::OkStatus();
  });
  if (!counted.ok()) return counted;
  report.kinds.push_back(KindCount{"curves"});
  KindCount& curves = report.kinds.back();
  std::map<std::string, int64_t> seen;
  absl::Status copied = from.ForEachCurve([&](monta::v1::BandwidthCurve c) {
    const std::string key = registry::CurveKey(c);
    ++curves.read;
    if (rows[key] - seen[key]++ > to.options().curve_history) {
      ++curves.not_copied;
      return absl::OkStatus();
    }
    store::Mutation m;
    m.kind = store::Mutation::Kind::kCurve;
    m.curve = std::move(c);
    return committer.Add(std::move(m));
  });
  if (!copied.ok()) return copied;
  return committer.Flush();
}

// The plan knowledge (calibrations, verified replies) as it is, record by
// record, under the store's fence.
absl::Status CopyKnowledge(SqliteStore& from, EtcdStore& to,
                           MigrationReport& report) {
  absl::StatusOr<store::KnowledgeList> listed = from.ListKnowledge();
  if (!listed.ok()) return listed.status();
  report.kinds.push_back(KindCount{"knowledge"});
  report.kinds.back().read = static_cast<int64_t>(listed->records.size());
  store::KnowledgeWrites writes;
  for (store::KnowledgeRecord& r : listed->records) {
    writes[r.id] = std::move(r.value);
  }
  absl::StatusOr<store::Fence> fence = to.Lead();
  if (!fence.ok()) return fence.status();
  return to.WriteKnowledge(*fence, writes);
}

absl::Status CopyRecords(SqliteStore& from, etcd::Client& client,
                         const std::string& prefix, SqliteStore::LogTable table,
                         KindCount& count) {
  const std::string name = SqliteStore::LogTableName(table);
  RecordTxn txn(client.options());
  absl::Status copied =
      from.ForEachLogRow(table, [&](SqliteStore::LogRow row) -> absl::Status {
        ++count.read;
        std::string key =
            RecordKey(prefix, name, row.at_unix_seconds, kSqliteOrigin, row.id);
        std::string value = EncodeRecord(row.at_unix_seconds, row.fields);
        const int64_t size = RecordTxn::PutBytes(key, value);
        if (size > txn.max_bytes()) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, " row ", row.id, ": ", size,
              " bytes, larger than one etcd request (", txn.max_bytes(), ")"));
        }
        if (!txn.Fits(size)) {
          if (absl::Status s = txn.Send(client); !s.ok()) return s;
        }
        txn.Add(std::move(key), std::move(value));
        return absl::OkStatus();
      });
  if (!copied.ok()) return copied;
  return txn.Send(client);
}

}  // namespace

std::string MigrationReport::Summary() const {
  std::string out;
  for (const KindCount& k : kinds) {
    absl::StrAppend(&out, k.kind, ": read ", k.read, ", in etcd ", k.written);
    if (k.not_copied > 0) {
      absl::StrAppend(
          &out, " (", k.not_copied,
          " older rows not copied: the etcd store keeps the newest ",
          curve_history, " of each measurement)");
    }
    out.push_back('\n');
  }
  return out;
}

absl::StatusOr<MigrationReport> MigrateFromSqlite(
    store::SqliteStore& from, etcd::Client& client,
    const MigrationOptions& options) {
  if (!options.into_nonempty) {
    if (absl::Status s = CheckEmpty(client, options.store.prefix); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::unique_ptr<EtcdStore>> to =
      EtcdStore::Open(&client, options.store);
  if (!to.ok()) return to.status();
  MigrationReport report;
  report.curve_history = options.store.curve_history;
  if (absl::Status s = CopyNodesAndCurves(from, **to, report); !s.ok()) {
    return s;
  }
  if (absl::Status s = CopyKnowledge(from, **to, report); !s.ok()) return s;
  const std::string& prefix = options.store.prefix;
  for (auto table :
       {SqliteStore::LogTable::kDecisions,
        SqliteStore::LogTable::kVerifications, SqliteStore::LogTable::kAudit}) {
    report.kinds.push_back(KindCount{table == SqliteStore::LogTable::kAudit
                                         ? "audit"
                                         : SqliteStore::LogTableName(table)});
    if (absl::Status s =
            CopyRecords(from, client, prefix, table, report.kinds.back());
        !s.ok()) {
      return s;
    }
  }
  for (KindCount& k : report.kinds) {
    const std::string table = k.kind == "audit" ? "audit_log" : k.kind;
    absl::StatusOr<int64_t> in_etcd = CountKeys(
        client, k.kind == "nodes" || k.kind == "curves" || k.kind == "knowledge"
                    ? absl::StrCat(prefix, k.kind, "/")
                    : RecordTablePrefix(prefix, table));
    if (!in_etcd.ok()) return in_etcd.status();
    k.written = *in_etcd;
  }
  return report;
}

}  // namespace monta::etcd_store
