#include "agent/runtime/bench_runner.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "agent/bench/layer.h"
#include "agent/bench/moe_groups.h"
#include "agent/bench/report.h"
#include "agent/bench/schedule.h"
#include "agent/bench/sweep.h"
#include "agent/comm/communicator_factory.h"
#include "common/backoff.h"
#include "common/bandwidth/collective_proto.h"
#include "common/grpc_status.h"
#include "common/status_proto.h"
#include "google/protobuf/util/time_util.h"

namespace monta::agent {
namespace {

// The planner fails tasks at their deadline; a rank stops a little earlier so
// its own error (e.g. "rank 3 never joined") reaches the planner first. Counted
// from the task's arrival with the time it had left then (timeout_seconds), so
// the planner's wall clock never enters; the communicators take it as a local
// absl::Time.
absl::Time RankDeadline(const monta::v1::BenchmarkTask& task,
                        absl::Time received) {
  using google::protobuf::util::TimeUtil;
  if (task.timeout_seconds() > 0) {
    return received + absl::Seconds(task.timeout_seconds()) - absl::Seconds(1);
  }
  if (!task.has_deadline()) return received + absl::Seconds(120);
  // A planner that predates timeout_seconds: its wall clock deadline.
  const absl::Time deadline =
      absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(task.deadline()));
  return deadline - absl::Seconds(1);
}

// One rank's own numbers: per series of the task (each collective, or each
// dispatch), its points.
struct RankResult {
  absl::Status status;
  std::vector<std::vector<bench::SweepPoint>> series;
};

// The communicator backend the task asks for, if this agent has it.
absl::StatusOr<comm::Backend> BackendOf(const monta::v1::BenchmarkTask& task) {
  if (task.backend() != monta::v1::BACKEND_NCCL) return comm::Backend::kGloo;
  if (!comm::NcclBuilt()) {
    return absl::FailedPreconditionError(
        "task asks for NCCL but this agent was built without CUDA/NCCL");
  }
  return comm::Backend::kNccl;
}

// Waits for every rank of the task, then connects this rank's communicator.
absl::StatusOr<std::unique_ptr<comm::Communicator>> MeetAndConnect(
    const monta::v1::BenchmarkTask& task, int rank, int size,
    absl::Time deadline, comm::Backend backend,
    std::shared_ptr<comm::RendezvousStore> store,
    const BenchRunnerOptions& options) {
  comm::CommunicatorOptions comm_options;
  comm_options.hostname = options.bench_address;
  // Gloo cannot interrupt a running collective: a peer that dies mid-operation
  // is noticed at this timeout, so keep it short (loopback and datacenter
  // sweeps take well under a second per operation) and inside the task's
  // deadline.
  comm_options.op_timeout =
      std::clamp(deadline - absl::Now(), absl::Seconds(1), absl::Seconds(10));
  comm_options.device = rank % std::max(1, task.ranks_per_node());
  // Meet first through the planner's store, which ends the wait at once when
  // the task fails (a peer's node lost its lease). Only then connect: a TCP
  // connect to a peer that died meanwhile retries until its deadline and cannot
  // be interrupted, so that phase gets a short one.
  absl::Status joined = comm::JoinAll(
      *store, absl::StrCat(task.task_id(), "/all"), rank, size, deadline);
  if (!joined.ok()) return joined;
  const absl::Time connect_deadline =
      std::min(deadline, absl::Now() + absl::Seconds(15));
  return comm::CreateCommunicator(backend, store,
                                  absl::StrCat(task.task_id(), "/world"), rank,
                                  size, comm_options, connect_deadline);
}

bench::SweepOptions SweepOptionsOf(const monta::v1::BenchmarkTask& task) {
  bench::SweepOptions sweep;
  sweep.min_bytes = task.min_bytes();
  sweep.max_bytes = task.max_bytes();
  sweep.step_factor = std::max(2, task.step_factor());
  sweep.warmup_iterations = std::max(0, task.warmup_iterations());
  sweep.iterations = std::max(1, task.iterations());
  // Each rank reports its own numbers; the planner agrees them.
  sweep.agree_across_ranks = false;
  // The median of iterations timed alone; across nodes also a warm chain
  // after it at each size (SweepOptions::chain_too): the model takes the
  // link's rates from the chain and a short chunk's launch from both
  // (docs/MODEL.md §2, §4). Inside a node the median alone.
  sweep.chain_too = task.scope() == monta::v1::SCOPE_INTER_NODE;
  return sweep;
}

absl::StatusOr<bench::Strategy> DispatchStrategy(
    const monta::v1::DispatchWorkload& w) {
  switch (w.strategy_kind()) {
    case monta::v1::STRATEGY_KIND_FLAT:
      return bench::Strategy::kFlat;
    case monta::v1::STRATEGY_KIND_TP_DEDUP:
      return bench::Strategy::kTpDedup;
    case monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED:
      return bench::Strategy::kTpDedupPipelined;
    case monta::v1::STRATEGY_KIND_HIERARCHICAL:
      return bench::Strategy::kHierarchical;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dispatches.strategy_kind: cannot run ",
                       monta::v1::StrategyKind_Name(w.strategy_kind())));
  }
}

// What a LAYER workload runs in its expert layout.
absl::StatusOr<bench::ExpertLayout> LayerLayout(
    const monta::v1::DispatchWorkload& w) {
  switch (w.expert_layout()) {
    case monta::v1::EXPERT_LAYOUT_TENSOR_PARALLEL:
      return bench::ExpertLayout::kTensorParallel;
    case monta::v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL:
      return bench::ExpertLayout::kNotTensorParallel;
    default:
      return absl::InvalidArgumentError(
          "dispatches.expert_layout: a layer workload needs TENSOR_PARALLEL or "
          "NOT_TENSOR_PARALLEL");
  }
}

// One workload on its groups: the layer's four ops (LAYER) or one dispatch op
// (OP, or a planner that predates the scope).
absl::StatusOr<bench::JobWorkload> JobWorkloadOf(
    bench::MoeGroups& groups, const monta::v1::DispatchWorkload& w) {
  absl::StatusOr<bench::Strategy> strategy = DispatchStrategy(w);
  if (!strategy.ok()) return strategy.status();
  bench::JobWorkload job{&groups, *strategy, std::max(1, w.chunks()),
                         bench::DispatchShape{w.rows(), w.row_bytes()},
                         std::nullopt};
  if (w.scope() == monta::v1::VERIFY_SCOPE_LAYER) {
    absl::StatusOr<bench::ExpertLayout> layout = LayerLayout(w);
    if (!layout.ok()) return layout.status();
    job.layout = *layout;
  }
  return job;
}

// Every job-shaped workload of the task (montactl verify's candidates), each
// data-checked, then timed side by side: every workload's warm-up, then the
// timed iterations round robin (iteration i of every workload, in the task's
// order, before iteration i + 1 of any; bench::MeasureInterleaved), so that
// whatever else the host does meanwhile falls on every candidate alike and
// iteration i of two candidates ran next to each other (docs/MODEL.md §11).
// The workloads share one set of buffers (they move the same D). `series`
// gains this rank's one point per workload (its own time, iterations in
// iteration order, and wrong bytes: the planner judges them).
absl::Status RunDispatches(
    const monta::v1::BenchmarkTask& task, comm::Communicator& world,
    absl::Time deadline, std::vector<std::vector<bench::SweepPoint>>* series) {
  // Groups first, in the order the workloads name them (a collective step
  // every rank takes alike); map nodes stay where they are.
  std::map<int, bench::MoeGroups> groups_by_tp;
  std::vector<bench::JobWorkload> workloads;
  for (const monta::v1::DispatchWorkload& w : task.dispatches()) {
    auto it = groups_by_tp.find(w.tensor_parallel_size());
    if (it == groups_by_tp.end()) {
      bench::MoeLayout layout;
      layout.tp_size = std::max(1, w.tensor_parallel_size());
      layout.ranks_per_node = task.ranks_per_node();
      absl::StatusOr<bench::MoeGroups> g =
          bench::MakeMoeGroups(world, layout, deadline);
      if (!g.ok()) return g.status();
      it = groups_by_tp.emplace(w.tensor_parallel_size(), *std::move(g)).first;
    }
    absl::StatusOr<bench::JobWorkload> job = JobWorkloadOf(it->second, w);
    if (!job.ok()) return job.status();
    workloads.push_back(*job);
  }
  absl::StatusOr<std::vector<bench::SweepPoint>> points =
      bench::MeasureInterleaved(workloads, SweepOptionsOf(task));
  if (!points.ok()) return points.status();
  for (bench::SweepPoint& p : *points) series->push_back({std::move(p)});
  return absl::OkStatus();
}

// One rank of the task: join, build the communicator, sweep every collective.
RankResult RunRank(const monta::v1::BenchmarkTask& task, int rank,
                   absl::Time deadline,
                   std::shared_ptr<comm::RendezvousStore> store,
                   const BenchRunnerOptions& options, Cancellation& cancel) {
  RankResult result;
  const int size = task.nodes_size() * task.ranks_per_node();
  // Tells the planner this rank showed up, so a missing one can be named.
  result.status = store->Set(absl::StrCat("join/", rank), options.node_name);
  if (!result.status.ok()) return result;

  absl::StatusOr<comm::Backend> backend = BackendOf(task);
  if (!backend.ok()) {
    result.status = backend.status();
    return result;
  }
  absl::StatusOr<std::unique_ptr<comm::Communicator>> comm =
      MeetAndConnect(task, rank, size, deadline, *backend, store, options);
  if (!comm.ok()) {
    result.status = comm.status();
    return result;
  }
  // The agent stopping fails every operation of the sweep from here on.
  comm::Communicator* raw = comm->get();
  const int abort_id = cancel.Add([raw] { raw->Abort(); });
  struct Unregister {
    Cancellation& cancel;
    int id;
    ~Unregister() { cancel.Remove(id); }
  } unregister{cancel, abort_id};
  const bench::SweepOptions sweep = SweepOptionsOf(task);
  if (task.dispatches_size() > 0) {
    result.status = RunDispatches(task, **comm, deadline, &result.series);
    if (!result.status.ok() && cancel.cancelled()) {
      result.status = cancel.status();
    }
    if (!result.status.ok()) (*comm)->Abort();
    return result;
  }
  for (int c : task.collectives()) {
    // A collective this agent does not know fails the task by name rather
    // than measuring something else under the planner's label.
    absl::StatusOr<bandwidth::Collective> collective =
        bandwidth::CollectiveFromProto(static_cast<monta::v1::Collective>(c));
    if (!collective.ok()) {
      result.status = collective.status();
      (*comm)->Abort();
      return result;
    }
    absl::StatusOr<std::vector<bench::SweepPoint>> points =
        bench::SweepCollective(**comm, *collective, sweep);
    if (!points.ok()) {
      result.status = cancel.cancelled() ? cancel.status() : points.status();
      (*comm)->Abort();
      return result;
    }
    // Wrong bytes go into the report: the planner excludes that curve.
    result.series.push_back(*std::move(points));
  }
  return result;
}

// Set and Get address a key the same way: by task and key.
template <typename Request>
Request RendezvousRequest(const std::string& task_id, int64_t leader_epoch,
                          absl::string_view key) {
  Request request;
  request.set_task_id(task_id);
  request.set_leader_epoch(leader_epoch);
  request.set_key(std::string(key));
  return request;
}

}  // namespace

RpcRendezvousStore::RpcRendezvousStore(
    monta::v1::AgentGateway::StubInterface* stub, std::string task_id,
    Cancellation* cancel, int64_t leader_epoch)
    : stub_(stub),
      task_id_(std::move(task_id)),
      cancel_(cancel),
      leader_epoch_(leader_epoch) {}

grpc::Status RpcRendezvousStore::Call(
    grpc::ClientContext& context, const std::function<grpc::Status()>& rpc) {
  if (cancel_ == nullptr) return rpc();
  const int id = cancel_->Add([&context] { context.TryCancel(); });
  grpc::Status status = rpc();
  cancel_->Remove(id);
  if (cancel_->cancelled()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        std::string(cancel_->status().message()));
  }
  return status;
}

absl::Status RpcRendezvousStore::Set(absl::string_view key,
                                     absl::string_view value) {
  auto request = RendezvousRequest<monta::v1::RendezvousSetRequest>(
      task_id_, leader_epoch_, key);
  request.set_value(std::string(value));
  monta::v1::RendezvousSetReply reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Seconds(10)));
  return FromGrpc(Call(context, [&] {
    return stub_->RendezvousSet(&context, request, &reply);
  }));
}

absl::StatusOr<std::string> RpcRendezvousStore::Get(absl::string_view key,
                                                    absl::Time deadline) {
  while (true) {
    // Slices keep every RPC short-lived, so a planner restart costs one slice.
    const absl::Duration wait = std::clamp(
        deadline - absl::Now(), absl::ZeroDuration(), absl::Seconds(5));
    auto request = RendezvousRequest<monta::v1::RendezvousGetRequest>(
        task_id_, leader_epoch_, key);
    request.set_wait_seconds(absl::ToDoubleSeconds(wait));
    monta::v1::RendezvousGetReply reply;
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(wait + absl::Seconds(5)));
    grpc::Status status = Call(context, [&] {
      return stub_->RendezvousGet(&context, request, &reply);
    });
    if (status.ok()) return reply.value();
    if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
        status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return FromGrpc(status);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous key \"", key,
                                                      "\" of task ", task_id_,
                                                      " not set in time"));
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
}

namespace {

// Runs this node's ranks of `task` (one thread each) and fills the report's
// ranks and series: every rank's own numbers per series. Returns the first
// rank's failure, naming the rank.
absl::Status MeasureNode(const monta::v1::BenchmarkTask& task, int node_index,
                         absl::Time deadline,
                         monta::v1::AgentGateway::StubInterface* stub,
                         const BenchRunnerOptions& options,
                         Cancellation& cancel,
                         monta::v1::ReportBenchmarkRequest* report) {
  const int rpn = task.ranks_per_node();
  const int first_rank = node_index * rpn;
  for (int i = 0; i < rpn; ++i) report->add_ranks(first_rank + i);
  auto store = std::make_shared<RpcRendezvousStore>(
      stub, task.task_id(), &cancel, task.leader_epoch());
  std::vector<RankResult> results(rpn);
  std::vector<std::thread> threads;
  for (int i = 0; i < rpn; ++i) {
    threads.emplace_back([&, i] {
      results[i] =
          RunRank(task, first_rank + i, deadline, store, options, cancel);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < rpn; ++i) {
    if (!results[i].status.ok()) {
      return absl::Status(results[i].status.code(),
                          absl::StrCat("rank ", first_rank + i, ": ",
                                       results[i].status.message()));
    }
  }
  const size_t n_series = results[0].series.size();
  for (size_t k = 0; k < n_series; ++k) {
    std::vector<std::vector<bench::SweepPoint>> per_rank;
    for (RankResult& r : results) {
      if (r.series.size() != n_series) {
        return absl::InternalError("the node's ranks measured other series");
      }
      per_rank.push_back(std::move(r.series[k]));
    }
    absl::StatusOr<monta::v1::SeriesTimes> series =
        bench::SeriesFromRanks(per_rank);
    if (!series.ok()) return series.status();
    if (task.dispatches_size() > 0) {
      series->set_dispatch_index(static_cast<int>(k));
    } else {
      series->set_collective(static_cast<monta::v1::Collective>(
          task.collectives(static_cast<int>(k))));
    }
    *report->add_series() = *std::move(series);
  }
  return absl::OkStatus();
}

// Why a report the planner refused with `refused` is not sent again, or
// nothing when it may be taken after a wait of `wait`. Only
// RESOURCE_EXHAUSTED can succeed on a resend: the planner took nothing
// because its store is behind (--max_pending_registry_changes,
// --max_pending_wait) and takes the same report once it caught up. Every
// other refusal answers the same report the same way again: a task unknown
// or of another leader (NOT_FOUND, FAILED_PRECONDITION "leader changed": the
// new leader runs the task again), a report out of bounds or malformed
// (INVALID_ARGUMENT), a node that may not report it (PERMISSION_DENIED), one
// already taken (ALREADY_EXISTS), a replica that does not lead or is gone
// (UNAVAILABLE: the task's leader is gone with it).
std::optional<std::string> WhyNotAgain(const absl::Status& refused,
                                       absl::Duration wait, absl::Time deadline,
                                       const Cancellation& cancel) {
  if (!absl::IsResourceExhausted(refused)) {
    return absl::StrCat(absl::StatusCodeToString(refused.code()),
                        " is not retried: the same report gets the same "
                        "answer");
  }
  if (cancel.cancelled()) {
    return absl::StrCat("the run was cancelled (", cancel.status().message(),
                        ")");
  }
  if (absl::Now() + wait > deadline) {
    return absl::StrCat("the task's deadline (", absl::FormatTime(deadline),
                        ") comes before the next try (in ",
                        absl::FormatDuration(wait), ")");
  }
  return std::nullopt;
}

// Sends `report`. A refusal that can succeed on a resend (WhyNotAgain) is
// sent again after a backoff (200 ms doubling to 5 s, equal jitter: a fleet
// refused together does not come back in lockstep) until `deadline` (the
// task's end) or a cancellation; the last answer is returned, and why the
// agent stopped sending is logged.
absl::Status SendReport(monta::v1::AgentGateway::StubInterface* stub,
                        const monta::v1::ReportBenchmarkRequest& report,
                        absl::Time deadline, const Cancellation& cancel,
                        const std::string& node_name) {
  Backoff backoff(absl::Milliseconds(200), absl::Seconds(5));
  while (true) {
    monta::v1::ReportBenchmarkReply reply;
    grpc::ClientContext context;
    // Stopping: the report is worth a moment, not the whole grace period.
    context.set_deadline(GrpcDeadline(cancel.cancelled() ? absl::Seconds(2)
                                                         : absl::Seconds(10)));
    const absl::Status reported =
        FromGrpc(stub->ReportBenchmark(&context, report, &reply));
    if (reported.ok()) return reported;
    const absl::Duration wait = backoff.Next();
    const std::optional<std::string> why =
        WhyNotAgain(reported, wait, deadline, cancel);
    std::cerr << "monta-agent[" << node_name << "]: report of task "
              << report.task_id() << " refused (" << reported.ToString()
              << "); "
              << (why.has_value()
                      ? absl::StrCat("not sending it again after ",
                                     backoff.attempts(), " tries: ", *why)
                      : absl::StrCat("sending it again in ",
                                     absl::FormatDuration(wait)))
              << std::endl;
    if (why.has_value()) return reported;
    const absl::Time until = absl::Now() + wait;
    while (!cancel.cancelled() && absl::Now() < until) {
      absl::SleepFor(std::min(absl::Milliseconds(50), until - absl::Now()));
    }
  }
}

}  // namespace

TaskRunner MakeBenchRunner(BenchRunnerOptions options) {
  return [options](const monta::v1::BenchmarkTask& task,
                   monta::v1::AgentGateway::StubInterface* stub,
                   Cancellation& cancel) {
    const absl::Time deadline = RankDeadline(task, absl::Now());
    const auto& nodes = task.nodes();
    const int node_index = static_cast<int>(
        std::find(nodes.begin(), nodes.end(), options.node_name) -
        nodes.begin());
    // One report per node and task: its ranks' own numbers, never another
    // node's.
    monta::v1::ReportBenchmarkRequest report;
    report.set_task_id(task.task_id());
    report.set_node_name(options.node_name);
    report.set_leader_epoch(task.leader_epoch());
    absl::Status outcome;
    if (node_index >= nodes.size() || task.ranks_per_node() < 1) {
      outcome = absl::InvalidArgumentError(
          absl::StrCat("task does not place node ", options.node_name));
    } else {
      outcome = MeasureNode(task, node_index, deadline, stub, options, cancel,
                            &report);
    }
    if (cancel.superseded()) {
      // Its leader is gone or no longer leads, and the new one hands the
      // task out again: a report would be refused (or, at a leader that
      // still knows the epoch, fail the new attempt).
      std::cerr << "monta-agent[" << options.node_name << "]: task "
                << task.task_id() << " of leader epoch " << task.leader_epoch()
                << " dropped, not reported: " << cancel.status().message()
                << std::endl;
      if (options.on_finished) options.on_finished("superseded");
      return;
    }
    if (!outcome.ok()) report.clear_series();
    *report.mutable_status() = StatusToProto(outcome);
    const int64_t now_nanos = absl::ToUnixNanos(absl::Now());
    report.mutable_measured_at()->set_seconds(now_nanos / 1000000000);
    report.mutable_measured_at()->set_nanos(
        static_cast<int32_t>(now_nanos % 1000000000));
    std::cerr << "monta-agent[" << options.node_name << "]: task "
              << task.task_id() << " "
              << (outcome.ok() ? "done" : "failed: " + outcome.ToString())
              << std::endl;
    const absl::Status reported =
        SendReport(stub, report, deadline, cancel, options.node_name);
    if (!reported.ok()) {
      // The planner fails the task at its deadline; nothing else to do here.
      DiscardError(options.node_name, "report_benchmark",
                   absl::StrCat("report of task ", task.task_id()), reported,
                   options.on_discarded_error);
    }
    if (options.on_finished)
      options.on_finished(outcome.ok() ? "succeeded" : "failed");
  };
}

}  // namespace monta::agent
