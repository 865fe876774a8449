// Runs the planner's benchmark tasks on this node: one thread per local rank, a
// communicator over the task's rendezvous store (the planner's
// RendezvousSet/Get), nccl-tests-style sweeps, and one report per node.
#ifndef MONTA_AGENT_RUNTIME_BENCH_RUNNER_H_
#define MONTA_AGENT_RUNTIME_BENCH_RUNNER_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "agent/comm/rendezvous_store.h"
#include "agent/runtime/agent_runtime.h"
#include "proto/monta/v1/agent.grpc.pb.h"

namespace monta::agent {

// A RendezvousStore over the planner's per-task key-value RPCs. Get waits in
// bounded slices; ABORTED (the task failed, or `cancel` fired: the agent is
// stopping) ends the wait at once.
class RpcRendezvousStore : public comm::RendezvousStore {
 public:
  // `stub` and `cancel` (may be null) must outlive the store. Every call
  // names the task's `leader_epoch` (BenchmarkTask.leader_epoch).
  RpcRendezvousStore(monta::v1::AgentGateway::StubInterface* stub,
                     std::string task_id, Cancellation* cancel = nullptr,
                     int64_t leader_epoch = 0);
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Time deadline) override;

 private:
  // Runs one RPC on `context`, cancelled when `cancel_` fires meanwhile.
  grpc::Status Call(grpc::ClientContext& context,
                    const std::function<grpc::Status()>& rpc);

  monta::v1::AgentGateway::StubInterface* const stub_;
  const std::string task_id_;
  Cancellation* const cancel_;
  const int64_t leader_epoch_;
};

struct BenchRunnerOptions {
  std::string node_name;
  // Address this node's ranks listen on for Gloo traffic.
  std::string bench_address = "127.0.0.1";
  // Called after every task with its outcome ("succeeded" / "failed").
  std::function<void(const std::string& result)> on_finished;
  // A report the planner did not take (see DiscardError).
  DiscardedErrorSink on_discarded_error;
};

// A TaskRunner for AgentOptions::runner.
TaskRunner MakeBenchRunner(BenchRunnerOptions options);

}  // namespace monta::agent

#endif  // MONTA_AGENT_RUNTIME_BENCH_RUNNER_H_
