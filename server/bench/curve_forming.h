// The planner's side of a benchmark's results: each node reports its own
// ranks' times (monta.v1.SeriesTimes); the planner checks a report against
// the task at the edge, and once every node reported forms the task's curves
// (a collective ends when its slowest rank does) and excludes the ones it
// cannot trust: nodes that disagree, a claim above the line rate, wrong bytes.
// Pure functions of the task, the reports and what the registry knows of the
// nodes' links; the coordinator holds the reports and calls them.
#ifndef MONTA_SERVER_BENCH_CURVE_FORMING_H_
#define MONTA_SERVER_BENCH_CURVE_FORMING_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/benchmark.pb.h"

namespace monta::coordination {

// The global ranks of `node` in `task`: [i*G, (i+1)*G) for node i; empty when
// the task does not include it.
std::vector<int> RanksOf(const monta::v1::BenchmarkTask& task,
                         absl::string_view node);

// Series of the task: one per dispatch of a verify task, else one per
// collective.
int SeriesCount(const monta::v1::BenchmarkTask& task);
// The message sizes the task asks series `i` for: the collective's sweep
// (bandwidth::SweepMessageBytes over every rank of the task), or a dispatch's
// D (its EP group of nranks / t ranks times rows times row_bytes).
std::vector<uint64_t> SeriesSizes(const monta::v1::BenchmarkTask& task, int i);

// INVALID_ARGUMENT unless the report names a node of the task and exactly that
// node's ranks, in order (every report, OK or not).
absl::Status CheckReporter(const monta::v1::BenchmarkTask& task,
                           const monta::v1::ReportBenchmarkRequest& report);

// Checks an OK report against its task: ranks exactly the node's, one series
// per collective of the task in order (or per dispatch, dispatch_index 0, 1,
// ...), each with exactly the sizes the task asks for, one time in
// [1e-9, 3600] s and one wrong-byte count per rank, and in a verify task either
// no iterations or ranks x the task's iterations, each such a time.
// INVALID_ARGUMENT naming the field and what was expected (never echoing more
// than a number of the input).
absl::Status ValidateReport(const monta::v1::BenchmarkTask& task,
                            const monta::v1::ReportBenchmarkRequest& report);

// What the planner knows of one node's network, for the line-rate check.
struct NodeLinks {
  // Sum of the line rates of its active NICs (registered topology); 0 =
  // unknown.
  double nic_bytes_per_second = 0;
  // Its benchmark address is a loopback one: its "inter-node" traffic never
  // leaves the host, so no NIC bounds it.
  bool loopback = false;
};

struct CurveChecks {
  // A curve is excluded when, at some size, one node's median rank time is
  // more than this many times another node's (docs/ARCHITECTURE.md says why
  // this number).
  double agreement_factor = 4;
  // ... and when the slower node's time also exceeds the faster's by more
  // than this: below it, a difference is the host's scheduling (a rank
  // descheduled for a few ms on a shared host), not a claim worth refusing.
  double agreement_slack_seconds = 0.005;
  // A curve is excluded when it moves more bytes across nodes per rank and
  // second than the slowest node's NICs allow per rank, times this (timer
  // granularity; a line rate is never beaten).
  double line_rate_slack = 1.1;
  // Per node of the task; a node missing here has no known line rate.
  std::map<std::string, NodeLinks> links;
};

struct FormedCurves {
  std::vector<monta::v1::BandwidthCurve> kept;  // in the task's series order
  std::vector<monta::v1::ExcludedCurve> excluded;
};

// The task's curves from every node's validated OK report (`reports` by node
// name, one per node of the task), one per series. Each point: the slowest
// rank's time over all nodes (in a verify task also per timed iteration, when
// every node reported them), every rank's wrong bytes summed, bandwidths by
// common/bandwidth (a dispatch's busbw over its EP group). measured_at is the
// first node's claim (display only), received_at is `now`, sequence is left
// to the registry. A curve with wrong bytes, whose nodes disagree beyond
// checks.agreement_factor (and checks.agreement_slack_seconds), or that beats
// the line rate it crosses is excluded, with the reason.
FormedCurves FormCurves(
    const monta::v1::BenchmarkTask& task,
    const std::map<std::string, monta::v1::ReportBenchmarkRequest>& reports,
    const CurveChecks& checks, absl::Time now);

}  // namespace monta::coordination

#endif  // MONTA_SERVER_BENCH_CURVE_FORMING_H_
