#include "server/api/planner_service.h"

#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/bandwidth/collective_proto.h"
#include "common/grpc_status.h"
#include "common/proto_names.h"
#include "server/api/reactors.h"
#include "server/planning/decide_strategy.h"
#include "server/store/task_store.h"

namespace monta::api {

PlannerService::PlannerService(
    registry::Registry* registry, coordination::Coordinator* coordinator,
    const Authorizer* authz, metrics::PlannerMetrics* metrics,
    store::DecisionLog* decisions, const planning::PlanKnowledge* knowledge,
    verify::Verifier* verifier, store::AuditLog* audit,
    const fabric::Fabric* fabric)
    : registry_(registry),
      coordinator_(coordinator),
      authz_(authz),
      metrics_(metrics),
      decisions_(decisions),
      knowledge_(knowledge),
      verifier_(verifier),
      audit_(audit),
      fabric_(fabric) {}

PlannerService::~PlannerService() {
  absl::MutexLock lock(&verify_mu_);
  verify_mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &verifying_));
}

grpc::ServerUnaryReactor* PlannerService::GetStrategy(
    grpc::CallbackServerContext* context,
    const monta::v1::StrategyRequest* request,
    monta::v1::StrategyReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  // On named nodes the fabric tree prices the uplinks and advises a rank
  // order (docs/MODEL.md §12).
  std::optional<monta::v1::FabricReply> tree;
  if (fabric_ != nullptr && request->placement().node_names_size() > 0) {
    tree = fabric_->Tree(registry_->List(Instant::Now(), false));
  }
  // The decision is logged below, not here: DecideStrategy would block this
  // callback thread until its record is stored.
  absl::StatusOr<monta::v1::StrategyReply> decided = planning::DecideStrategy(
      *request, registry_, metrics_,
      /*decisions=*/nullptr, knowledge_, tree ? &*tree : nullptr);
  if (!decided.ok()) return FinishUnary(context, ToGrpc(decided.status()));
  *reply = *std::move(decided);
  // Where the job's nodes sit and who placed them.
  if (fabric_ != nullptr && request->placement().node_names_size() > 0) {
    std::optional<std::string> note =
        fabric_->EvidenceNote({request->placement().node_names().begin(),
                               request->placement().node_names().end()});
    if (note) reply->mutable_evidence()->add_notes(*std::move(note));
  }
  if (decisions_ == nullptr) return FinishUnary(context, grpc::Status::OK);
  // Answered once the decision's record is stored, from the log's thread
  // (--store=etcd: the record writer's, after its Txn landed), or refused
  // UNAVAILABLE when it is not; this callback thread is free meanwhile.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  decisions_->RecordDecision(*request, *reply,
                             [reactor](const absl::Status& stored) {
                               reactor->Finish(ToGrpc(stored));
                             });
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::ListNodes(
    grpc::CallbackServerContext* context,
    const monta::v1::ListNodesRequest* request,
    monta::v1::ListNodesReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  absl::StatusOr<monta::v1::ListNodesReply> page =
      registry_->ListNodes(*request, Instant::Now());
  if (!page.ok()) return FinishUnary(context, ToGrpc(page.status()));
  // The instance id only tells an agent's restarts apart; replies never carry
  // it (it once served as the node's credential).
  for (auto& node : *page->mutable_nodes()) {
    node.clear_instance_id();
    if (fabric_ != nullptr) *node.mutable_fabric() = fabric_->PositionOf(node);
  }
  *reply = *std::move(page);
  return FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PlannerService::GetNode(
    grpc::CallbackServerContext* context,
    const monta::v1::GetNodeRequest* request, monta::v1::NodeInfo* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  if (request->name().empty()) {
    return FinishUnary(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                             "name: expected a node name"));
  }
  absl::StatusOr<monta::v1::NodeInfo> node =
      registry_->Get(request->name(), Instant::Now());
  if (!node.ok()) return FinishUnary(context, ToGrpc(node.status()));
  node->clear_instance_id();  // see ListNodes
  if (fabric_ != nullptr) *node->mutable_fabric() = fabric_->PositionOf(*node);
  *reply = *std::move(node);
  return FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PlannerService::ListProfiles(
    grpc::CallbackServerContext* context,
    const monta::v1::ListProfilesRequest* request,
    monta::v1::ListProfilesReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  for (auto& profile : planning::ListProfiles())
    *reply->add_profiles() = std::move(profile);
  return FinishUnary(context, grpc::Status::OK);
}

grpc::Status PlannerService::LevelRound(
    const monta::v1::RunBenchmarkRequest& request,
    monta::v1::RunBenchmarkReply* reply) {
  if (!request.fabric_levels()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "dry_run: only with fabric_levels");
  }
  if (!request.nodes().empty()) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "nodes: expected none with fabric_levels (the round chooses them)");
  }
  if (request.wait()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "wait: not with fabric_levels (its tasks run "
                        "independently; watch montactl topology --fabric)");
  }
  if (!level_round_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "fabric_levels: this planner has no fabric map or node "
                        "labels (--fabric_map_file, "
                        "--fabric_node_labels_file)");
  }
  absl::StatusOr<monta::v1::RunBenchmarkReply> round = level_round_(request);
  if (!round.ok()) return ToGrpc(round.status());
  *reply = *std::move(round);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* PlannerService::RunBenchmark(
    grpc::CallbackServerContext* context,
    const monta::v1::RunBenchmarkRequest* request,
    monta::v1::RunBenchmarkReply* reply) {
  if (grpc::Status s = authz_->RequireOperator(*context); !s.ok())
    return FinishUnary(context, s);
  if (request->fabric_levels() || request->dry_run()) {
    return FinishUnary(context, LevelRound(*request, reply));
  }
  absl::StatusOr<monta::v1::BenchmarkTaskStatus> status =
      coordinator_->Schedule(*request, Instant::Now());
  if (!status.ok()) return FinishUnary(context, ToGrpc(status.status()));
  *reply->mutable_status() = *status;
  if (!request->wait()) return FinishUnary(context, grpc::Status::OK);
  // Bounded by the task's own deadline and by the caller's deadline, as a
  // duration from now: the alarm's deadline is derived from it (GrpcDeadline),
  // so a wall clock step does not move it.
  absl::Duration max_wait =
      absl::Seconds(request->timeout_seconds() > 0 ? request->timeout_seconds()
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
  coordination::Coordinator* coordinator = coordinator_;
  const std::string task_id = status->task_id();
  // Replies with the task's status once it finished, or as it is at the
  // deadline; the last known status stands when the task was evicted.
  const auto reply_status =
      [coordinator, authz = authz_, context, task_id,
       reply](bool at_deadline) -> std::optional<grpc::Status> {
    // A caller denied while it waited gets no answer.
    if (grpc::Status s = authz->RequireAuthenticated(*context); !s.ok()) {
      return s;
    }
    absl::StatusOr<monta::v1::BenchmarkTaskStatus> now =
        coordinator->Status(task_id);
    if (!now.ok()) return ToGrpc(now.status());
    const bool finished = now->state() == monta::v1::TASK_STATE_SUCCEEDED ||
                          now->state() == monta::v1::TASK_STATE_FAILED;
    if (!finished && !at_deadline && !coordinator->ShuttingDown())
      return std::nullopt;
    *reply->mutable_status() = *std::move(now);
    return grpc::Status::OK;
  };
  return TaskWaitReactor::Start(
      coordinator, task_id, max_wait,
      [reply_status] { return reply_status(false); },
      [reply_status] { return *reply_status(true); });
}

grpc::ServerUnaryReactor* PlannerService::GetFabric(
    grpc::CallbackServerContext* context,
    const monta::v1::GetFabricRequest* request, monta::v1::FabricReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  if (fabric_ == nullptr) {
    return FinishUnary(context, grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                             "this planner has no fabric"));
  }
  *reply = fabric_->Tree(registry_->List(Instant::Now(), false));
  return FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PlannerService::GetBenchmarkTask(
    grpc::CallbackServerContext* context,
    const monta::v1::GetBenchmarkTaskRequest* request,
    monta::v1::GetBenchmarkTaskReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  if (absl::Status valid = store::ValidateTaskId(request->task_id(), "task_id");
      !valid.ok()) {
    return FinishUnary(context, ToGrpc(valid));
  }
  coordination::Coordinator* coordinator = coordinator_;
  const auto describe = [coordinator, request, reply]() {
    absl::StatusOr<coordination::TaskView> view =
        coordinator->Describe(request->task_id());
    if (!view.ok()) return ToGrpc(view.status());
    *reply->mutable_status() = std::move(view->status);
    *reply->mutable_task() = std::move(view->spec);
    reply->set_attempt(view->attempts);
    reply->set_max_attempts(view->max_attempts);
    reply->set_from_store(view->from_store);
    return grpc::Status::OK;
  };
  // The leader answers from memory, on this thread.
  if (coordinator_->CheckLeading().ok()) {
    return FinishUnary(context, describe());
  }
  // A follower reads the task queue from etcd: on store_reads_' threads.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // A call cancelled while it waited (its caller gone, or the server
  // shutting down) reads nothing.
  absl::Status queued = store_reads_.Submit([describe, reactor, context] {
    reactor->Finish(context->IsCancelled()
                        ? grpc::Status(grpc::StatusCode::CANCELLED,
                                       "cancelled while waiting for the store")
                        : describe());
  });
  if (!queued.ok()) reactor->Finish(ToGrpc(queued));
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::Verify(
    grpc::CallbackServerContext* context,
    const monta::v1::VerifyRequest* request, monta::v1::VerifyReply* reply) {
  if (grpc::Status s = authz_->RequireOperator(*context); !s.ok())
    return FinishUnary(context, s);
  if (verifier_ == nullptr) {
    return FinishUnary(context, grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                             "this planner does not verify"));
  }
  // Bounded by the run's own deadline (the verifier's) and the caller's.
  absl::Duration max_wait = absl::Hours(1);
  const auto caller_deadline = context->deadline();
  if (caller_deadline != std::chrono::system_clock::time_point::max()) {
    max_wait = std::min(
        max_wait,
        absl::FromChrono(caller_deadline - std::chrono::system_clock::now()));
  }
  // A verification runs benchmarks for minutes and blocks while it does: on a
  // thread of its own, never on one of gRPC's callback threads. Operators
  // start them one at a time; the destructor waits for the last.
  {
    absl::MutexLock lock(&verify_mu_);
    ++verifying_;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  verify::Verifier* verifier = verifier_;
  std::thread([this, verifier, request, reply, reactor, max_wait] {
    absl::StatusOr<monta::v1::VerifyReply> verified =
        verifier->Verify(*request, max_wait);
    grpc::Status status = ToGrpc(verified.status());
    if (verified.ok()) *reply = *std::move(verified);
    reactor->Finish(std::move(status));
    absl::MutexLock lock(&verify_mu_);
    --verifying_;
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::ListCurves(
    grpc::CallbackServerContext* context,
    const monta::v1::ListCurvesRequest* request,
    monta::v1::ListCurvesReply* reply) {
  if (grpc::Status s = authz_->RequireAuthenticated(*context); !s.ok())
    return FinishUnary(context, s);
  if (request->node_name().empty()) {
    return FinishUnary(context,
                       grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "node_name: expected a node name"));
  }
  absl::StatusOr<monta::v1::ListCurvesReply> listed =
      registry_->ListCurves(request->node_name());
  if (!listed.ok()) return FinishUnary(context, ToGrpc(listed.status()));
  *reply = *std::move(listed);
  return FinishUnary(context, grpc::Status::OK);
}

namespace {

// "2 curve(s) of task bench-1-2 (alltoall on node-a,node-b, ...)": what an
// audit entry says was dropped and put back.
std::string ForgetDetail(const monta::v1::ForgetCurvesReply& reply) {
  const auto describe = [](const monta::v1::BandwidthCurve& c) {
    return absl::StrCat(
        bandwidth::CollectiveProtoName(c.collective()),
        c.strategy_kind() == monta::v1::STRATEGY_KIND_UNSPECIFIED
            ? ""
            : absl::StrCat(" ", CurveStrategyName(c.strategy_kind())),
        " on ", absl::StrJoin(c.nodes(), ","), " of task ", c.task_id(),
        " (sequence ", c.sequence(), ")");
  };
  std::vector<std::string> dropped;
  for (const auto& c : reply.forgotten()) dropped.push_back(describe(c));
  std::vector<std::string> restored;
  for (const auto& c : reply.restored()) restored.push_back(describe(c));
  return absl::StrCat("dropped ", reply.forgotten_size(), " curve(s)",
                      dropped.empty() ? "" : ": ", absl::StrJoin(dropped, "; "),
                      "; restored ", reply.restored_size(),
                      restored.empty() ? "" : ": ",
                      absl::StrJoin(restored, "; "));
}

}  // namespace

grpc::ServerUnaryReactor* PlannerService::ForgetCurves(
    grpc::CallbackServerContext* context,
    const monta::v1::ForgetCurvesRequest* request,
    monta::v1::ForgetCurvesReply* reply) {
  if (grpc::Status s = authz_->RequireOperator(*context); !s.ok())
    return FinishUnary(context, s);
  const registry::ForgetSelector what{request->task_id(), request->node_name()};
  absl::StatusOr<monta::v1::ForgetCurvesReply> forgotten =
      registry_->Forget(what);
  if (!forgotten.ok()) return FinishUnary(context, ToGrpc(forgotten.status()));
  store::AuditEntry entry;
  entry.identity = authz_->Accountable(*context);
  entry.action = "forget_curves";
  entry.target = what.task_id.empty() ? absl::StrCat("node ", what.node_name)
                                      : absl::StrCat("task ", what.task_id);
  entry.detail = ForgetDetail(*forgotten);
  std::cerr << "monta-planner: audit: "
            << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(),
                                absl::UTCTimeZone())
            << " " << entry.identity << " forgot the curves of " << entry.target
            << ": " << entry.detail << std::endl;
  *reply = *std::move(forgotten);
  if (audit_ == nullptr) return FinishUnary(context, grpc::Status::OK);
  // Answered once the audit entry is stored. The curves are forgotten
  // already: an entry not stored is DATA_LOSS, not UNAVAILABLE, so that no
  // client retries a forget that happened (its retry would forget nothing
  // and audit "dropped 0"); the log line above keeps what was dropped.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  audit_->RecordAudit(entry, [reactor](const absl::Status& stored) {
    reactor->Finish(
        stored.ok()
            ? grpc::Status::OK
            : grpc::Status(grpc::StatusCode::DATA_LOSS,
                           absl::StrCat("the curves were forgotten, but ",
                                        stored.message(),
                                        " (the planner's log has it)")));
  });
  return reactor;
}

}  // namespace monta::api
