// The MoE dispatch strategies of docs/MODEL.md §4 as real schedules on the
// Communicator interface (never on Gloo or NCCL directly).
//
// Data: every EP rank sends `rows` capacity rows of `row_bytes` bytes to each
// EP rank (D = e * rows * row_bytes bytes per rank), and every strategy must
// leave exactly the output of one plain AllToAll of D over the EP group:
// [source EP rank][rows][row_bytes]. Inputs are laid out the way each strategy
// wants them (the gate's scatter can write any layout, so packing is not
// charged); everything after that is timed.
#ifndef MONTA_AGENT_BENCH_SCHEDULE_H_
#define MONTA_AGENT_BENCH_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/bench/moe_groups.h"
#include "agent/comm/communicator.h"
#include "common/schedule/schedule.h"
#include "common/strategy/strategy.h"

namespace monta::bench {

// The strategies a schedule can run: S0..S3 of strategy::StrategyKind, with
// its numbers (S4 overlaps expert compute, which a benchmark does not run).
enum class Strategy {
  // S0: AllToAll of D over the EP group; all TP ranks send the same bytes.
  kFlat = static_cast<int>(strategy::StrategyKind::kFlat),
  // S1: each TP rank keeps 1/t of the capacity axis, AllToAll of D/t over the
  // EP group, AllGather over the TP group, reorder copy.
  kTpDedup = static_cast<int>(strategy::StrategyKind::kTpDedup),
  // S2(K): S1 cut into K chunks along the capacity axis; chunk i+1's AllToAll
  // overlaps chunk i's AllGather and chunk i-1's reorder copy.
  kTpDedupPipelined =
      static_cast<int>(strategy::StrategyKind::kTpDedupPipelined),
  // S3: intra-node AllToAll grouping blocks by destination node, reorder, then
  // inter-node AllToAll among same-local-index peers (n_s times larger).
  kHierarchical = static_cast<int>(strategy::StrategyKind::kHierarchical),
};

// strategy::StrategyName of the same kind: "flat", "tp_dedup", ...
const char* StrategyName(Strategy strategy);
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name);

struct DispatchShape {
  uint64_t rows = 1;       // capacity C
  uint64_t row_bytes = 1;  // bytes of one capacity row for one destination
};

// Which op of a MoE layer a schedule runs (docs/MODEL.md §4; the steps of
// python/monta/alltoall.py, which the bytes here match).
enum class Step {
  // [E, C] -> [E, C]: the strategy above, what every op of a layer runs when
  // experts are tensor-parallel (or nothing is duplicated): its own adjoint.
  kExchange,
  // [E, C] -> [E, n], n = ceil(C/t): experts not tensor-parallel, the
  // dispatch forward and the combine's gradient. This TP rank's n rows
  // (rows [tp_rank*n, (tp_rank+1)*n) of C padded to n*t with zero rows), then
  // the AllToAll of them: hierarchical's two steps for kHierarchical, one
  // unchunked AllToAll for the others (flat is DeepSpeed's drop path there).
  kDrop,
  // [E, n] -> [E, C]: the combine forward and the dispatch's gradient: the
  // AllToAll of this TP rank's n rows, then the TP AllGather and the reorder
  // copy into [src][C] (tp_dedup's schedule, in K pipelined chunks for
  // kTpDedupPipelined; hierarchical's AllToAll, then the gather).
  kGather,
};
const char* StepName(Step step);

// Buffers that the schedules of one task share (montactl verify's candidates
// all move the same D, up to 64 of them interleaved): the `slot`-th buffer of
// `bytes` that an `owner` asks for is one buffer, whichever schedule asks, so
// a task holds about one candidate's buffers per strategy, not one per
// candidate. A schedule's input is then only its own until the next schedule
// of the pool is created: check each one right after its Create (timing
// does not read the bytes). One pool per rank; not thread-safe.
class BufferPool {
 public:
  explicit BufferPool(comm::Communicator& world) : world_(world) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  absl::StatusOr<comm::Buffer*> Get(int owner, int slot, uint64_t bytes);
  // What the pool allocated, and what its schedules asked for in all.
  uint64_t allocated_bytes() const { return allocated_bytes_; }
  uint64_t requested_bytes() const { return requested_bytes_; }

 private:
  comm::Communicator& world_;
  std::map<std::tuple<int, int, uint64_t>, std::unique_ptr<comm::Buffer>>
      buffers_;
  uint64_t allocated_bytes_ = 0;
  uint64_t requested_bytes_ = 0;
};

class DispatchSchedule {
 public:
  // Allocates buffers in the communicators' memory and writes the input.
  // `chunks` matters only for kTpDedupPipelined (kTpDedup is K = 1), and in
  // kDrop not at all. kHierarchical needs groups.nodes > 1 to differ from
  // flat, but runs anyway. With a `pool` (which must outlive the schedule)
  // the buffers are the pool's, asked for as `owner`: two schedules that must
  // hold their data at the same time (a layer's ops) are different owners.
  static absl::StatusOr<std::unique_ptr<DispatchSchedule>> Create(
      MoeGroups& groups, Strategy strategy, int chunks, DispatchShape shape,
      Step step = Step::kExchange, BufferPool* pool = nullptr, int owner = 0);

  // One iteration of the schedule; returns when all its operations finished.
  absl::Status Run();
  // Overwrites the output so the next Run must write every byte of it.
  absl::Status PoisonOutput();
  // Compares the output with the reference: one plain AllToAll of the whole
  // [E, C] (kExchange, kGather); its rows of this TP rank, padding rows zero
  // (kDrop).
  absl::StatusOr<uint64_t> CountWrongBytes();

  Strategy strategy() const { return strategy_; }
  Step step() const { return step_; }
  // Pipeline chunks actually run (1 unless pipelined): the chunk rule of
  // common/schedule, which the model prices.
  int effective_chunks() const { return static_cast<int>(chunks_.size()); }
  // D: bytes each rank dispatches (the AllToAll size every strategy is
  // compared at).
  uint64_t bytes_per_rank() const;
  int ep_size() const { return groups_.ep->size(); }

 private:
  // How the op moves its rows: one AllToAll, tp_dedup's gathered chunks, or
  // hierarchical's two steps (then a gather in kGather).
  enum class Plan { kAllToAll, kGathered, kHierarchical };

  DispatchSchedule(MoeGroups& groups, Strategy strategy, DispatchShape shape,
                   Step step);
  absl::Status Setup(int chunks);
  absl::Status SetupGathered(int chunks);
  absl::Status SetupHierarchical();
  // The capacity row input row `r` of the AllToAll carries to every
  // destination, or -1 for a padding row (zeros).
  int64_t SourceRow(uint64_t r) const;
  absl::Status RunAllToAll();
  absl::Status RunGathered();
  absl::Status RunHierarchical();
  // The AllGather over TP of one chunk of AllToAll output `a2a` ([src][len
  // rows], rows [first, first+len) of each TP rank's share) and the copies
  // that place its rows in the output.
  void GatherChunk(const uint8_t* a2a, uint64_t first, uint64_t len,
                   const comm::WorkPtr& after,
                   std::vector<comm::WorkPtr>* works);
  absl::StatusOr<comm::Buffer*> Alloc(uint64_t bytes);

  MoeGroups& groups_;
  const Strategy strategy_;
  const DispatchShape shape_;
  const Step step_;
  Plan plan_ = Plan::kAllToAll;
  // Rows the AllToAll carries per destination: C, or n = ceil(C/t) when this
  // TP rank's share is sent (kDrop, kGather, and tp_dedup's kExchange).
  uint64_t a2a_rows_ = 0;
  // tp_dedup: capacity rows each TP rank keeps (schedule::RowsPerTpRank; the
  // last TP rank's slice is padded when t does not divide rows) and its
  // chunks (schedule::ChunkRows); one chunk for the other strategies.
  uint64_t rows_per_tp_ = 0;
  std::vector<schedule::RowRange> chunks_ = {{0, 1}};
  std::vector<std::unique_ptr<comm::Buffer>> buffers_;  // without a pool
  BufferPool* pool_ = nullptr;
  int owner_ = 0;
  int slots_ = 0;  // buffers asked for so far
  comm::Buffer* input_ = nullptr;
  comm::Buffer* output_ = nullptr;
  comm::Buffer* stage1_ = nullptr;  // tp_dedup: AllToAll out; hier: intra out
  comm::Buffer* stage2_ = nullptr;  // tp_dedup: AllGather out; hier: reordered
  comm::Buffer* stage3_ = nullptr;  // hier kGather: inter-node AllToAll out
  comm::Buffer* stage4_ = nullptr;  // hier kGather: AllGather out
};

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_SCHEDULE_H_
