#include "server/store/knowledge_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace monta::store {

absl::Status ValidateKnowledgeWrites(const KnowledgeWrites& writes) {
  for (const auto& [id, record] : writes) {
    bool printable = !id.empty() && id.size() <= kMaxKnowledgeIdBytes;
    for (char c : id) printable = printable && c > ' ' && c < 0x7f;
    if (!printable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "knowledge id: expected 1..", kMaxKnowledgeIdBytes,
          " printable bytes without spaces, got ", id.size(), " bytes"));
    }
    if (record.has_value() && record->size() > kMaxKnowledgeRecordBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("knowledge ", id, ": record of ", record->size(),
                       " bytes, at most ", kMaxKnowledgeRecordBytes));
    }
  }
  return absl::OkStatus();
}

KnowledgeFollower::KnowledgeFollower(KnowledgeStore* store, Sink sink)
    : store_(store), sink_(std::move(sink)) {}

absl::Status KnowledgeFollower::Step(absl::Duration wait) {
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (paused_) return absl::OkStatus();
    generation = generation_;
  }
  if (watch_ == nullptr || watched_generation_ != generation) {
    return Relist(generation);
  }
  absl::StatusOr<std::vector<KnowledgeChange>> changes = watch_->Next(wait);
  if (!changes.ok() &&
      changes.status().code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  if (generation != generation_) return absl::OkStatus();  // paused since
  if (!changes.ok()) {
    // Behind what the store keeps, or the watch ended: list again.
    watch_.reset();
    in_sync_ = false;
    return changes.status();
  }
  for (const KnowledgeChange& change : *changes) sink_.apply(change);
  return absl::OkStatus();
}

absl::Status KnowledgeFollower::Relist(uint64_t generation) {
  watch_.reset();
  absl::StatusOr<KnowledgeList> listed = store_->ListKnowledge();
  absl::StatusOr<std::unique_ptr<KnowledgeWatch>> watch =
      listed.ok()
          ? store_->WatchKnowledge(listed->revision)
          : absl::StatusOr<std::unique_ptr<KnowledgeWatch>>(listed.status());
  absl::MutexLock lock(&mu_);
  in_sync_ = false;
  if (!watch.ok()) return watch.status();
  if (generation != generation_ || paused_) return absl::OkStatus();
  sink_.replace(listed->records);
  watch_ = *std::move(watch);
  watched_generation_ = generation;
  in_sync_ = true;
  ++lists_;
  return absl::OkStatus();
}

void KnowledgeFollower::Pause() {
  absl::MutexLock lock(&mu_);
  paused_ = true;
  in_sync_ = false;
  ++generation_;
}

void KnowledgeFollower::Resume() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
  ++generation_;
}

bool KnowledgeFollower::in_sync() const {
  absl::MutexLock lock(&mu_);
  return in_sync_;
}

int64_t KnowledgeFollower::lists() const {
  absl::MutexLock lock(&mu_);
  return lists_;
}

}  // namespace monta::store
