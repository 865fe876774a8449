#include "server/api/planner_service.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "server/planning/decide_strategy.h"

namespace monta::api {

PlannerService::PlannerService(registry::Registry* registry,
                               bench::Coordinator* coordinator,
                               const Authorizer* authz,
                               metrics::PlannerMetrics* metrics,
                               store::DecisionLog* decisions,
                               const planning::PlanKnowledge* knowledge,
                               verify::Verifier* verifier)
    : registry_(registry),
      coordinator_(coordinator),
      authz_(authz),
      metrics_(metrics),
      decisions_(decisions),
      knowledge_(knowledge),
      verifier_(verifier) {}

grpc::Status PlannerService::GetStrategy(
    grpc::ServerContext* context, const monta::v1::StrategyRequest* request,
    monta::v1::StrategyReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return s;
  absl::StatusOr<monta::v1::StrategyReply> decided = planning::DecideStrategy(
      *request, registry_, metrics_, decisions_, knowledge_);
  if (!decided.ok()) return ToGrpc(decided.status());
  *reply = *std::move(decided);
  return grpc::Status::OK;
}

grpc::Status PlannerService::ListNodes(
    grpc::ServerContext* context, const monta::v1::ListNodesRequest* request,
    monta::v1::ListNodesReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return s;
  absl::StatusOr<monta::v1::ListNodesReply> page =
      registry_->ListNodes(*request, Instant::Now());
  if (!page.ok()) return ToGrpc(page.status());
  // The instance id only tells an agent's restarts apart; replies never carry
  // it (it once served as the node's credential).
  for (auto& node : *page->mutable_nodes()) node.clear_instance_id();
  *reply = *std::move(page);
  return grpc::Status::OK;
}

grpc::Status PlannerService::GetNode(grpc::ServerContext* context,
                                     const monta::v1::GetNodeRequest* request,
                                     monta::v1::NodeInfo* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return s;
  if (request->name().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "name: expected a node name");
  }
  absl::StatusOr<monta::v1::NodeInfo> node =
      registry_->Get(request->name(), Instant::Now());
  if (!node.ok()) return ToGrpc(node.status());
  node->clear_instance_id();  // see ListNodes
  *reply = *std::move(node);
  return grpc::Status::OK;
}

grpc::Status PlannerService::ListProfiles(
    grpc::ServerContext* context, const monta::v1::ListProfilesRequest* request,
    monta::v1::ListProfilesReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return s;
  for (auto& profile : planning::ListProfiles())
    *reply->add_profiles() = std::move(profile);
  return grpc::Status::OK;
}

grpc::Status PlannerService::RunBenchmark(
    grpc::ServerContext* context, const monta::v1::RunBenchmarkRequest* request,
    monta::v1::RunBenchmarkReply* reply) {
  if (grpc::Status s = authz_->RequireOperator(*context); !s.ok()) return s;
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> status =
      coordinator_->Schedule(*request, Instant::Now());
  if (!status.ok()) return ToGrpc(status.status());
  if (request->wait()) {
    // Bounded by the task's own deadline and by the caller's deadline.
    absl::Duration max_wait = absl::Seconds(request->timeout_seconds() > 0
                                                ? request->timeout_seconds()
                                                : 120) +
                              absl::Seconds(5);
    // Time left of the caller's deadline, read now against the clock gRPC
    // converts with (the system clock).
    const auto caller_deadline = context->deadline();
    if (caller_deadline != std::chrono::system_clock::time_point::max()) {
      max_wait = std::min(
          max_wait,
          absl::FromChrono(caller_deadline - std::chrono::system_clock::now()));
    }
    status = coordinator_->WaitFinished(status->task_id(), max_wait);
    if (!status.ok()) return ToGrpc(status.status());
  }
  *reply->mutable_status() = *std::move(status);
  return grpc::Status::OK;
}

grpc::Status PlannerService::Verify(grpc::ServerContext* context,
                                    const monta::v1::VerifyRequest* request,
                                    monta::v1::VerifyReply* reply) {
  if (grpc::Status s = authz_->RequireOperator(*context); !s.ok()) return s;
  if (verifier_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this planner does not verify");
  }
  // Bounded by the run's own deadline (the verifier's) and the caller's.
  absl::Duration max_wait = absl::Hours(1);
  const auto caller_deadline = context->deadline();
  if (caller_deadline != std::chrono::system_clock::time_point::max()) {
    max_wait = std::min(
        max_wait,
        absl::FromChrono(caller_deadline - std::chrono::system_clock::now()));
  }
  absl::StatusOr<monta::v1::VerifyReply> verified =
      verifier_->Verify(*request, max_wait);
  if (!verified.ok()) return ToGrpc(verified.status());
  *reply = *std::move(verified);
  return grpc::Status::OK;
}

}  // namespace monta::api
