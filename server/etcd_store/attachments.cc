#include "server/etcd_store/attachments.h"

#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/etcd/kv.h"
#include "server/etcd_store/records.h"

namespace monta::etcd_store {

std::string AttachPrefix(const std::string& prefix) {
  return absl::StrCat(prefix, "attach/");
}

std::string AttachKey(const std::string& prefix, const std::string& node,
                      const std::string& replica_id) {
  return absl::StrCat(AttachPrefix(prefix), node, "/", replica_id);
}

namespace {

// The node of an attach key ("" when it is not one).
std::string NodeOfKey(const std::string& attach_prefix,
                      const std::string& key) {
  if (!absl::StartsWith(key, attach_prefix)) return "";
  const std::string rest = key.substr(attach_prefix.size());
  const size_t slash = rest.find('/');
  return slash == std::string::npos ? "" : rest.substr(0, slash);
}

}  // namespace

Attachments::Attachments(etcd::Client* client, AttachmentsOptions options)
    : client_(client), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Attachments>> Attachments::Start(
    etcd::Client* client, AttachmentsOptions options) {
  if (options.replica_id.empty() ||
      options.replica_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        "attachments: replica_id: expected a non-empty id without '/'");
  }
  if (options.lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "attachments: lease_ttl: expected at least 1 second");
  }
  std::unique_ptr<Attachments> attachments(
      new Attachments(client, std::move(options)));
  absl::MutexLock lock(&attachments->publish_mu_);
  if (absl::Status renewed = attachments->Renew(); !renewed.ok()) {
    return renewed;
  }
  return attachments;
}

Attachments::~Attachments() = default;

absl::Status Attachments::Renew() {
  absl::StatusOr<etcd::Lease> lease = client_->GrantLease(options_.lease_ttl);
  if (!lease.ok()) {
    return absl::Status(lease.status().code(),
                        absl::StrCat("attachments: granting a lease: ",
                                     lease.status().message()));
  }
  // A lost lease is noticed by the next Publish (keepalive_->lost()).
  absl::StatusOr<std::unique_ptr<etcd::LeaseKeepAlive>> keepalive =
      client_->KeepAlive(*lease, [](const absl::Status&) {});
  if (!keepalive.ok()) return keepalive.status();
  keepalive_ = *std::move(keepalive);
  published_.clear();  // nothing is on the new lease yet
  absl::MutexLock lock(&mu_);
  lease_ = lease->id;
  return absl::OkStatus();
}

void Attachments::DropAttachedElsewhere(OwnNodes& own) {
  absl::MutexLock follow(&follow_mu_);
  for (auto it = own.begin(); it != own.end();) {
    // Keys of this instance of the node, less this replica's own.
    int elsewhere = 0;
    if (auto node = counts_.find(it->first); node != counts_.end()) {
      if (auto count = node->second.find(it->second);
          count != node->second.end()) {
        elsewhere = count->second;
      }
    }
    if (elsewhere > 0) {
      auto mine = keys_.find(
          AttachKey(options_.prefix, it->first, options_.replica_id));
      if (mine != keys_.end() && mine->second.second == it->second) {
        --elsewhere;
      }
    }
    it = elsewhere > 0 ? own.erase(it) : std::next(it);
  }
}

absl::Status Attachments::Publish(const OwnNodes& heard, bool defer) {
  OwnNodes own = heard;
  if (defer) DropAttachedElsewhere(own);
  absl::MutexLock publish(&publish_mu_);
  if (keepalive_ == nullptr || keepalive_->lost()) {
    if (absl::Status renewed = Renew(); !renewed.ok()) return renewed;
  }
  const int64_t lease = keepalive_->id();
  // The difference: a put (the instance) or a delete (none) per node.
  struct Change {
    etcd::Op op;
    std::string node;
    std::optional<std::string> instance;
  };
  std::vector<Change> diff;
  int64_t puts = 0;
  for (const auto& [node, instance] : own) {
    auto it = published_.find(node);
    if (it != published_.end() && it->second == instance) continue;
    diff.push_back(
        {etcd::Op::Put(AttachKey(options_.prefix, node, options_.replica_id),
                       instance, lease),
         node, instance});
    ++puts;
  }
  for (const auto& [node, instance] : published_) {
    if (own.find(node) != own.end()) continue;
    diff.push_back({etcd::Op::Delete(
                        AttachKey(options_.prefix, node, options_.replica_id)),
                    node, std::nullopt});
  }
  // In Txns within etcd's limits; published_ follows each Txn that landed.
  RecordTxn txn(client_->options());
  absl::Status status;
  int64_t txns = 0;
  size_t first = 0;
  for (size_t i = 0; i <= diff.size(); ++i) {
    const bool full =
        i == diff.size() || !txn.Fits(RecordTxn::OpBytes(diff[i].op));
    if (full && !txn.empty()) {
      status = txn.Send(*client_);
      if (!status.ok()) break;
      ++txns;
      for (; first < i; ++first) {
        if (diff[first].instance.has_value()) {
          published_[diff[first].node] = *diff[first].instance;
        } else {
          published_.erase(diff[first].node);
        }
      }
    }
    if (i < diff.size()) txn.AddOp(diff[i].op);
  }
  absl::MutexLock lock(&mu_);
  writes_ += txns;
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("attachments: publishing: ",
                                                    status.message()));
  }
  puts_ += puts;
  deletes_ += static_cast<int64_t>(diff.size()) - puts;
  return absl::OkStatus();
}

absl::Status Attachments::Relist() {
  watch_.reset();
  etcd::ListRequest list;
  list.key = AttachPrefix(options_.prefix);
  list.range_end = etcd::PrefixEnd(list.key);
  std::map<std::string, std::pair<std::string, std::string>> keys;
  absl::StatusOr<int64_t> revision =
      client_->ListPages(list, [&](std::vector<etcd::KeyValue> page) {
        for (etcd::KeyValue& kv : page) {
          std::string node = NodeOfKey(list.key, kv.key);
          if (node.empty()) continue;
          keys[kv.key] = {std::move(node), std::move(kv.value)};
        }
        return absl::OkStatus();
      });
  if (!revision.ok()) return revision.status();
  etcd::WatchOptions watch;
  watch.key = list.key;
  watch.range_end = list.range_end;
  watch.start_revision = *revision + 1;
  absl::StatusOr<std::unique_ptr<etcd::Watch>> opened =
      client_->OpenWatch(watch);
  if (!opened.ok()) return opened.status();
  watch_ = *std::move(opened);
  // The difference from what Follow held (a list is rare: the first, and
  // after a compaction or a lost watch).
  Counts counts;
  for (const auto& [key, attachment] : keys) {
    ++counts[attachment.first][attachment.second];
  }
  std::vector<AttachmentChange> changes;
  const auto differ = [&changes](const auto& from, const auto& to,
                                 bool attached) {
    for (const auto& [node, instances] : from) {
      auto other = to.find(node);
      for (const auto& [instance, count] : instances) {
        if (other == to.end() || other->second.count(instance) == 0) {
          changes.push_back({node, instance, attached});
        }
      }
    }
  };
  differ(counts, counts_, true);
  differ(counts_, counts, false);
  keys_ = std::move(keys);
  counts_ = std::move(counts);
  Tell(changes);
  return absl::OkStatus();
}

absl::Status Attachments::Follow(absl::Duration wait) {
  absl::MutexLock follow(&follow_mu_);
  if (watch_ == nullptr) return Relist();
  absl::StatusOr<etcd::WatchBatch> batch = watch_->Next(wait);
  if (absl::IsDeadlineExceeded(batch.status())) return absl::OkStatus();
  if (!batch.ok() || batch->compact_revision > 0) {
    watch_.reset();  // compacted or ended: the next call lists again
    return batch.ok() ? absl::OkStatus() : batch.status();
  }
  if (batch->events.empty()) return absl::OkStatus();
  const std::string prefix = AttachPrefix(options_.prefix);
  std::vector<AttachmentChange> changes;
  for (etcd::Event& event : batch->events) {
    if (event.type == etcd::Event::Type::kDelete) {
      Drop(event.kv.key, changes);
      continue;
    }
    std::string node = NodeOfKey(prefix, event.kv.key);
    if (node.empty()) continue;
    Add(event.kv.key, std::move(node), std::move(event.kv.value), changes);
  }
  Tell(changes);
  return absl::OkStatus();
}

void Attachments::Add(const std::string& key, std::string node,
                      std::string instance,
                      std::vector<AttachmentChange>& changes) {
  auto [it, added] = keys_.try_emplace(key);
  if (!added && it->second.first == node && it->second.second == instance) {
    return;
  }
  // A key that named another instance is counted as the new one before the
  // old one is uncounted: an instance attached through it before and after
  // never counts as detached.
  std::pair<std::string, std::string> before =
      std::exchange(it->second, {node, instance});
  if (++counts_[node][instance] == 1) {
    changes.push_back({std::move(node), std::move(instance), true});
  }
  if (!added) Uncount(before.first, before.second, changes);
}

void Attachments::Drop(const std::string& key,
                       std::vector<AttachmentChange>& changes) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return;
  std::pair<std::string, std::string> before = std::move(it->second);
  keys_.erase(it);
  Uncount(before.first, before.second, changes);
}

void Attachments::Uncount(const std::string& node, const std::string& instance,
                          std::vector<AttachmentChange>& changes) {
  auto of_node = counts_.find(node);
  if (of_node == counts_.end()) return;
  auto count = of_node->second.find(instance);
  if (count == of_node->second.end() || --count->second > 0) return;
  of_node->second.erase(count);
  if (of_node->second.empty()) counts_.erase(of_node);
  changes.push_back({node, instance, false});
}

void Attachments::Tell(const std::vector<AttachmentChange>& changes) {
  {
    absl::MutexLock lock(&mu_);
    attached_nodes_ = counts_.size();
  }
  if (!changes.empty() && options_.on_attached) options_.on_attached(changes);
}

int64_t Attachments::lease() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

int64_t Attachments::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

int64_t Attachments::puts() const {
  absl::MutexLock lock(&mu_);
  return puts_;
}

int64_t Attachments::deletes() const {
  absl::MutexLock lock(&mu_);
  return deletes_;
}

size_t Attachments::attached_nodes() const {
  absl::MutexLock lock(&mu_);
  return attached_nodes_;
}

}  // namespace monta::etcd_store
