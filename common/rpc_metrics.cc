#include "common/rpc_metrics.h"

#include <chrono>

namespace monta {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Latency buckets from 50 us to 10 s: decisions are sub-millisecond, benchmark
// RPCs may take seconds.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return *buckets;
}

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcMetricsInterceptorFactory* factory,
                        std::string method)
      : factory_(factory),
        method_(std::move(method)),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = methods->GetSendStatus().error_code();
      recorded_ = true;
    }
    methods->Proceed();
  }

  ~RpcMetricsInterceptor() override {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    factory_->Record(method_, recorded_ ? code_ : grpc::StatusCode::CANCELLED,
                     seconds);
  }

 private:
  RpcMetricsInterceptorFactory* factory_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  grpc::StatusCode code_ = grpc::StatusCode::OK;
  // False when the call ended without a status from the handler (client
  // cancel).
  bool recorded_ = false;
};

}  // namespace

std::pair<std::string, std::string> SplitGrpcMethod(
    const std::string& full_method) {
  // Format: "/package.Service/Method".
  const size_t slash = full_method.rfind('/');
  if (full_method.size() < 3 || full_method[0] != '/' || slash == 0 ||
      slash == std::string::npos) {
    return {"unknown", full_method};
  }
  return {full_method.substr(1, slash - 1), full_method.substr(slash + 1)};
}

std::string StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

RpcMetricsInterceptorFactory::RpcMetricsInterceptorFactory(
    prometheus::Registry& registry, std::string component)
    : component_(std::move(component)),
      requests_(
          prometheus::BuildCounter()
              .Name("monta_rpc_requests_total")
              .Help("gRPC calls served, by service, method and status code")
              .Register(registry)),
      duration_(prometheus::BuildHistogram()
                    .Name("monta_rpc_duration_seconds")
                    .Help("gRPC call latency from arrival to status, by "
                          "service and method")
                    .Register(registry)) {}

grpc::experimental::Interceptor*
RpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RpcMetricsInterceptor(this, info->method());
}

void RpcMetricsInterceptorFactory::Record(const std::string& full_method,
                                          grpc::StatusCode code,
                                          double seconds) {
  auto [service, method] = SplitGrpcMethod(full_method);
  requests_
      .Add({{"component", component_},
            {"service", service},
            {"method", method},
            {"code", StatusCodeName(code)}})
      .Increment();
  duration_
      .Add(
          {{"component", component_}, {"service", service}, {"method", method}},
          LatencyBuckets())
      .Observe(seconds);
}

}  // namespace monta
