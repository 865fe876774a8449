#include "agent/bench/sweep.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/bench/data_pattern.h"

namespace monta::bench {

using ::monta::bandwidth::Collective;

namespace {

// Every warm-up of every run, then the timed iterations round robin
// (iteration i of every run before iteration i+1 of any); returns each run's
// timed iterations in us, in order. With `notify`, options.on_iteration hears
// each (run, iteration, warm-up) before it runs.
absl::StatusOr<std::vector<std::vector<double>>> RoundRobinUs(
    const std::vector<std::function<absl::Status()>>& runs,
    const SweepOptions& options, bool notify) {
  auto heard = [&options, notify](size_t w, int i, bool warmup) {
    if (notify && options.on_iteration) options.on_iteration(w, i, warmup);
  };
  for (size_t w = 0; w < runs.size(); ++w) {
    for (int i = 0; i < options.warmup_iterations; ++i) {
      heard(w, i, true);
      if (absl::Status s = runs[w](); !s.ok()) return s;
    }
  }
  std::vector<std::vector<double>> samples(runs.size());
  for (int i = 0; i < std::max(1, options.iterations); ++i) {
    for (size_t w = 0; w < runs.size(); ++w) {
      heard(w, i, false);
      const absl::Time start = absl::Now();
      if (absl::Status s = runs[w](); !s.ok()) return s;
      samples[w].push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    }
  }
  return samples;
}

// Times `run` alone over warm-up and timed iterations; returns each timed
// iteration in us, in order.
absl::StatusOr<std::vector<double>> IterationsUs(
    const SweepOptions& options, const std::function<absl::Status()>& run) {
  absl::StatusOr<std::vector<std::vector<double>>> samples =
      RoundRobinUs({run}, options, /*notify=*/false);
  if (!samples.ok()) return samples.status();
  return std::move(samples->front());
}

// The median of IterationsUs.
absl::StatusOr<double> MedianTimeUs(const SweepOptions& options,
                                    const std::function<absl::Status()>& run) {
  absl::StatusOr<std::vector<double>> samples = IterationsUs(options, run);
  if (!samples.ok()) return samples.status();
  return bandwidth::Median(*std::move(samples));
}

// This rank's (time, wrong bytes), or with options.agree_across_ranks the
// slowest rank's time and everyone's wrong bytes.
absl::StatusOr<std::pair<double, uint64_t>> MaybeAgree(
    comm::Communicator& comm, const SweepOptions& options, double time_us,
    uint64_t wrong) {
  if (!options.agree_across_ranks) {
    return std::pair<double, uint64_t>{time_us, wrong};
  }
  return AgreeAcrossRanks(comm, time_us, wrong);
}

SweepPoint MakePoint(Collective collective, uint64_t bytes, int nranks,
                     double time_us, uint64_t wrong) {
  SweepPoint p;
  p.bytes = bytes;
  p.count = bytes;
  p.time_us = time_us;
  const double message_bytes = static_cast<double>(bytes);
  p.algbw_gbps =
      bandwidth::AlgBwBytesPerSecond(message_bytes, time_us * 1e-6) / 1e9;
  p.busbw_gbps = bandwidth::BusBwBytesPerSecond(collective, nranks,
                                                message_bytes, time_us * 1e-6) /
                 1e9;
  p.wrong = wrong;
  return p;
}

}  // namespace

DispatchShape ShapeForBytes(uint64_t bytes, int ep_size, uint64_t row_bytes) {
  const uint64_t block = std::max<uint64_t>(1, bytes / std::max(1, ep_size));
  DispatchShape shape;
  shape.row_bytes = std::max<uint64_t>(1, std::min(row_bytes, block));
  shape.rows = std::max<uint64_t>(1, block / shape.row_bytes);
  return shape;
}

absl::StatusOr<double> BackToBackTimeUs(
    comm::Communicator& comm, const SweepOptions& options,
    const std::function<absl::Status()>& run) {
  for (int i = 0; i < options.warmup_iterations; ++i) {
    if (absl::Status s = run(); !s.ok()) return s;
  }
  // The meeting: AgreeAcrossRanks's AllGather, its answer unused.
  if (absl::StatusOr<std::pair<double, uint64_t>> met =
          AgreeAcrossRanks(comm, 0, 0);
      !met.ok()) {
    return met.status();
  }
  const int n = std::max(1, options.iterations);
  const absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = run(); !s.ok()) return s;
  }
  return absl::ToDoubleMicroseconds(absl::Now() - start) / n;
}

absl::StatusOr<std::pair<double, uint64_t>> AgreeAcrossRanks(
    comm::Communicator& comm, double time_us, uint64_t wrong) {
  struct Entry {
    double time_us;
    uint64_t wrong;
  };
  const Entry mine{time_us, wrong};
  std::vector<Entry> all(comm.size());
  absl::StatusOr<std::unique_ptr<comm::Buffer>> send =
      comm.Allocate(sizeof(Entry));
  if (!send.ok()) return send.status();
  absl::StatusOr<std::unique_ptr<comm::Buffer>> recv =
      comm.Allocate(sizeof(Entry) * all.size());
  if (!recv.ok()) return recv.status();
  absl::Status s = comm.CopyFromHost((*send)->data(), &mine, sizeof(mine));
  if (!s.ok()) return s;
  s = comm.AllGather((*send)->data(), (*recv)->data(), sizeof(Entry), {})
          ->Wait();
  if (!s.ok()) return s;
  s = comm.CopyToHost(all.data(), (*recv)->data(), sizeof(Entry) * all.size());
  if (!s.ok()) return s;
  std::pair<double, uint64_t> agreed{0, 0};
  for (const Entry& e : all) {
    agreed.first = std::max(agreed.first, e.time_us);
    agreed.second += e.wrong;
  }
  return agreed;
}

namespace {

// A workload of MeasureInterleaved, created and data-checked.
struct Prepared {
  std::unique_ptr<LayerSchedule> layer;  // or
  std::unique_ptr<DispatchSchedule> op;
  uint64_t wrong = 0;

  absl::Status Run() { return layer ? layer->Run() : op->Run(); }
  uint64_t bytes() const {
    return layer ? layer->bytes_per_rank() : op->bytes_per_rank();
  }
  int chunks_effective() const {
    return layer ? layer->effective_chunks() : op->effective_chunks();
  }
};

// Creates `w`'s schedule from `pool` and checks it at once, on poisoned
// outputs (so a schedule that leaves bytes unwritten cannot pass on an
// earlier iteration's result), before the next workload's Create may
// overwrite the input it shares.
absl::StatusOr<Prepared> Prepare(const JobWorkload& w, BufferPool& pool) {
  Prepared p;
  absl::StatusOr<uint64_t> wrong;
  if (w.layout.has_value()) {
    absl::StatusOr<std::unique_ptr<LayerSchedule>> layer =
        LayerSchedule::Create(*w.groups, w.strategy, w.chunks, w.shape,
                              *w.layout, &pool);
    if (!layer.ok()) return layer.status();
    p.layer = *std::move(layer);
    wrong = p.layer->CountWrongBytes();
  } else {
    absl::StatusOr<std::unique_ptr<DispatchSchedule>> op =
        DispatchSchedule::Create(*w.groups, w.strategy, w.chunks, w.shape,
                                 Step::kExchange, &pool);
    if (!op.ok()) return op.status();
    p.op = *std::move(op);
    absl::Status s = p.op->PoisonOutput();
    if (s.ok()) s = p.op->Run();
    wrong = s.ok() ? p.op->CountWrongBytes() : absl::StatusOr<uint64_t>(s);
  }
  if (!wrong.ok()) return wrong.status();
  p.wrong = *wrong;
  return p;
}

}  // namespace

absl::StatusOr<std::vector<SweepPoint>> MeasureInterleaved(
    const std::vector<JobWorkload>& workloads, const SweepOptions& options,
    BufferPool* pool) {
  if (workloads.empty()) return std::vector<SweepPoint>{};
  for (const JobWorkload& w : workloads) {
    if (w.groups == nullptr || w.groups->world != workloads[0].groups->world) {
      return absl::InvalidArgumentError(
          "workloads: each needs groups over the same world");
    }
  }
  std::optional<BufferPool> own;
  if (pool == nullptr) pool = &own.emplace(*workloads[0].groups->world);
  std::vector<Prepared> prepared;
  for (const JobWorkload& w : workloads) {
    absl::StatusOr<Prepared> p = Prepare(w, *pool);
    if (!p.ok()) return p.status();
    prepared.push_back(*std::move(p));
  }
  std::vector<std::function<absl::Status()>> runs;
  for (Prepared& p : prepared) runs.push_back([&p] { return p.Run(); });
  absl::StatusOr<std::vector<std::vector<double>>> samples =
      RoundRobinUs(runs, options, /*notify=*/true);
  if (!samples.ok()) return samples.status();
  std::vector<SweepPoint> points;
  for (size_t w = 0; w < prepared.size(); ++w) {
    MoeGroups& groups = *workloads[w].groups;
    absl::StatusOr<std::pair<double, uint64_t>> agreed =
        MaybeAgree(*groups.world, options, bandwidth::Median((*samples)[w]),
                   prepared[w].wrong);
    if (!agreed.ok()) return agreed.status();
    SweepPoint p = MakePoint(Collective::kAllToAll, prepared[w].bytes(),
                             groups.ep->size(), agreed->first, agreed->second);
    p.chunks_effective = prepared[w].chunks_effective();
    p.iteration_us = std::move((*samples)[w]);
    points.push_back(std::move(p));
  }
  return points;
}

namespace {

// One workload alone.
absl::StatusOr<SweepPoint> MeasureOne(const JobWorkload& w,
                                      const SweepOptions& options) {
  absl::StatusOr<std::vector<SweepPoint>> points =
      MeasureInterleaved({w}, options);
  if (!points.ok()) return points.status();
  return std::move(points->front());
}

// SweepOptions::chain_too: after the median's iterations (the op is warm),
// the chain of options.iterations more without a second warm-up, agreed as
// the median (with agree_across_ranks the slowest rank's).
absl::StatusOr<double> ChainAfterMedianUs(
    comm::Communicator& comm, const SweepOptions& options,
    const std::function<absl::Status()>& run) {
  SweepOptions warm = options;
  warm.warmup_iterations = 0;
  absl::StatusOr<double> chain_us = BackToBackTimeUs(comm, warm, run);
  if (!chain_us.ok()) return chain_us.status();
  absl::StatusOr<std::pair<double, uint64_t>> agreed =
      MaybeAgree(comm, options, *chain_us, 0);
  if (!agreed.ok()) return agreed.status();
  return agreed->first;
}

}  // namespace

absl::StatusOr<SweepPoint> MeasureDispatch(MoeGroups& groups, Strategy strategy,
                                           int chunks, DispatchShape shape,
                                           const SweepOptions& options) {
  return MeasureOne({&groups, strategy, chunks, shape, std::nullopt}, options);
}

absl::StatusOr<SweepPoint> MeasureLayer(MoeGroups& groups, Strategy strategy,
                                        int chunks, DispatchShape shape,
                                        ExpertLayout layout,
                                        const SweepOptions& options) {
  return MeasureOne({&groups, strategy, chunks, shape, layout}, options);
}

absl::StatusOr<std::vector<SweepPoint>> SweepStrategy(
    MoeGroups& groups, Strategy strategy, int chunks,
    const SweepOptions& options) {
  std::vector<SweepPoint> points;
  const int e = groups.ep->size();
  for (uint64_t bytes : bandwidth::SweepSizes(
           options.min_bytes, options.max_bytes, options.step_factor)) {
    absl::StatusOr<SweepPoint> p =
        MeasureDispatch(groups, strategy, chunks,
                        ShapeForBytes(bytes, e, options.row_bytes), options);
    if (!p.ok()) return p.status();
    points.push_back(*p);
  }
  return points;
}

absl::StatusOr<std::vector<ChunkCurve>> SweepChunks(
    MoeGroups& groups, Strategy strategy, const std::vector<int>& chunks,
    const SweepOptions& options) {
  std::vector<ChunkCurve> curves;
  for (int k : chunks) {
    absl::StatusOr<std::vector<SweepPoint>> points =
        SweepStrategy(groups, strategy, k, options);
    if (!points.ok()) return points.status();
    curves.push_back(ChunkCurve{k, std::move(*points)});
  }
  return curves;
}

absl::StatusOr<std::vector<SweepPoint>> SweepCollective(
    comm::Communicator& comm, Collective collective,
    const SweepOptions& options) {
  std::vector<SweepPoint> points;
  const int n = comm.size(), me = comm.rank();
  for (uint64_t size :
       bandwidth::SweepMessageBytes(collective, n, options.min_bytes,
                                    options.max_bytes, options.step_factor)) {
    // Per-rank buffers, and the nccl-tests size the point is reported at.
    const bandwidth::CollectiveBuffers buffers =
        bandwidth::BuffersFor(collective, n, size);
    const uint64_t in_bytes = buffers.in_bytes;
    const uint64_t out_bytes = buffers.out_bytes;
    const uint64_t bytes = buffers.message_bytes;
    absl::StatusOr<std::unique_ptr<comm::Buffer>> in = comm.Allocate(in_bytes);
    if (!in.ok()) return in.status();
    absl::StatusOr<std::unique_ptr<comm::Buffer>> out =
        comm.Allocate(out_bytes);
    if (!out.ok()) return out.status();
    // Input: block for destination d (AllToAll) or the rank's own block.
    std::vector<uint8_t> host(in_bytes);
    const uint64_t block =
        collective == Collective::kAllToAll ? in_bytes / n : in_bytes;
    for (uint64_t d = 0; d * block < in_bytes; ++d) {
      FillRow(&host[d * block], me, static_cast<int>(d), 0, block);
    }
    absl::Status s = comm.CopyFromHost((*in)->data(), host.data(), in_bytes);
    if (!s.ok()) return s;
    auto run = [&]() -> absl::Status {
      switch (collective) {
        case Collective::kAllToAll:
          return comm.AllToAll((*in)->data(), (*out)->data(), block, {})
              ->Wait();
        case Collective::kAllGather:
          return comm.AllGather((*in)->data(), (*out)->data(), in_bytes, {})
              ->Wait();
        case Collective::kCopy:
          return comm
              .Copy((*out)->data(), in_bytes, (*in)->data(), in_bytes, in_bytes,
                    1, {})
              ->Wait();
      }
      return absl::InternalError("unknown collective");
    };
    std::vector<uint8_t> poison(out_bytes, 0xA5);
    s = comm.CopyFromHost((*out)->data(), poison.data(), out_bytes);
    if (!s.ok()) return s;
    s = run();
    if (!s.ok()) return s;
    std::vector<uint8_t> got(out_bytes);
    s = comm.CopyToHost(got.data(), (*out)->data(), out_bytes);
    if (!s.ok()) return s;
    uint64_t wrong = 0;
    const uint64_t out_block =
        collective == Collective::kCopy ? out_bytes : out_bytes / n;
    for (uint64_t k = 0; k * out_block < out_bytes; ++k) {
      // AllToAll: block k came from rank k for me; AllGather: rank k's own
      // block; copy: my own block 0.
      const int src =
          collective == Collective::kCopy ? me : static_cast<int>(k);
      const int dst = collective == Collective::kAllToAll ? me : 0;
      wrong += CountWrongInRow(&got[k * out_block], src, dst, 0, out_block);
    }
    absl::StatusOr<double> time_us = options.back_to_back
                                         ? BackToBackTimeUs(comm, options, run)
                                         : MedianTimeUs(options, run);
    if (!time_us.ok()) return time_us.status();
    absl::StatusOr<std::pair<double, uint64_t>> agreed =
        MaybeAgree(comm, options, *time_us, wrong);
    if (!agreed.ok()) return agreed.status();
    points.push_back(
        MakePoint(collective, bytes, n, agreed->first, agreed->second));
    if (options.chain_too && !options.back_to_back) {
      absl::StatusOr<double> chain_us = ChainAfterMedianUs(comm, options, run);
      if (!chain_us.ok()) return chain_us.status();
      points.back().chain_time_us = *chain_us;
    }
  }
  return points;
}

}  // namespace monta::bench
