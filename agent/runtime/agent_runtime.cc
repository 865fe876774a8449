#include "agent/runtime/agent_runtime.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/status_proto.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace monta::agent {
namespace {

void Log(const std::string& node, const std::string& message) {
  std::cerr << absl::FormatTime("%H:%M:%E3S ", absl::Now(),
                                absl::LocalTimeZone())
            << "monta-agent[" << node << "]: " << message << std::endl;
}

}  // namespace

void DiscardError(const std::string& node, const std::string& site,
                  const std::string& context, const absl::Status& status,
                  const DiscardedErrorSink& sink) {
  Log(node, absl::StrCat(context, ": ", status.ToString(), " (dropped at ",
                         site, ")"));
  if (sink) sink(site);
}

void Cancellation::Cancel() {
  CancelWith(absl::AbortedError("agent shutting down"), false);
}

bool Cancellation::Supersede(const std::string& why) {
  return CancelWith(absl::AbortedError(why), true);
}

bool Cancellation::CancelWith(absl::Status why, bool superseded) {
  std::map<int, std::function<void()>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    cancelled_ = true;
    superseded_ = superseded;
    why_ = std::move(why);
    callbacks.swap(callbacks_);
  }
  for (auto& [id, callback] : callbacks) callback();
  return true;
}

bool Cancellation::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool Cancellation::superseded() const {
  absl::MutexLock lock(&mu_);
  return superseded_;
}

absl::Status Cancellation::status() const {
  absl::MutexLock lock(&mu_);
  return why_;
}

int Cancellation::Add(std::function<void()> on_cancel) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      callbacks_[next_id_] = std::move(on_cancel);
      return next_id_++;
    }
  }
  on_cancel();
  return -1;
}

void Cancellation::Remove(int id) {
  absl::MutexLock lock(&mu_);
  callbacks_.erase(id);
}

std::string RandomInstanceId() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

namespace {

// --planner's replicas (monta-agent checks the flag; a list that does not
// parse is dialled as given, and gRPC says why it fails).
replicas::Endpoints PlannerEndpoints(const std::string& address) {
  absl::StatusOr<replicas::Endpoints> parsed =
      replicas::Endpoints::Parse(address, "planner_address");
  return parsed.ok() ? *std::move(parsed) : replicas::Endpoints({address});
}

}  // namespace

AgentRuntime::AgentRuntime(AgentOptions options)
    : options_(std::move(options)),
      backoff_(options_.initial_backoff, options_.max_backoff),
      endpoints_(PlannerEndpoints(options_.planner_address)),
      home_(endpoints_.all(),
            replicas::HomeIndex(options_.node_name, endpoints_.size())) {
  if (options_.instance_id.empty()) options_.instance_id = RandomInstanceId();
  Reconnect();
  absl::MutexLock lock(&mu_);
  home_stub_ = NewStub(home_.current());
}

std::shared_ptr<monta::v1::AgentGateway::Stub> AgentRuntime::HeartbeatStub(
    bool with_topology) {
  absl::MutexLock lock(&mu_);
  return with_topology || endpoints_.size() == 1 ? stub_ : home_stub_;
}

std::string AgentRuntime::MoveHome() {
  absl::MutexLock lock(&mu_);
  home_.MoveOn("");  // the next replica, not the leader
  home_stub_ = NewStub(home_.current());
  return home_.current();
}

std::string AgentRuntime::endpoint() {
  absl::MutexLock lock(&mu_);
  return endpoints_.current();
}

size_t AgentRuntime::endpoint_count() {
  absl::MutexLock lock(&mu_);
  return endpoints_.size();
}

std::string AgentRuntime::MoveOn(absl::string_view message) {
  {
    absl::MutexLock lock(&mu_);
    endpoints_.MoveOn(message);
  }
  Reconnect();
  return endpoint();
}

void AgentRuntime::SeeEpoch(int64_t epoch) {
  int64_t seen = newest_epoch_.load();
  while (epoch > seen && !newest_epoch_.compare_exchange_weak(seen, epoch)) {
  }
  std::shared_ptr<Cancellation> run;
  int64_t run_epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (run_cancel_ == nullptr || run_epoch_ >= epoch) return;
    run = run_cancel_;
    run_epoch = run_epoch_;
  }
  // Its leader is gone or follows now: waiting at its rendezvous until the
  // deadline would only keep this node from the new leader's attempt.
  if (run->Supersede(absl::StrCat("leader epoch ", epoch,
                                  " leads now; the run of leader epoch ",
                                  run_epoch, " is dropped unreported"))) {
    ++superseded_runs_;
  }
}

void AgentRuntime::RunTask(
    const monta::v1::BenchmarkTask& task,
    std::shared_ptr<monta::v1::AgentGateway::Stub> stub) {
  JoinUnwound(/*all=*/false);
  auto run = std::make_shared<Cancellation>();
  // Stop() cancels the agent's own, which cancels this run.
  const int stop_id = cancel_.Add([run] { run->Cancel(); });
  {
    absl::MutexLock lock(&mu_);
    run_cancel_ = run;
    run_epoch_ = task.leader_epoch();
  }
  // Ended, or superseded: what the watch thread waits for.
  auto over = std::make_shared<absl::Mutex>();
  auto ended = std::make_shared<std::atomic<bool>>(false);
  std::thread runner([this, task, stub, run, over, ended] {
    options_.runner(task, stub.get(), *run);
    absl::MutexLock lock(over.get());
    *ended = true;
  });
  const int superseded_id = run->Add([over] {
    absl::MutexLock lock(over.get());  // wakes the wait below
  });
  // An epoch seen between AcceptTask and here.
  SeeEpoch(newest_epoch_.load());
  {
    struct Over {
      Cancellation* run;
      std::atomic<bool>* ended;
    } state{run.get(), ended.get()};
    absl::MutexLock lock(over.get());
    over->Await(absl::Condition(
        +[](Over* o) { return o->ended->load() || o->run->superseded(); },
        &state));
  }
  run->Remove(superseded_id);
  {
    absl::MutexLock lock(&mu_);
    run_cancel_ = nullptr;
    if (!ended->load()) {
      unwinding_.push_back({std::move(runner), ended});
    }
  }
  if (runner.joinable()) runner.join();
  cancel_.Remove(stop_id);
  if (run->superseded()) {
    Log(options_.node_name,
        absl::StrCat("task ", task.task_id(), ": ", run->status().message()));
  }
}

void AgentRuntime::JoinUnwound(bool all) {
  std::vector<Unwinding> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = unwinding_.begin(); it != unwinding_.end();) {
      if (all || it->ended->load()) {
        done.push_back(std::move(*it));
        it = unwinding_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Unwinding& u : done) u.thread.join();
}

bool AgentRuntime::AcceptTask(const monta::v1::BenchmarkTask& task) {
  const int64_t newest = newest_epoch_.load();
  if (task.leader_epoch() < newest) {
    ++stale_tasks_;
    Log(options_.node_name,
        absl::StrCat("ignoring task ", task.task_id(), " of leader epoch ",
                     task.leader_epoch(), ": epoch ", newest,
                     " leads now (the old leader's tasks failed \"leader "
                     "changed\")"));
    return false;
  }
  SeeEpoch(task.leader_epoch());
  return true;
}

void AgentRuntime::Reconnect() {
  std::shared_ptr<monta::v1::AgentGateway::Stub> stub = NewStub(endpoint());
  absl::MutexLock lock(&mu_);
  stub_ = std::move(stub);
}

std::shared_ptr<monta::v1::AgentGateway::Stub> AgentRuntime::NewStub(
    const std::string& target) const {
  grpc::ChannelArguments args;
  // A channel of our own with a private subchannel pool: after a planner
  // restart a fresh channel connects at once instead of waiting out gRPC's
  // reconnect backoff on a shared subchannel. Our loop adds the jittered
  // backoff.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  auto channel = grpc::CreateCustomChannel(
      target,
      options_.credentials != nullptr ? options_.credentials
                                      : grpc::InsecureChannelCredentials(),
      args);
  return monta::v1::AgentGateway::NewStub(channel);
}

std::shared_ptr<monta::v1::AgentGateway::Stub> AgentRuntime::stub() {
  absl::MutexLock lock(&mu_);
  return stub_;
}

AgentRuntime::~AgentRuntime() { Stop(); }

void AgentRuntime::Start() {
  lease_thread_ = std::thread([this] { LeaseLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

void AgentRuntime::Stop() {
  if (stop_.HasBeenNotified()) return;
  stop_.Notify();
  // A running sweep fails now ("agent shutting down") rather than at its
  // deadline; the watch thread reports it and returns.
  cancel_.Cancel();
  {
    absl::MutexLock lock(&mu_);
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  JoinUnwound(/*all=*/true);
  if (registered_.load()) {
    monta::v1::DeregisterRequest request;
    request.set_node_name(options_.node_name);
    request.set_instance_id(options_.instance_id);
    monta::v1::DeregisterReply reply;
    auto context = NewContext();
    grpc::Status status = stub()->Deregister(context.get(), request, &reply);
    Log(options_.node_name, status.ok() ? "deregistered"
                                        : absl::StrCat("deregister failed: ",
                                                       status.error_message()));
    registered_ = false;
  }
}

std::unique_ptr<grpc::ClientContext> AgentRuntime::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(GrpcDeadline(options_.rpc_timeout));
  return context;
}

absl::Duration AgentRuntime::BackoffFor(int attempt) {
  absl::Duration interval;
  {
    absl::MutexLock lock(&mu_);
    interval = heartbeat_interval_;
  }
  return backoff_.Delay(attempt, interval);
}

absl::Status AgentRuntime::RegisterOnce() {
  monta::v1::RegisterRequest request;
  request.set_node_name(options_.node_name);
  request.set_instance_id(options_.instance_id);
  request.set_agent_version(options_.agent_version);
  request.set_bench_address(options_.bench_address);
  if (options_.discover) {
    absl::StatusOr<monta::v1::NodeTopology> topology = options_.discover();
    if (!topology.ok()) return topology.status();
    *request.mutable_topology() = *std::move(topology);
  }
  monta::v1::RegisterReply reply;
  auto context = NewContext();
  if (absl::Status status =
          FromGrpc(stub()->Register(context.get(), request, &reply));
      !status.ok()) {
    return status;
  }
  SeeEpoch(reply.leader_epoch());
  absl::MutexLock lock(&mu_);
  if (reply.heartbeat_interval_seconds() > 0) {
    heartbeat_interval_ = absl::Seconds(reply.heartbeat_interval_seconds());
  }
  last_topology_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

bool AgentRuntime::TryRegister(int& attempt) {
  absl::Status status = RegisterOnce();
  if (status.ok()) {
    attempt = 0;
    registered_ = true;
    ++registrations_;
    Log(options_.node_name,
        absl::StrCat(
            "registered with ", endpoint(), " as instance ",
            options_.instance_id,
            newest_epoch_.load() > 0
                ? absl::StrCat(" (leader epoch ", newest_epoch_.load(), ")")
                : std::string()));
    return true;
  }
  registered_ = false;
  const absl::Duration wait = BackoffFor(attempt++);
  // Down, or a follower naming the leader: try the next replica.
  const std::string next = endpoint_count() > 1 && absl::IsUnavailable(status)
                               ? MoveOn(status.message())
                               : endpoint();
  Log(options_.node_name,
      absl::StrCat("register failed (", status.ToString(), "); retrying with ",
                   next, " in ", absl::FormatDuration(wait)));
  stop_.WaitForNotificationWithTimeout(wait);
  return false;
}

monta::v1::HeartbeatRequest AgentRuntime::NewHeartbeat(bool with_topology) {
  monta::v1::HeartbeatRequest request;
  request.set_node_name(options_.node_name);
  request.set_instance_id(options_.instance_id);
  if (with_topology && options_.discover) {
    absl::StatusOr<monta::v1::NodeTopology> topology = options_.discover();
    if (topology.ok()) *request.mutable_topology() = *std::move(topology);
  }
  return request;
}

void AgentRuntime::LeaseLoop() {
  int attempt = 0;
  bool need_register = true;
  while (!stop_.HasBeenNotified()) {
    if (need_register) {
      if (!TryRegister(attempt)) continue;
      need_register = false;
    }
    absl::Duration interval;
    bool refresh_topology;
    {
      absl::MutexLock lock(&mu_);
      interval = heartbeat_interval_;
      refresh_topology =
          MonoSince(last_topology_, std::chrono::steady_clock::now()) >=
          options_.topology_refresh;
    }
    if (stop_.WaitForNotificationWithTimeout(
            attempt == 0 ? interval : BackoffFor(attempt)))
      break;

    const monta::v1::HeartbeatRequest request = NewHeartbeat(refresh_topology);
    monta::v1::HeartbeatReply reply;
    auto context = NewContext();
    const bool home = endpoint_count() > 1 && !request.has_topology();
    grpc::Status status = HeartbeatStub(request.has_topology())
                              ->Heartbeat(context.get(), request, &reply);
    if (home && status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // The home replica is down (or its cache behind): heartbeat to the
      // next one at once; the registration stays in the store.
      Log(options_.node_name,
          absl::StrCat("heartbeat failed (", status.error_message(),
                       "); heartbeating to ", MoveHome()));
      ++attempt;
      continue;
    }
    if (status.ok()) {
      SeeEpoch(reply.leader_epoch());
      if (attempt > 0) Log(options_.node_name, "heartbeat ok again");
      attempt = 0;
      registered_ = true;
      if (request.has_topology()) {
        absl::MutexLock lock(&mu_);
        last_topology_ = std::chrono::steady_clock::now();
      }
    } else if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
               status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // The planner forgot us (restart) or someone else holds the name:
      // register again.
      Log(options_.node_name,
          absl::StrCat("heartbeat refused (", status.error_message(),
                       "); registering again"));
      registered_ = false;
      need_register = true;
    } else if (endpoint_count() > 1 &&
               status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // The replica died or no longer leads: register with the leader it
      // named, else the next one.
      registered_ = false;
      need_register = true;
      const std::string next = MoveOn(status.error_message());
      Log(options_.node_name,
          absl::StrCat("heartbeat failed (", status.error_message(),
                       "); moving to ", next));
    } else {
      registered_ = false;
      ++attempt;
      Log(options_.node_name,
          absl::StrCat("heartbeat failed (", status.error_message(),
                       "); retrying"));
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) Reconnect();
    }
  }
}

void AgentRuntime::WatchLoop() {
  int attempt = 0;
  while (!stop_.HasBeenNotified()) {
    if (!registered_.load()) {
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100));
      continue;
    }
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&mu_);
      if (stop_.HasBeenNotified()) break;
      watch_context_ = &context;
    }
    monta::v1::WatchTasksRequest request;
    request.set_node_name(options_.node_name);
    request.set_instance_id(options_.instance_id);
    std::shared_ptr<monta::v1::AgentGateway::Stub> watch_stub = stub();
    auto reader = watch_stub->WatchTasks(&context, request);
    monta::v1::BenchmarkTask task;
    bool got_any = false;
    while (reader->Read(&task)) {
      got_any = true;
      attempt = 0;
      Log(options_.node_name,
          absl::StrCat("task ", task.task_id(), " received"));
      if (!AcceptTask(task)) continue;
      if (options_.runner) {
        RunTask(task, watch_stub);
        // A superseded run's stream is the old leader's: the next task comes
        // from the leader the lease loop moved to.
        if (newest_epoch_.load() > task.leader_epoch()) {
          context.TryCancel();
          break;
        }
      } else {
        monta::v1::ReportBenchmarkRequest report;
        report.set_task_id(task.task_id());
        report.set_node_name(options_.node_name);
        report.set_leader_epoch(task.leader_epoch());
        // The planner accepts a node's result only naming exactly its ranks.
        const auto& nodes = task.nodes();
        const int first_rank =
            static_cast<int>(
                std::find(nodes.begin(), nodes.end(), options_.node_name) -
                nodes.begin()) *
            task.ranks_per_node();
        for (int i = 0; i < task.ranks_per_node(); ++i) {
          report.add_ranks(first_rank + i);
        }
        *report.mutable_status() = StatusToProto(absl::FailedPreconditionError(
            "this agent has no benchmark runner"));
        monta::v1::ReportBenchmarkReply reply;
        auto report_context = NewContext();
        const absl::Status reported = FromGrpc(
            watch_stub->ReportBenchmark(report_context.get(), report, &reply));
        if (!reported.ok()) {
          DiscardError(options_.node_name, "report_benchmark_no_runner",
                       absl::StrCat("report of task ", task.task_id()),
                       reported, options_.on_discarded_error);
        }
      }
    }
    grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      watch_context_ = nullptr;
    }
    if (stop_.HasBeenNotified()) break;
    WatchEnded(status);
    if (!got_any) ++attempt;
    stop_.WaitForNotificationWithTimeout(BackoffFor(attempt));
  }
}

void AgentRuntime::WatchEnded(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return;
  // Tasks come from the leader: to the one named, else the next replica
  // (heartbeats to a follower do not notice a change of leader). One endpoint
  // (a Service in front of the replicas): a new channel, which may reach
  // another replica.
  if (endpoint_count() > 1) {
    const std::string next = MoveOn(status.error_message());
    Log(options_.node_name,
        absl::StrCat("task watch ended (", status.error_message(),
                     "); watching at ", next));
  } else {
    Reconnect();
  }
}

}  // namespace monta::agent
