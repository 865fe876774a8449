// gRPC handlers of the public Planner API: thin adapters over the registry, the
// strategy planner and the benchmark coordinator, on gRPC's callback API
// (RunBenchmark with wait is a reactor that holds no thread while it waits;
// Verify, which runs benchmarks for minutes, runs on a thread of its own; a
// follower's GetBenchmarkTask, an etcd read, runs on store_reads_).
#ifndef MONTA_SERVER_API_PLANNER_SERVICE_H_
#define MONTA_SERVER_API_PLANNER_SERVICE_H_

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/work_queue.h"
#include "proto/monta/v1/planner.grpc.pb.h"
#include "server/api/authz.h"
#include "server/bench/coordinator.h"
#include "server/fabric/fabric.h"
#include "server/metrics/planner_metrics.h"
#include "server/planning/calibration.h"
#include "server/planning/strategy_planner.h"
#include "server/registry/registry.h"
#include "server/store/audit_log.h"
#include "server/store/decision_log.h"
#include "server/verify/verifier.h"

namespace monta::api {

class PlannerService final : public monta::v1::Planner::CallbackService {
 public:
  // Pointers are not owned and must outlive the service; `metrics` and
  // `decisions` may be null. `authz` decides who may call what (authz.h).
  // `knowledge` and `verifier` may be null (no calibration; Verify is then
  // UNIMPLEMENTED). `audit` (may be null: the log line only) records what
  // operators change (ForgetCurves). `fabric` may be null (GetFabric is then
  // UNIMPLEMENTED and NodeInfo.fabric stays unset).
  PlannerService(registry::Registry* registry,
                 coordination::Coordinator* coordinator,
                 const Authorizer* authz, metrics::PlannerMetrics* metrics,
                 store::DecisionLog* decisions = nullptr,
                 const planning::PlanKnowledge* knowledge = nullptr,
                 verify::Verifier* verifier = nullptr,
                 store::AuditLog* audit = nullptr,
                 const fabric::Fabric* fabric = nullptr);

  // Threads and queue bound of a follower's GetBenchmarkTask store reads.
  static constexpr int kStoreReadThreads = 4;
  static constexpr int kMaxQueuedStoreReads = 64;

  // Waits for the Verify calls still running and answers the store reads
  // still queued.
  ~PlannerService() override;

  // What RunBenchmark with fabric_levels runs: one round of level
  // measurements (the planner's, PlannerServer::LevelRound). Set before the
  // service serves; unset, fabric_levels is FAILED_PRECONDITION.
  using LevelRoundFunction =
      std::function<absl::StatusOr<monta::v1::RunBenchmarkReply>(
          const monta::v1::RunBenchmarkRequest& request)>;
  void SetLevelRound(LevelRoundFunction level_round) {
    level_round_ = std::move(level_round);
  }

  grpc::ServerUnaryReactor* GetStrategy(
      grpc::CallbackServerContext* context,
      const monta::v1::StrategyRequest* request,
      monta::v1::StrategyReply* reply) override;
  grpc::ServerUnaryReactor* ListNodes(
      grpc::CallbackServerContext* context,
      const monta::v1::ListNodesRequest* request,
      monta::v1::ListNodesReply* reply) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* context,
                                    const monta::v1::GetNodeRequest* request,
                                    monta::v1::NodeInfo* reply) override;
  grpc::ServerUnaryReactor* ListProfiles(
      grpc::CallbackServerContext* context,
      const monta::v1::ListProfilesRequest* request,
      monta::v1::ListProfilesReply* reply) override;
  grpc::ServerUnaryReactor* RunBenchmark(
      grpc::CallbackServerContext* context,
      const monta::v1::RunBenchmarkRequest* request,
      monta::v1::RunBenchmarkReply* reply) override;
  grpc::ServerUnaryReactor* Verify(grpc::CallbackServerContext* context,
                                   const monta::v1::VerifyRequest* request,
                                   monta::v1::VerifyReply* reply) override;
  grpc::ServerUnaryReactor* ListCurves(
      grpc::CallbackServerContext* context,
      const monta::v1::ListCurvesRequest* request,
      monta::v1::ListCurvesReply* reply) override;
  grpc::ServerUnaryReactor* ForgetCurves(
      grpc::CallbackServerContext* context,
      const monta::v1::ForgetCurvesRequest* request,
      monta::v1::ForgetCurvesReply* reply) override;
  grpc::ServerUnaryReactor* GetFabric(
      grpc::CallbackServerContext* context,
      const monta::v1::GetFabricRequest* request,
      monta::v1::FabricReply* reply) override;
  grpc::ServerUnaryReactor* GetBenchmarkTask(
      grpc::CallbackServerContext* context,
      const monta::v1::GetBenchmarkTaskRequest* request,
      monta::v1::GetBenchmarkTaskReply* reply) override;

 private:
  // RunBenchmark with fabric_levels (or dry_run): checks the request and
  // runs level_round_.
  grpc::Status LevelRound(const monta::v1::RunBenchmarkRequest& request,
                          monta::v1::RunBenchmarkReply* reply);

  registry::Registry* const registry_;
  coordination::Coordinator* const coordinator_;
  const Authorizer* const authz_;
  metrics::PlannerMetrics* const metrics_;
  store::DecisionLog* const decisions_;
  const planning::PlanKnowledge* const knowledge_;
  verify::Verifier* const verifier_;
  store::AuditLog* const audit_;
  const fabric::Fabric* const fabric_;
  LevelRoundFunction level_round_;
  // Verify calls running on their own threads.
  absl::Mutex verify_mu_;
  int verifying_ ABSL_GUARDED_BY(verify_mu_) = 0;
  // A follower's GetBenchmarkTask reads the task queue from etcd (up to the
  // etcd client's deadline per endpoint) here, never on one of gRPC's few
  // callback threads: a slow etcd would stall every RPC of the replica. Past
  // kMaxQueuedStoreReads waiting it refuses RESOURCE_EXHAUSTED. Last member:
  // destroyed (its queued reads answered) before the rest.
  WorkQueue store_reads_{
      {"GetBenchmarkTask store reads (a follower reads "
       "the task queue from etcd)",
       kStoreReadThreads, kMaxQueuedStoreReads}};
};

}  // namespace monta::api

#endif  // MONTA_SERVER_API_PLANNER_SERVICE_H_
