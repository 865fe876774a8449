// What one MoE layer communicates (docs/MODEL.md §4), as montactl verify's
// layer scope runs it: the dispatch and the combine forward, then the
// combine's gradient and the dispatch's, each op after the previous one
// finished (a layer's experts sit between them), in the job's expert layout.
// The ops are DispatchSchedule's steps, so every byte is checked as there.
#ifndef MONTA_AGENT_BENCH_LAYER_H_
#define MONTA_AGENT_BENCH_LAYER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/bench/moe_groups.h"
#include "agent/bench/schedule.h"

namespace monta::bench {

// How the experts sit on the TP ranks (monta.v1.ExpertLayout).
enum class ExpertLayout {
  // Each op is the strategy's exchange, its own adjoint: 4 x Step::kExchange.
  kTensorParallel,
  // DeepSpeed's path for whole experts: dispatch forward and combine
  // backward kDrop, combine forward and dispatch backward kGather. With
  // t = 1 nothing is duplicated and it runs as kTensorParallel.
  kNotTensorParallel,
};

class LayerSchedule {
 public:
  // Allocates each op's buffers (the tensor-parallel layout shares one
  // schedule among its four identical ops), from `pool` when given (op i of
  // the layer is the pool's owner i, so a layer's own ops never share).
  static absl::StatusOr<std::unique_ptr<LayerSchedule>> Create(
      MoeGroups& groups, Strategy strategy, int chunks, DispatchShape shape,
      ExpertLayout layout, BufferPool* pool = nullptr);

  // One iteration: the four ops in layer order, each waited for.
  absl::Status Run();
  // Each op in layer order once, on a poisoned output, checked against its
  // reference: the wrong bytes of all four.
  absl::StatusOr<uint64_t> CountWrongBytes();

  // The ops in layer order: dispatch forward, combine forward, combine
  // backward, dispatch backward.
  const std::vector<DispatchSchedule*>& ops() const { return ops_; }
  // Pipeline chunks of the op that chunks (1 when none does).
  int effective_chunks() const;
  // D: bytes each rank dispatches.
  uint64_t bytes_per_rank() const { return ops_.front()->bytes_per_rank(); }

 private:
  LayerSchedule() = default;
  std::vector<std::unique_ptr<DispatchSchedule>> owned_;
  std::vector<DispatchSchedule*> ops_;
};

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_LAYER_H_
