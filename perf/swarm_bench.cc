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
#include "perf/swarm.h"
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

// ---------------------------------------------------------------- metrics --

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

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
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
  };
  for (std::string& flag :
       SwarmPlannerFlags(absl::GetFlag(FLAGS_planner_args))) {
    argv.push_back(std::move(flag));
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
  SwarmOptions options;
  options.targets = {target};
  options.agents = n;
  options.agents_per_channel = absl::GetFlag(FLAGS_agents_per_channel);
  options.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_seconds));
  options.job = std::move(job);
  Swarm swarm(std::move(options));
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
