// gRPC handlers for the node agents: thin adapters over the registry and the
// benchmark coordinator, on gRPC's callback API (no thread per call; the calls
// that wait are reactors, see reactors.h).
#ifndef MONTA_SERVER_API_AGENT_GATEWAY_SERVICE_H_
#define MONTA_SERVER_API_AGENT_GATEWAY_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "common/work_queue.h"
#include "proto/monta/v1/agent.grpc.pb.h"
#include "server/api/authz.h"
#include "server/api/reactors.h"
#include "server/bench/coordinator.h"
#include "server/registry/registry.h"

namespace monta::api {

class AgentGatewayService final
    : public monta::v1::AgentGateway::CallbackService {
 public:
  // Called after a successful Register with the node's name (e.g. to schedule
  // its intra-node sweep, a store write), once the registration is persisted
  // (so what it writes lands after the node), in registration order, on a
  // thread of the service's own: never on the registry's delivery thread,
  // which answers every registration and would wait for it. At most
  // `max_queued_registered` calls wait; past them one is dropped, logged.
  using RegisteredCallback = std::function<void(const std::string& node_name)>;

  // No pointer is owned; all must outlive the service. `authz` decides who
  // may call what (see authz.h).
  AgentGatewayService(registry::Registry* registry,
                      coordination::Coordinator* coordinator,
                      const Authorizer* authz,
                      RegisteredCallback on_registered = nullptr,
                      int max_queued_registered = 1024);

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const monta::v1::RegisterRequest* request,
                                     monta::v1::RegisterReply* reply) override;
  grpc::ServerUnaryReactor* Heartbeat(
      grpc::CallbackServerContext* context,
      const monta::v1::HeartbeatRequest* request,
      monta::v1::HeartbeatReply* reply) override;
  grpc::ServerUnaryReactor* Deregister(
      grpc::CallbackServerContext* context,
      const monta::v1::DeregisterRequest* request,
      monta::v1::DeregisterReply* reply) override;
  grpc::ServerWriteReactor<monta::v1::BenchmarkTask>* WatchTasks(
      grpc::CallbackServerContext* context,
      const monta::v1::WatchTasksRequest* request) override;
  grpc::ServerUnaryReactor* RendezvousSet(
      grpc::CallbackServerContext* context,
      const monta::v1::RendezvousSetRequest* request,
      monta::v1::RendezvousSetReply* reply) override;
  grpc::ServerUnaryReactor* RendezvousGet(
      grpc::CallbackServerContext* context,
      const monta::v1::RendezvousGetRequest* request,
      monta::v1::RendezvousGetReply* reply) override;
  grpc::ServerUnaryReactor* ReportBenchmark(
      grpc::CallbackServerContext* context,
      const monta::v1::ReportBenchmarkRequest* request,
      monta::v1::ReportBenchmarkReply* reply) override;

  // Ends the WatchTasks streams whose node lost its lease (the planner's
  // maintenance loop calls this every second).
  void ExpireWatches(Instant now);
  // Ends (PERMISSION_DENIED) the WatchTasks streams whose caller the deny
  // list now names (the planner calls this after the list changed).
  void EndDeniedWatches();
  // Open WatchTasks streams.
  size_t open_watches() const { return watches_.size(); }

 private:
  // Queues on_registered_ for `node` (on registered_'s thread).
  void Registered(const std::string& node);

  registry::Registry* const registry_;
  coordination::Coordinator* const coordinator_;
  const Authorizer* const authz_;
  const RegisteredCallback on_registered_;
  WatchList watches_;
  // Runs on_registered_ (null without it). Last member: destroyed, its
  // queued calls run, before the rest.
  std::unique_ptr<WorkQueue> registered_;
};

}  // namespace monta::api

#endif  // MONTA_SERVER_API_AGENT_GATEWAY_SERVICE_H_
