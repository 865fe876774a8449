#include "agent/bench/layer.h"

#include <algorithm>
#include <utility>

namespace monta::bench {

absl::StatusOr<std::unique_ptr<LayerSchedule>> LayerSchedule::Create(
    MoeGroups& groups, Strategy strategy, int chunks, DispatchShape shape,
    ExpertLayout layout, BufferPool* pool) {
  if (groups.tp == nullptr) {
    return absl::InvalidArgumentError("groups are not set up");
  }
  std::vector<Step> steps = {Step::kExchange};
  if (layout == ExpertLayout::kNotTensorParallel && groups.tp->size() > 1) {
    steps = {Step::kDrop, Step::kGather};
  }
  std::unique_ptr<LayerSchedule> layer(new LayerSchedule());
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StatusOr<std::unique_ptr<DispatchSchedule>> op =
        DispatchSchedule::Create(groups, strategy, chunks, shape, steps[i],
                                 pool, static_cast<int>(i));
    if (!op.ok()) return op.status();
    layer->owned_.push_back(*std::move(op));
  }
  // Tensor-parallel: the same op four times. Whole experts: drop, gather,
  // and autograd's mirror of them (the combine's gradient drops, the
  // dispatch's gathers).
  const size_t n = layer->owned_.size();
  for (size_t i = 0; i < 4; ++i) {
    layer->ops_.push_back(layer->owned_[i % n].get());
  }
  return layer;
}

absl::Status LayerSchedule::Run() {
  for (DispatchSchedule* op : ops_) {
    if (absl::Status s = op->Run(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> LayerSchedule::CountWrongBytes() {
  uint64_t wrong = 0;
  for (DispatchSchedule* op : ops_) {
    if (absl::Status s = op->PoisonOutput(); !s.ok()) return s;
    if (absl::Status s = op->Run(); !s.ok()) return s;
    absl::StatusOr<uint64_t> w = op->CountWrongBytes();
    if (!w.ok()) return w.status();
    wrong += *w;
  }
  return wrong;
}

int LayerSchedule::effective_chunks() const {
  int k = 1;
  for (const auto& op : owned_) k = std::max(k, op->effective_chunks());
  return k;
}

}  // namespace monta::bench
