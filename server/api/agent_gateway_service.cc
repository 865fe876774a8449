#include "server/api/agent_gateway_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace monta::api {

AgentGatewayService::AgentGatewayService(registry::Registry* registry,
                                         bench::Coordinator* coordinator,
                                         const Authorizer* authz,
                                         RegisteredCallback on_registered)
    : registry_(registry),
      coordinator_(coordinator),
      authz_(authz),
      on_registered_(std::move(on_registered)) {}

grpc::Status AgentGatewayService::Register(
    grpc::ServerContext* context, const monta::v1::RegisterRequest* request,
    monta::v1::RegisterReply* reply) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok())
    return s;
  absl::Status status = registry_->Register(*request, Instant::Now());
  if (!status.ok()) return ToGrpc(status);
  reply->set_lease_seconds(absl::ToDoubleSeconds(registry_->options().lease));
  reply->set_heartbeat_interval_seconds(
      absl::ToDoubleSeconds(registry_->options().heartbeat_interval));
  if (on_registered_) on_registered_(request->node_name());
  return grpc::Status::OK;
}

grpc::Status AgentGatewayService::Heartbeat(
    grpc::ServerContext* context, const monta::v1::HeartbeatRequest* request,
    monta::v1::HeartbeatReply* reply) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok())
    return s;
  absl::Status status = registry_->Heartbeat(*request, Instant::Now());
  if (!status.ok()) return ToGrpc(status);
  reply->set_lease_seconds(absl::ToDoubleSeconds(registry_->options().lease));
  return grpc::Status::OK;
}

grpc::Status AgentGatewayService::Deregister(
    grpc::ServerContext* context, const monta::v1::DeregisterRequest* request,
    monta::v1::DeregisterReply* reply) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok())
    return s;
  const Instant now = Instant::Now();
  absl::Status status =
      registry_->Deregister(request->node_name(), request->instance_id(), now);
  if (status.ok())
    coordinator_->FailTasksOfNode(request->node_name(), "deregistered", now);
  return ToGrpc(status);
}

grpc::Status AgentGatewayService::WatchTasks(
    grpc::ServerContext* context, const monta::v1::WatchTasksRequest* request,
    grpc::ServerWriter<monta::v1::BenchmarkTask>* writer) {
  if (grpc::Status s = authz_->RequireNode(*context, request->node_name());
      !s.ok())
    return s;
  if (!registry_->IsAlive(request->node_name(), request->instance_id(),
                          Instant::Now())) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("node \"", request->node_name(),
                                     "\": this agent instance holds no live "
                                     "lease; register first"));
  }
  // Poll in short slices so a cancelled stream or an expired lease ends the
  // call.
  while (!context->IsCancelled()) {
    if (!registry_->IsAlive(request->node_name(), request->instance_id(),
                            Instant::Now())) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "lease expired; register again");
    }
    std::optional<monta::v1::BenchmarkTask> task =
        coordinator_->NextTask(request->node_name(), absl::Milliseconds(500));
    if (!task.has_value()) {
      if (coordinator_->ShuttingDown()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "planner shutting down");
      }
      continue;
    }
    if (!writer->Write(*task)) {
      coordinator_->FailTasksOfNode(request->node_name(),
                                    "dropped its task stream", Instant::Now());
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "task stream closed");
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
}

grpc::Status AgentGatewayService::RendezvousSet(
    grpc::ServerContext* context,
    const monta::v1::RendezvousSetRequest* request,
    monta::v1::RendezvousSetReply* reply) {
  if (grpc::Status s = authz_->RequireTaskMember(*context, request->task_id());
      !s.ok())
    return s;
  return ToGrpc(coordinator_->Set(*request));
}

grpc::Status AgentGatewayService::RendezvousGet(
    grpc::ServerContext* context,
    const monta::v1::RendezvousGetRequest* request,
    monta::v1::RendezvousGetReply* reply) {
  if (grpc::Status s = authz_->RequireTaskMember(*context, request->task_id());
      !s.ok())
    return s;
  absl::StatusOr<std::string> value = coordinator_->Get(*request);
  if (!value.ok()) return ToGrpc(value.status());
  reply->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status AgentGatewayService::ReportBenchmark(
    grpc::ServerContext* context,
    const monta::v1::ReportBenchmarkRequest* request,
    monta::v1::ReportBenchmarkReply* reply) {
  if (grpc::Status s = authz_->RequireReporter(*context, *request); !s.ok())
    return s;
  return ToGrpc(coordinator_->Report(*request, Instant::Now()));
}

}  // namespace monta::api
