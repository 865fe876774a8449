#include "common/rpc_metrics.h"

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace monta {
namespace {

TEST(RpcMetricsTest, SplitsFullMethodName) {
  EXPECT_EQ(SplitGrpcMethod("/monta.v1.Planner/GetStrategy"),
            std::make_pair(std::string("monta.v1.Planner"),
                           std::string("GetStrategy")));
  EXPECT_EQ(SplitGrpcMethod("garbage").first, "unknown");
}

TEST(RpcMetricsTest, RecordsCountsByCodeAndLatency) {
  prometheus::Registry registry;
  RpcMetricsInterceptorFactory factory(registry, "planner");
  factory.Record("/monta.v1.Planner/GetStrategy", grpc::StatusCode::OK, 0.0002);
  factory.Record("/monta.v1.Planner/GetStrategy", grpc::StatusCode::OK, 0.0003);
  factory.Record("/monta.v1.Planner/GetStrategy",
                 grpc::StatusCode::INVALID_ARGUMENT, 0.0001);
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(
      text.find(
          "monta_rpc_requests_total{code=\"OK\",component=\"planner\",method="
          "\"GetStrategy\",service=\"monta.v1.Planner\"} 2"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("code=\"INVALID_ARGUMENT\""), std::string::npos);
  EXPECT_NE(
      text.find("monta_rpc_duration_seconds_count{component=\"planner\",method="
                "\"GetStrategy\",service=\"monta.v1.Planner\"} 3"),
      std::string::npos)
      << text;
}

}  // namespace
}  // namespace monta
