#include "server/etcd_store/etcd_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "server/etcd/watch.h"

namespace monta::etcd_store {

using store::ChangeWatch;
using store::Committed;
using store::Event;
using store::Fence;
using store::Mutation;
using store::Snapshot;

namespace {

constexpr size_t kMaxPrefixBytes = 128;

// At most this much of a key goes into an error message.
std::string Shown(const std::string& key) {
  return key.size() <= 160 ? key : key.substr(0, 160) + "...";
}

void AppendBytes(std::string& out, const std::string& bytes) {
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(bytes);
}

class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool Bytes(std::string* out) {
    if (data_.size() - pos_ < 4) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(data_[pos_ + i]))
           << (8 * i);
    }
    pos_ += 4;
    if (data_.size() - pos_ < n) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Number(uint32_t* out) {
    std::string bytes;
    if (!Bytes(&bytes) || bytes.size() != 4) return false;
    *out = 0;
    for (int i = 0; i < 4; ++i) {
      *out |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]))
              << (8 * i);
    }
    return true;
  }
  bool done() const { return pos_ == data_.size(); }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

std::string NumberBytes(uint32_t n) {
  std::string out;
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

bool Names(const monta::v1::BandwidthCurve& curve, const std::string& node) {
  return std::find(curve.nodes().begin(), curve.nodes().end(), node) !=
         curve.nodes().end();
}

absl::Status Fenced(int64_t epoch, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("etcd store: fenced (epoch ", epoch, " ", why, ")"));
}

}  // namespace

bool IsFenced(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StartsWith(status.message(), "etcd store: fenced");
}

std::string EncodeMutations(absl::Span<const Mutation> mutations) {
  std::string out;
  AppendBytes(out, NumberBytes(static_cast<uint32_t>(mutations.size())));
  for (const Mutation& m : mutations) {
    AppendBytes(out, NumberBytes(static_cast<uint32_t>(m.kind)));
    switch (m.kind) {
      case Mutation::Kind::kNode:
        AppendBytes(out, m.node.SerializeAsString());
        break;
      case Mutation::Kind::kCurve:
        AppendBytes(out, m.curve.SerializeAsString());
        break;
      case Mutation::Kind::kNodeRemoved:
        AppendBytes(out, m.node_name);
        break;
      case Mutation::Kind::kCurvesForgotten:
        AppendBytes(out, m.forget.task_id);
        AppendBytes(out, m.forget.node_name);
        AppendBytes(out,
                    NumberBytes(static_cast<uint32_t>(m.measurements.size())));
        for (const std::string& key : m.measurements) AppendBytes(out, key);
        break;
    }
  }
  return out;
}

absl::StatusOr<std::vector<Mutation>> DecodeMutations(const std::string& data) {
  const absl::Status malformed =
      absl::DataLossError("etcd store: a malformed commit log value");
  Reader reader(data);
  uint32_t count = 0;
  if (!reader.Number(&count) || count > data.size()) return malformed;
  std::vector<Mutation> out(count);
  for (Mutation& m : out) {
    uint32_t kind = 0;
    std::string bytes;
    if (!reader.Number(&kind)) return malformed;
    switch (kind) {
      case static_cast<uint32_t>(Mutation::Kind::kNode):
        m.kind = Mutation::Kind::kNode;
        if (!reader.Bytes(&bytes) || !m.node.ParseFromString(bytes)) {
          return malformed;
        }
        break;
      case static_cast<uint32_t>(Mutation::Kind::kCurve):
        m.kind = Mutation::Kind::kCurve;
        if (!reader.Bytes(&bytes) || !m.curve.ParseFromString(bytes)) {
          return malformed;
        }
        break;
      case static_cast<uint32_t>(Mutation::Kind::kNodeRemoved):
        m.kind = Mutation::Kind::kNodeRemoved;
        if (!reader.Bytes(&m.node_name)) return malformed;
        break;
      case static_cast<uint32_t>(Mutation::Kind::kCurvesForgotten): {
        m.kind = Mutation::Kind::kCurvesForgotten;
        uint32_t n = 0;
        if (!reader.Bytes(&m.forget.task_id) ||
            !reader.Bytes(&m.forget.node_name) || !reader.Number(&n) ||
            n > data.size()) {
          return malformed;
        }
        m.measurements.resize(n);
        for (std::string& key : m.measurements) {
          if (!reader.Bytes(&key)) return malformed;
        }
        break;
      }
      default:
        return malformed;
    }
  }
  if (!reader.done()) return malformed;
  return out;
}

// The etcd Txns of one Commit: the net puts and deletes of its mutations,
// split at etcd's limits (see the header).
namespace {

// The commits of P log after a revision, as ChangeWatch.
// The next batch of `watch` with something `convert` keeps, waiting up to
// `timeout` on the monotonic clock (a wall clock step neither ends nor
// stretches the wait): DEADLINE_EXCEEDED when none came, OUT_OF_RANGE ("list
// again") when etcd compacted the history the watch needs.
template <typename T>
absl::StatusOr<std::vector<T>> NextOf(
    etcd::Watch& watch, absl::Duration timeout, absl::string_view what,
    const std::function<absl::Status(const etcd::Event&, std::vector<T>&)>&
        convert) {
  const MonoTime deadline =
      MonoAfter(std::chrono::steady_clock::now(), timeout);
  while (true) {
    absl::StatusOr<etcd::WatchBatch> batch = watch.Next(
        std::max(MonoSince(std::chrono::steady_clock::now(), deadline),
                 absl::ZeroDuration()));
    if (!batch.ok()) {
      if (batch.status().code() == absl::StatusCode::kFailedPrecondition) {
        return absl::OutOfRangeError(
            absl::StrCat(what,
                         ": the history it needs is compacted: list "
                         "again (",
                         batch.status().message(), ")"));
      }
      return batch.status();
    }
    if (batch->compact_revision > 0) {
      return absl::OutOfRangeError(
          absl::StrCat(what, ": etcd compacted through revision ",
                       batch->compact_revision, ": list again"));
    }
    std::vector<T> out;
    for (const etcd::Event& e : batch->events) {
      if (absl::Status s = convert(e, out); !s.ok()) return s;
    }
    if (!out.empty()) return out;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": nothing new"));
    }
  }
}

class EtcdChangeWatch : public ChangeWatch {
 public:
  explicit EtcdChangeWatch(std::unique_ptr<etcd::Watch> watch)
      : watch_(std::move(watch)) {}

  absl::StatusOr<std::vector<Event>> Next(absl::Duration timeout) override {
    return NextOf<Event>(
        *watch_, timeout, "etcd store watch",
        [](const etcd::Event& e, std::vector<Event>& out) -> absl::Status {
          if (e.type != etcd::Event::Type::kPut) return absl::OkStatus();
          absl::StatusOr<std::vector<Mutation>> mutations =
              DecodeMutations(e.kv.value);
          if (!mutations.ok()) {
            return absl::DataLossError(
                absl::StrCat(mutations.status().message(), " at revision ",
                             e.kv.mod_revision));
          }
          out.push_back(Event{e.kv.mod_revision, *std::move(mutations)});
          return absl::OkStatus();
        });
  }

 private:
  std::unique_ptr<etcd::Watch> watch_;
};

// The puts and deletes of P knowledge/ as knowledge changes (ids without the
// key's directory).
class EtcdKnowledgeWatch : public store::KnowledgeWatch {
 public:
  EtcdKnowledgeWatch(std::unique_ptr<etcd::Watch> watch, std::string dir)
      : watch_(std::move(watch)), dir_(std::move(dir)) {}

  absl::StatusOr<std::vector<store::KnowledgeChange>> Next(
      absl::Duration timeout) override {
    return NextOf<store::KnowledgeChange>(
        *watch_, timeout, "etcd knowledge watch",
        [this](const etcd::Event& e,
               std::vector<store::KnowledgeChange>& out) -> absl::Status {
          if (!absl::StartsWith(e.kv.key, dir_)) return absl::OkStatus();
          store::KnowledgeChange change;
          change.id = e.kv.key.substr(dir_.size());
          if (e.type == etcd::Event::Type::kPut) change.value = e.kv.value;
          out.push_back(std::move(change));
          return absl::OkStatus();
        });
  }

 private:
  std::unique_ptr<etcd::Watch> watch_;
  const std::string dir_;
};

}  // namespace

EtcdStore::EtcdStore(etcd::Client* client, EtcdStoreOptions options)
    : client_(client), options_(std::move(options)) {}

std::string EtcdStore::FormatVersion(SchemaVersion version) {
  return absl::StrCat(version.major, ".", version.minor);
}

absl::StatusOr<SchemaVersion> EtcdStore::ParseVersion(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, '.');
  SchemaVersion v;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &v.major) ||
      !absl::SimpleAtoi(parts[1], &v.minor) || v.major < 1 || v.minor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema version: expected <major>.<minor>, got \"",
                     absl::CHexEscape(Shown(text)), "\""));
  }
  return v;
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(
    etcd::Client* client, EtcdStoreOptions options) {
  const std::string& p = options.prefix;
  if (p.size() < 2 || p.size() > kMaxPrefixBytes || p.front() != '/' ||
      p.back() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd store prefix: expected 2..", kMaxPrefixBytes,
                     " bytes starting and ending with '/', got \"",
                     absl::CHexEscape(Shown(p)), "\""));
  }
  if (options.curve_history < 1 || options.curve_history > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd store curve_history: expected 1..64, got ",
                     options.curve_history));
  }
  if (options.fence_key.empty() != (options.leader_epoch == nullptr)) {
    return absl::InvalidArgumentError(
        "etcd store: fence_key and leader_epoch go together");
  }
  std::unique_ptr<EtcdStore> store(new EtcdStore(client, std::move(options)));
  if (absl::Status s = store->CheckSchema(); !s.ok()) return s;
  return store;
}

absl::Status EtcdStore::CheckSchema() {
  const std::string key = options_.prefix + "schema";
  const std::string ours = FormatVersion(options_.schema);
  etcd::TxnRequest txn;
  txn.compares.push_back(
      etcd::Compare::CreateRevision(key, etcd::Compare::Result::kEqual, 0));
  txn.success.push_back(etcd::Op::Put(key, ours));
  txn.failure.push_back(etcd::Op::Get(key));
  absl::StatusOr<etcd::TxnResult> result = client_->Txn(txn);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat("etcd store ", options_.prefix,
                                     ": reading the schema version: ",
                                     result.status().message()));
  }
  if (result->succeeded) return absl::OkStatus();  // an empty store: ours
  if (result->results.empty() || result->results[0].range.kvs.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "etcd store ", options_.prefix,
        ": the schema version key vanished while read: try again"));
  }
  absl::StatusOr<SchemaVersion> stored =
      ParseVersion(result->results[0].range.kvs[0].value);
  if (!stored.ok()) {
    return absl::DataLossError(
        absl::StrCat("etcd store ", key, ": ", stored.status().message()));
  }
  if (stored->major > options_.schema.major) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd store ", options_.prefix, ": its schema version ",
        FormatVersion(*stored), " is newer than this planner's ", ours,
        " (another major version): run a planner that knows it"));
  }
  if (stored->major < options_.schema.major) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd store ", options_.prefix, ": its schema version ",
        FormatVersion(*stored), " is older than this planner's ", ours,
        " (another major version, and no migration from it): use a fresh "
        "prefix or a planner of major ",
        stored->major));
  }
  return absl::OkStatus();
}

std::string EtcdStore::NodeKey(const std::string& name) const {
  return absl::StrCat(options_.prefix, "nodes/", name);
}

std::string EtcdStore::CurveKey(const std::string& measurement,
                                uint64_t seq) const {
  char digits[24];
  std::snprintf(digits, sizeof(digits), "%020llu",
                static_cast<unsigned long long>(seq));
  return absl::StrCat(options_.prefix, "curves/",
                      absl::BytesToHexString(measurement), "/", digits);
}

void EtcdStore::SetWriteListener(WriteListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

int EtcdStore::last_commit_txns() const {
  absl::MutexLock lock(&mu_);
  return last_commit_txns_;
}

namespace {

// Parses one stored key of the prefix into `nodes` / `curves`; keys of
// other kinds (schema, writer, log) are skipped.
absl::Status ParseKey(
    const std::string& prefix, const etcd::KeyValue& kv,
    std::map<std::string, std::string>& nodes,
    std::map<std::string, std::map<uint64_t, monta::v1::BandwidthCurve>>&
        curves) {
  absl::string_view rest(kv.key);
  rest.remove_prefix(prefix.size());
  if (absl::ConsumePrefix(&rest, "nodes/")) {
    monta::v1::NodeInfo node;
    if (!node.ParseFromString(kv.value)) {
      return absl::DataLossError(
          absl::StrCat("etcd store: ", Shown(kv.key), ": not a NodeInfo"));
    }
    nodes[kv.key] = kv.value;
    return absl::OkStatus();
  }
  if (!absl::ConsumePrefix(&rest, "curves/")) return absl::OkStatus();
  monta::v1::BandwidthCurve curve;
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos || !curve.ParseFromString(kv.value)) {
    return absl::DataLossError(
        absl::StrCat("etcd store: ", Shown(kv.key), ": not a stored curve"));
  }
  const std::string measurement =
      absl::HexStringToBytes(std::string(rest.substr(0, slash)));
  curves[measurement][curve.sequence()] = std::move(curve);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> EtcdStore::ReadInto(int64_t revision,
                                            Mirror& out) const {
  // The curves, then the nodes at the curves' revision: the other keys of
  // the prefix (records/, the election's) are not the registry's.
  size_t keys = 0;
  int64_t listed = revision;
  for (const char* kind : {"curves/", "nodes/"}) {
    etcd::ListRequest request;
    request.key = options_.prefix + kind;
    request.range_end = etcd::PrefixEnd(request.key);
    request.revision = listed;
    absl::StatusOr<int64_t> at = client_->ListPages(
        request, [&](std::vector<etcd::KeyValue> page) -> absl::Status {
          keys += page.size();
          if (keys > options_.max_keys) {
            return absl::ResourceExhaustedError(
                absl::StrCat("etcd store ", options_.prefix, ": more than ",
                             options_.max_keys, " keys"));
          }
          for (const etcd::KeyValue& kv : page) {
            if (absl::Status s =
                    ParseKey(options_.prefix, kv, out.nodes, out.curves);
                !s.ok()) {
              return s;
            }
          }
          return absl::OkStatus();
        });
    if (!at.ok()) return at.status();
    listed = *at;
  }
  return listed;
}

absl::StatusOr<Snapshot> EtcdStore::List(int64_t revision) {
  Mirror read;
  absl::StatusOr<int64_t> listed = ReadInto(revision, read);
  if (!listed.ok()) {
    if (listed.status().code() == absl::StatusCode::kOutOfRange) {
      return absl::OutOfRangeError(absl::StrCat(
          "etcd store: revision ", revision,
          " is not held (compacted, or not reached yet): list the newest (",
          listed.status().message(), ")"));
    }
    return listed.status();
  }
  Snapshot snapshot;
  snapshot.revision = *listed;
  for (const auto& [key, value] : read.nodes) {
    snapshot.nodes.emplace_back();
    snapshot.nodes.back().ParseFromString(value);
  }
  for (const auto& [measurement, history] : read.curves) {
    if (history.empty()) continue;
    snapshot.curves.push_back(history.rbegin()->second);
    snapshot.max_curve_sequence = std::max<uint64_t>(
        snapshot.max_curve_sequence, history.rbegin()->first);
  }
  std::sort(
      snapshot.curves.begin(), snapshot.curves.end(),
      [](const auto& a, const auto& b) { return a.sequence() < b.sequence(); });
  return snapshot;
}

absl::Status EtcdStore::LoadMirrorLocked() {
  mirror_ = Mirror{};
  absl::StatusOr<int64_t> listed = ReadInto(0, mirror_);
  if (!listed.ok()) {
    mirror_ = Mirror{};
    return listed.status();
  }
  mirror_.valid = true;
  return absl::OkStatus();
}

absl::StatusOr<Fence> EtcdStore::Lead() {
  Fence fence;
  if (options_.leader_epoch) {
    absl::StatusOr<int64_t> epoch = options_.leader_epoch();
    if (!epoch.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("etcd store: this replica does not lead: ",
                       epoch.status().message()));
    }
    fence.epoch = *epoch;
  } else {
    absl::StatusOr<etcd::PutResult> put =
        client_->Put(options_.prefix + "writer", "lead");
    if (!put.ok()) return put.status();
    fence.epoch = put->revision;
  }
  // What the previous fence's commits left: loaded again by WarmUp or by
  // the first Commit under this fence, when nobody else writes.
  absl::MutexLock lock(&mu_);
  mirror_ = Mirror{};
  return fence;
}

absl::Status EtcdStore::WarmUp() {
  absl::MutexLock lock(&mu_);
  if (mirror_.valid) return absl::OkStatus();
  return LoadMirrorLocked();
}

etcd::Compare EtcdStore::FenceCompare(const Fence& fence) const {
  if (!options_.fence_key.empty()) {
    return etcd::Compare::CreateRevision(
        options_.fence_key, etcd::Compare::Result::kEqual, fence.epoch);
  }
  return etcd::Compare::ModRevision(options_.prefix + "writer",
                                    etcd::Compare::Result::kEqual, fence.epoch);
}

void EtcdStore::DeleteCurvesLocked(
    const std::function<bool(const monta::v1::BandwidthCurve&)>& which,
    TxnBatch& batch) {
  for (auto m = mirror_.curves.begin(); m != mirror_.curves.end();) {
    for (auto c = m->second.begin(); c != m->second.end();) {
      if (which(c->second)) {
        batch.Delete(CurveKey(m->first, c->first));
        c = m->second.erase(c);
      } else {
        ++c;
      }
    }
    m = m->second.empty() ? mirror_.curves.erase(m) : std::next(m);
  }
}

absl::Status EtcdStore::Apply(
    const Mutation& mutation, TxnBatch& batch,
    std::vector<monta::v1::BandwidthCurve>* restored) {
  switch (mutation.kind) {
    case Mutation::Kind::kNode: {
      monta::v1::NodeInfo node = mutation.node;
      node.clear_curves();
      std::string value = node.SerializeAsString();
      const std::string key = NodeKey(node.name());
      auto it = mirror_.nodes.find(key);
      // Written on change only.
      if (it != mirror_.nodes.end() && it->second == value) break;
      mirror_.nodes[key] = value;
      batch.Put(key, std::move(value));
      break;
    }
    case Mutation::Kind::kCurve: {
      const std::string measurement = registry::CurveKey(mutation.curve);
      auto& history = mirror_.curves[measurement];
      history[mutation.curve.sequence()] = mutation.curve;
      batch.Put(CurveKey(measurement, mutation.curve.sequence()),
                mutation.curve.SerializeAsString());
      while (history.size() > static_cast<size_t>(options_.curve_history)) {
        batch.Delete(CurveKey(measurement, history.begin()->first));
        history.erase(history.begin());
      }
      break;
    }
    case Mutation::Kind::kNodeRemoved: {
      const std::string key = NodeKey(mutation.node_name);
      if (mirror_.nodes.erase(key) > 0) batch.Delete(key);
      DeleteCurvesLocked(
          [&](const auto& c) { return Names(c, mutation.node_name); }, batch);
      break;
    }
    case Mutation::Kind::kCurvesForgotten: {
      const registry::ForgetSelector& f = mutation.forget;
      DeleteCurvesLocked(
          [&](const auto& c) {
            return f.task_id.empty() ? Names(c, f.node_name)
                                     : c.task_id() == f.task_id;
          },
          batch);
      for (const std::string& measurement : mutation.measurements) {
        auto it = mirror_.curves.find(measurement);
        if (it != mirror_.curves.end() && !it->second.empty()) {
          restored->push_back(it->second.rbegin()->second);
        }
      }
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Committed> EtcdStore::Commit(
    const Fence& fence, const std::vector<Mutation>& mutations) {
  if (mutations.empty()) {
    return absl::InvalidArgumentError("mutations: expected at least one");
  }
  for (size_t i = 0; i < mutations.size(); ++i) {
    if (absl::Status s = store::ValidateMutation(mutations[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutations[", i, "]: ", s.message()));
    }
  }
  if (fence.epoch <= 0) return Fenced(fence.epoch, "was never handed out");
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Committed> committed = CommitLocked(fence, mutations);
  // The mirror is what etcd holds only after a commit that landed whole.
  if (!committed.ok()) {
    mirror_ = Mirror{};
    std::cerr << "monta-planner: etcd store " << options_.prefix
              << ": a commit of " << mutations.size()
              << " changes failed: " << committed.status() << std::endl;
  }
  if (listener_ && (!committed.ok() || failing_)) {
    listener_(registry::ChangeOperation(mutations[0].kind), committed.status());
  }
  failing_ = !committed.ok();
  return committed;
}

absl::StatusOr<Committed> EtcdStore::CommitLocked(
    const Fence& fence, const std::vector<Mutation>& mutations) {
  if (!mirror_.valid) {
    if (absl::Status s = LoadMirrorLocked(); !s.ok()) return s;
  }
  const etcd::ClientOptions& limits = client_->options();
  TxnBatch batch(static_cast<size_t>(limits.max_txn_ops),
                 limits.max_request_bytes - etcd::kRaftEnvelopeBytes -
                     etcd::kTxnFramingBytes);
  Committed committed;
  for (size_t i = 0; i < mutations.size(); ++i) {
    if (absl::Status s = Apply(mutations[i], batch, &committed.restored);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = batch.EndMutation(mutations[i], i); !s.ok()) return s;
  }
  std::vector<TxnBatch::Part> parts = batch.Finish();
  const etcd::Compare compare = FenceCompare(fence);
  for (size_t i = 0; i < parts.size(); ++i) {
    etcd::TxnRequest txn;
    txn.compares.push_back(compare);
    txn.success = std::move(parts[i].ops);
    if (!parts[i].mutations.empty()) {
      txn.success.push_back(etcd::Op::Put(options_.prefix + "log",
                                          EncodeMutations(parts[i].mutations)));
    }
    const std::string landed = absl::StrCat(i, " of ", parts.size(),
                                            " etcd Txns of this commit landed");
    absl::StatusOr<etcd::TxnResult> result = client_->Txn(txn);
    if (!result.ok()) {
      return absl::Status(
          result.status().code(),
          absl::StrCat("etcd store commit: ", result.status().message(), " (",
                       landed, ")"));
    }
    if (!result->succeeded) {
      return Fenced(fence.epoch, absl::StrCat("is not the newest: ", landed));
    }
    committed.revision = result->revision;
  }
  last_commit_txns_ = static_cast<int>(parts.size());
  return committed;
}

absl::StatusOr<int64_t> EtcdStore::NewestRevision() {
  etcd::RangeRequest request;
  request.key = options_.prefix + "log";
  request.keys_only = true;
  absl::StatusOr<etcd::RangeResult> log = client_->Range(request);
  if (!log.ok()) return log.status();
  return log->kvs.empty() ? 0 : log->kvs.front().mod_revision;
}

absl::StatusOr<std::unique_ptr<ChangeWatch>> EtcdStore::Watch(
    int64_t after_revision) {
  if (after_revision < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watch after_revision: expected >= 0, got ", after_revision));
  }
  etcd::WatchOptions options;
  options.key = options_.prefix + "log";
  options.start_revision = after_revision + 1;
  absl::StatusOr<std::unique_ptr<etcd::Watch>> watch =
      client_->OpenWatch(options);
  if (!watch.ok()) return watch.status();
  return std::unique_ptr<ChangeWatch>(new EtcdChangeWatch(*std::move(watch)));
}

absl::Status EtcdStore::WriteTasks(const Fence& fence,
                                   const store::TaskWrites& writes) {
  if (absl::Status s = store::ValidateTaskWrites(writes); !s.ok()) return s;
  return WriteRecords(fence, "tasks/", writes, "task");
}

absl::Status EtcdStore::WriteKnowledge(const Fence& fence,
                                       const store::KnowledgeWrites& writes) {
  if (absl::Status s = store::ValidateKnowledgeWrites(writes); !s.ok()) {
    return s;
  }
  return WriteRecords(fence, "knowledge/", writes, "knowledge");
}

absl::Status EtcdStore::WriteRecords(const Fence& fence, const std::string& dir,
                                     const store::RecordWrites& writes,
                                     const std::string& operation) {
  if (writes.empty()) return absl::OkStatus();
  if (fence.epoch <= 0) return Fenced(fence.epoch, "was never handed out");
  absl::MutexLock lock(&mu_);
  absl::Status written = WriteRecordsLocked(fence, dir, writes);
  if (!written.ok()) {
    std::cerr << "monta-planner: etcd store " << options_.prefix << ": writing "
              << writes.size() << " " << operation
              << " records failed: " << written << std::endl;
  }
  if (listener_ && (!written.ok() || failing_)) listener_(operation, written);
  failing_ = !written.ok();
  return written;
}

absl::Status EtcdStore::WriteRecordsLocked(const Fence& fence,
                                           const std::string& dir,
                                           const store::RecordWrites& writes) {
  const etcd::ClientOptions& limits = client_->options();
  const size_t max_ops = static_cast<size_t>(limits.max_txn_ops);
  const int64_t max_bytes = limits.max_request_bytes -
                            etcd::kRaftEnvelopeBytes - etcd::kTxnFramingBytes;
  const etcd::Compare compare = FenceCompare(fence);
  std::vector<etcd::TxnRequest> txns(1);
  int64_t bytes = 0;
  for (const auto& [id, record] : writes) {
    const std::string key = absl::StrCat(options_.prefix, dir, id);
    const int64_t op_bytes = static_cast<int64_t>(
        key.size() + (record.has_value() ? record->size() : 0) +
        etcd::kOpOverheadBytes);
    if (!txns.back().success.empty() &&
        (txns.back().success.size() + 1 > max_ops ||
         bytes + op_bytes > max_bytes)) {
      txns.emplace_back();
      bytes = 0;
    }
    txns.back().success.push_back(record.has_value()
                                      ? etcd::Op::Put(key, *record)
                                      : etcd::Op::Delete(key));
    bytes += op_bytes;
  }
  for (size_t i = 0; i < txns.size(); ++i) {
    txns[i].compares.push_back(compare);
    const std::string landed =
        absl::StrCat(i, " of ", txns.size(), " etcd Txns of this write landed");
    absl::StatusOr<etcd::TxnResult> result = client_->Txn(txns[i]);
    if (!result.ok()) {
      return absl::Status(
          result.status().code(),
          absl::StrCat("etcd store write of ", dir, ": ",
                       result.status().message(), " (", landed, ")"));
    }
    if (!result->succeeded) {
      return Fenced(fence.epoch, absl::StrCat("is not the newest: ", landed));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<store::KnowledgeList> EtcdStore::ListRecords(
    const std::string& dir) {
  const std::string prefix = absl::StrCat(options_.prefix, dir);
  etcd::ListRequest request;
  request.key = prefix;
  request.range_end = etcd::PrefixEnd(prefix);
  store::KnowledgeList list;
  absl::StatusOr<int64_t> listed = client_->ListPages(
      request, [&](std::vector<etcd::KeyValue> page) -> absl::Status {
        if (list.records.size() + page.size() > options_.max_keys) {
          return absl::ResourceExhaustedError(
              absl::StrCat("etcd store ", prefix, ": more than ",
                           options_.max_keys, " keys"));
        }
        for (etcd::KeyValue& kv : page) {
          list.records.push_back(store::KnowledgeRecord{
              kv.key.substr(prefix.size()), std::move(kv.value)});
        }
        return absl::OkStatus();
      });
  if (!listed.ok()) return listed.status();
  list.revision = *listed;
  return list;
}

absl::StatusOr<std::vector<std::string>> EtcdStore::ListTasks() {
  absl::StatusOr<store::KnowledgeList> list = ListRecords("tasks/");
  if (!list.ok()) return list.status();
  std::vector<std::string> records;
  records.reserve(list->records.size());
  for (store::KnowledgeRecord& r : list->records) {
    records.push_back(std::move(r.value));
  }
  return records;
}

absl::StatusOr<std::optional<std::string>> EtcdStore::GetTask(
    const std::string& task_id) {
  if (absl::Status s = store::ValidateTaskId(task_id, "task id"); !s.ok()) {
    return s;
  }
  absl::StatusOr<etcd::RangeResult> got =
      client_->Get(absl::StrCat(options_.prefix, "tasks/", task_id));
  if (!got.ok()) return got.status();
  if (got->kvs.empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(got->kvs.front().value));
}

absl::StatusOr<store::KnowledgeList> EtcdStore::ListKnowledge() {
  return ListRecords("knowledge/");
}

absl::StatusOr<std::unique_ptr<store::KnowledgeWatch>>
EtcdStore::WatchKnowledge(int64_t after_revision) {
  if (after_revision < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "knowledge watch after_revision: expected >= 0, got ", after_revision));
  }
  const std::string dir = absl::StrCat(options_.prefix, "knowledge/");
  etcd::WatchOptions options;
  options.key = dir;
  options.range_end = etcd::PrefixEnd(dir);
  options.start_revision = after_revision + 1;
  absl::StatusOr<std::unique_ptr<etcd::Watch>> watch =
      client_->OpenWatch(options);
  if (!watch.ok()) return watch.status();
  return std::unique_ptr<store::KnowledgeWatch>(
      new EtcdKnowledgeWatch(*std::move(watch), dir));
}

}  // namespace monta::etcd_store
