#include "server/bench/curve_forming.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bandwidth/bandwidth.h"
#include "common/bandwidth/collective_proto.h"
#include "google/protobuf/util/time_util.h"

namespace monta::coordination {
namespace {

namespace v1 = ::monta::v1;
using bandwidth::Collective;

constexpr double kMaxRankSeconds = 3600;
// No timer an agent reads resolves less; a smaller time (down to a denormal)
// would make a node's spread over the others unbounded, and the agreement
// slack lets a time that far below the others' through to the curve.
constexpr double kMinRankSeconds = 1e-9;

// One reported time of one rank: `field`[`index`].
absl::Status CheckRankTime(double s, const std::string& field, int index) {
  if (std::isfinite(s) && s >= kMinRankSeconds && s <= kMaxRankSeconds) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, "[", index, "]: expected a time in [",
                   absl::StrFormat("%g", kMinRankSeconds), ", ",
                   kMaxRankSeconds, "] s, got ", absl::StrFormat("%g", s)));
}

int TotalRanks(const v1::BenchmarkTask& task) {
  return task.nodes_size() * task.ranks_per_node();
}

// D of a dispatch workload: bytes each rank dispatches over its EP group of
// nranks / t ranks (agent/bench/schedule.h).
uint64_t DispatchBytes(const v1::BenchmarkTask& task,
                       const v1::DispatchWorkload& w) {
  const int t = std::max(1, w.tensor_parallel_size());
  const uint64_t ep = static_cast<uint64_t>(std::max(1, TotalRanks(task) / t));
  return ep * w.rows() * w.row_bytes();
}

}  // namespace

int SeriesCount(const v1::BenchmarkTask& task) {
  return task.dispatches_size() > 0 ? task.dispatches_size()
                                    : task.collectives_size();
}

std::vector<uint64_t> SeriesSizes(const v1::BenchmarkTask& task, int i) {
  if (task.dispatches_size() > 0) {
    return {DispatchBytes(task, task.dispatches(i))};
  }
  absl::StatusOr<Collective> c = bandwidth::CollectiveFromProto(
      static_cast<v1::Collective>(task.collectives(i)));
  if (!c.ok()) return {};
  return bandwidth::SweepMessageBytes(*c, TotalRanks(task), task.min_bytes(),
                                      task.max_bytes(), task.step_factor());
}

absl::Status CheckReporter(const v1::BenchmarkTask& task,
                           const v1::ReportBenchmarkRequest& report) {
  const std::vector<int> mine = RanksOf(task, report.node_name());
  if (mine.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_name: not a node of task ", task.task_id()));
  }
  if (!std::equal(mine.begin(), mine.end(), report.ranks().begin(),
                  report.ranks().end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks: expected exactly this node's ranks ", mine.front(),
                     "..", mine.back(), " in order (", mine.size(),
                     " ranks), got ", report.ranks_size(), " ranks"));
  }
  return absl::OkStatus();
}

namespace {

// A verify task's iterations: none (an agent that predates them), or
// ranks x iterations times, each as rank_seconds; never in a sweep.
absl::Status CheckIterations(const v1::SizeTimes& size,
                             const std::string& field, int ranks,
                             int iterations) {
  const int n = size.rank_iteration_seconds_size();
  if (n == 0) return absl::OkStatus();
  if (iterations < 1 || n != ranks * iterations) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".rank_iteration_seconds: expected none or ", ranks, " x ",
        std::max(0, iterations), " (ranks x the task's iterations), got ", n));
  }
  for (int i = 0; i < n; ++i) {
    absl::Status s = CheckRankTime(size.rank_iteration_seconds(i),
                                   field + ".rank_iteration_seconds", i);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const v1::SizeTimes& size, const std::string& field,
                       uint64_t expected_bytes, int ranks) {
  if (size.message_bytes() != expected_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".message_bytes: expected ", expected_bytes,
                     " (the task's size)", ", got ", size.message_bytes()));
  }
  if (size.rank_seconds_size() != ranks ||
      size.rank_wrong_bytes_size() != ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        field,
        ": expected one rank_seconds and one rank_wrong_bytes per rank (",
        ranks, "), got ", size.rank_seconds_size(), " and ",
        size.rank_wrong_bytes_size()));
  }
  for (int r = 0; r < ranks; ++r) {
    absl::Status s =
        CheckRankTime(size.rank_seconds(r), field + ".rank_seconds", r);
    if (!s.ok()) return s;
  }
  // An inter-node sweep's chains: none (not measured), or one per rank.
  const int chains = size.rank_chain_seconds_size();
  if (chains != 0 && chains != ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".rank_chain_seconds: expected none or one per rank (", ranks,
        "), got ", chains));
  }
  for (int r = 0; r < chains; ++r) {
    absl::Status s = CheckRankTime(size.rank_chain_seconds(r),
                                   field + ".rank_chain_seconds", r);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckSeries(const v1::BenchmarkTask& task,
                         const v1::SeriesTimes& series, int i, int ranks) {
  const std::string field = absl::StrCat("series[", i, "]");
  if (task.dispatches_size() > 0) {
    if (series.dispatch_index() != i ||
        series.collective() != v1::COLLECTIVE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": expected dispatch_index ", i,
          " and no collective (a verify task's dispatch ", i, ")"));
    }
  } else if (series.collective() != task.collectives(i) ||
             series.dispatch_index() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".collective: expected ",
                     bandwidth::CollectiveProtoName(
                         static_cast<v1::Collective>(task.collectives(i))),
                     " (the task's collective ", i, ")"));
  }
  const std::vector<uint64_t> sizes = SeriesSizes(task, i);
  if (series.sizes_size() != static_cast<int>(sizes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".sizes: expected ", sizes.size(),
                     " sizes (the task's sweep), got ", series.sizes_size()));
  }
  for (int k = 0; k < series.sizes_size(); ++k) {
    const std::string at = absl::StrCat(field, ".sizes[", k, "]");
    if (absl::Status s = CheckSize(series.sizes(k), at, sizes[k], ranks);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            CheckIterations(series.sizes(k), at, ranks,
                            task.dispatches_size() > 0 ? task.iterations() : 0);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The curve of series `i` without points: what it measured, where.
v1::BandwidthCurve CurveHeader(const v1::BenchmarkTask& task, int i) {
  v1::BandwidthCurve curve;
  curve.set_scope(task.scope());
  curve.set_backend(task.backend() == v1::BACKEND_NCCL ? v1::BACKEND_NCCL
                                                       : v1::BACKEND_GLOO);
  curve.set_nranks(TotalRanks(task));
  curve.set_n_nodes(task.nodes_size());
  std::vector<std::string> nodes(task.nodes().begin(), task.nodes().end());
  std::sort(nodes.begin(), nodes.end());
  for (const std::string& n : nodes) curve.add_nodes(n);
  curve.set_task_id(task.task_id());
  if (task.has_fabric()) *curve.mutable_fabric() = task.fabric();
  curve.set_chunks(1);
  if (task.dispatches_size() > 0) {
    const v1::DispatchWorkload& w = task.dispatches(i);
    curve.set_collective(v1::COLLECTIVE_ALLTOALL);
    curve.set_strategy_kind(w.strategy_kind());
    curve.set_chunks(std::max(1, w.chunks()));
  } else {
    curve.set_collective(static_cast<v1::Collective>(task.collectives(i)));
  }
  return curve;
}

std::string Seconds(double s) { return absl::StrFormat("%.3g s", s); }

// One size over all nodes: the point, and the nodes' medians.
struct SizeAcrossNodes {
  double slowest_rank_seconds = 0;
  // The slowest rank's chain over all nodes; 0 unless every node reported
  // its ranks' chains.
  double slowest_chain_seconds = 0;
  uint64_t wrong_bytes = 0;
  // Per timed iteration, the slowest rank's time over all nodes; empty
  // unless every node reported its ranks' iterations.
  std::vector<double> iteration_seconds;
  std::vector<std::pair<double, std::string>> node_medians;  // sorted
};

SizeAcrossNodes Agree(
    const v1::BenchmarkTask& task,
    const std::map<std::string, v1::ReportBenchmarkRequest>& reports, int i,
    int k) {
  SizeAcrossNodes out;
  const int n = task.iterations();
  bool every_iteration = task.dispatches_size() > 0 && n > 0;
  bool every_chain = true;
  for (const std::string& node : task.nodes()) {
    const v1::SizeTimes& size = reports.at(node).series(i).sizes(k);
    // Validated: none or one per rank.
    every_chain = every_chain && size.rank_chain_seconds_size() > 0;
    for (double t : size.rank_chain_seconds()) {
      out.slowest_chain_seconds = std::max(out.slowest_chain_seconds, t);
    }
    // Validated: ranks x n, rank-major.
    every_iteration = every_iteration && size.rank_iteration_seconds_size() > 0;
    if (every_iteration) {
      out.iteration_seconds.resize(static_cast<size_t>(n), 0);
      for (int j = 0; j < size.rank_iteration_seconds_size(); ++j) {
        double& slowest = out.iteration_seconds[static_cast<size_t>(j % n)];
        slowest = std::max(slowest, size.rank_iteration_seconds(j));
      }
    }
    std::vector<double> times(size.rank_seconds().begin(),
                              size.rank_seconds().end());
    for (double t : times)
      out.slowest_rank_seconds = std::max(out.slowest_rank_seconds, t);
    for (uint64_t w : size.rank_wrong_bytes()) out.wrong_bytes += w;
    out.node_medians.emplace_back(bandwidth::Median(std::move(times)), node);
  }
  std::sort(out.node_medians.begin(), out.node_medians.end());
  if (!every_iteration) out.iteration_seconds.clear();
  if (!every_chain) out.slowest_chain_seconds = 0;
  return out;
}

// Why the curve cannot be trusted, or nullopt.
struct Verdict {
  v1::ExclusionReason reason = v1::EXCLUSION_REASON_UNSPECIFIED;
  std::string detail;
};

// Per rank, the line rate of the slowest node's NICs; 0 when the check does
// not apply (one node, a loopback address, a node without known NICs).
double LineRatePerRank(const v1::BenchmarkTask& task,
                       const CurveChecks& checks) {
  if (task.nodes_size() < 2 || task.dispatches_size() > 0) return 0;
  double slowest = 0;
  for (const std::string& node : task.nodes()) {
    auto it = checks.links.find(node);
    if (it == checks.links.end() || it->second.loopback ||
        it->second.nic_bytes_per_second <= 0) {
      return 0;
    }
    const double rate = it->second.nic_bytes_per_second;
    slowest = slowest == 0 ? rate : std::min(slowest, rate);
  }
  return slowest / std::max(1, task.ranks_per_node());
}

// Checks one point; fills `verdict` with the first reason to exclude.
void Judge(const v1::BenchmarkTask& task, const v1::BandwidthCurve& curve,
           const SizeAcrossNodes& at, uint64_t bytes, const CurveChecks& checks,
           double line_rate_per_rank, Verdict* verdict) {
  if (verdict->reason != v1::EXCLUSION_REASON_UNSPECIFIED) return;
  if (at.wrong_bytes > 0) {
    verdict->reason = v1::EXCLUSION_REASON_DATA_CHECK;
    verdict->detail =
        absl::StrCat(at.wrong_bytes, " wrong bytes at ", bytes, " bytes");
    return;
  }
  const auto& [fastest, fastest_node] = at.node_medians.front();
  const auto& [slowest, slowest_node] = at.node_medians.back();
  if (slowest > fastest * checks.agreement_factor &&
      slowest - fastest > checks.agreement_slack_seconds) {
    verdict->reason = v1::EXCLUSION_REASON_NODES_DISAGREE;
    verdict->detail = absl::StrFormat(
        "at %d bytes node %s's median rank time %s is %.1fx node %s's %s; "
        "nodes must agree within %gx or %s",
        bytes, slowest_node, Seconds(slowest), slowest / fastest, fastest_node,
        Seconds(fastest), checks.agreement_factor,
        Seconds(checks.agreement_slack_seconds));
    return;
  }
  if (line_rate_per_rank <= 0 || curve.collective() == v1::COLLECTIVE_COPY) {
    return;
  }
  // Of the bytes a rank sends (AllToAll) or gathers (AllGather), the share
  // from or to other nodes crosses a NIC.
  const int n = curve.nranks();
  const int g = task.ranks_per_node();
  const double across = static_cast<double>(bytes) * (n - g) / n;
  const double rate = across / at.slowest_rank_seconds;
  if (rate > line_rate_per_rank * checks.line_rate_slack) {
    verdict->reason = v1::EXCLUSION_REASON_ABOVE_LINE_RATE;
    verdict->detail = absl::StrFormat(
        "at %d bytes it moves %.3g GB/s per rank across nodes, above the "
        "slowest node's NIC line rate of %.3g GB/s per rank",
        bytes, rate / 1e9, line_rate_per_rank / 1e9);
  }
}

// Series `i` formed over every node's report, and the verdict on it.
std::pair<v1::BandwidthCurve, Verdict> FormSeries(
    const v1::BenchmarkTask& task,
    const std::map<std::string, v1::ReportBenchmarkRequest>& reports, int i,
    const CurveChecks& checks) {
  v1::BandwidthCurve curve = CurveHeader(task, i);
  const v1::SeriesTimes& first = reports.at(task.nodes(0)).series(i);
  // Validated: one of the task's collectives (or a dispatch's AllToAll).
  const Collective collective =
      bandwidth::CollectiveFromProto(curve.collective())
          .value_or(Collective::kAllToAll);
  // Busbw over the EP group for a dispatch, over every rank otherwise.
  int bus_ranks = curve.nranks();
  if (task.dispatches_size() > 0) {
    bus_ranks =
        std::max(1, curve.nranks() /
                        std::max(1, task.dispatches(i).tensor_parallel_size()));
  }
  const double line_rate = LineRatePerRank(task, checks);
  Verdict verdict;
  double spread = 1;
  for (int k = 0; k < first.sizes_size(); ++k) {
    const SizeAcrossNodes at = Agree(task, reports, i, k);
    const uint64_t bytes = first.sizes(k).message_bytes();
    spread = std::max(
        spread, at.node_medians.back().first / at.node_medians.front().first);
    v1::CurvePoint& p = *curve.add_points();
    p.set_message_bytes(bytes);
    p.set_time_seconds(at.slowest_rank_seconds);
    p.set_algbw_bytes_per_second(bandwidth::AlgBwBytesPerSecond(
        static_cast<double>(bytes), at.slowest_rank_seconds));
    p.set_busbw_bytes_per_second(bandwidth::BusBwBytesPerSecond(
        collective, bus_ranks, static_cast<double>(bytes),
        at.slowest_rank_seconds));
    p.set_wrong_bytes(at.wrong_bytes);
    for (double s : at.iteration_seconds) p.add_iteration_seconds(s);
    p.set_chain_time_seconds(at.slowest_chain_seconds);
    Judge(task, curve, at, bytes, checks, line_rate, &verdict);
  }
  curve.set_node_spread_ratio(spread);
  return {std::move(curve), std::move(verdict)};
}

}  // namespace

std::vector<int> RanksOf(const v1::BenchmarkTask& task,
                         absl::string_view node) {
  const auto& nodes = task.nodes();
  const auto at = std::find(nodes.begin(), nodes.end(), node);
  if (at == nodes.end() || task.ranks_per_node() < 1) return {};
  const int first =
      static_cast<int>(at - nodes.begin()) * task.ranks_per_node();
  std::vector<int> ranks;
  for (int r = first; r < first + task.ranks_per_node(); ++r) {
    ranks.push_back(r);
  }
  return ranks;
}

absl::Status ValidateReport(const v1::BenchmarkTask& task,
                            const v1::ReportBenchmarkRequest& report) {
  if (absl::Status s = CheckReporter(task, report); !s.ok()) return s;
  const int series = SeriesCount(task);
  if (report.series_size() != series) {
    return absl::InvalidArgumentError(
        absl::StrCat("series: expected ", series, " (one per ",
                     task.dispatches_size() > 0 ? "dispatch" : "collective",
                     " of the task), got ", report.series_size()));
  }
  for (int i = 0; i < series; ++i) {
    if (absl::Status s =
            CheckSeries(task, report.series(i), i, task.ranks_per_node());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

FormedCurves FormCurves(
    const v1::BenchmarkTask& task,
    const std::map<std::string, v1::ReportBenchmarkRequest>& reports,
    const CurveChecks& checks, absl::Time now) {
  using google::protobuf::util::TimeUtil;
  FormedCurves formed;
  if (task.nodes().empty()) return formed;
  const v1::ReportBenchmarkRequest& first = reports.at(task.nodes(0));
  for (int i = 0; i < first.series_size(); ++i) {
    auto [curve, verdict] = FormSeries(task, reports, i, checks);
    *curve.mutable_measured_at() = first.measured_at();
    *curve.mutable_received_at() =
        TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(now));
    if (verdict.reason == v1::EXCLUSION_REASON_UNSPECIFIED) {
      formed.kept.push_back(std::move(curve));
      continue;
    }
    v1::ExcludedCurve& excluded = formed.excluded.emplace_back();
    curve.clear_points();
    *excluded.mutable_curve() = std::move(curve);
    excluded.set_reason(verdict.reason);
    excluded.set_detail(std::move(verdict.detail));
  }
  return formed;
}

}  // namespace monta::coordination
