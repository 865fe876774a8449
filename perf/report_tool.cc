// Sends one node's ReportBenchmark, as that node's certificate, into a task an
// operator scheduled: what perf/trust_bench.sh needs to replay issue 17's
// attacks on a running planner (a forged slow curve dated in the future, a
// node claiming 10x, a flood of reports). The report is shaped like an
// agent's for the task the planner hands out with its defaults (the nodes in
// rank order, --ranks_per_node, the --min_bytes/--max_bytes/--step_factor
// sweep of AllToAll); every rank claims --seconds at every size, or
// --seconds_per_size (e.g. 10x what an honest curve measured).
//
//   report_tool --planner=127.0.0.1:7400 --flagfile=tls/agent-node-b.flags
//     --task_id=bench-... --node=node-b --nodes=node-a,node-b --seconds=10
//     --measured_at_offset_seconds=3155760000 [--count=157 --oversize]
//
// Prints one JSON line: {"sent":N,"ok":N,"already_exists":N,"other":N,
// "first_error":"..."}.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/grpc_security.h"
#include "common/grpc_security_flags.h"
#include "grpcpp/create_channel.h"
#include "nlohmann/json.hpp"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "server/bench/test_reports.h"

ABSL_FLAG(std::string, planner, "127.0.0.1:7400", "planner gRPC address");
ABSL_FLAG(std::string, task_id, "", "the task to report into");
ABSL_FLAG(std::string, node, "node-b", "the reporting node (its certificate)");
ABSL_FLAG(std::string, nodes, "node-a,node-b",
          "the task's nodes in rank order, comma-separated");
ABSL_FLAG(int, ranks_per_node, 2, "the task's ranks per node");
ABSL_FLAG(uint64_t, min_bytes, 64 << 10, "the task's sweep (planner default)");
ABSL_FLAG(uint64_t, max_bytes, 16 << 20, "the task's sweep (planner default)");
ABSL_FLAG(int, step_factor, 4, "the task's sweep (planner default)");
ABSL_FLAG(double, seconds, 10, "what every rank claims at every size");
ABSL_FLAG(std::string, seconds_per_size, "",
          "instead of --seconds: one claim per size, comma-separated");
ABSL_FLAG(double, measured_at_offset_seconds, 0,
          "measured_at = now + this (e.g. 3155760000: 100 years ahead)");
ABSL_FLAG(int, count, 1, "reports to send, one after the other");
ABSL_FLAG(bool, oversize, false,
          "every report carries 64 series x 1024 sizes (as issue 17's "
          "flood)");

namespace {

monta::v1::BenchmarkTask Spec() {
  monta::v1::BenchmarkTask task;
  task.set_task_id(absl::GetFlag(FLAGS_task_id));
  for (absl::string_view n :
       absl::StrSplit(absl::GetFlag(FLAGS_nodes), ',', absl::SkipEmpty())) {
    task.add_nodes(std::string(n));
  }
  task.set_ranks_per_node(absl::GetFlag(FLAGS_ranks_per_node));
  task.add_collectives(monta::v1::COLLECTIVE_ALLTOALL);
  task.set_min_bytes(absl::GetFlag(FLAGS_min_bytes));
  task.set_max_bytes(absl::GetFlag(FLAGS_max_bytes));
  task.set_step_factor(absl::GetFlag(FLAGS_step_factor));
  return task;
}

monta::v1::ReportBenchmarkRequest MakeReport() {
  monta::v1::ReportBenchmarkRequest report =
      monta::coordination::ReportForTesting(Spec(), absl::GetFlag(FLAGS_node),
                                            absl::GetFlag(FLAGS_seconds));
  const std::vector<std::string> per_size = absl::StrSplit(
      absl::GetFlag(FLAGS_seconds_per_size), ',', absl::SkipEmpty());
  for (auto& series : *report.mutable_series()) {
    for (int k = 0;
         k < series.sizes_size() && k < static_cast<int>(per_size.size());
         ++k) {
      for (auto& s : *series.mutable_sizes(k)->mutable_rank_seconds()) {
        s = std::stod(per_size[k]);
      }
    }
  }
  const int64_t at = absl::ToUnixSeconds(
      absl::Now() +
      absl::Seconds(absl::GetFlag(FLAGS_measured_at_offset_seconds)));
  report.mutable_measured_at()->set_seconds(at);
  return report;
}

}  // namespace

int main(int argc, char** argv) {
  monta::ParseFlags(argc, argv,
                    "Sends crafted ReportBenchmark calls as one node "
                    "(perf/trust_bench.sh).\n\nUsage: report_tool --planner "
                    "ADDR (--flagfile=NODE.flags | --insecure) --task_id ID "
                    "--node NAME [--seconds S] [--count N] [--oversize]",
                    __FILE__);
  absl::StatusOr<monta::GrpcSecurityOptions> security =
      monta::GrpcSecurityFromFlags();
  if (!security.ok()) {
    std::cerr << "report_tool: " << security.status().message() << "\n";
    return 2;
  }
  auto credentials = monta::MakeChannelCredentials(*security);
  if (!credentials.ok()) {
    std::cerr << "report_tool: " << credentials.status().message() << "\n";
    return 2;
  }
  auto stub = monta::v1::AgentGateway::NewStub(
      grpc::CreateChannel(absl::GetFlag(FLAGS_planner), *credentials));
  const monta::v1::ReportBenchmarkRequest report = MakeReport();
  monta::v1::ReportBenchmarkRequest oversized = report;
  for (int i = 0; i < 63; ++i) *oversized.add_series() = oversized.series(0);
  for (auto& series : *oversized.mutable_series()) {
    while (series.sizes_size() < 1024) *series.add_sizes() = series.sizes(0);
  }
  int ok = 0, already = 0, other = 0;
  std::string first_error;
  const int count = absl::GetFlag(FLAGS_count);
  for (int i = 0; i < count; ++i) {
    grpc::ClientContext context;
    context.set_deadline(monta::GrpcDeadline(absl::Seconds(30)));
    monta::v1::ReportBenchmarkReply reply;
    const grpc::Status s = stub->ReportBenchmark(
        &context, absl::GetFlag(FLAGS_oversize) ? oversized : report, &reply);
    if (s.ok()) {
      ++ok;
    } else if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      ++already;
    } else {
      ++other;
    }
    if (!s.ok() && first_error.empty()) first_error = s.error_message();
  }
  std::cout << nlohmann::json{{"sent", count},
                              {"ok", ok},
                              {"already_exists", already},
                              {"other", other},
                              {"first_error", first_error}}
                   .dump()
            << "\n";
  return 0;
}
