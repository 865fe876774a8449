// A swarm of simulated agents against one planner process: each agent
// registers, heartbeats at the interval the planner gives it and holds one
// WatchTasks stream, as agent/runtime does (same backoff, re-registers on
// NOT_FOUND / FAILED_PRECONDITION), plus a GetStrategy load at a fixed rate.
// All agents share a few channels and gRPC's callback client API: no thread
// per agent, so 10,000 of them fit on a small box next to the planner.
//
//   bazel build -c opt //server:monta-planner //perf:swarm_bench
//   bazel-bin/perf/swarm_bench --agents=10000 --seconds=300
//   bazel-bin/perf/swarm_bench --agents=10000 --kill_after_seconds=30
//       (SIGKILL and restart the planner 30 s into the measured phase)
//
// The planner runs as a child process (--planner_binary, its own --db and
// port) so that its threads and RSS can be read from /proc and it can be
// killed and restarted on the same database and port. Reported, over the
// measured phase (after the registration ramp): heartbeat latency
// p50/p99/max, deadline misses (heartbeats ending DEADLINE_EXCEEDED), other
// heartbeat errors, stale flaps (a ListNodes audit that shows a node STALE
// while its agent believes it holds the lease, plus gaps between an agent's
// successful heartbeats longer than the lease), the planner's peak threads and
// RSS, the client's scheduling lag (large values mean this process, not the
// planner, fell behind) and, with --kill_after_seconds, the time from the
// restart until every agent is alive again.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/job_file.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"

ABSL_FLAG(int, agents, 1000, "simulated agents (nodes)");
ABSL_FLAG(double, seconds, 60, "length of the measured phase");
ABSL_FLAG(double, register_rate, 1000,
          "registrations per second during the ramp (unmeasured)");
ABSL_FLAG(double, settle_seconds, 10,
          "unmeasured time after the last registration before measuring");
ABSL_FLAG(int, agents_per_channel, 50,
          "agents sharing one channel (one TCP connection)");
ABSL_FLAG(std::string, planner_binary, "bazel-bin/server/monta-planner",
          "the planner to start (a child process of this benchmark)");
ABSL_FLAG(std::string, planner_args, "",
          "extra planner flags, space separated (e.g. "
          "\"--heartbeat_seconds=5 --lease_seconds=15\")");
ABSL_FLAG(int, port, 0, "planner gRPC port; 0 picks a free one");
ABSL_FLAG(std::string, db, "",
          "planner --db; empty: a fresh file under /tmp, removed at the end");
ABSL_FLAG(std::string, planner_log, "",
          "planner's stderr; empty: /tmp/swarm-bench-<pid>-planner.log");
ABSL_FLAG(double, strategy_qps, 20,
          "GetStrategy calls per second during the run (0: none)");
ABSL_FLAG(std::string, job, "examples/monta-paper-2x70b.yaml",
          "job file of the GetStrategy load");
ABSL_FLAG(double, rpc_timeout_seconds, 5,
          "deadline of each agent call (as the agent's default)");
ABSL_FLAG(double, audit_every_seconds, 30,
          "ListNodes audit for stale flaps this often (0: none)");
ABSL_FLAG(double, kill_after_seconds, 0,
          "SIGKILL the planner this long into the measured phase, restart it "
          "on the same --db and port and time until every agent is alive; 0: "
          "no kill");
ABSL_FLAG(bool, json, false, "print the report as JSON");

namespace monta::perf {
namespace {

using monta::v1::AgentGateway;

// ---------------------------------------------------------------- planner --

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// The planner as a child process.
class PlannerProcess {
 public:
  PlannerProcess(std::vector<std::string> argv, std::string log_path)
      : argv_(std::move(argv)), log_path_(std::move(log_path)) {}
  ~PlannerProcess() { Kill(); }

  absl::Status Start() {
    std::vector<char*> args;
    for (std::string& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    const int log_fd =
        open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log_fd < 0) return absl::InternalError("cannot open " + log_path_);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(log_fd);
    if (pid < 0) return absl::InternalError("fork failed");
    pid_ = pid;
    return absl::OkStatus();
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  pid_t pid() const { return pid_; }

 private:
  std::vector<std::string> argv_;
  const std::string log_path_;
  pid_t pid_ = -1;
};

// Waits until the planner answers a health check; false after `timeout`.
bool WaitServing(const std::string& target, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args);
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse reply;
    if (stub->Check(&context, request, &reply).ok()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

struct ProcSample {
  int threads = 0;
  int64_t rss_kb = 0;
  double cpu_seconds = 0;  // user + system
};

// Threads and VmRSS of `pid` (zeros when it is gone).
ProcSample ReadProc(pid_t pid) {
  ProcSample s;
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) s.threads = std::atoi(&line[8]);
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::atoll(&line[6]);
  }
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(stat)),
                  std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces): state is field 3,
  // utime and stime fields 14 and 15.
  const size_t close = all.rfind(')');
  if (close != std::string::npos) {
    std::vector<std::string> f = absl::StrSplit(all.substr(close + 2), ' ');
    if (f.size() > 12) {
      s.cpu_seconds = (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) /
                      sysconf(_SC_CLK_TCK);
    }
  }
  return s;
}

// ------------------------------------------------------------------ swarm --

enum class Kind { kRegister, kHeartbeat, kWatch, kStrategy };

struct Event {
  absl::Time due;
  int agent;
  Kind kind;
  bool operator>(const Event& o) const { return due > o.due; }
};

// Capped exponential backoff with equal jitter, as AgentRuntime::Backoff.
absl::Duration Backoff(int attempt, absl::Duration interval) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const absl::Duration cap = std::min(absl::Seconds(5), interval);
  const double factor = std::pow(2.0, std::min(attempt, 20));
  const absl::Duration base = std::min(cap, absl::Milliseconds(200) * factor);
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return base * jitter(rng);
}

monta::v1::NodeTopology SwarmTopology(const std::string& name) {
  monta::v1::NodeTopology t;
  t.set_hostname(name);
  (*t.mutable_labels())["network.topology.nvidia.com/leaf"] = "leaf-01";
  t.set_cpu_sockets(2);
  t.set_cpu_logical_count(64);
  for (int g = 0; g < 8; ++g) {
    monta::v1::Gpu* gpu = t.add_gpus();
    gpu->set_index(g);
    gpu->set_name("NVIDIA H100 80GB HBM3");
    gpu->set_pci_bus_id(absl::StrFormat("0000:%02x:00.0", 0x18 + g));
    gpu->set_memory_bytes(uint64_t{80} << 30);
    gpu->set_sm_count(132);
    gpu->set_numa_node(g / 4);
  }
  return t;
}

struct Agent {
  std::string name;
  std::string instance_id;
  int channel = 0;
  absl::Mutex mu;
  // The agent believes it holds the lease (its last Register or Heartbeat
  // succeeded).
  bool registered ABSL_GUARDED_BY(mu) = false;
  bool watching ABSL_GUARDED_BY(mu) = false;
  int heartbeat_attempt ABSL_GUARDED_BY(mu) = 0;
  int watch_attempt ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_ok ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // Completion of the first call sent after the restart that succeeded.
  absl::Time alive_after_restart ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  grpc::ClientContext* watch_context ABSL_GUARDED_BY(mu) = nullptr;
};

struct Stats {
  std::vector<int32_t> heartbeat_us;
  std::vector<int32_t> strategy_us;
  int64_t deadline_misses = 0;
  std::map<std::string, int64_t> heartbeat_errors;
  int64_t strategy_errors = 0;
  int64_t lease_gaps = 0;
  int64_t audit_stale_flaps = 0;
  int64_t watch_lease_ends = 0;  // streams ended "lease expired"
  int64_t tasks = 0;
  int64_t registrations = 0;
  double max_lag_ms = 0;
};

class Swarm {
 public:
  Swarm(const std::string& target, int n, int per_channel,
        monta::v1::StrategyRequest job)
      : target_(target), job_(std::move(job)) {
    const int channels = (n + per_channel - 1) / per_channel;
    for (int c = 0; c <= channels; ++c) {  // the last one: GetStrategy, audits
      grpc::ChannelArguments args;
      args.SetInt("monta.swarm_bench.channel", c);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
      args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
      args.SetMaxReceiveMessageSize(-1);
      auto channel = grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
      gateways_.push_back(AgentGateway::NewStub(channel));
      planners_.push_back(monta::v1::Planner::NewStub(channel));
    }
    const std::string run = absl::StrFormat("%08x", std::random_device{}());
    agents_.reserve(n);
    for (int i = 0; i < n; ++i) {
      agents_.push_back(std::make_unique<Agent>());
      agents_[i]->name = absl::StrFormat("swarm-%05d", i);
      agents_[i]->instance_id = absl::StrCat(run, "-", i);
      agents_[i]->channel = i / per_channel;
    }
    scheduler_ = std::thread([this] { Loop(); });
  }

  ~Swarm() { Stop(); }

  void Schedule(absl::Time due, int agent, Kind kind) {
    absl::MutexLock lock(&mu_);
    heap_.push(Event{due, agent, kind});
  }

  // Registrations spread at `rate` per second from now on; GetStrategy at qps.
  void Start(double rate, double strategy_qps) {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < agents_.size(); ++i) {
      Schedule(now + absl::Seconds(i / rate), i, Kind::kRegister);
    }
    strategy_period_ = strategy_qps > 0 ? absl::Seconds(1 / strategy_qps)
                                        : absl::InfiniteDuration();
    if (strategy_qps > 0) Schedule(now, -1, Kind::kStrategy);
  }

  void Stop();
  void SetMeasuring(bool on) { measuring_ = on; }
  // From now on, agents note their first success (see AliveAfterRestart).
  void MarkRestart(absl::Time restart);
  // Agents alive again since MarkRestart, and the last of them to be.
  int AliveAfterRestart(absl::Time* last) const;
  int Registered() const;
  // One ListNodes: counts STALE nodes whose agent believes it is alive.
  absl::Status Audit();
  Stats TakeStats() {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }
  absl::Duration interval() const {
    return absl::Milliseconds(interval_ms_.load());
  }

 private:
  void Loop();
  void Dispatch(const Event& e);
  void Register(int i);
  void OnRegistered(int i, absl::Time sent, const grpc::Status& status,
                    double interval_seconds);
  void Heartbeat(int i);
  void OnHeartbeat(int i, absl::Time sent, const grpc::Status& status);
  void Watch(int i);
  void GetStrategy();
  void NoteAlive(Agent& a, absl::Time sent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a.mu);

 public:
  // Called by the watch reactor.
  void OnTask(int i, const monta::v1::BenchmarkTask& task);
  void OnWatchDone(int i, bool got_any, absl::Time started,
                   const grpc::Status& status);

 private:
  const std::string target_;
  const monta::v1::StrategyRequest job_;
  std::vector<std::unique_ptr<AgentGateway::Stub>> gateways_;
  std::vector<std::unique_ptr<monta::v1::Planner::Stub>> planners_;
  std::vector<std::unique_ptr<Agent>> agents_;
  absl::Duration strategy_period_ = absl::InfiniteDuration();
  std::atomic<int64_t> interval_ms_{5000};
  std::atomic<int64_t> lease_ms_{15000};
  std::atomic<bool> measuring_{false};
  std::atomic<int64_t> in_flight_{0};
  std::thread scheduler_;

  mutable absl::Mutex mu_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time restart_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();

  absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

class WatchReactor : public grpc::ClientReadReactor<monta::v1::BenchmarkTask> {
 public:
  WatchReactor(Swarm* swarm, int agent) : swarm_(swarm), agent_(agent) {}
  grpc::ClientContext* context() { return &context_; }
  monta::v1::WatchTasksRequest* request() { return &request_; }
  void Begin() {
    StartRead(&task_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    got_any_ = true;
    swarm_->OnTask(agent_, task_);
    StartRead(&task_);
  }
  void OnDone(const grpc::Status& status) override {
    swarm_->OnWatchDone(agent_, got_any_, started_, status);
    delete this;
  }

 private:
  Swarm* const swarm_;
  const int agent_;
  grpc::ClientContext context_;
  monta::v1::WatchTasksRequest request_;
  monta::v1::BenchmarkTask task_;
  bool got_any_ = false;
  const absl::Time started_ = absl::Now();
};

void Swarm::Loop() {
  std::vector<Event> due;
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    due.clear();
    while (!heap_.empty() && heap_.top().due <= now) {
      due.push_back(heap_.top());
      heap_.pop();
    }
    if (due.empty()) {
      // Bounded so that an event pushed ahead of the top waits at most 20 ms.
      absl::Time next = now + absl::Milliseconds(20);
      if (!heap_.empty()) next = std::min(next, heap_.top().due);
      mu_.AwaitWithDeadline(absl::Condition(&stop_), next);
      continue;
    }
    mu_.Unlock();
    const double lag_ms = absl::ToDoubleMilliseconds(now - due.front().due);
    if (measuring_) {
      absl::MutexLock stats(&stats_mu_);
      stats_.max_lag_ms = std::max(stats_.max_lag_ms, lag_ms);
    }
    for (const Event& e : due) Dispatch(e);
    mu_.Lock();
  }
}

void Swarm::Dispatch(const Event& e) {
  switch (e.kind) {
    case Kind::kRegister:
      Register(e.agent);
      break;
    case Kind::kHeartbeat:
      Heartbeat(e.agent);
      break;
    case Kind::kWatch:
      Watch(e.agent);
      break;
    case Kind::kStrategy:
      GetStrategy();
      Schedule(e.due + strategy_period_, -1, Kind::kStrategy);
      break;
  }
}

void Swarm::Register(int i) {
  Agent& a = *agents_[i];
  struct Call {
    grpc::ClientContext context;
    monta::v1::RegisterRequest request;
    monta::v1::RegisterReply reply;
  };
  auto* call = new Call;
  call->context.set_deadline(absl::ToChronoTime(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_seconds))));
  call->request.set_node_name(a.name);
  call->request.set_instance_id(a.instance_id);
  call->request.set_agent_version("swarm-bench");
  call->request.set_bench_address(
      absl::StrCat("127.0.0.1:", 20000 + i % 40000));
  *call->request.mutable_topology() = SwarmTopology(a.name);
  const absl::Time sent = absl::Now();
  ++in_flight_;
  gateways_[a.channel]->async()->Register(
      &call->context, &call->request, &call->reply,
      [this, i, call, sent](grpc::Status status) {
        OnRegistered(i, sent, status, call->reply.heartbeat_interval_seconds());
        delete call;
        --in_flight_;
      });
}

void Swarm::NoteAlive(Agent& a, absl::Time sent) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (sent >= restart_ && a.alive_after_restart == absl::InfinitePast()) {
      a.alive_after_restart = now;
    }
  }
  if (measuring_ && a.last_ok != absl::InfinitePast() &&
      now - a.last_ok > absl::Milliseconds(lease_ms_.load())) {
    absl::MutexLock stats(&stats_mu_);
    ++stats_.lease_gaps;
  }
  a.last_ok = now;
  a.registered = true;
}

void Swarm::OnRegistered(int i, absl::Time sent, const grpc::Status& status,
                         double interval_seconds) {
  Agent& a = *agents_[i];
  if (!status.ok()) {
    absl::MutexLock lock(&a.mu);
    Schedule(absl::Now() + Backoff(a.heartbeat_attempt++, interval()), i,
             Kind::kRegister);
    return;
  }
  if (interval_seconds > 0) interval_ms_ = interval_seconds * 1000;
  {
    absl::MutexLock stats(&stats_mu_);
    ++stats_.registrations;
  }
  absl::MutexLock lock(&a.mu);
  a.heartbeat_attempt = 0;
  NoteAlive(a, sent);
  Schedule(absl::Now() + interval(), i, Kind::kHeartbeat);
  if (!a.watching) {
    a.watching = true;
    Schedule(absl::Now(), i, Kind::kWatch);
  }
}

void Swarm::Heartbeat(int i) {
  Agent& a = *agents_[i];
  struct Call {
    grpc::ClientContext context;
    monta::v1::HeartbeatRequest request;
    monta::v1::HeartbeatReply reply;
  };
  auto* call = new Call;
  call->context.set_deadline(absl::ToChronoTime(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_seconds))));
  call->request.set_node_name(a.name);
  call->request.set_instance_id(a.instance_id);
  const absl::Time sent = absl::Now();
  ++in_flight_;
  gateways_[a.channel]->async()->Heartbeat(
      &call->context, &call->request, &call->reply,
      [this, i, call, sent](grpc::Status status) {
        OnHeartbeat(i, sent, status);
        delete call;
        --in_flight_;
      });
}

void Swarm::OnHeartbeat(int i, absl::Time sent, const grpc::Status& status) {
  const absl::Time now = absl::Now();
  Agent& a = *agents_[i];
  if (measuring_) {
    absl::MutexLock stats(&stats_mu_);
    if (status.ok()) {
      stats_.heartbeat_us.push_back(
          static_cast<int32_t>(absl::ToInt64Microseconds(now - sent)));
    } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      ++stats_.deadline_misses;
    } else {
      ++stats_.heartbeat_errors[absl::StrCat(status.error_code(), " ",
                                             status.error_message())];
    }
  }
  absl::MutexLock lock(&a.mu);
  if (status.ok()) {
    a.heartbeat_attempt = 0;
    NoteAlive(a, sent);
    Schedule(now + interval(), i, Kind::kHeartbeat);
  } else if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
             status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    a.registered = false;  // the planner forgot us: register again
    Schedule(now, i, Kind::kRegister);
  } else {
    a.registered = false;
    Schedule(now + Backoff(++a.heartbeat_attempt, interval()), i,
             Kind::kHeartbeat);
  }
}

void Swarm::Watch(int i) {
  Agent& a = *agents_[i];
  absl::MutexLock lock(&a.mu);
  if (!a.registered) {  // as the agent's watch loop: wait for the lease
    Schedule(absl::Now() + absl::Milliseconds(100), i, Kind::kWatch);
    return;
  }
  auto* reactor = new WatchReactor(this, i);
  reactor->request()->set_node_name(a.name);
  reactor->request()->set_instance_id(a.instance_id);
  a.watch_context = reactor->context();
  ++in_flight_;
  gateways_[a.channel]->async()->WatchTasks(reactor->context(),
                                            reactor->request(), reactor);
  reactor->Begin();
}

void Swarm::OnTask(int i, const monta::v1::BenchmarkTask& task) {
  {
    absl::MutexLock stats(&stats_mu_);
    ++stats_.tasks;
  }
  // As an agent without a benchmark runner: report the task failed.
  struct Call {
    grpc::ClientContext context;
    monta::v1::ReportBenchmarkRequest request;
    monta::v1::ReportBenchmarkReply reply;
  };
  auto* call = new Call;
  call->request.set_task_id(task.task_id());
  call->request.set_node_name(agents_[i]->name);
  // A report names exactly the node's ranks in the task.
  const auto& nodes = task.nodes();
  const int index = static_cast<int>(
      std::find(nodes.begin(), nodes.end(), agents_[i]->name) - nodes.begin());
  for (int r = 0; r < task.ranks_per_node(); ++r) {
    call->request.add_ranks(index * task.ranks_per_node() + r);
  }
  call->request.mutable_status()->set_code(
      static_cast<int>(absl::StatusCode::kFailedPrecondition));
  call->request.mutable_status()->set_message("swarm agents run no benchmark");
  ++in_flight_;
  gateways_[agents_[i]->channel]->async()->ReportBenchmark(
      &call->context, &call->request, &call->reply, [this, call](grpc::Status) {
        delete call;
        --in_flight_;
      });
}

void Swarm::OnWatchDone(int i, bool got_any, absl::Time started,
                        const grpc::Status& status) {
  Agent& a = *agents_[i];
  const bool lease_end =
      status.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
  {
    absl::MutexLock lock(&a.mu);
    a.watch_context = nullptr;
    if (!got_any) ++a.watch_attempt;
    if (got_any) a.watch_attempt = 0;
    bool stopping;
    bool recovering;  // restarted, and this agent not yet alive since
    {
      absl::MutexLock l(&mu_);
      stopping = stop_;
      recovering = restart_ != absl::InfiniteFuture() &&
                   (a.alive_after_restart == absl::InfinitePast() ||
                    started <= a.alive_after_restart);
    }
    if (!stopping) {
      Schedule(absl::Now() + Backoff(a.watch_attempt, interval()), i,
               Kind::kWatch);
    }
    // After a restart the restored nodes are stale until their agents'
    // next heartbeat: a watch refused before that is expected.
    if (lease_end && measuring_ && a.registered && !recovering) {
      absl::MutexLock stats(&stats_mu_);
      ++stats_.watch_lease_ends;
    }
  }
  --in_flight_;
}

void Swarm::GetStrategy() {
  struct Call {
    grpc::ClientContext context;
    monta::v1::StrategyReply reply;
  };
  auto* call = new Call;
  call->context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  const absl::Time sent = absl::Now();
  ++in_flight_;
  planners_.back()->async()->GetStrategy(
      &call->context, &job_, &call->reply,
      [this, call, sent](grpc::Status status) {
        if (measuring_) {
          absl::MutexLock stats(&stats_mu_);
          if (status.ok()) {
            stats_.strategy_us.push_back(static_cast<int32_t>(
                absl::ToInt64Microseconds(absl::Now() - sent)));
          } else {
            ++stats_.strategy_errors;
          }
        }
        delete call;
        --in_flight_;
      });
}

void Swarm::MarkRestart(absl::Time restart) {
  for (auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    agent->alive_after_restart = absl::InfinitePast();
    agent->last_ok = absl::InfinitePast();  // no lease gap across the kill
  }
  absl::MutexLock lock(&mu_);
  restart_ = restart;
}

int Swarm::AliveAfterRestart(absl::Time* last) const {
  int alive = 0;
  *last = absl::InfinitePast();
  for (const auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    if (agent->alive_after_restart == absl::InfinitePast()) continue;
    ++alive;
    *last = std::max(*last, agent->alive_after_restart);
  }
  return alive;
}

int Swarm::Registered() const {
  int n = 0;
  for (const auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    n += agent->registered;
  }
  return n;
}

absl::Status Swarm::Audit() {
  std::map<std::string, int> index;
  for (size_t i = 0; i < agents_.size(); ++i) index[agents_[i]->name] = i;
  int64_t flaps = 0;
  // Every page: the planner returns at most --max_nodes_per_page per reply.
  std::string page_token;
  do {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Seconds(30)));
    monta::v1::ListNodesRequest request;
    request.set_page_token(page_token);
    monta::v1::ListNodesReply reply;
    grpc::Status status =
        planners_.back()->ListNodes(&context, request, &reply);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("ListNodes: ", status.error_message()));
    }
    for (const auto& node : reply.nodes()) {
      auto it = index.find(node.name());
      if (it == index.end() || node.state() != monta::v1::NODE_STATE_STALE)
        continue;
      Agent& a = *agents_[it->second];
      absl::MutexLock lock(&a.mu);
      if (a.registered) ++flaps;
    }
    page_token = reply.next_page_token();
  } while (!page_token.empty());
  absl::MutexLock stats(&stats_mu_);
  stats_.audit_stale_flaps += flaps;
  return absl::OkStatus();
}

void Swarm::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  scheduler_.join();
  for (auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    if (agent->watch_context != nullptr) agent->watch_context->TryCancel();
  }
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (in_flight_.load() > 0 && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// ---------------------------------------------------------------- metrics --

// GET http://127.0.0.1:<port>/metrics; empty on failure.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) body.append(buf, n);
    }
  }
  close(fd);
  return body;
}

// Cumulative bucket counts (by upper bound) of the planner's own Heartbeat
// latency histogram, monta_rpc_duration_seconds{method="Heartbeat"}.
std::map<double, double> HeartbeatBuckets(const std::string& metrics) {
  std::map<double, double> buckets;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, "monta_rpc_duration_seconds_bucket{") ||
        !absl::StrContains(line, "method=\"Heartbeat\"")) {
      continue;
    }
    const size_t le = line.find("le=\"");
    const size_t space = line.rfind(' ');
    if (le == absl::string_view::npos || space == absl::string_view::npos)
      continue;
    const std::string bound(
        line.substr(le + 4, line.find('"', le + 4) - le - 4));
    const double upper = bound == "+Inf"
                             ? std::numeric_limits<double>::infinity()
                             : std::atof(bound.c_str());
    buckets[upper] = std::atof(std::string(line.substr(space + 1)).c_str());
  }
  return buckets;
}

// The planner's view between two scrapes: the smallest bucket bound holding
// fraction `q` of the heartbeats (ms), and the share served within `ms`.
struct ServerSide {
  double p50_le_ms = -1;
  double p99_le_ms = -1;
  double within_100ms = -1;
  double within_250ms = -1;
};

ServerSide Diff(const std::map<double, double>& before,
                const std::map<double, double>& after) {
  ServerSide s;
  if (after.empty()) return s;
  const auto count = [&](double upper) {
    auto b = before.find(upper);
    return after.at(upper) - (b == before.end() ? 0 : b->second);
  };
  const double total = count(after.rbegin()->first);
  if (total <= 0) return s;
  for (const auto& [upper, n] : after) {
    const double share = count(upper) / total;
    if (s.p50_le_ms < 0 && share >= 0.5) s.p50_le_ms = upper * 1e3;
    if (s.p99_le_ms < 0 && share >= 0.99) s.p99_le_ms = upper * 1e3;
    if (upper == 0.1) s.within_100ms = share;
    if (upper == 0.25) s.within_250ms = share;
  }
  return s;
}

// ----------------------------------------------------------------- report --

// The 1-minute load average: other work on the machine shows up here and
// explains noisy runs.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return in ? one : -1;
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double Percentile(std::vector<int32_t>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i] / 1e3;
}

struct Run {
  int agents = 0;
  double measured_seconds = 0;
  int peak_threads = 0;
  int64_t peak_rss_kb = 0;
  int end_threads = 0;
  int64_t end_rss_kb = 0;
  double ramp_seconds = 0;
  // CPU of the planner and of this process over the measured phase (the
  // planner's only when it was not restarted), in cores.
  double planner_cpu_cores = -1;
  double client_cpu_cores = -1;
  ServerSide server;  // only when the planner was not restarted
  // Kill mode.
  bool killed = false;
  double restart_to_serving_s = -1;
  double restart_to_all_alive_s = -1;
  int alive_after_restart = 0;
  double heartbeat_interval_s = 0;
};

nlohmann::json Report(const Run& run, Stats s) {
  nlohmann::json j;
  j["agents"] = run.agents;
  j["measured_seconds"] = run.measured_seconds;
  j["ramp_seconds"] = run.ramp_seconds;
  j["heartbeats_ok"] = s.heartbeat_us.size();
  j["heartbeat_p50_ms"] = Percentile(s.heartbeat_us, 0.50);
  j["heartbeat_p99_ms"] = Percentile(s.heartbeat_us, 0.99);
  j["heartbeat_max_ms"] = Percentile(s.heartbeat_us, 1.0);
  j["deadline_misses"] = s.deadline_misses;
  int64_t errors = 0;
  for (const auto& [what, n] : s.heartbeat_errors) errors += n;
  j["heartbeat_errors"] = errors;
  if (!s.heartbeat_errors.empty()) {
    j["first_heartbeat_error"] = s.heartbeat_errors.begin()->first;
  }
  j["stale_flaps"] = s.audit_stale_flaps + s.lease_gaps + s.watch_lease_ends;
  j["stale_flaps_audit"] = s.audit_stale_flaps;
  j["stale_flaps_lease_gaps"] = s.lease_gaps;
  j["stale_flaps_watch_lease_ends"] = s.watch_lease_ends;
  j["strategy_ok"] = s.strategy_us.size();
  j["strategy_errors"] = s.strategy_errors;
  j["strategy_p50_ms"] = Percentile(s.strategy_us, 0.50);
  j["strategy_p99_ms"] = Percentile(s.strategy_us, 0.99);
  j["tasks_received"] = s.tasks;
  j["planner_peak_threads"] = run.peak_threads;
  j["planner_peak_rss_mb"] = run.peak_rss_kb / 1024.0;
  j["planner_end_threads"] = run.end_threads;
  j["planner_end_rss_mb"] = run.end_rss_kb / 1024.0;
  j["client_max_lag_ms"] = s.max_lag_ms;
  j["planner_cpu_cores"] = run.planner_cpu_cores;
  if (!run.killed) {
    j["planner_heartbeat_p50_le_ms"] = run.server.p50_le_ms;
    j["planner_heartbeat_p99_le_ms"] = run.server.p99_le_ms;
    j["planner_heartbeat_within_100ms"] = run.server.within_100ms;
    j["planner_heartbeat_within_250ms"] = run.server.within_250ms;
  }
  j["client_cpu_cores"] = run.client_cpu_cores;
  j["loadavg_1m"] = LoadAverage();
  if (run.killed) {
    j["heartbeat_interval_s"] = run.heartbeat_interval_s;
    j["restart_to_serving_s"] = run.restart_to_serving_s;
    j["restart_to_all_alive_s"] = run.restart_to_all_alive_s;
    j["alive_after_restart"] = run.alive_after_restart;
  }
  return j;
}

// ------------------------------------------------------------------- main --

absl::StatusOr<monta::v1::StrategyRequest> LoadJob(const std::string& path) {
  absl::StatusOr<monta::v1::StrategyRequest> job = LoadJobFile(path);
  if (job.ok() || path.empty() || path[0] == '/') return job;
  for (const char* env :
       {"BUILD_WORKING_DIRECTORY", "BUILD_WORKSPACE_DIRECTORY"}) {
    const char* dir = std::getenv(env);
    if (dir == nullptr) continue;
    auto other = LoadJobFile(absl::StrCat(dir, "/", path));
    if (other.ok()) return other;
  }
  return job;
}

std::vector<std::string> PlannerArgv(int port, int metrics_port,
                                     const std::string& db) {
  std::vector<std::string> argv = {
      absl::GetFlag(FLAGS_planner_binary),
      absl::StrCat("--listen=127.0.0.1:", port),
      absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port),
      absl::StrCat("--db=", db),
      // The swarm's channels are plaintext on loopback; mTLS costs are not
      // what it measures.
      "--insecure",
      // A swarm measures the lease path: no sweeps for every new node.
      "--bench_on_register=false",
      "--bench_interval_seconds=0",
  };
  for (absl::string_view extra : absl::StrSplit(
           absl::GetFlag(FLAGS_planner_args), ' ', absl::SkipEmpty())) {
    argv.emplace_back(extra);
  }
  return argv;
}

// Samples the planner every 250 ms for `length` (stopping early when `done`
// says so), running audits on their schedule.
void Observe(Swarm& swarm, const PlannerProcess& planner, absl::Duration length,
             Run* run, const std::function<bool()>& done = nullptr) {
  const absl::Time end = absl::Now() + length;
  const double audit_every = absl::GetFlag(FLAGS_audit_every_seconds);
  absl::Time next_audit = audit_every > 0
                              ? absl::Now() + absl::Seconds(audit_every)
                              : absl::InfiniteFuture();
  while (absl::Now() < end) {
    const ProcSample p = ReadProc(planner.pid());
    run->peak_threads = std::max(run->peak_threads, p.threads);
    run->peak_rss_kb = std::max(run->peak_rss_kb, p.rss_kb);
    run->end_threads = p.threads;
    run->end_rss_kb = p.rss_kb;
    if (done && done()) return;
    if (absl::Now() >= next_audit) {
      if (absl::Status s = swarm.Audit(); !s.ok()) {
        std::cerr << "swarm_bench: audit failed: " << s << "\n";
      }
      next_audit = absl::Now() + absl::Seconds(audit_every);
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

// Kills the planner, restarts it on the same port and database, and waits
// (up to 4 lease lengths) until every agent is alive again.
absl::Status KillAndRestart(Swarm& swarm, PlannerProcess& planner,
                            const std::string& target, int n, Run* run) {
  planner.Kill();
  std::cerr << "swarm_bench: planner SIGKILLed, restarting\n";
  const absl::Time restart = absl::Now();
  swarm.MarkRestart(restart);
  if (absl::Status s = planner.Start(); !s.ok()) return s;
  if (!WaitServing(target, absl::Seconds(60))) {
    return absl::UnavailableError("the restarted planner never served");
  }
  run->killed = true;
  run->restart_to_serving_s = absl::ToDoubleSeconds(absl::Now() - restart);
  run->heartbeat_interval_s = absl::ToDoubleSeconds(swarm.interval());
  absl::Time last;
  Observe(swarm, planner, swarm.interval() * 12, run,
          [&] { return swarm.AliveAfterRestart(&last) == n; });
  run->alive_after_restart = swarm.AliveAfterRestart(&last);
  if (run->alive_after_restart == n) {
    run->restart_to_all_alive_s = absl::ToDoubleSeconds(last - restart);
  }
  return absl::OkStatus();
}

// The ramp, the settling and the measured phase (with the kill when asked);
// returns the swarm's counts and fills `run` with the planner's.
Stats RunSwarm(PlannerProcess& planner, const std::string& target,
               int metrics_port, int n, monta::v1::StrategyRequest job,
               Run* run) {
  Swarm swarm(target, n, absl::GetFlag(FLAGS_agents_per_channel),
              std::move(job));
  const absl::Time ramp_start = absl::Now();
  swarm.Start(absl::GetFlag(FLAGS_register_rate),
              absl::GetFlag(FLAGS_strategy_qps));
  // Ramp: until every agent registered (or 5 min), then settle.
  while (swarm.Registered() < n && absl::Now() - ramp_start < absl::Minutes(5))
    absl::SleepFor(absl::Milliseconds(200));
  run->ramp_seconds = absl::ToDoubleSeconds(absl::Now() - ramp_start);
  std::cerr << "swarm_bench: " << swarm.Registered() << " of " << n
            << " registered in " << run->ramp_seconds << " s\n";
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_settle_seconds)));
  swarm.SetMeasuring(true);
  const absl::Time start = absl::Now();
  const double planner_cpu0 = ReadProc(planner.pid()).cpu_seconds;
  const double client_cpu0 = SelfCpuSeconds();
  const auto buckets0 = HeartbeatBuckets(Scrape(metrics_port));
  const absl::Duration length = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  const double kill_after = absl::GetFlag(FLAGS_kill_after_seconds);
  if (kill_after > 0) {
    Observe(swarm, planner, absl::Seconds(kill_after), run);
    if (absl::Status s = KillAndRestart(swarm, planner, target, n, run);
        !s.ok()) {
      std::cerr << "swarm_bench: " << s << "\n";
    }
  }
  Observe(swarm, planner,
          std::max(absl::ZeroDuration(), start + length - absl::Now()), run);
  run->measured_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  swarm.SetMeasuring(false);
  if (!run->killed) {
    run->server = Diff(buckets0, HeartbeatBuckets(Scrape(metrics_port)));
    run->planner_cpu_cores =
        (ReadProc(planner.pid()).cpu_seconds - planner_cpu0) /
        run->measured_seconds;
  }
  run->client_cpu_cores =
      (SelfCpuSeconds() - client_cpu0) / run->measured_seconds;
  return swarm.TakeStats();
}

int Main() {
  const int n = absl::GetFlag(FLAGS_agents);
  if (n < 1 || absl::GetFlag(FLAGS_agents_per_channel) < 1 ||
      absl::GetFlag(FLAGS_register_rate) <= 0) {
    std::cerr << "swarm_bench: --agents, --agents_per_channel and "
                 "--register_rate must be > 0\n";
    return 2;
  }
  absl::StatusOr<monta::v1::StrategyRequest> job =
      LoadJob(absl::GetFlag(FLAGS_job));
  if (!job.ok()) {
    std::cerr << "swarm_bench: --job: " << job.status() << "\n";
    return 2;
  }
  const int port = absl::GetFlag(FLAGS_port) > 0 ? absl::GetFlag(FLAGS_port)
                                                 : PickFreePort();
  std::string db = absl::GetFlag(FLAGS_db);
  const bool temp_db = db.empty();
  if (temp_db) db = absl::StrCat("/tmp/swarm-bench-", getpid(), ".db");
  std::string log = absl::GetFlag(FLAGS_planner_log);
  if (log.empty())
    log = absl::StrCat("/tmp/swarm-bench-", getpid(), "-planner.log");
  const int metrics_port = PickFreePort();
  PlannerProcess planner(PlannerArgv(port, metrics_port, db), log);
  const std::string target = absl::StrCat("127.0.0.1:", port);
  if (absl::Status s = planner.Start();
      !s.ok() || !WaitServing(target, absl::Seconds(60))) {
    std::cerr << "swarm_bench: planner did not start; see " << log << "\n";
    return 1;
  }
  std::cerr << "swarm_bench: planner pid " << planner.pid() << " on " << target
            << ", log " << log << "\n";
  Run run;
  run.agents = n;
  Stats stats =
      RunSwarm(planner, target, metrics_port, n, *std::move(job), &run);
  planner.Kill();
  if (temp_db) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      unlink(absl::StrCat(db, suffix).c_str());
    }
  }
  const nlohmann::json report = Report(run, std::move(stats));
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << report.dump(2) << std::endl;
  } else {
    for (const auto& [key, value] : report.items()) {
      std::cout << absl::StrFormat("%-30s %s\n", key, value.dump());
    }
  }
  return 0;
}

}  // namespace
}  // namespace monta::perf

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "N simulated agents (register, heartbeat, WatchTasks) and a GetStrategy "
      "load against a planner child process; see the file's header.");
  absl::ParseCommandLine(argc, argv);
  // One Mutex per agent: Debian's Abseil would walk its deadlock graph on
  // every acquisition, which costs the shared cores more than the planner.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  signal(SIGPIPE, SIG_IGN);
  return monta::perf::Main();
}
