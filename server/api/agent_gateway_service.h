// gRPC handlers for the node agents: thin adapters over the registry and the
// benchmark coordinator.
#ifndef MONTA_SERVER_API_AGENT_GATEWAY_SERVICE_H_
#define MONTA_SERVER_API_AGENT_GATEWAY_SERVICE_H_

#include <functional>
#include <string>

#include "proto/monta/v1/agent.grpc.pb.h"
#include "server/api/authz.h"
#include "server/bench/coordinator.h"
#include "server/registry/registry.h"

namespace monta::api {

class AgentGatewayService final : public monta::v1::AgentGateway::Service {
 public:
  // Called after a successful Register with the node's name (e.g. to schedule
  // its intra-node sweep).
  using RegisteredCallback = std::function<void(const std::string& node_name)>;

  // No pointer is owned; all must outlive the service. `authz` decides who
  // may call what (see authz.h).
  AgentGatewayService(registry::Registry* registry,
                      bench::Coordinator* coordinator, const Authorizer* authz,
                      RegisteredCallback on_registered = nullptr);

  grpc::Status Register(grpc::ServerContext* context,
                        const monta::v1::RegisterRequest* request,
                        monta::v1::RegisterReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const monta::v1::HeartbeatRequest* request,
                         monta::v1::HeartbeatReply* reply) override;
  grpc::Status Deregister(grpc::ServerContext* context,
                          const monta::v1::DeregisterRequest* request,
                          monta::v1::DeregisterReply* reply) override;
  grpc::Status WatchTasks(
      grpc::ServerContext* context, const monta::v1::WatchTasksRequest* request,
      grpc::ServerWriter<monta::v1::BenchmarkTask>* writer) override;
  grpc::Status RendezvousSet(grpc::ServerContext* context,
                             const monta::v1::RendezvousSetRequest* request,
                             monta::v1::RendezvousSetReply* reply) override;
  grpc::Status RendezvousGet(grpc::ServerContext* context,
                             const monta::v1::RendezvousGetRequest* request,
                             monta::v1::RendezvousGetReply* reply) override;
  grpc::Status ReportBenchmark(grpc::ServerContext* context,
                               const monta::v1::ReportBenchmarkRequest* request,
                               monta::v1::ReportBenchmarkReply* reply) override;

 private:
  registry::Registry* const registry_;
  bench::Coordinator* const coordinator_;
  const Authorizer* const authz_;
  const RegisteredCallback on_registered_;
};

}  // namespace monta::api

#endif  // MONTA_SERVER_API_AGENT_GATEWAY_SERVICE_H_
