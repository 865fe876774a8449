#include "agent/bench/schedule.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/bench/data_pattern.h"

namespace monta::bench {
namespace {

using comm::OpOptions;
using comm::WorkPtr;

// Waits for every handle (so nothing is left running on buffers the caller
// may reuse) and returns the first failure.
absl::Status WaitAll(const std::vector<WorkPtr>& works) {
  absl::Status first;
  for (const WorkPtr& w : works) {
    absl::Status s = w->Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

OpOptions On(int stream, std::vector<WorkPtr> after = {}) {
  OpOptions o;
  o.stream = stream;
  o.after = std::move(after);
  return o;
}

}  // namespace

const char* StrategyName(Strategy strategy) {
  return strategy::StrategyName(static_cast<strategy::StrategyKind>(strategy));
}

absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  for (Strategy s : {Strategy::kFlat, Strategy::kTpDedup,
                     Strategy::kTpDedupPipelined, Strategy::kHierarchical}) {
    if (name == StrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown strategy '", name,
      "' (want flat, tp_dedup, tp_dedup_pipelined or hierarchical)"));
}

const char* StepName(Step step) {
  switch (step) {
    case Step::kExchange:
      return "exchange";
    case Step::kDrop:
      return "drop";
    case Step::kGather:
      return "gather";
  }
  return "unknown";
}

DispatchSchedule::DispatchSchedule(MoeGroups& groups, Strategy strategy,
                                   DispatchShape shape, Step step)
    : groups_(groups), strategy_(strategy), shape_(shape), step_(step) {}

uint64_t DispatchSchedule::bytes_per_rank() const {
  return static_cast<uint64_t>(groups_.ep->size()) * shape_.rows *
         shape_.row_bytes;
}

absl::StatusOr<comm::Buffer*> BufferPool::Get(int owner, int slot,
                                              uint64_t bytes) {
  requested_bytes_ += bytes;
  std::unique_ptr<comm::Buffer>& b = buffers_[{owner, slot, bytes}];
  if (b == nullptr) {
    absl::StatusOr<std::unique_ptr<comm::Buffer>> allocated =
        world_.Allocate(bytes);
    if (!allocated.ok()) return allocated.status();
    b = *std::move(allocated);
    allocated_bytes_ += bytes;
  }
  return b.get();
}

absl::StatusOr<std::unique_ptr<DispatchSchedule>> DispatchSchedule::Create(
    MoeGroups& groups, Strategy strategy, int chunks, DispatchShape shape,
    Step step, BufferPool* pool, int owner) {
  if (shape.rows < 1 || shape.row_bytes < 1) {
    return absl::InvalidArgumentError(
        "dispatch shape needs rows, row_bytes >= 1");
  }
  if (chunks < 1) return absl::InvalidArgumentError("chunks must be >= 1");
  if (groups.ep == nullptr || groups.tp == nullptr) {
    return absl::InvalidArgumentError("groups are not set up");
  }
  std::unique_ptr<DispatchSchedule> schedule(
      new DispatchSchedule(groups, strategy, shape, step));
  schedule->pool_ = pool;
  schedule->owner_ = owner;
  absl::Status s =
      schedule->Setup(strategy == Strategy::kTpDedupPipelined ? chunks : 1);
  if (!s.ok()) return s;
  return schedule;
}

absl::StatusOr<comm::Buffer*> DispatchSchedule::Alloc(uint64_t bytes) {
  const int slot = slots_++;
  if (pool_ != nullptr) return pool_->Get(owner_, slot, bytes);
  absl::StatusOr<std::unique_ptr<comm::Buffer>> b =
      groups_.world->Allocate(bytes);
  if (!b.ok()) return b.status();
  buffers_.push_back(std::move(*b));
  return buffers_.back().get();
}

int64_t DispatchSchedule::SourceRow(uint64_t r) const {
  if (step_ == Step::kExchange && plan_ != Plan::kGathered) {
    return static_cast<int64_t>(r);
  }
  const uint64_t c = groups_.tp_rank * rows_per_tp_ + r;
  return c < shape_.rows ? static_cast<int64_t>(c) : -1;
}

namespace {

// Writes the row `source_row` that `me` sends to `dst` (zeros stay for a
// padding row, -1).
void FillSourceRow(uint8_t* out, int me, uint64_t dst, int64_t source_row,
                   uint64_t row_bytes) {
  if (source_row >= 0) {
    FillRow(out, me, static_cast<int>(dst), static_cast<uint64_t>(source_row),
            row_bytes);
  }
}

}  // namespace

absl::Status DispatchSchedule::Setup(int chunks) {
  const uint64_t e = groups_.ep->size();
  const uint64_t rows = shape_.rows, row = shape_.row_bytes;
  rows_per_tp_ = schedule::RowsPerTpRank(rows, groups_.tp->size());
  const bool dedup = strategy_ == Strategy::kTpDedup ||
                     strategy_ == Strategy::kTpDedupPipelined;
  const bool hier = strategy_ == Strategy::kHierarchical;
  switch (step_) {
    case Step::kExchange:
      plan_ = dedup  ? Plan::kGathered
              : hier ? Plan::kHierarchical
                     : Plan::kAllToAll;
      a2a_rows_ = dedup ? rows_per_tp_ : rows;
      break;
    case Step::kDrop:
      plan_ = hier ? Plan::kHierarchical : Plan::kAllToAll;
      a2a_rows_ = rows_per_tp_;
      break;
    case Step::kGather:
      plan_ = hier ? Plan::kHierarchical : Plan::kGathered;
      a2a_rows_ = rows_per_tp_;
      break;
  }
  absl::StatusOr<comm::Buffer*> out =
      Alloc(e * (step_ == Step::kDrop ? a2a_rows_ : rows) * row);
  if (!out.ok()) return out.status();
  output_ = *out;
  if (plan_ == Plan::kGathered) return SetupGathered(chunks);
  if (plan_ == Plan::kHierarchical) return SetupHierarchical();
  // [dst][rows][row]: one contiguous block per destination.
  std::vector<uint8_t> host(e * a2a_rows_ * row, 0);
  for (uint64_t dst = 0; dst < e; ++dst) {
    for (uint64_t r = 0; r < a2a_rows_; ++r) {
      FillSourceRow(&host[(dst * a2a_rows_ + r) * row], groups_.ep_rank, dst,
                    SourceRow(r), row);
    }
  }
  absl::StatusOr<comm::Buffer*> in = Alloc(host.size());
  if (!in.ok()) return in.status();
  input_ = *in;
  return groups_.world->CopyFromHost(input_->data(), host.data(), host.size());
}

absl::Status DispatchSchedule::SetupGathered(int chunks) {
  const uint64_t e = groups_.ep->size();
  const uint64_t t = groups_.tp->size();
  const uint64_t row = shape_.row_bytes;
  chunks_ = schedule::ChunkRows(rows_per_tp_, chunks);
  const uint64_t slice = e * rows_per_tp_ * row;  // this TP rank's share
  std::vector<comm::Buffer**> wanted = {&stage1_, &stage2_, &input_};
  std::vector<uint64_t> sizes = {slice, t * slice, slice};
  for (size_t i = 0; i < wanted.size(); ++i) {
    absl::StatusOr<comm::Buffer*> b = Alloc(sizes[i]);
    if (!b.ok()) return b.status();
    *wanted[i] = *b;
  }
  // Chunk-major: [chunk][dst][chunk rows][row], so each chunk's AllToAll
  // input is contiguous. Padding rows (beyond `rows`) are zero.
  std::vector<uint8_t> host(slice, 0);
  for (const schedule::RowRange& chunk : chunks_) {
    const uint64_t first = chunk.first;
    const uint64_t len = chunk.count;
    for (uint64_t dst = 0; dst < e; ++dst) {
      for (uint64_t r = 0; r < len; ++r) {
        FillSourceRow(&host[(e * first + dst * len + r) * row], groups_.ep_rank,
                      dst, SourceRow(first + r), row);
      }
    }
  }
  return groups_.world->CopyFromHost(input_->data(), host.data(), host.size());
}

absl::Status DispatchSchedule::SetupHierarchical() {
  const uint64_t e = groups_.ep->size();
  const uint64_t t = groups_.tp->size();
  const uint64_t ns = groups_.ep_per_node, nodes = groups_.nodes;
  const uint64_t row = shape_.row_bytes;
  const uint64_t block = a2a_rows_ * row;  // to one destination
  std::vector<comm::Buffer**> wanted = {&stage1_, &stage2_, &input_};
  std::vector<uint64_t> sizes = {e * block, e * block, e * block};
  if (step_ == Step::kGather) {
    wanted.insert(wanted.end(), {&stage3_, &stage4_});
    sizes.insert(sizes.end(), {e * block, t * e * block});
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    absl::StatusOr<comm::Buffer*> b = Alloc(sizes[i]);
    if (!b.ok()) return b.status();
    *wanted[i] = *b;
  }
  // [local index l'][node m'] of the destination (m' * n_s + l'): the
  // intra-node step then sends one contiguous run to each local peer.
  std::vector<uint8_t> host(e * block, 0);
  for (uint64_t l = 0; l < ns; ++l) {
    for (uint64_t m = 0; m < nodes; ++m) {
      const uint64_t dst = m * ns + l;
      for (uint64_t r = 0; r < a2a_rows_; ++r) {
        FillSourceRow(&host[((l * nodes + m) * a2a_rows_ + r) * row],
                      groups_.ep_rank, dst, SourceRow(r), row);
      }
    }
  }
  return groups_.world->CopyFromHost(input_->data(), host.data(), host.size());
}

absl::Status DispatchSchedule::Run() {
  switch (plan_) {
    case Plan::kAllToAll:
      return RunAllToAll();
    case Plan::kGathered:
      return RunGathered();
    case Plan::kHierarchical:
      return RunHierarchical();
  }
  return absl::InternalError("unknown plan");
}

absl::Status DispatchSchedule::RunAllToAll() {
  return groups_.ep
      ->AllToAll(input_->data(), output_->data(), a2a_rows_ * shape_.row_bytes,
                 On(0))
      ->Wait();
}

void DispatchSchedule::GatherChunk(const uint8_t* a2a, uint64_t first,
                                   uint64_t len, const WorkPtr& after,
                                   std::vector<WorkPtr>* works) {
  comm::Communicator& tp = *groups_.tp;
  const uint64_t e = groups_.ep->size(), t = tp.size();
  const uint64_t rows = shape_.rows, row = shape_.row_bytes;
  // AllGather and copies on separate TP streams so that the copy of chunk i-1
  // runs beside the AllGather of chunk i (and both beside AllToAll i+1 on the
  // EP communicator).
  const int copy_stream = tp.num_streams() > 1 ? 1 : 0;
  comm::Buffer* gathered_buffer =
      plan_ == Plan::kHierarchical ? stage4_ : stage2_;
  uint8_t* gathered =
      static_cast<uint8_t*>(gathered_buffer->data()) + t * e * first * row;
  auto* out = static_cast<uint8_t*>(output_->data());
  WorkPtr g = tp.AllGather(a2a, gathered, e * len * row, On(0, {after}));
  works->push_back(g);
  // Gathered chunk: [tp q][src][len rows]; its rows belong at capacity rows
  // q*rows_per_tp + first + r of each source block of the output.
  for (uint64_t q = 0; q < t; ++q) {
    const uint64_t c0 = q * rows_per_tp_ + first;
    if (c0 >= rows) continue;
    const uint64_t valid = std::min(len, rows - c0);  // drop padding rows
    works->push_back(tp.Copy(out + c0 * row, rows * row,
                             gathered + q * e * len * row, len * row,
                             valid * row, e, On(copy_stream, {g})));
  }
}

absl::Status DispatchSchedule::RunGathered() {
  comm::Communicator& ep = *groups_.ep;
  const uint64_t e = ep.size();
  const uint64_t row = shape_.row_bytes;
  auto* in = static_cast<uint8_t*>(input_->data());
  auto* a2a = static_cast<uint8_t*>(stage1_->data());
  std::vector<WorkPtr> works;
  for (const schedule::RowRange& chunk : chunks_) {
    const uint64_t first = chunk.first;
    const uint64_t len = chunk.count;
    WorkPtr a = ep.AllToAll(in + e * first * row, a2a + e * first * row,
                            len * row, On(0));
    works.push_back(a);
    GatherChunk(a2a + e * first * row, first, len, a, &works);
  }
  return WaitAll(works);
}

absl::Status DispatchSchedule::RunHierarchical() {
  const uint64_t ns = groups_.ep_per_node, nodes = groups_.nodes;
  const uint64_t block = a2a_rows_ * shape_.row_bytes;
  auto* s1 = static_cast<uint8_t*>(stage1_->data());
  auto* s2 = static_cast<uint8_t*>(stage2_->data());
  std::vector<WorkPtr> works;
  // Step 1: local peer l' gets every block destined to (any node, l').
  WorkPtr intra =
      groups_.intra->AllToAll(input_->data(), s1, nodes * block, On(0));
  works.push_back(intra);
  // s1 is [source local index][destination node]; regroup by destination
  // node so each inter-node peer gets one contiguous run of n_s blocks.
  std::vector<WorkPtr> copies;
  for (uint64_t m = 0; m < nodes; ++m) {
    copies.push_back(groups_.intra->Copy(s2 + m * ns * block, block,
                                         s1 + m * block, nodes * block, block,
                                         ns, On(0, {intra})));
  }
  works.insert(works.end(), copies.begin(), copies.end());
  // Step 2: n_s-times larger messages among same-local-index peers; arrives
  // as [source node][source local index] = [source EP rank].
  comm::Buffer* arrived = step_ == Step::kGather ? stage3_ : output_;
  WorkPtr inter =
      groups_.inter->AllToAll(s2, arrived->data(), ns * block, On(0, copies));
  works.push_back(inter);
  if (step_ == Step::kGather) {
    // Then the TP gather of this rank's rows, as one tp_dedup chunk.
    GatherChunk(static_cast<const uint8_t*>(arrived->data()), 0, a2a_rows_,
                inter, &works);
  }
  return WaitAll(works);
}

absl::Status DispatchSchedule::PoisonOutput() {
  std::vector<uint8_t> poison(output_->size_bytes(), 0xA5);
  return groups_.world->CopyFromHost(output_->data(), poison.data(),
                                     poison.size());
}

absl::StatusOr<uint64_t> DispatchSchedule::CountWrongBytes() {
  std::vector<uint8_t> host(output_->size_bytes());
  absl::Status s =
      groups_.world->CopyToHost(host.data(), output_->data(), host.size());
  if (!s.ok()) return s;
  const uint64_t e = groups_.ep->size();
  const uint64_t row = shape_.row_bytes;
  // kDrop leaves [src][n]: this TP rank's rows of each source's block, the
  // padding rows zero; the others the whole [src][C].
  const bool dropped = step_ == Step::kDrop;
  const uint64_t rows = dropped ? a2a_rows_ : shape_.rows;
  uint64_t wrong = 0;
  for (uint64_t src = 0; src < e; ++src) {
    for (uint64_t r = 0; r < rows; ++r) {
      const uint8_t* got = &host[(src * rows + r) * row];
      const int64_t c = dropped ? SourceRow(r) : static_cast<int64_t>(r);
      if (c < 0) {
        wrong += static_cast<uint64_t>(
            std::count_if(got, got + row, [](uint8_t b) { return b != 0; }));
        continue;
      }
      wrong += CountWrongInRow(got, static_cast<int>(src), groups_.ep_rank,
                               static_cast<uint64_t>(c), row);
    }
  }
  return wrong;
}

}  // namespace monta::bench
