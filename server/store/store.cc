#include "server/store/store.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/store/task_store.h"

namespace monta::store {

absl::Status ValidateMutation(const Mutation& mutation) {
  switch (mutation.kind) {
    case Mutation::Kind::kNode:
      return registry::ValidateNodeName(mutation.node.name());
    case Mutation::Kind::kNodeRemoved:
      return registry::ValidateNodeName(mutation.node_name);
    case Mutation::Kind::kCurve:
      if (mutation.curve.nodes().empty() || mutation.curve.sequence() == 0) {
        return absl::InvalidArgumentError(
            "curve: expected at least one node and a sequence >= 1");
      }
      return absl::OkStatus();
    case Mutation::Kind::kCurvesForgotten:
      if (mutation.forget.task_id.empty() ==
          mutation.forget.node_name.empty()) {
        return absl::InvalidArgumentError(
            "forget: expected exactly one of task_id and node_name");
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("mutation: unknown kind");
}

std::vector<monta::v1::BandwidthCurve> RegistryWriter::Changed(
    const std::vector<registry::Change>& changes) {
  absl::StatusOr<Committed> committed = store_->Commit(fence_, changes);
  if (!committed.ok()) return {};
  return std::move(committed->restored);
}

absl::Status LoadInto(
    Store& store, registry::Registry& registry,
    const std::function<void(const std::string& site)>& on_discarded,
    int64_t* revision) {
  absl::StatusOr<Snapshot> snapshot = store.List();
  if (!snapshot.ok()) return snapshot.status();
  if (revision != nullptr) *revision = snapshot->revision;
  const Instant now = Instant::Now();
  for (const auto& node : snapshot->nodes) registry.Restore(node, now);
  // Later curves number above every stored row, restored or not.
  registry.AdvanceSequence(snapshot->max_curve_sequence);
  for (const auto& curve : snapshot->curves) {
    // A curve naming a node that is no longer stored is history only.
    if (absl::Status added = registry.RestoreCurve(curve); !added.ok()) {
      std::cerr << "monta-planner: store: curve of task " << curve.task_id()
                << " stays history only: " << added << std::endl;
      if (on_discarded) on_discarded("load_curve");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTaskId(const std::string& id, absl::string_view field) {
  if (!id.empty() && id.size() <= kMaxTaskIdBytes &&
      id.find('/') == std::string::npos) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected 1..", kMaxTaskIdBytes,
                   " bytes without '/', got ", id.size(), " bytes",
                   id.find('/') != std::string::npos ? " with '/'" : ""));
}

absl::Status ValidateTaskWrites(const TaskWrites& writes) {
  for (const auto& [id, record] : writes) {
    if (absl::Status s = ValidateTaskId(id, "task id"); !s.ok()) return s;
    if (record.has_value() && record->size() > kMaxTaskRecordBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("task ", id, ": record of ", record->size(),
                       " bytes, at most ", kMaxTaskRecordBytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace monta::store
