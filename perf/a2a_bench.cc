// monta-a2a-bench: nccl-tests-style benchmark of Monta's MoE dispatch
// schedules (flat, tp_dedup, tp_dedup_pipelined(K), hierarchical) and plain
// collectives, on Gloo (CPUs over TCP) or NCCL (GPUs), with data checks.
//
//   monta-a2a-bench --backend=gloo --ranks=4 --strategy=flat
//   monta-a2a-bench --mode=compare_gloo --min_bytes=65536 --max_bytes=16777216
//   monta-a2a-bench --mode=pipeline_report --tp=2
//
// Several hosts, the way nccl-tests runs under MPI: every host starts its ranks
// with the same --world and a rendezvous directory all of them can reach
// (a shared file system), and listens on its own address (--hostname):
//   host A: monta-a2a-bench --world=4 --host_index=0 --ranks_per_host=2
//             --rendezvous_dir=/shared/run1 --hostname=10.0.0.1 --strategy=flat
//   host B: monta-a2a-bench --world=4 --host_index=1 --ranks_per_host=2
//             --rendezvous_dir=/shared/run1 --hostname=10.0.0.2 --strategy=flat
// or one process per rank: --world=4 --rank=R. Global rank 0 prints.
//
// Exit status: 0 when every point's data check passed, 1 on wrong bytes,
// 2 on errors (including "no GPU" for --backend=nccl on a machine without).
#include <gloo/alltoall.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "agent/bench/moe_groups.h"
#include "agent/bench/schedule.h"
#include "agent/bench/sweep.h"
#include "agent/comm/communicator.h"
#include "agent/comm/communicator_factory.h"
#include "agent/comm/rendezvous_store.h"
#include "common/bandwidth/bandwidth.h"
#include "common/flags.h"
#include "perf/tcp_store.h"

ABSL_FLAG(std::string, backend, "gloo", "gloo | nccl");
ABSL_FLAG(int, ranks, 4,
          "ranks on this machine (nccl: 0 = one per GPU; ranks are spread "
          "over the GPUs round-robin)");
ABSL_FLAG(std::string, launch, "threads",
          "threads | processes: how the ranks of this machine run");
ABSL_FLAG(std::string, mode, "sweep",
          "sweep | compare_gloo (engine flat AllToAll vs direct "
          "gloo::alltoall) | pipeline_report (tp_dedup_pipelined K=1,4,16 vs "
          "tp_dedup)");
ABSL_FLAG(std::string, strategy, "flat",
          "flat | tp_dedup | tp_dedup_pipelined | hierarchical | alltoall | "
          "allgather | copy");
ABSL_FLAG(std::vector<std::string>, chunks, {"1"},
          "K values for tp_dedup_pipelined, comma-separated (one table each)");
ABSL_FLAG(int, tp, 1, "tensor-parallel size t (world = t * e)");
ABSL_FLAG(int, ranks_per_node, 0,
          "ranks per (emulated) node for hierarchical; 0 = all on one node");
ABSL_FLAG(uint64_t, min_bytes, 1024, "smallest size (bytes per rank)");
ABSL_FLAG(uint64_t, max_bytes, 16 << 20, "largest size (bytes per rank)");
ABSL_FLAG(int, step_factor, 2, "size multiplier between points");
ABSL_FLAG(int, iters, 20, "timed iterations per size (median reported)");
ABSL_FLAG(int, warmup, 5, "warm-up iterations per size");
ABSL_FLAG(uint64_t, row_bytes, 1024,
          "capacity-row bytes (hidden size x bytes per element)");
ABSL_FLAG(bool, json, false, "print JSON instead of the table");
ABSL_FLAG(std::string, hostname, "127.0.0.1", "Gloo listen address");
ABSL_FLAG(int, timeout_s, 120, "rendezvous and per-operation timeout");
ABSL_FLAG(int, world, 0,
          "multi-host: ranks on all hosts together (0 = single machine: "
          "--ranks ranks here)");
ABSL_FLAG(int, rank, -1,
          "multi-host: the one global rank this process runs (with --world)");
ABSL_FLAG(int, host_index, -1,
          "multi-host: this host runs global ranks [host_index * "
          "ranks_per_host, + ranks_per_host) (with --world)");
ABSL_FLAG(int, ranks_per_host, 0,
          "multi-host with --host_index: ranks on this host (0 = --ranks); "
          "also the node size of hierarchical unless --ranks_per_node is set");
ABSL_FLAG(std::string, rendezvous_dir, "",
          "multi-host: a directory every host reads and writes (shared file "
          "system); use a fresh one, or a fresh --run_id, per run");
ABSL_FLAG(std::string, rendezvous, "",
          "multi-host: rendezvous over TCP instead of a directory: host:port "
          "(IPv4) that the process running global rank 0 serves and every "
          "rank reaches");
ABSL_FLAG(std::string, run_id, "a2a",
          "multi-host: scopes the rendezvous keys of one run");

namespace monta::perf {
namespace {

using bench::SweepPoint;

struct RankResult {
  std::string text;  // what rank 0 prints
  bool wrong = false;
};

absl::StatusOr<std::unique_ptr<comm::Communicator>> MakeWorld(
    std::shared_ptr<comm::RendezvousStore> store, int rank, int size) {
  absl::StatusOr<comm::Backend> backend =
      comm::ParseBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  comm::CommunicatorOptions options;
  options.hostname = absl::GetFlag(FLAGS_hostname);
  options.op_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  return comm::CreateCommunicator(*backend, std::move(store), "bench/world",
                                  rank, size, options,
                                  absl::Now() + options.op_timeout);
}

bench::SweepOptions SweepFlags() {
  bench::SweepOptions o;
  o.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  o.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  o.step_factor = absl::GetFlag(FLAGS_step_factor);
  o.iterations = absl::GetFlag(FLAGS_iters);
  o.warmup_iterations = absl::GetFlag(FLAGS_warmup);
  o.row_bytes = absl::GetFlag(FLAGS_row_bytes);
  return o;
}

std::string Table(const std::string& title,
                  const std::vector<SweepPoint>& points, bool with_chunks) {
  std::string out = absl::StrCat("# ", title, "\n");
  absl::StrAppendFormat(&out, "#%14s %12s %7s %12s %12s %12s %8s%s\n", "size",
                        "count", "type", "time(us)", "algbw(GB/s)",
                        "busbw(GB/s)", "#wrong", with_chunks ? "  K_eff" : "");
  for (const SweepPoint& p : points) {
    absl::StrAppendFormat(&out, "%15d %12d %7s %12.2f %12.3f %12.3f %8d",
                          p.bytes, p.count, p.type, p.time_us, p.algbw_gbps,
                          p.busbw_gbps, p.wrong);
    if (with_chunks) absl::StrAppendFormat(&out, " %6d", p.chunks_effective);
    out += "\n";
  }
  return out;
}

std::string Json(const std::string& title,
                 const std::vector<SweepPoint>& points) {
  std::string out = absl::StrFormat(
      "{\"benchmark\": \"%s\", \"backend\": \"%s\", \"points\": [", title,
      absl::GetFlag(FLAGS_backend));
  for (size_t i = 0; i < points.size(); ++i) {
    const SweepPoint& p = points[i];
    absl::StrAppendFormat(
        &out,
        "%s{\"size\": %d, \"count\": %d, \"type\": \"%s\", \"time_us\": %.3f, "
        "\"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": %d, "
        "\"chunks_effective\": %d}",
        i ? ", " : "", p.bytes, p.count, p.type, p.time_us, p.algbw_gbps,
        p.busbw_gbps, p.wrong, p.chunks_effective);
  }
  return out + "]}\n";
}

bool AnyWrong(const std::vector<SweepPoint>& points) {
  for (const SweepPoint& p : points) {
    if (p.wrong != 0) return true;
  }
  return false;
}

absl::StatusOr<std::vector<int>> ChunkFlags() {
  std::vector<int> chunks;
  for (const std::string& k : absl::GetFlag(FLAGS_chunks)) {
    int value = 0;
    if (!absl::SimpleAtoi(k, &value) || value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chunks: '", k, "' is not a positive integer"));
    }
    chunks.push_back(value);
  }
  if (chunks.empty()) chunks.push_back(1);
  return chunks;
}

absl::StatusOr<RankResult> RunSweep(comm::Communicator& world) {
  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  const bench::SweepOptions options = SweepFlags();
  const std::string title =
      absl::StrFormat("monta-a2a-bench %s: backend %s, %d ranks, strategy %s",
                      absl::GetFlag(FLAGS_launch), absl::GetFlag(FLAGS_backend),
                      world.size(), strategy);
  RankResult result;
  const auto emit = [&](const std::string& heading,
                        const std::vector<SweepPoint>& points,
                        bool with_chunks) {
    result.wrong |= AnyWrong(points);
    result.text += absl::GetFlag(FLAGS_json)
                       ? Json(heading, points)
                       : Table(heading, points, with_chunks);
  };
  if (strategy == "alltoall" || strategy == "allgather" || strategy == "copy") {
    using bandwidth::Collective;
    const Collective c = strategy == "alltoall"    ? Collective::kAllToAll
                         : strategy == "allgather" ? Collective::kAllGather
                                                   : Collective::kCopy;
    absl::StatusOr<std::vector<SweepPoint>> points =
        bench::SweepCollective(world, c, options);
    if (!points.ok()) return points.status();
    emit(title, *points, false);
    return result;
  }
  absl::StatusOr<bench::Strategy> s = bench::ParseStrategy(strategy);
  if (!s.ok()) return s.status();
  absl::StatusOr<std::vector<int>> chunks = ChunkFlags();
  if (!chunks.ok()) return chunks.status();
  if (*s != bench::Strategy::kTpDedupPipelined) *chunks = {1};
  bench::MoeLayout layout{absl::GetFlag(FLAGS_tp),
                          absl::GetFlag(FLAGS_ranks_per_node)};
  absl::StatusOr<bench::MoeGroups> groups = bench::MakeMoeGroups(
      world, layout,
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!groups.ok()) return groups.status();
  absl::StatusOr<std::vector<bench::ChunkCurve>> curves =
      bench::SweepChunks(*groups, *s, *chunks, options);
  if (!curves.ok()) return curves.status();
  for (const bench::ChunkCurve& curve : *curves) {
    emit(absl::StrFormat("%s, chunks %d, tp %d, ep %d, row_bytes %d", title,
                         curve.chunks, layout.tp_size, groups->ep->size(),
                         options.row_bytes),
         curve.points, *s == bench::Strategy::kTpDedupPipelined);
  }
  return result;
}

// The direct side of compare_gloo: plain Gloo, the way a Gloo user would
// write it, one context per rank with its own TCP pairs.
std::shared_ptr<gloo::rendezvous::Context> ConnectDirectGloo(
    int me, int n, gloo::rendezvous::Store& gloo_store) {
  gloo::transport::tcp::attr attr;
  attr.hostname = absl::GetFlag(FLAGS_hostname);
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(me, n);
  context->setTimeout(std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
  gloo::rendezvous::PrefixStore prefixed("direct", gloo_store);
  context->connectFullMesh(prefixed, device);
  return context;
}

// One row of the compare_gloo table.
struct ComparedSize {
  std::string line;
  bool wrong = false;
};

// Times the engine's flat AllToAll and direct gloo::alltoall on the same
// bytes at one size, and formats the row.
absl::StatusOr<ComparedSize> CompareGlooAtSize(
    comm::Communicator& world, bench::MoeGroups& groups,
    const std::shared_ptr<gloo::rendezvous::Context>& context,
    const bench::SweepOptions& options, uint64_t size) {
  const int n = world.size(), me = world.rank();
  absl::StatusOr<std::unique_ptr<bench::DispatchSchedule>> schedule =
      bench::DispatchSchedule::Create(
          groups, bench::Strategy::kFlat, 1,
          bench::ShapeForBytes(size, n, options.row_bytes));
  if (!schedule.ok()) return schedule.status();
  bench::DispatchSchedule& engine = **schedule;
  absl::Status s = engine.PoisonOutput();
  if (s.ok()) s = engine.Run();
  if (!s.ok()) return s;
  absl::StatusOr<uint64_t> wrong = engine.CountWrongBytes();
  if (!wrong.ok()) return wrong.status();
  // Same bytes as the engine moves.
  const uint64_t bytes = engine.bytes_per_rank();
  std::vector<uint8_t> in(bytes, static_cast<uint8_t>(me)), out_buf(bytes);
  // Engine and direct alternate iteration by iteration, so drift in the
  // machine's load (other work on a shared host) hits both alike.
  std::vector<double> engine_us, direct_us;
  for (int i = 0; i < options.warmup_iterations + options.iterations; ++i) {
    const absl::Time t0 = absl::Now();
    s = engine.Run();
    if (!s.ok()) return s;
    const absl::Time t1 = absl::Now();
    gloo::AlltoallOptions opts(context);
    opts.setInput(in.data(), in.size());
    opts.setOutput(out_buf.data(), out_buf.size());
    opts.setTag(static_cast<uint32_t>(i));
    gloo::alltoall(opts);
    const absl::Time t2 = absl::Now();
    if (i >= options.warmup_iterations) {
      engine_us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
      direct_us.push_back(absl::ToDoubleMicroseconds(t2 - t1));
    }
  }
  // Both sides reported like the sweeps: the slowest rank's median.
  absl::StatusOr<std::pair<double, uint64_t>> e_agreed =
      bench::AgreeAcrossRanks(world, bandwidth::Median(engine_us), *wrong);
  if (!e_agreed.ok()) return e_agreed.status();
  absl::StatusOr<std::pair<double, uint64_t>> d_agreed =
      bench::AgreeAcrossRanks(world, bandwidth::Median(direct_us), 0);
  if (!d_agreed.ok()) return d_agreed.status();
  const auto busbw_gbps = [&](double us) {
    return bandwidth::BusBwBytesPerSecond(bandwidth::Collective::kAllToAll, n,
                                          static_cast<double>(bytes),
                                          us * 1e-6) /
           1e9;
  };
  const double e_bus = busbw_gbps(e_agreed->first);
  const double d_bus = busbw_gbps(d_agreed->first);
  ComparedSize row;
  row.wrong = e_agreed->second != 0;
  row.line = absl::StrFormat("%15d %14.1f %14.1f %16.3f %16.3f %8.3f %8d\n",
                             bytes, e_agreed->first, d_agreed->first, e_bus,
                             d_bus, e_bus / d_bus, e_agreed->second);
  return row;
}

// Direct gloo::alltoall for comparison: one context per rank with its own TCP
// pairs, called on the rank's thread, nothing of Monta in between.
absl::StatusOr<RankResult> RunCompareGloo(comm::Communicator& world,
                                          gloo::rendezvous::Store& gloo_store) {
  if (absl::GetFlag(FLAGS_backend) != "gloo" ||
      absl::GetFlag(FLAGS_launch) != "threads") {
    return absl::InvalidArgumentError(
        "compare_gloo needs --backend=gloo --launch=threads");
  }
  const int n = world.size(), me = world.rank();
  const std::shared_ptr<gloo::rendezvous::Context> context =
      ConnectDirectGloo(me, n, gloo_store);

  bench::MoeLayout layout{1, 0};
  absl::StatusOr<bench::MoeGroups> groups = bench::MakeMoeGroups(
      world, layout,
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!groups.ok()) return groups.status();
  bench::SweepOptions options = SweepFlags();
  const std::vector<uint64_t> sizes = bandwidth::SweepSizes(
      options.min_bytes, options.max_bytes, options.step_factor);
  RankResult result;
  result.text = absl::StrFormat(
      "# engine flat AllToAll (GlooCommunicator + schedule; data check "
      "outside timing) vs direct gloo::alltoall, interleaved, %d ranks, "
      "threads; busbw in GB/s, ratio = engine/direct\n"
      "#%14s %14s %14s %16s %16s %8s %8s\n",
      n, "size", "engine(us)", "direct(us)", "engine busbw", "direct busbw",
      "ratio", "#wrong");
  for (uint64_t size : sizes) {
    absl::StatusOr<ComparedSize> row =
        CompareGlooAtSize(world, *groups, context, options, size);
    if (!row.ok()) return row.status();
    result.text += row->line;
    result.wrong |= row->wrong;
  }
  return result;
}

absl::StatusOr<RankResult> RunPipelineReport(comm::Communicator& world) {
  bench::MoeLayout layout{absl::GetFlag(FLAGS_tp),
                          absl::GetFlag(FLAGS_ranks_per_node)};
  absl::StatusOr<bench::MoeGroups> groups = bench::MakeMoeGroups(
      world, layout,
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!groups.ok()) return groups.status();
  const bench::SweepOptions options = SweepFlags();
  struct Column {
    std::string name;
    bench::Strategy strategy;
    int chunks;
  };
  const std::vector<Column> columns = {
      {"flat", bench::Strategy::kFlat, 1},
      {"tp_dedup", bench::Strategy::kTpDedup, 1},
      {"pipe K=1", bench::Strategy::kTpDedupPipelined, 1},
      {"pipe K=4", bench::Strategy::kTpDedupPipelined, 4},
      {"pipe K=16", bench::Strategy::kTpDedupPipelined, 16},
  };
  std::vector<std::vector<SweepPoint>> results;
  bool wrong_any = false;
  for (const Column& c : columns) {
    absl::StatusOr<std::vector<SweepPoint>> points =
        bench::SweepStrategy(*groups, c.strategy, c.chunks, options);
    if (!points.ok()) return points.status();
    wrong_any |= AnyWrong(*points);
    results.push_back(std::move(*points));
  }
  std::string out = absl::StrFormat(
      "# %s, %d ranks, tp %d, ep %d, row_bytes %d: median time (us) per "
      "dispatch of D bytes per rank; speedup = tp_dedup time / time; "
      "K_eff in ()\n#%14s",
      absl::GetFlag(FLAGS_backend), world.size(), layout.tp_size,
      groups->ep->size(), options.row_bytes, "D bytes");
  for (const Column& c : columns) absl::StrAppendFormat(&out, " %12s", c.name);
  out += "   speedup K=1/4/16  #wrong\n";
  for (size_t i = 0; i < results[0].size(); ++i) {
    absl::StrAppendFormat(&out, "%15d", results[0][i].bytes);
    uint64_t wrong = 0;
    for (size_t c = 0; c < columns.size(); ++c) {
      const SweepPoint& p = results[c][i];
      wrong += p.wrong;
      if (columns[c].strategy == bench::Strategy::kTpDedupPipelined) {
        absl::StrAppendFormat(&out, " %8.1f(%2d)", p.time_us,
                              p.chunks_effective);
      } else {
        absl::StrAppendFormat(&out, " %12.1f", p.time_us);
      }
    }
    const double s1 = results[1][i].time_us;
    absl::StrAppendFormat(
        &out, "   %5.2f/%5.2f/%5.2f  %6d\n", s1 / results[2][i].time_us,
        s1 / results[3][i].time_us, s1 / results[4][i].time_us, wrong);
  }
  RankResult result;
  result.text = out;
  result.wrong = wrong_any;
  return result;
}

// State the ranks of thread mode share.
struct Shared {
  gloo::rendezvous::HashStore gloo_store;  // for the direct Gloo side
};

// Runs one rank; returns its exit code. Rank 0 prints the result.
int RunRank(std::shared_ptr<comm::RendezvousStore> store, Shared* shared,
            int rank, int size) {
  absl::StatusOr<std::unique_ptr<comm::Communicator>> world =
      MakeWorld(store, rank, size);
  absl::StatusOr<RankResult> result;
  if (!world.ok()) {
    result = world.status();
  } else {
    const std::string mode = absl::GetFlag(FLAGS_mode);
    try {
      if (mode == "sweep") {
        result = RunSweep(**world);
      } else if (mode == "compare_gloo") {
        if (shared == nullptr) {
          result =
              absl::InvalidArgumentError("compare_gloo needs --launch=threads");
        } else {
          result = RunCompareGloo(**world, shared->gloo_store);
        }
      } else if (mode == "pipeline_report") {
        result = RunPipelineReport(**world);
      } else {
        result = absl::InvalidArgumentError(
            absl::StrCat("unknown mode '", mode, "'"));
      }
    } catch (const std::exception& e) {  // direct Gloo calls throw
      result = absl::InternalError(e.what());
    }
  }
  if (!result.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 result.status().ToString().c_str());
    return 2;
  }
  if (rank == 0) std::fputs(result->text.c_str(), stdout);
  return result->wrong ? 1 : 0;
}

// Which global ranks this process runs, out of how many.
struct Placement {
  int world = 0;
  std::vector<int> ranks;
};

absl::StatusOr<Placement> PlaceRanks(int ranks_here) {
  const int world = absl::GetFlag(FLAGS_world);
  const int rank = absl::GetFlag(FLAGS_rank);
  const int host_index = absl::GetFlag(FLAGS_host_index);
  Placement p;
  if (world == 0) {
    if (rank >= 0 || host_index >= 0) {
      return absl::InvalidArgumentError("--rank and --host_index need --world");
    }
    p.world = ranks_here;
    for (int r = 0; r < ranks_here; ++r) p.ranks.push_back(r);
    return p;
  }
  if (world < 1) return absl::InvalidArgumentError("--world must be >= 1");
  if (absl::GetFlag(FLAGS_rendezvous_dir).empty() ==
      absl::GetFlag(FLAGS_rendezvous).empty()) {
    return absl::InvalidArgumentError(
        "--world needs one of --rendezvous_dir (a directory all hosts share) "
        "and --rendezvous (host:port)");
  }
  if ((rank >= 0) == (host_index >= 0)) {
    return absl::InvalidArgumentError(
        "--world needs exactly one of --rank and --host_index");
  }
  p.world = world;
  if (rank >= 0) {
    if (rank >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rank ", rank, " is not in [0, ", world, ")"));
    }
    p.ranks.push_back(rank);
    return p;
  }
  const int per_host = absl::GetFlag(FLAGS_ranks_per_host) > 0
                           ? absl::GetFlag(FLAGS_ranks_per_host)
                           : ranks_here;
  if (per_host < 1 || world % per_host != 0 || host_index >= world / per_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_index ", host_index, " with ", per_host,
                     " ranks per host does not fit --world ", world));
  }
  for (int r = 0; r < per_host; ++r)
    p.ranks.push_back(host_index * per_host + r);
  // Hierarchical's node is the host unless said otherwise.
  if (absl::GetFlag(FLAGS_ranks_per_node) == 0) {
    absl::SetFlag(&FLAGS_ranks_per_node, per_host);
  }
  return p;
}

// Runs `placement`'s ranks as threads sharing `store`; the worst exit code.
int RunThreads(const Placement& placement,
               std::shared_ptr<comm::RendezvousStore> store, Shared* shared) {
  std::vector<int> codes(placement.ranks.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < placement.ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      codes[i] = RunRank(store, shared, placement.ranks[i], placement.world);
    });
  }
  for (auto& t : threads) t.join();
  return *std::max_element(codes.begin(), codes.end());
}

using StoreFactory = std::function<std::shared_ptr<comm::RendezvousStore>()>;

// Runs `placement`'s ranks as forked processes, each meeting the others
// through a store of its own from `make_store`, and `after_fork` in the
// parent (which has no threads before it); the worst exit code.
int RunProcesses(
    const Placement& placement, const StoreFactory& make_store,
    const std::function<void()>& after_fork = [] {}) {
  // Fork before any thread exists.
  std::vector<pid_t> children;
  for (int r : placement.ranks) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 2;
    }
    if (pid == 0) {
      const int code = RunRank(make_store(), nullptr, r, placement.world);
      // _exit skips stdio's flush at exit.
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    children.push_back(pid);
  }
  after_fork();
  int worst = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
    worst = std::max(worst, code);
  }
  return worst;
}

// NCCL's ranks here: --ranks, or one per GPU; -1 after printing why not.
int NcclRanksHere(int ranks) {
  // The pipelined schedules run NCCL kernels of two communicators (EP and
  // TP) concurrently on one GPU; ordering their launches by host program
  // order (the same on every rank) rules out cross-communicator deadlock.
  setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", /*overwrite=*/0);
  // CUDA must not be initialized before fork(), so only thread mode asks
  // for the device count here (in process mode each rank fails by itself).
  if (absl::GetFlag(FLAGS_launch) != "processes" || !comm::NcclBuilt()) {
    absl::StatusOr<int> gpus = comm::GpuCount();
    if (!gpus.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(gpus.status().message()).c_str());
      return -1;
    }
    if (ranks <= 0) ranks = *gpus;
  }
  return ranks;
}

// Ranks of several hosts: they meet in --rendezvous_dir or through the TCP
// store at --rendezvous, which the process with global rank 0 serves (started
// after any fork: the parent of forked ranks only waits).
int RunMultiHost(const Placement& placement, const std::string& launch) {
  const std::string shared_dir = absl::GetFlag(FLAGS_rendezvous_dir);
  const std::string tcp_address = absl::GetFlag(FLAGS_rendezvous);
  const std::string run_id = absl::GetFlag(FLAGS_run_id);
  const bool serve = !tcp_address.empty() && placement.ranks[0] == 0;
  const StoreFactory make_store = [&]() {
    std::shared_ptr<comm::RendezvousStore> base;
    if (tcp_address.empty()) {
      base = std::make_shared<comm::FileStore>(shared_dir);
    } else {
      base = std::make_shared<TcpStore>(tcp_address);
    }
    return std::make_shared<comm::PrefixStore>(run_id, std::move(base));
  };
  std::unique_ptr<TcpStoreServer> server;
  const auto start_server = [&] {
    if (!serve) return;
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> started =
        TcpStoreServer::Start(tcp_address);
    if (started.ok()) {
      server = std::move(*started);
    } else {  // the ranks say so too: they time out naming the address
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
    }
  };
  if (launch == "processes") {
    return RunProcesses(placement, make_store, start_server);
  }
  start_server();
  return RunThreads(placement, make_store(), nullptr);
}

int Main() {
  int ranks = absl::GetFlag(FLAGS_ranks);
  if (absl::GetFlag(FLAGS_backend) == "nccl") {
    ranks = NcclRanksHere(ranks);
    if (ranks < 0) return 2;
  }
  if (ranks < 1) {
    std::fprintf(stderr, "--ranks must be >= 1\n");
    return 2;
  }
  absl::StatusOr<Placement> placement = PlaceRanks(ranks);
  if (!placement.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(placement.status().message()).c_str());
    return 2;
  }
  const std::string launch = absl::GetFlag(FLAGS_launch);
  if (launch != "threads" && launch != "processes") {
    std::fprintf(stderr, "unknown --launch '%s'\n", launch.c_str());
    return 2;
  }
  const std::string run_id = absl::GetFlag(FLAGS_run_id);
  if (absl::GetFlag(FLAGS_world) > 0) return RunMultiHost(*placement, launch);
  if (launch == "threads") {
    Shared shared;
    return RunThreads(*placement, std::make_shared<comm::InMemoryStore>(),
                      &shared);
  }
  char dir_template[] = "/tmp/monta-a2a-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string directory = dir_template;
  const int worst = RunProcesses(*placement, [&]() {
    return std::make_shared<comm::PrefixStore>(
        run_id, std::make_shared<comm::FileStore>(directory));
  });
  std::string cleanup = absl::StrCat("rm -rf '", dir_template, "'");
  if (std::system(cleanup.c_str()) != 0) {
    std::fprintf(stderr, "could not remove %s\n", dir_template);
  }
  return worst;
}

}  // namespace
}  // namespace monta::perf

int main(int argc, char** argv) {
  monta::ParseFlags(
      argc, argv,
      "nccl-tests-style benchmark of Monta's MoE dispatch "
      "schedules and plain collectives, on Gloo (CPUs) or NCCL (GPUs).\n\n"
      "Usage: monta-a2a-bench [flags]\n"
      "Examples:\n"
      "  monta-a2a-bench --backend=gloo --ranks=4 --strategy=flat\n"
      "  monta-a2a-bench --mode=compare_gloo --min_bytes=65536 "
      "--max_bytes=16777216\n"
      "  monta-a2a-bench --world=4 --host_index=0 --ranks_per_host=2 "
      "--rendezvous=10.0.0.1:29500 --hostname=10.0.0.1  # host 0 of 2",
      __FILE__);
  return monta::perf::Main();
}
