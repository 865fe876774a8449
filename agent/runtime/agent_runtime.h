// The agent's life with the planner: register (with capped exponential backoff
// and jitter while the planner is away), renew the lease, re-register by itself
// after a planner restart, keep a WatchTasks stream open and hand tasks to a
// runner, and deregister on shutdown.
#ifndef MONTA_AGENT_RUNTIME_AGENT_RUNTIME_H_
#define MONTA_AGENT_RUNTIME_AGENT_RUNTIME_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/replicas/endpoints.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "proto/monta/v1/agent.grpc.pb.h"

namespace monta::agent {

// Tells a running task to stop: the agent is stopping (SIGTERM, Cancel), or
// a newer leader leads (Supersede: the task's leader is gone or no longer
// leads, and the new one hands its tasks out again). cancelled() turns true
// and the callbacks added run once, so a sweep, or a wait at the rendezvous,
// stops within moments instead of running to its deadline.
class Cancellation {
 public:
  // The agent stops: the run reports its failure ("agent shutting down").
  void Cancel();
  // A newer leader leads (`why` says which): the run reports nothing (its
  // leader took no report for it; the new one runs it again). True when
  // this call cancelled it (not cancelled before).
  bool Supersede(const std::string& why);
  bool cancelled() const;
  bool superseded() const;
  // ABORTED with why the run was cancelled; OK while it is not.
  absl::Status status() const;
  // Runs `on_cancel` at Cancel(), or at once when already cancelled (then
  // returns -1). Remove(id) before what it touches goes away.
  int Add(std::function<void()> on_cancel);
  void Remove(int id);

 private:
  // False when cancelled before (nothing changes).
  bool CancelWith(absl::Status why, bool superseded);

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool superseded_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// Runs one benchmark task for this node and reports its result to the planner
// (through `stub`). Called on a thread of its own, one task at a time (a
// superseded run may still be unwinding while the next one runs); `cancel`
// (the run's own) fires when the agent stops, or is superseded when the agent
// learns of a leader epoch newer than the task's: then it reports nothing.
using TaskRunner = std::function<void(
    const monta::v1::BenchmarkTask& task,
    monta::v1::AgentGateway::StubInterface* stub, Cancellation& cancel)>;

// Counts a result the agent had to drop (nobody left to hand it to), by site,
// e.g. for monta_agent_discarded_errors_total; DiscardError logs it first.
using DiscardedErrorSink = std::function<void(const std::string& site)>;

// What every drop site does instead of `(void)`: one log line naming the site,
// the node and the context, then `sink(site)` when set.
void DiscardError(const std::string& node, const std::string& site,
                  const std::string& context, const absl::Status& status,
                  const DiscardedErrorSink& sink);

struct AgentOptions {
  // The planner: host:port, or several comma-separated (the replicas of a
  // planner on etcd). With several, the agent heartbeats to its home replica
  // (the list's entry at a hash of the node name, so agents spread over the
  // replicas without a balancer; the next one when it is down), which owns
  // its liveness, and registers, watches tasks and sends topology refreshes
  // to the leader: a call refused UNAVAILABLE there (the replica is down, or
  // not the leader) moves to the leader it named, else the next one.
  std::string planner_address = "127.0.0.1:7400";
  // How to reach the planner: mutual TLS with this node's certificate (see
  // common/grpc_security.h); null = plaintext (monta-agent sets it always,
  // from --tls_* or --insecure).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string node_name;
  // Random per process unless set (tests set it to simulate a duplicate agent).
  std::string instance_id;
  std::string agent_version = "0.1.0";
  std::string bench_address = "127.0.0.1";
  // Produces the node's topology; called at start and every topology_refresh.
  std::function<absl::StatusOr<monta::v1::NodeTopology>()> discover;
  absl::Duration topology_refresh = absl::Seconds(30);
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Null: tasks are reported as failed ("no benchmark runner in this agent").
  TaskRunner runner;
  DiscardedErrorSink on_discarded_error;
};

class AgentRuntime {
 public:
  explicit AgentRuntime(AgentOptions options);
  ~AgentRuntime();

  // Starts the background threads. Returns at once.
  void Start();
  // Aborts a running task, stops the threads and deregisters (best effort,
  // bounded by rpc_timeout).
  void Stop();

  // True while the last Register/Heartbeat succeeded.
  bool registered() const { return registered_.load(); }
  // Successful Register calls so far (re-registrations after a planner restart
  // count).
  int registrations() const { return registrations_.load(); }
  const std::string& instance_id() const { return options_.instance_id; }
  // The newest leader epoch this agent has seen (RegisterReply,
  // HeartbeatReply, tasks); 0 from a planner without an election.
  int64_t newest_epoch() const { return newest_epoch_.load(); }
  // Tasks ignored because their epoch was older than newest_epoch().
  int stale_tasks() const { return stale_tasks_.load(); }
  // Runs cancelled because a newer leader epoch was seen while they ran.
  int superseded_runs() const { return superseded_runs_.load(); }

 private:
  void LeaseLoop();
  void WatchLoop();
  // After the task watch ended with `status`: on UNAVAILABLE, the leader it
  // names or the next replica (a new channel with one endpoint).
  void WatchEnded(const grpc::Status& status);
  absl::Status RegisterOnce();
  // RegisterOnce with the loop's bookkeeping: true when registered; else it
  // logged, moved to the next replica on UNAVAILABLE and waited its backoff.
  bool TryRegister(int& attempt);
  // The wait before retry `attempt`: backoff_, capped at the heartbeat
  // interval too.
  absl::Duration BackoffFor(int attempt);
  // A heartbeat, carrying the node's topology when `with_topology` (and it
  // could be discovered).
  monta::v1::HeartbeatRequest NewHeartbeat(bool with_topology);
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // Replaces the channel (after the planner became unreachable).
  void Reconnect();
  // After an UNAVAILABLE `message` with several planner endpoints: the leader
  // it names when listed, else the next one (replicas::Endpoints), and a new
  // channel; with one, Reconnect. Returns the endpoint now used.
  std::string MoveOn(absl::string_view message);
  std::string endpoint();
  size_t endpoint_count();
  // The stub a heartbeat goes to: the home replica's, or the leader's for a
  // heartbeat carrying a topology (and with one endpoint, the one stub).
  std::shared_ptr<monta::v1::AgentGateway::Stub> HeartbeatStub(
      bool with_topology);
  // After the home replica answered UNAVAILABLE: the next one, and its
  // channel. Returns it.
  std::string MoveHome();
  std::shared_ptr<monta::v1::AgentGateway::Stub> NewStub(
      const std::string& target) const;
  // Remembers `epoch` when it is the newest seen; supersedes the run in
  // progress when its task is of an older epoch.
  void SeeEpoch(int64_t epoch);
  // Runs `task` on a thread of its own with a cancellation of its own (the
  // agent's Stop and SeeEpoch cancel it) and waits until it ends, or until it
  // is superseded: then the run is left to unwind (a Gloo connect in
  // progress cannot be interrupted; Stop joins it) and the watch thread takes
  // the new leader's task meanwhile.
  void RunTask(const monta::v1::BenchmarkTask& task,
               std::shared_ptr<monta::v1::AgentGateway::Stub> stub);
  // Joins the superseded runs that ended (all of them: `all`).
  void JoinUnwound(bool all);
  // False (logged, counted) for a task of an older epoch than the newest seen.
  bool AcceptTask(const monta::v1::BenchmarkTask& task);
  std::shared_ptr<monta::v1::AgentGateway::Stub> stub();

  AgentOptions options_;
  // Registration, heartbeat and task watch retries (initial_backoff doubling
  // to max_backoff, capped at the heartbeat interval, jittered).
  Backoff backoff_;
  // Waits on the monotonic clock: a wall clock step must not stretch a
  // heartbeat interval.
  MonoNotification stop_;
  Cancellation cancel_;
  std::atomic<bool> registered_{false};
  std::atomic<int> registrations_{0};
  std::atomic<int64_t> newest_epoch_{0};
  std::atomic<int> stale_tasks_{0};
  std::atomic<int> superseded_runs_{0};
  std::thread lease_thread_;
  std::thread watch_thread_;

  absl::Mutex mu_;
  std::shared_ptr<monta::v1::AgentGateway::Stub> stub_ ABSL_GUARDED_BY(mu_);
  // options_.planner_address split at ','.
  replicas::Endpoints endpoints_ ABSL_GUARDED_BY(mu_);
  // With several endpoints: the replica heartbeats go to, and its stub.
  replicas::Endpoints home_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<monta::v1::AgentGateway::Stub> home_stub_
      ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(5);
  MonoTime last_topology_ ABSL_GUARDED_BY(mu_) = MonoTime();
  // The open WatchTasks call, so Stop() can cancel it.
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The run in progress (null: none) and its task's leader epoch, so that a
  // newer epoch supersedes it.
  std::shared_ptr<Cancellation> run_cancel_ ABSL_GUARDED_BY(mu_);
  int64_t run_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Superseded runs still unwinding: their threads and whether they ended.
  struct Unwinding {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> ended;
  };
  std::vector<Unwinding> unwinding_ ABSL_GUARDED_BY(mu_);
};

// A random 16-hex-digit id.
std::string RandomInstanceId();

}  // namespace monta::agent

#endif  // MONTA_AGENT_RUNTIME_AGENT_RUNTIME_H_
