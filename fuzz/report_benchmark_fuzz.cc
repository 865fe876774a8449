// ReportBenchmark's report path (issue 17): any bytes that parse as a
// monta.v1.ReportBenchmarkRequest are one node's report into a real task of a
// fresh coordinator over an in-memory registry of two CPU nodes with NICs (so
// the line-rate check runs): a pair's AllToAll sweep, or, when the report's
// first series names no collective, a verify task of two dispatches. The task
// id is set to the scheduled one so that input reaches past the lookup. Then
// the other node's honest report, when it is a node of the task.
//
// What must hold: every answer is OK or a clear refusal (INVALID_ARGUMENT,
// RESOURCE_EXHAUSTED, ALREADY_EXISTS) of bounded length; the same report again
// is ALREADY_EXISTS once taken and refused the same way otherwise; a taken
// report is held until the task ends and nothing is held after; the curves
// the planner keeps are well formed (sequence set, sizes increasing, finite
// positive times, spread >= 1) and every exclusion has a reason; a failure
// reason stays short whatever the node said. The authorization in front of
// it (server/api/authz RequireReporter) needs a TLS peer and is exercised by
// //tests:mtls_attack_test instead; its rank rule is CheckReporter's here.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/status_proto.h"
#include "proto/monta/v1/agent.pb.h"
#include "server/bench/coordinator.h"
#include "server/bench/test_reports.h"
#include "server/registry/registry.h"

namespace {

namespace v1 = ::monta::v1;
using monta::Instant;

void Check(bool condition) {
  if (!condition) std::abort();
}

// Both clocks `seconds` after a fixed start.
Instant At(int seconds) {
  static const monta::MonoTime start =
      monta::MonoTime() + std::chrono::hours(1000);
  return Instant{absl::FromUnixSeconds(1'700'000'000 + seconds),
                 monta::MonoAfter(start, absl::Seconds(seconds))};
}

void Register(monta::registry::Registry& registry, const std::string& name,
              const std::string& address) {
  v1::RegisterRequest r;
  r.set_node_name(name);
  r.set_instance_id("i-" + name);
  r.set_bench_address(address);
  r.mutable_topology()->set_hostname(name);
  v1::Nic* nic = r.mutable_topology()->add_nics();
  nic->set_name("mlx5_0");
  nic->set_state("ACTIVE");
  nic->set_rate_bytes_per_second(12.5e9);  // 100 Gb/s
  Check(registry.Register(r, At(0)).ok());
}

bool Refusal(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAlreadyExists:
      // Named, and never an echo of unbounded input.
      return !s.message().empty() && s.message().size() < 1024;
    default:
      return false;
  }
}

void CheckCurve(const v1::BandwidthCurve& c) {
  Check(c.sequence() > 0);
  Check(std::isfinite(c.node_spread_ratio()) && c.node_spread_ratio() >= 1);
  uint64_t last = 0;
  for (const v1::CurvePoint& p : c.points()) {
    Check(p.message_bytes() > last);
    last = p.message_bytes();
    Check(std::isfinite(p.time_seconds()) && p.time_seconds() > 0);
    Check(std::isfinite(p.busbw_bytes_per_second()));
    Check(p.wrong_bytes() == 0);  // wrong bytes exclude the curve
  }
}

// Schedules the task the report goes to; its id, or "" when refused.
std::string Schedule(monta::coordination::Coordinator& coordinator,
                     bool verify) {
  v1::RunBenchmarkRequest pair;
  pair.add_nodes("node-a");
  pair.add_nodes("node-b");
  pair.set_timeout_seconds(60);
  absl::StatusOr<v1::BenchmarkTaskStatus> status;
  if (!verify) {
    status = coordinator.Schedule(pair, At(0));
  } else {
    v1::DispatchWorkload flat;
    flat.set_strategy_kind(v1::STRATEGY_KIND_FLAT);
    flat.set_chunks(1);
    flat.set_rows(4);
    flat.set_row_bytes(64);
    flat.set_tensor_parallel_size(1);
    v1::DispatchWorkload pipelined = flat;
    pipelined.set_strategy_kind(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
    pipelined.set_chunks(2);
    pipelined.set_tensor_parallel_size(2);
    status = coordinator.ScheduleDispatches(
        pair, {flat, pipelined}, 3, 1, At(0),
        [](const v1::BenchmarkTaskStatus&, std::vector<v1::BandwidthCurve> c) {
          for (const auto& curve : c) Check(!curve.points().empty());
        });
  }
  Check(status.ok());
  return status->task_id();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::ReportBenchmarkRequest report;
  if (!report.ParseFromArray(data, static_cast<int>(size))) return 0;
  monta::registry::Registry registry(monta::registry::RegistryOptions{});
  Register(registry, "node-a", "10.0.0.1");
  Register(registry, "node-b", "10.0.0.2");
  monta::coordination::Coordinator coordinator(
      &registry, monta::coordination::CoordinatorOptions{});
  const bool verify =
      report.series_size() > 0 &&
      report.series(0).collective() == v1::COLLECTIVE_UNSPECIFIED;
  const std::string task = Schedule(coordinator, verify);
  report.set_task_id(task);

  const absl::Status first = coordinator.Report(report, At(1));
  Check(first.ok() || Refusal(first));
  const absl::Status again = coordinator.Report(report, At(1));
  Check(first.ok() ? again.code() == absl::StatusCode::kAlreadyExists
                   : again.code() == first.code());
  if (first.ok()) {
    const v1::TaskState state = coordinator.Status(task)->state();
    // A failure report ends the task at once; an OK one is held.
    if (monta::StatusFromProto(report.status()).ok()) {
      Check(state != v1::TASK_STATE_FAILED &&
            coordinator.held_report_bytes() > 0);
    } else {
      Check(state == v1::TASK_STATE_FAILED &&
            coordinator.held_report_bytes() == 0);
    }
  }
  const std::string other =
      report.node_name() == "node-a" ? "node-b" : "node-a";
  const absl::Status honest =
      coordinator.Report(monta::coordination::ReportForTesting(
                             *coordinator.Spec(task), other, 1e-3),
                         At(2));
  Check(honest.ok() || honest.code() == absl::StatusCode::kAlreadyExists);

  const v1::BenchmarkTaskStatus status = *coordinator.Status(task);
  Check(status.reason().size() < 4096);
  for (const v1::ExcludedCurve& e : status.excluded()) {
    Check(e.reason() != v1::EXCLUSION_REASON_UNSPECIFIED);
    Check(!e.detail().empty() && e.curve().points().empty());
  }
  for (const char* name : {"node-a", "node-b"}) {
    const absl::StatusOr<v1::NodeInfo> node = registry.Get(name, At(2));
    Check(node.ok());
    for (const v1::BandwidthCurve& c : node->curves()) CheckCurve(c);
  }
  // Whatever happened, nothing is held once every task ended.
  coordinator.ExpireOverdue(At(3600));
  Check(coordinator.held_report_bytes() == 0);
  return 0;
}
