#include "perf/swarm.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace monta::perf {
namespace {

using monta::v1::AgentGateway;

// The agent's backoff (AgentOptions' 200 ms doubling to 5 s, capped at the
// heartbeat interval, equal jitter), one per thread: no lock shared by the
// swarm's callbacks.
absl::Duration Backoff(int attempt, absl::Duration interval) {
  thread_local monta::Backoff backoff(absl::Milliseconds(200),
                                      absl::Seconds(5));
  return backoff.Delay(attempt, interval);
}

}  // namespace

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
// The 1-minute load average: other work on the machine shows up here and
// explains noisy runs.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return in ? one : -1;
}

double Percentile(std::vector<int32_t>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i] / 1e3;
}

std::vector<std::string> SwarmPlannerFlags(const std::string& extra) {
  std::vector<std::string> flags = {
      "--insecure",
      "--bench_on_register=false",
      "--bench_interval_seconds=0",
  };
  for (absl::string_view flag : absl::StrSplit(extra, ' ', absl::SkipEmpty())) {
    flags.emplace_back(flag);
  }
  return flags;
}

absl::StatusOr<std::vector<monta::v1::NodeInfo>> ListAllNodes(
    monta::v1::Planner::Stub& planner, bool include_gone) {
  std::vector<monta::v1::NodeInfo> nodes;
  std::string page_token;
  do {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Seconds(30)));
    monta::v1::ListNodesRequest request;
    request.set_include_gone(include_gone);
    request.set_page_token(page_token);
    monta::v1::ListNodesReply reply;
    const grpc::Status status = planner.ListNodes(&context, request, &reply);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("ListNodes: ", status.error_message()));
    }
    for (auto& node : *reply.mutable_nodes()) nodes.push_back(std::move(node));
    page_token = reply.next_page_token();
  } while (!page_token.empty());
  return nodes;
}

Swarm::Swarm(SwarmOptions options) : options_(std::move(options)) {
  const int n = options_.agents;
  const int per_channel = options_.agents_per_channel;
  const int channels = (n + per_channel - 1) / per_channel;
  gateways_.resize(options_.targets.size());
  for (size_t t = 0; t < options_.targets.size(); ++t) {
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
          options_.targets[t], grpc::InsecureChannelCredentials(), args);
      gateways_[t].push_back(AgentGateway::NewStub(channel));
      if (c == channels)
        planners_.push_back(monta::v1::Planner::NewStub(channel));
    }
  }
  const std::string run = absl::StrFormat("%08x", std::random_device{}());
  agents_.reserve(n);
  for (int i = 0; i < n; ++i) {
    // Agent i starts at targets[i % size]; it heartbeats to its home.
    const std::string name = absl::StrFormat("swarm-%05d", i);
    agents_.push_back(std::make_unique<Agent>(
        replicas::Endpoints(options_.targets, static_cast<size_t>(i)),
        replicas::Endpoints(
            options_.targets,
            replicas::HomeIndex(name, options_.targets.size()))));
    Agent& a = *agents_[i];
    a.name = name;
    a.instance_id = absl::StrCat(run, "-", i);
    a.channel = i / per_channel;
  }
  scheduler_ = std::thread([this] { Loop(); });
}

void Swarm::Schedule(absl::Time due, int agent, Kind kind) {
  absl::MutexLock lock(&mu_);
  heap_.push(Event{due, agent, kind});
}

void Swarm::Start(double rate, double strategy_qps) {
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < agents_.size(); ++i) {
    Schedule(now + absl::Seconds(i / rate), i, Kind::kRegister);
  }
  strategy_period_ = strategy_qps > 0 ? absl::Seconds(1 / strategy_qps)
                                      : absl::InfiniteDuration();
  if (strategy_qps > 0) Schedule(now, -1, Kind::kStrategy);
}

namespace {

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

}  // namespace

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
  call->context.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  call->request.set_node_name(a.name);
  call->request.set_instance_id(a.instance_id);
  call->request.set_agent_version("swarm-bench");
  call->request.set_bench_address(
      absl::StrCat("127.0.0.1:", 20000 + i % 40000));
  *call->request.mutable_topology() = SwarmTopology(a.name);
  const absl::Time sent = absl::Now();
  ++in_flight_;
  GatewayOf(a).async()->Register(
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
  {
    absl::MutexLock stats(&stats_mu_);
    ++stats_.register_answers[absl::StatusCodeToString(
        static_cast<absl::StatusCode>(status.error_code()))];
  }
  if (!status.ok()) {
    absl::MutexLock lock(&a.mu);
    MoveOn(a, status);
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
  a.acknowledged = true;
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
  call->context.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  call->request.set_node_name(a.name);
  call->request.set_instance_id(a.instance_id);
  const absl::Time sent = absl::Now();
  ++in_flight_;
  HomeGatewayOf(a).async()->Heartbeat(
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
    if (measuring_) {
      absl::MutexLock stats(&stats_mu_);
      ++stats_.heartbeats_by_target[a.home.index()];
    }
    a.heartbeat_attempt = 0;
    NoteAlive(a, sent);
    Schedule(now + interval(), i, Kind::kHeartbeat);
  } else if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
             status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    a.registered = false;  // the planner forgot us: register again
    Schedule(now, i, Kind::kRegister);
  } else if (options_.targets.size() > 1 &&
             status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // The home replica is down (or its cache behind): heartbeat to the next
    // one; the registration stays in the store.
    a.home.MoveOn("");
    {
      absl::MutexLock stats(&stats_mu_);
      ++stats_.home_moves;
    }
    Schedule(now + Backoff(a.heartbeat_attempt++, interval()), i,
             Kind::kHeartbeat);
  } else if (MoveOn(a, status)) {
    a.registered = false;  // registers with the next replica
    Schedule(now + Backoff(a.heartbeat_attempt++, interval()), i,
             Kind::kRegister);
  } else {
    a.registered = false;
    Schedule(now + Backoff(++a.heartbeat_attempt, interval()), i,
             Kind::kHeartbeat);
  }
}

bool Swarm::MoveOn(Agent& a, const grpc::Status& status) {
  if (options_.targets.size() < 2 ||
      status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    return false;
  }
  a.endpoints.MoveOn(status.error_message());
  absl::MutexLock stats(&stats_mu_);
  ++stats_.target_moves;
  return true;
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
  Gateway(a).async()->WatchTasks(reactor->context(), reactor->request(),
                                 reactor);
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
  GatewayOf(*agents_[i])
      .async()
      ->ReportBenchmark(&call->context, &call->request, &call->reply,
                        [this, call](grpc::Status) {
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
    // Tasks come from the leader: heartbeats to a follower do not notice a
    // change of leader, the watch does.
    MoveOn(a, status);
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
  planners_.front()->async()->GetStrategy(
      &call->context, &options_.job, &call->reply,
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

std::vector<std::string> Swarm::Acknowledged() const {
  std::vector<std::string> names;
  for (const auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    if (agent->acknowledged) names.push_back(agent->name);
  }
  return names;
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
  absl::StatusOr<std::vector<monta::v1::NodeInfo>> nodes =
      ListAllNodes(*planners_.front(), false);
  if (!nodes.ok()) return nodes.status();
  for (const auto& node : *nodes) {
    auto it = index.find(node.name());
    if (it == index.end() || node.state() != monta::v1::NODE_STATE_STALE)
      continue;
    Agent& a = *agents_[it->second];
    absl::MutexLock lock(&a.mu);
    if (a.registered) ++flaps;
  }
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

}  // namespace monta::perf
