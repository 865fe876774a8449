#include "perf/ha_writes.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/replicas/endpoints.h"
#include "server/etcd/client.h"
#include "server/etcd_store/records.h"
#include "server/registry/registry.h"

namespace monta::perf {

monta::v1::StrategyRequest DecisionLedger::Next(
    const monta::v1::StrategyRequest& job) {
  monta::v1::StrategyRequest request = job;
  absl::MutexLock lock(&mu_);
  request.mutable_job()->set_name(absl::StrCat(prefix_, "-", next_++));
  return request;
}

void DecisionLedger::Acknowledge(const monta::v1::StrategyRequest& request) {
  absl::MutexLock lock(&mu_);
  acknowledged_.push_back(request.job().name());
}

std::vector<std::string> DecisionLedger::Acknowledged() const {
  absl::MutexLock lock(&mu_);
  return acknowledged_;
}

absl::StatusOr<std::set<std::string>> RecordedDecisionJobs(
    const std::vector<std::string>& endpoints, const std::string& prefix) {
  etcd::ClientOptions options;
  options.endpoints = endpoints;
  options.security.insecure = true;
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Create(std::move(options));
  if (!client.ok()) return client.status();
  etcd::ListRequest list;
  list.key = etcd_store::RecordTablePrefix(prefix, "decisions");
  list.range_end = etcd::PrefixEnd(list.key);
  list.page_size = 100;  // a record holds a whole StrategyReply
  std::set<std::string> names;
  const absl::StatusOr<int64_t> listed = (*client)->ListPages(
      list, [&names](std::vector<etcd::KeyValue> page) -> absl::Status {
        for (const etcd::KeyValue& kv : page) {
          absl::StatusOr<store::SqliteStore::LogRow> row =
              etcd_store::DecodeRecord(kv.value);
          monta::v1::StrategyRequest request;
          if (!row.ok() || row->fields.empty() ||
              !request.ParseFromString(row->fields[0])) {
            return absl::DataLossError(
                absl::StrCat("decision record ", kv.key,
                             ": not a record of a StrategyRequest"));
          }
          names.insert(request.job().name());
        }
        return absl::OkStatus();
      });
  if (!listed.ok()) return listed.status();
  return names;
}

int CountMissing(const std::vector<std::string>& acknowledged,
                 const std::set<std::string>& present) {
  return static_cast<int>(std::count_if(
      acknowledged.begin(), acknowledged.end(),
      [&present](const std::string& name) { return !present.count(name); }));
}

// ---------------------------------------------------------- benchmarks --

BenchmarkLoop::BenchmarkLoop(BenchmarkLoopOptions options)
    : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

void BenchmarkLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    acknowledged_cv_.SignalAll();
    if (in_flight_ != nullptr) {
      std::cerr << "ha_bench: benchmark call to replica " << in_flight_at_
                << " cancelled at the end, unanswered after "
                << absl::FormatDuration(absl::Now() - in_flight_since_) << "\n";
      in_flight_->TryCancel();
    }
  }
  if (thread_.joinable()) thread_.join();
}

bool BenchmarkLoop::WaitForAcknowledged(int count, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!stop_ && acknowledged_count_ < count) {
    if (acknowledged_cv_.WaitWithDeadline(&mu_, end)) break;
  }
  return acknowledged_count_ >= count;
}

int BenchmarkLoop::AcknowledgedSoFar() {
  absl::MutexLock lock(&mu_);
  return acknowledged_count_;
}

int64_t BenchmarkLoop::curves_acknowledged() const {
  int64_t n = 0;
  for (const AcknowledgedBenchmark& a : acknowledged_) n += a.curves.size();
  return n;
}

int BenchmarkLoop::NotAcknowledged() const {
  int n = 0;
  for (const auto& [outcome, count] : not_acknowledged_) n += count;
  return n;
}

void BenchmarkLoop::Run() {
  absl::Time next = absl::Now();
  while (true) {
    CallOnce();
    next = std::max(next + options_.every, absl::Now());
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithDeadline(absl::Condition(&stop_), next)) return;
  }
}

void BenchmarkLoop::CallOnce() {
  monta::v1::RunBenchmarkRequest request;
  for (const std::string& node : options_.nodes) request.add_nodes(node);
  request.set_min_bytes(options_.min_bytes);
  request.set_max_bytes(options_.max_bytes);
  request.set_wait(true);
  request.set_timeout_seconds(options_.timeout_seconds);
  const size_t n = options_.planners.size();
  std::string refusal;
  for (size_t tried = 0; tried < n; ++tried) {
    grpc::ClientContext context;
    context.set_deadline(
        GrpcDeadline(absl::Seconds(options_.timeout_seconds + 15)));
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      in_flight_ = &context;
      in_flight_at_ = at_;
      in_flight_since_ = absl::Now();
    }
    monta::v1::RunBenchmarkReply reply;
    const grpc::Status status =
        options_.planners[at_]->RunBenchmark(&context, request, &reply);
    {
      absl::MutexLock lock(&mu_);
      in_flight_ = nullptr;
      if (stop_ && status.error_code() == grpc::StatusCode::CANCELLED) return;
    }
    if (Answered(at_, status, reply)) return;
    refusal = status.error_message();
    // To the leader the follower named, else the next replica.
    const auto named =
        std::find(options_.addresses.begin(), options_.addresses.end(),
                  replicas::LeaderNamed(refusal));
    const size_t leader = named - options_.addresses.begin();
    at_ = named != options_.addresses.end() && leader != at_ ? leader
                                                             : (at_ + 1) % n;
  }
  NotAcknowledged("no replica leads", refusal);
}

bool BenchmarkLoop::Answered(size_t at, const grpc::Status& status,
                             const monta::v1::RunBenchmarkReply& reply) {
  if (!status.ok()) {
    const std::string& message = status.error_message();
    // Nothing was scheduled: a follower refused, or the replica is down.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        (absl::StrContains(message, "not the leader") ||
         absl::StrContains(message, "failed to connect"))) {
      return false;
    }
    NotAcknowledged(absl::StatusCodeToString(
                        static_cast<absl::StatusCode>(status.error_code())),
                    message);
    // The replica may be gone (killed mid-call): the next call starts at the
    // next one.
    at_ = (at + 1) % options_.planners.size();
    return true;
  }
  const monta::v1::BenchmarkTaskStatus& task = reply.status();
  if (task.state() != monta::v1::TASK_STATE_SUCCEEDED) {
    // "TASK_STATE_FAILED: leader changed" (the reason up to its first ':').
    const std::string why = task.reason().substr(0, task.reason().find(':'));
    NotAcknowledged(absl::StrCat(monta::v1::TaskState_Name(task.state()),
                                 why.empty() ? "" : ": ", why),
                    task.reason());
    return true;
  }
  acknowledged_.push_back(ListAcknowledged(at, task.task_id()));
  std::cerr << "ha_bench: "
            << absl::FormatTime("%H:%M:%E3S", absl::Now(),
                                absl::LocalTimeZone())
            << " benchmark " << task.task_id() << " acknowledged by replica "
            << at << ", " << acknowledged_.back().curves.size()
            << " curve(s)\n";
  absl::MutexLock lock(&mu_);
  ++acknowledged_count_;
  acknowledged_cv_.SignalAll();
  return true;
}

AcknowledgedBenchmark BenchmarkLoop::ListAcknowledged(
    size_t at, const std::string& task_id) {
  AcknowledgedBenchmark acknowledged;
  acknowledged.task_id = task_id;
  std::set<std::string> seen;  // a curve of several nodes is under each
  for (const std::string& node : options_.nodes) {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Seconds(5)));
    monta::v1::ListCurvesRequest request;
    request.set_node_name(node);
    monta::v1::ListCurvesReply reply;
    if (!options_.planners[at]->ListCurves(&context, request, &reply).ok())
      continue;
    for (monta::v1::BandwidthCurve& curve : *reply.mutable_curves()) {
      if (curve.task_id() != task_id) continue;
      const std::string key =
          absl::StrCat(registry::CurveKey(curve), "#", curve.sequence());
      if (!seen.insert(key).second) continue;
      curve.clear_points();
      acknowledged.curves.push_back(std::move(curve));
    }
  }
  return acknowledged;
}

void BenchmarkLoop::NotAcknowledged(const std::string& outcome,
                                    const std::string& error) {
  ++not_acknowledged_[outcome];
  last_error_ = error;
  std::cerr << "ha_bench: "
            << absl::FormatTime("%H:%M:%E3S", absl::Now(),
                                absl::LocalTimeZone())
            << " benchmark not acknowledged (" << outcome << "): " << error
            << "\n";
}

int LostBenchmarks(monta::v1::Planner::Stub& planner,
                   const std::vector<AcknowledgedBenchmark>& acknowledged) {
  int lost = 0;
  for (const AcknowledgedBenchmark& a : acknowledged) {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Seconds(5)));
    monta::v1::GetBenchmarkTaskRequest request;
    request.set_task_id(a.task_id);
    monta::v1::GetBenchmarkTaskReply reply;
    const grpc::Status status =
        planner.GetBenchmarkTask(&context, request, &reply);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      ++lost;
    } else if (!status.ok()) {
      return -1;
    } else if (reply.status().state() != monta::v1::TASK_STATE_SUCCEEDED) {
      ++lost;
    }
  }
  return lost;
}

int LostCurves(monta::v1::Planner::Stub& planner,
               const std::vector<AcknowledgedBenchmark>& acknowledged) {
  std::map<std::string, monta::v1::ListCurvesReply> listed;  // by node
  int lost = 0;
  for (const AcknowledgedBenchmark& a : acknowledged) {
    for (const monta::v1::BandwidthCurve& curve : a.curves) {
      const std::string node = curve.nodes().empty() ? "" : curve.nodes(0);
      if (!listed.count(node)) {
        grpc::ClientContext context;
        context.set_deadline(GrpcDeadline(absl::Seconds(5)));
        monta::v1::ListCurvesRequest request;
        request.set_node_name(node);
        const grpc::Status status =
            planner.ListCurves(&context, request, &listed[node]);
        if (!status.ok() &&
            status.error_code() != grpc::StatusCode::NOT_FOUND) {
          return -1;
        }
      }
      const std::string key = registry::CurveKey(curve);
      const auto& now = listed[node].curves();
      lost += std::none_of(now.begin(), now.end(),
                           [&](const monta::v1::BandwidthCurve& c) {
                             return registry::CurveKey(c) == key &&
                                    (c.task_id() == curve.task_id() ||
                                     c.sequence() > curve.sequence());
                           });
    }
  }
  return lost;
}

}  // namespace monta::perf
