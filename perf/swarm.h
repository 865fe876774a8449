// A swarm of simulated agents on gRPC's callback client API (no thread per
// agent): each agent registers, heartbeats at the interval the planner gives
// it and holds one WatchTasks stream, as agent/runtime does (same backoff,
// registers again on NOT_FOUND / FAILED_PRECONDITION). With several planner
// replicas (targets) an agent moves on when a registration or a heartbeat
// answers UNAVAILABLE (the replica is down, or a follower: "not the leader
// (leader: X)") and registers there: through common/replicas' Endpoints, as
// the agent's --planner=a,b,c does (to the leader a follower names when it is
// a target, else the next target). Optionally a
// GetStrategy load at a fixed rate on the first target. Used by
// perf/swarm_bench (one planner) and perf/ha_bench (three replicas on etcd).
#ifndef MONTA_PERF_SWARM_H_
#define MONTA_PERF_SWARM_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/replicas/endpoints.h"
#include "grpcpp/grpcpp.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"

namespace monta::perf {

// ------------------------------------------------------------- processes --

struct ProcSample {
  int threads = 0;
  int64_t rss_kb = 0;
  double cpu_seconds = 0;  // user + system
};

// Threads, VmRSS and CPU time of `pid` (zeros when it is gone).
ProcSample ReadProc(pid_t pid);

// GET http://127.0.0.1:<port>/metrics; empty on failure.
std::string Scrape(int port);

// The 1-minute load average: other work on the machine shows up here and
// explains noisy runs.
double LoadAverage();

// The q-quantile of `v` (microseconds), in milliseconds; sorts `v`.
double Percentile(std::vector<int32_t>& v, double q);

// The topology a simulated agent registers: 8 H100s on one leaf.
monta::v1::NodeTopology SwarmTopology(const std::string& name);

// The planner flags a swarm runs against, then `extra` (space separated):
// plaintext on loopback (mTLS costs are not what a swarm measures) and no
// benchmark sweeps (it measures the lease path).
std::vector<std::string> SwarmPlannerFlags(const std::string& extra);

// Every node `planner` lists (all pages: a reply holds at most the planner's
// --max_nodes_per_page), gone ones too when `include_gone`.
absl::StatusOr<std::vector<monta::v1::NodeInfo>> ListAllNodes(
    monta::v1::Planner::Stub& planner, bool include_gone);

// ----------------------------------------------------------------- swarm --

enum class Kind { kRegister, kHeartbeat, kWatch, kStrategy };

struct Event {
  absl::Time due;
  int agent;
  Kind kind;
  bool operator>(const Event& o) const { return due > o.due; }
};

struct Agent {
  Agent(replicas::Endpoints targets, replicas::Endpoints home_targets)
      : endpoints(std::move(targets)), home(std::move(home_targets)) {}
  std::string name;
  std::string instance_id;
  int channel = 0;
  absl::Mutex mu;
  // The planner replicas; current() is the one the agent talks to now.
  replicas::Endpoints endpoints ABSL_GUARDED_BY(mu);
  // The replica heartbeats go to (as the agent's: at the hash of the name,
  // the next one after an UNAVAILABLE); registrations and the task watch go
  // to `endpoints`, which follows the leader.
  replicas::Endpoints home ABSL_GUARDED_BY(mu);
  // The agent believes it holds the lease (its last Register or Heartbeat
  // succeeded).
  bool registered ABSL_GUARDED_BY(mu) = false;
  // Some registration of this agent was acknowledged.
  bool acknowledged ABSL_GUARDED_BY(mu) = false;
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
  // Every Register answer, measuring or not, by its code ("OK",
  // "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", ...): a storm's refusals,
  // timeouts and retries (each answer but the last OK of an agent is one).
  std::map<std::string, int64_t> register_answers;
  // UNAVAILABLE: on to the leader a follower named, else the next replica.
  int64_t target_moves = 0;
  // A heartbeat answered UNAVAILABLE: on to the next home replica.
  int64_t home_moves = 0;
  // Successful heartbeats while measuring, per target (the agents' homes).
  std::map<int, int64_t> heartbeats_by_target;
  double max_lag_ms = 0;
};

struct SwarmOptions {
  // Planner replicas ("host:port"); agent i starts at targets[i % size].
  std::vector<std::string> targets;
  int agents = 1000;
  int agents_per_channel = 50;
  // Deadline of each agent call (as the agent's default).
  absl::Duration rpc_timeout = absl::Seconds(5);
  // The GetStrategy load's request (Start's strategy_qps > 0).
  monta::v1::StrategyRequest job;
};

class Swarm {
 public:
  explicit Swarm(SwarmOptions options);
  ~Swarm() { Stop(); }

  void Schedule(absl::Time due, int agent, Kind kind);

  // Registrations spread at `rate` per second from now on; GetStrategy at qps.
  void Start(double rate, double strategy_qps);

  void Stop();
  void SetMeasuring(bool on) { measuring_ = on; }
  // From now on, agents note their first success (see AliveAfterRestart).
  void MarkRestart(absl::Time restart);
  // Agents alive again since MarkRestart, and the last of them to be.
  int AliveAfterRestart(absl::Time* last) const;
  int Registered() const;
  // Names of the agents with an acknowledged registration.
  std::vector<std::string> Acknowledged() const;
  // One ListNodes on the first target: counts STALE nodes whose agent
  // believes it is alive.
  absl::Status Audit();
  Stats TakeStats() {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }
  absl::Duration interval() const {
    return absl::Milliseconds(interval_ms_.load());
  }

  // Called by the watch reactor.
  void OnTask(int i, const monta::v1::BenchmarkTask& task);
  void OnWatchDone(int i, bool got_any, absl::Time started,
                   const grpc::Status& status);

 private:
  void Loop();
  void Dispatch(const Event& e);
  void Register(int i);
  void OnRegistered(int i, absl::Time sent, const grpc::Status& status,
                    double interval_seconds);
  void Heartbeat(int i);
  void OnHeartbeat(int i, absl::Time sent, const grpc::Status& status);
  // UNAVAILABLE with several targets: the leader a follower named, else the
  // next one (replicas::Endpoints::MoveOn), where it registers.
  bool MoveOn(Agent& a, const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(a.mu);
  void Watch(int i);
  void GetStrategy();
  void NoteAlive(Agent& a, absl::Time sent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a.mu);
  monta::v1::AgentGateway::Stub& Gateway(const Agent& a)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(a.mu) {
    return *gateways_[a.endpoints.index()][a.channel];
  }
  monta::v1::AgentGateway::Stub& GatewayOf(Agent& a) {
    absl::MutexLock lock(&a.mu);
    return Gateway(a);
  }
  monta::v1::AgentGateway::Stub& HomeGatewayOf(Agent& a) {
    absl::MutexLock lock(&a.mu);
    return *gateways_[a.home.index()][a.channel];
  }

  const SwarmOptions options_;
  // [target][channel]; each target's last channel carries GetStrategy and
  // audits.
  std::vector<std::vector<std::unique_ptr<monta::v1::AgentGateway::Stub>>>
      gateways_;
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

}  // namespace monta::perf

#endif  // MONTA_PERF_SWARM_H_
