#include "server/api/agent_gateway_service.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/grpc_status.h"

namespace monta::api {

AgentGatewayService::AgentGatewayService(registry::Registry* registry,
                                         coordination::Coordinator* coordinator,
                                         const Authorizer* authz,
                                         RegisteredCallback on_registered,
                                         int max_queued_registered)
    : registry_(registry),
      coordinator_(coordinator),
      authz_(authz),
      on_registered_(std::move(on_registered)) {
  if (on_registered_) {
    registered_ = std::make_unique<WorkQueue>(
        WorkQueueOptions{"work on registration (--bench_on_register)", 1,
                         max_queued_registered});
  }
}

grpc::ServerUnaryReactor* AgentGatewayService::Register(
    grpc::CallbackServerContext* context,
    const monta::v1::RegisterRequest* request,
    monta::v1::RegisterReply* reply) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok())
    return FinishUnary(context, s);
  reply->set_lease_seconds(absl::ToDoubleSeconds(registry_->options().lease));
  reply->set_heartbeat_interval_seconds(
      absl::ToDoubleSeconds(registry_->options().heartbeat_interval));
  reply->set_leader_epoch(coordinator_->epoch());
  // Answered once the registration is persisted, without holding one of
  // gRPC's callback threads meanwhile (the registry batches the waiting ones
  // into one store write).
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  registry_->RegisterThen(*request, Instant::Now(),
                          [this, reactor, request, reply](absl::Status status) {
                            if (!status.ok()) {
                              reply->Clear();
                              reactor->Finish(ToGrpc(status));
                              return;
                            }
                            if (registered_ != nullptr) {
                              Registered(request->node_name());
                            }
                            reactor->Finish(grpc::Status::OK);
                          });
  return reactor;
}

void AgentGatewayService::Registered(const std::string& node) {
  // On the registry's delivery thread: queued, never run here.
  const absl::Status queued =
      registered_->Submit([this, node] { on_registered_(node); });
  if (!queued.ok()) {
    std::cerr << "monta-planner: node " << node
              << " registered; its work on registration is dropped: "
              << queued.message() << std::endl;
  }
}

grpc::ServerUnaryReactor* AgentGatewayService::Heartbeat(
    grpc::CallbackServerContext* context,
    const monta::v1::HeartbeatRequest* request,
    monta::v1::HeartbeatReply* reply) {
  // Any replica whose cache is in sync: liveness is the replica's own
  // (server/etcd_store/attachments.h), and nothing here writes the store.
  if (grpc::Status s =
          authz_->RequireNodeOnAnyReplica(*context, request->node_name());
      !s.ok())
    return FinishUnary(context, s);
  absl::Status status;
  if (request->has_topology() && !coordinator_->CheckLeading().ok()) {
    // A topology's events are a leader's write: a follower renews the lease
    // only (agents send their topology refreshes to the leader).
    monta::v1::HeartbeatRequest beat = *request;
    beat.clear_topology();
    status = registry_->Heartbeat(beat, Instant::Now());
  } else {
    status = registry_->Heartbeat(*request, Instant::Now());
  }
  if (status.ok()) {
    reply->set_lease_seconds(absl::ToDoubleSeconds(registry_->options().lease));
    reply->set_leader_epoch(coordinator_->epoch());
  }
  return FinishUnary(context, ToGrpc(status));
}

grpc::ServerUnaryReactor* AgentGatewayService::Deregister(
    grpc::CallbackServerContext* context,
    const monta::v1::DeregisterRequest* request,
    monta::v1::DeregisterReply* reply) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok())
    return FinishUnary(context, s);
  const Instant now = Instant::Now();
  absl::Status status =
      registry_->Deregister(request->node_name(), request->instance_id(), now);
  if (status.ok())
    coordinator_->FailTasksOfNode(request->node_name(), "deregistered", now);
  return FinishUnary(context, ToGrpc(status));
}

grpc::ServerWriteReactor<monta::v1::BenchmarkTask>*
AgentGatewayService::WatchTasks(grpc::CallbackServerContext* context,
                                const monta::v1::WatchTasksRequest* request) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok()) {
    return new FinishedWriteReactor<monta::v1::BenchmarkTask>(s);
  }
  if (!registry_->IsAlive(request->node_name(), request->instance_id(),
                          Instant::Now())) {
    return new FinishedWriteReactor<monta::v1::BenchmarkTask>(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("node ", EchoInput(request->node_name()),
                     ": this agent instance holds no live lease; register "
                     "first")));
  }
  // Ends when the lease expires (ExpireWatches), the agent cancels, a write
  // fails or the planner shuts down.
  return WatchTasksReactor::Start(coordinator_, &watches_, context,
                                  request->node_name(), request->instance_id());
}

void AgentGatewayService::ExpireWatches(Instant now) {
  watches_.ExpireLeases(*registry_, now);
}

void AgentGatewayService::EndDeniedWatches() {
  const Authorizer* authz = authz_;
  watches_.EndIf(
      [authz](const WatchTasksReactor& watch) -> std::optional<grpc::Status> {
        grpc::Status allowed = authz->RequireAuthenticated(watch.context());
        if (allowed.ok()) return std::nullopt;
        return allowed;
      });
}

grpc::ServerUnaryReactor* AgentGatewayService::RendezvousSet(
    grpc::CallbackServerContext* context,
    const monta::v1::RendezvousSetRequest* request,
    monta::v1::RendezvousSetReply* reply) {
  if (grpc::Status s = authz_->RequireTaskMember(*context, request->task_id());
      !s.ok())
    return FinishUnary(context, s);
  if (absl::Status s = coordinator_->CheckEpoch(request->leader_epoch());
      !s.ok())
    return FinishUnary(context, ToGrpc(s));
  return FinishUnary(context, ToGrpc(coordinator_->Set(
                                  *request, authz_->Accountable(*context))));
}

grpc::ServerUnaryReactor* AgentGatewayService::RendezvousGet(
    grpc::CallbackServerContext* context,
    const monta::v1::RendezvousGetRequest* request,
    monta::v1::RendezvousGetReply* reply) {
  if (grpc::Status s = authz_->RequireTaskMember(*context, request->task_id());
      !s.ok())
    return FinishUnary(context, s);
  if (absl::Status s = coordinator_->CheckEpoch(request->leader_epoch());
      !s.ok())
    return FinishUnary(context, ToGrpc(s));
  absl::StatusOr<absl::Duration> wait =
      coordination::Coordinator::GetWait(*request);
  if (!wait.ok()) return FinishUnary(context, ToGrpc(wait.status()));
  coordination::Coordinator* coordinator = coordinator_;
  // Waits for the key without a thread; a cancelled Get is freed at once.
  return TaskWaitReactor::Start(
      coordinator, request->task_id(), *wait,
      [coordinator, authz = authz_, context, request,
       reply]() -> std::optional<grpc::Status> {
        // A caller denied while it waited gets no value.
        if (grpc::Status s = authz->RequireAuthenticated(*context); !s.ok()) {
          return s;
        }
        absl::StatusOr<std::optional<std::string>> value =
            coordinator->TryGet(*request);
        if (!value.ok()) return ToGrpc(value.status());
        if (!value->has_value()) return std::nullopt;
        reply->set_value(**std::move(value));
        return grpc::Status::OK;
      },
      [request] {
        return ToGrpc(coordination::Coordinator::GetTimedOut(*request));
      });
}

grpc::ServerUnaryReactor* AgentGatewayService::ReportBenchmark(
    grpc::CallbackServerContext* context,
    const monta::v1::ReportBenchmarkRequest* request,
    monta::v1::ReportBenchmarkReply* reply) {
  if (grpc::Status s = authz_->RequireReporter(*context, *request); !s.ok())
    return FinishUnary(context, s);
  if (absl::Status s = coordinator_->CheckEpoch(request->leader_epoch());
      !s.ok())
    return FinishUnary(context, ToGrpc(s));
  return FinishUnary(context,
                     ToGrpc(coordinator_->Report(*request, Instant::Now())));
}

}  // namespace monta::api
