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

DispatchSchedule::DispatchSchedule(MoeGroups& groups, Strategy strategy,
                                   DispatchShape shape)
    : groups_(groups), strategy_(strategy), shape_(shape) {}

uint64_t DispatchSchedule::bytes_per_rank() const {
  return static_cast<uint64_t>(groups_.ep->size()) * shape_.rows *
         shape_.row_bytes;
}

absl::StatusOr<std::unique_ptr<DispatchSchedule>> DispatchSchedule::Create(
    MoeGroups& groups, Strategy strategy, int chunks, DispatchShape shape) {
  if (shape.rows < 1 || shape.row_bytes < 1) {
    return absl::InvalidArgumentError(
        "dispatch shape needs rows, row_bytes >= 1");
  }
  if (chunks < 1) return absl::InvalidArgumentError("chunks must be >= 1");
  if (groups.ep == nullptr || groups.tp == nullptr) {
    return absl::InvalidArgumentError("groups are not set up");
  }
  std::unique_ptr<DispatchSchedule> schedule(
      new DispatchSchedule(groups, strategy, shape));
  absl::Status s =
      schedule->Setup(strategy == Strategy::kTpDedupPipelined ? chunks : 1);
  if (!s.ok()) return s;
  return schedule;
}

absl::StatusOr<comm::Buffer*> DispatchSchedule::Alloc(uint64_t bytes) {
  absl::StatusOr<std::unique_ptr<comm::Buffer>> b =
      groups_.world->Allocate(bytes);
  if (!b.ok()) return b.status();
  buffers_.push_back(std::move(*b));
  return buffers_.back().get();
}

absl::Status DispatchSchedule::Setup(int chunks) {
  const uint64_t e = groups_.ep->size();
  const uint64_t t = groups_.tp->size();
  const uint64_t rows = shape_.rows, row = shape_.row_bytes;
  const uint64_t block = rows * row;  // to one destination
  const int me = groups_.ep_rank;
  std::vector<uint8_t> host;
  auto alloc = [&](comm::Buffer** out, uint64_t bytes) {
    absl::StatusOr<comm::Buffer*> b = Alloc(bytes);
    if (!b.ok()) return b.status();
    *out = *b;
    return absl::OkStatus();
  };
  absl::Status s = alloc(&output_, e * block);
  if (!s.ok()) return s;

  switch (strategy_) {
    case Strategy::kFlat: {
      host.resize(e * block);
      for (uint64_t dst = 0; dst < e; ++dst) {
        for (uint64_t c = 0; c < rows; ++c) {
          FillRow(&host[(dst * rows + c) * row], me, dst, c, row);
        }
      }
      break;
    }
    case Strategy::kTpDedup:
    case Strategy::kTpDedupPipelined: {
      rows_per_tp_ = schedule::RowsPerTpRank(rows, t);
      chunks_ = schedule::ChunkRows(rows_per_tp_, chunks);
      const uint64_t slice = e * rows_per_tp_ * row;  // this TP rank's share
      if (!(s = alloc(&stage1_, slice)).ok()) return s;
      if (!(s = alloc(&stage2_, t * slice)).ok()) return s;
      // Chunk-major: [chunk][dst][chunk rows][row], so each chunk's AllToAll
      // input is contiguous. Padding rows (beyond `rows`) are zero.
      host.assign(slice, 0);
      for (const schedule::RowRange& chunk : chunks_) {
        const uint64_t first = chunk.first;
        const uint64_t len = chunk.count;
        for (uint64_t dst = 0; dst < e; ++dst) {
          for (uint64_t r = 0; r < len; ++r) {
            const uint64_t c = groups_.tp_rank * rows_per_tp_ + first + r;
            if (c >= rows) continue;
            FillRow(&host[(e * first + dst * len + r) * row], me, dst, c, row);
          }
        }
      }
      input_ = nullptr;
      if (!(s = alloc(&input_, slice)).ok()) return s;
      return groups_.world->CopyFromHost(input_->data(), host.data(),
                                         host.size());
    }
    case Strategy::kHierarchical: {
      const uint64_t ns = groups_.ep_per_node, nodes = groups_.nodes;
      if (!(s = alloc(&stage1_, e * block)).ok()) return s;
      if (!(s = alloc(&stage2_, e * block)).ok()) return s;
      // [local index l'][node m'] of the destination (m' * n_s + l'): the
      // intra-node step then sends one contiguous run to each local peer.
      host.resize(e * block);
      for (uint64_t l = 0; l < ns; ++l) {
        for (uint64_t m = 0; m < nodes; ++m) {
          const uint64_t dst = m * ns + l;
          for (uint64_t c = 0; c < rows; ++c) {
            FillRow(&host[((l * nodes + m) * rows + c) * row], me, dst, c, row);
          }
        }
      }
      break;
    }
  }
  if (!(s = alloc(&input_, e * block)).ok()) return s;
  return groups_.world->CopyFromHost(input_->data(), host.data(), host.size());
}

absl::Status DispatchSchedule::Run() {
  switch (strategy_) {
    case Strategy::kFlat:
      return RunFlat();
    case Strategy::kTpDedup:
    case Strategy::kTpDedupPipelined:
      return RunTpDedup();
    case Strategy::kHierarchical:
      return RunHierarchical();
  }
  return absl::InternalError("unknown strategy");
}

absl::Status DispatchSchedule::RunFlat() {
  return groups_.ep
      ->AllToAll(input_->data(), output_->data(),
                 shape_.rows * shape_.row_bytes, On(0))
      ->Wait();
}

absl::Status DispatchSchedule::RunTpDedup() {
  comm::Communicator& ep = *groups_.ep;
  comm::Communicator& tp = *groups_.tp;
  const uint64_t e = ep.size(), t = tp.size();
  const uint64_t rows = shape_.rows, row = shape_.row_bytes;
  // AllGather and copies on separate TP streams so that the copy of chunk i-1
  // runs beside the AllGather of chunk i (and both beside AllToAll i+1 on the
  // EP communicator).
  const int copy_stream = tp.num_streams() > 1 ? 1 : 0;
  auto* in = static_cast<uint8_t*>(input_->data());
  auto* a2a = static_cast<uint8_t*>(stage1_->data());
  auto* ag = static_cast<uint8_t*>(stage2_->data());
  auto* out = static_cast<uint8_t*>(output_->data());
  std::vector<WorkPtr> works;
  for (const schedule::RowRange& chunk : chunks_) {
    const uint64_t first = chunk.first;
    const uint64_t len = chunk.count;
    WorkPtr a = ep.AllToAll(in + e * first * row, a2a + e * first * row,
                            len * row, On(0));
    uint8_t* gathered = ag + t * e * first * row;
    WorkPtr g = tp.AllGather(a2a + e * first * row, gathered, e * len * row,
                             On(0, {a}));
    works.push_back(a);
    works.push_back(g);
    // Gathered chunk: [tp q][src][len rows]; its rows belong at capacity rows
    // q*rows_per_tp + first + r of each source block of the output.
    for (uint64_t q = 0; q < t; ++q) {
      const uint64_t c0 = q * rows_per_tp_ + first;
      if (c0 >= rows) continue;
      const uint64_t valid = std::min(len, rows - c0);  // drop padding rows
      works.push_back(tp.Copy(out + c0 * row, rows * row,
                              gathered + q * e * len * row, len * row,
                              valid * row, e, On(copy_stream, {g})));
    }
  }
  return WaitAll(works);
}

absl::Status DispatchSchedule::RunHierarchical() {
  const uint64_t ns = groups_.ep_per_node, nodes = groups_.nodes;
  const uint64_t block = shape_.rows * shape_.row_bytes;
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
  works.push_back(
      groups_.inter->AllToAll(s2, output_->data(), ns * block, On(0, copies)));
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
  const uint64_t rows = shape_.rows, row = shape_.row_bytes;
  uint64_t wrong = 0;
  for (uint64_t src = 0; src < e; ++src) {
    for (uint64_t c = 0; c < rows; ++c) {
      wrong += CountWrongInRow(&host[(src * rows + c) * row], src,
                               groups_.ep_rank, c, row);
    }
  }
  return wrong;
}

}  // namespace monta::bench
