// Per-RPC Prometheus metrics for gRPC servers, as a server interceptor so every
// service (ours, health checking, reflection) is counted the same way.
#ifndef MONTA_COMMON_RPC_METRICS_H_
#define MONTA_COMMON_RPC_METRICS_H_

#include <memory>
#include <string>

#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace monta {

// Registers monta_rpc_requests_total{service,method,code} and
// monta_rpc_duration_seconds{service,method} on `registry`.
class RpcMetricsInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `component` becomes the `component` label ("planner", "agent").
  RpcMetricsInterceptorFactory(prometheus::Registry& registry,
                               std::string component);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Records one finished call (used by the interceptor; public for tests).
  void Record(const std::string& full_method, grpc::StatusCode code,
              double seconds);

 private:
  const std::string component_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& duration_;
};

// Splits "/monta.v1.Planner/GetStrategy" into {"monta.v1.Planner",
// "GetStrategy"}.
std::pair<std::string, std::string> SplitGrpcMethod(
    const std::string& full_method);

// gRPC status code name as in the gRPC spec ("OK", "INVALID_ARGUMENT", ...).
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace monta

#endif  // MONTA_COMMON_RPC_METRICS_H_
