// Message-size sweeps in the style of nccl-tests: for each size, warm-up
// iterations, then timed iterations whose median is the time; bandwidths from
// common/bandwidth; a data check of a poisoned output on every size.
#ifndef MONTA_AGENT_BENCH_SWEEP_H_
#define MONTA_AGENT_BENCH_SWEEP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/bench/layer.h"
#include "agent/bench/moe_groups.h"
#include "agent/bench/schedule.h"
#include "agent/comm/communicator.h"
#include "common/bandwidth/bandwidth.h"

namespace monta::bench {

struct SweepOptions {
  uint64_t min_bytes = 1 << 10;
  uint64_t max_bytes = 1 << 20;
  int step_factor = 2;
  int warmup_iterations = 2;
  int iterations = 10;
  // Capacity-row size of the dispatch (hidden size times bytes per element);
  // smaller sizes use one row per destination.
  uint64_t row_bytes = 1024;
  // Agree every point over the ranks (an AllGather after each size: the
  // slowest rank's time, everyone's wrong bytes), as nccl-tests prints it.
  // Off, each rank keeps its own median and wrong bytes: the agent reports
  // those and leaves the agreeing to the planner, so that no rank's number can
  // stand in for another's.
  bool agree_across_ranks = true;
  // SweepCollective: time each size as a warm back-to-back chain
  // (BackToBackTimeUs) rather than as the median of iterations timed alone.
  // Inside one node (the CPU's sub-ms ops on a shared host) a chain's mean
  // also takes in the scheduling stalls a median drops.
  bool back_to_back = false;
  // SweepCollective: time each size both ways, the median of iterations timed
  // alone (time_us), then, the op warm, a back-to-back chain of
  // `iterations` more (BackToBackTimeUs without a second warm-up;
  // SweepPoint::chain_time_us). The agent sets it for inter-node benchmarks:
  // the model takes the link's rates from the chain and the short chunk's
  // launch from both (docs/MODEL.md §2, §4). Ignored with back_to_back.
  bool chain_too = false;
  // MeasureInterleaved calls it before each warm-up and timed iteration of a
  // workload (the order it runs them in, for tests); unset: nothing.
  std::function<void(size_t workload, int iteration, bool warmup)> on_iteration;
};

// One row of the nccl-tests-style table: with agree_across_ranks the slowest
// rank's time and the sum of every rank's wrong bytes, else this rank's own.
// The time: the median of the timed iterations, or with
// SweepOptions::back_to_back one op of a warm chain (SweepCollective).
struct SweepPoint {
  uint64_t bytes = 0;  // nccl-tests "size" (see bandwidth::AlgBwBytesPerSecond)
  uint64_t count = 0;  // elements of `type`
  std::string type = "uint8";
  double time_us = 0;
  double algbw_gbps = 0;  // GB/s = 1e9 bytes/s, as nccl-tests prints
  double busbw_gbps = 0;
  uint64_t wrong = 0;
  int chunks_effective = 1;
  // SweepOptions::chain_too: one op of the warm chain (as time_us, agreed
  // with agree_across_ranks); 0 = not measured.
  double chain_time_us = 0;
  // MeasureDispatch and MeasureLayer: this rank's timed iterations in order
  // (time_us is their median, or the slowest rank's with
  // agree_across_ranks); empty for the collective sweeps.
  std::vector<double> iteration_us;
};

// The dispatch shape for D = `bytes` per rank over `ep_size` destinations:
// rows of options.row_bytes (fewer bytes per row when a block is smaller).
// Rounds down to a multiple of ep_size * row size; the point reports the
// bytes actually moved.
DispatchShape ShapeForBytes(uint64_t bytes, int ep_size, uint64_t row_bytes);

// One dispatch of `shape` under `strategy`: data-checked on a poisoned output,
// then the median of options.iterations timed runs after the warm-up (agreed
// over groups.world with options.agree_across_ranks). bytes = D; busbw over
// the EP group size.
absl::StatusOr<SweepPoint> MeasureDispatch(MoeGroups& groups, Strategy strategy,
                                           int chunks, DispatchShape shape,
                                           const SweepOptions& options);

// What one MoE layer communicates (agent/bench/layer.h) with `shape` under
// `strategy` in `layout`: the four ops data-checked on poisoned outputs, then
// the median of options.iterations timed layers (each the four ops back to
// back) after the warm-up, as MeasureDispatch. bytes = D.
absl::StatusOr<SweepPoint> MeasureLayer(MoeGroups& groups, Strategy strategy,
                                        int chunks, DispatchShape shape,
                                        ExpertLayout layout,
                                        const SweepOptions& options);

// One job-shaped workload of MeasureInterleaved (a montactl verify candidate).
struct JobWorkload {
  MoeGroups* groups = nullptr;  // not owned; every workload's world is one
  Strategy strategy = Strategy::kFlat;
  int chunks = 1;
  DispatchShape shape;
  // The layer's four ops in this expert layout (MeasureLayer); unset: one
  // dispatch op (MeasureDispatch).
  std::optional<ExpertLayout> layout;
};

// Several workloads measured side by side, so that whatever else the host
// does falls on all of them alike (docs/MODEL.md §11): each workload is
// created (its buffers from one BufferPool: `pool`, or one of its own, so
// that memory stays about one workload's, not one per workload) and at once
// data-checked on poisoned outputs; then every workload's warm-up
// iterations, workload after workload; then the timed iterations round
// robin: iteration i of every workload, in the order given, before
// iteration i + 1 of any. One point per workload, in order, as
// MeasureDispatch / MeasureLayer make it (iteration_us in iteration order).
// Collective over the workloads' world; every rank passes the same list.
absl::StatusOr<std::vector<SweepPoint>> MeasureInterleaved(
    const std::vector<JobWorkload>& workloads, const SweepOptions& options,
    BufferPool* pool = nullptr);

// Collective over groups.world: MeasureDispatch at every size of the sweep.
absl::StatusOr<std::vector<SweepPoint>> SweepStrategy(
    MoeGroups& groups, Strategy strategy, int chunks,
    const SweepOptions& options);

// One curve per K of `chunks` (docs/MODEL.md §5 searches K; the agent measures
// the same K values), in the order given.
struct ChunkCurve {
  int chunks = 1;
  std::vector<SweepPoint> points;
};
absl::StatusOr<std::vector<ChunkCurve>> SweepChunks(
    MoeGroups& groups, Strategy strategy, const std::vector<int>& chunks,
    const SweepOptions& options);

// A plain collective over `comm` (collective over it), on stream 0, at each of
// bandwidth::SweepMessageBytes. Sizes as nccl-tests: AllToAll = bytes each
// rank sends, AllGather = gathered output, copy = bytes copied. Each size is
// data-checked on a poisoned output, then timed: with options.back_to_back by
// BackToBackTimeUs (what one op costs inside a warm chain of them, as a MoE
// layer's ops and a pipeline's chunks run; docs/MODEL.md §2), else the median
// of the timed iterations after the warm-up, and with options.chain_too also
// the chain after it (chain_time_us).
absl::StatusOr<std::vector<SweepPoint>> SweepCollective(
    comm::Communicator& comm, bandwidth::Collective collective,
    const SweepOptions& options);

// Collective over `comm`: `run` options.warmup_iterations times, then every
// rank meets (an AllGather), then `run` options.iterations times back to back
// (at least once), timed as a whole; returns that chain's time over its
// length, in us: this rank's time of one op in a warm back-to-back chain.
// Without the meeting, or with each iteration timed on its own, ranks drift
// against each other and a rank's iteration also holds part of its peers'
// (issue 18: at 400 Mbit/s the slowest rank's median of five such iterations
// read 0-13% above the chain's time at 1-4 MiB, docs/MODEL.md §2).
absl::StatusOr<double> BackToBackTimeUs(
    comm::Communicator& comm, const SweepOptions& options,
    const std::function<absl::Status()>& run);

// Collective over `comm`: (max over ranks of `time_us`, sum of `wrong`).
absl::StatusOr<std::pair<double, uint64_t>> AgreeAcrossRanks(
    comm::Communicator& comm, double time_us, uint64_t wrong);

}  // namespace monta::bench

#endif  // MONTA_AGENT_BENCH_SWEEP_H_
