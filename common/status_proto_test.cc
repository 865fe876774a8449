#include "common/status_proto.h"

#include "gtest/gtest.h"

namespace monta {
namespace {

TEST(StatusProtoTest, RoundTripsCodeAndMessage) {
  const absl::Status failed = absl::UnavailableError("peer reset");
  monta::v1::Status wire = StatusToProto(failed);
  EXPECT_EQ(wire.code(), 14);  // gRPC's UNAVAILABLE
  EXPECT_EQ(wire.message(), "peer reset");
  EXPECT_EQ(StatusFromProto(wire), failed);
}

TEST(StatusProtoTest, UnsetIsOk) {
  EXPECT_TRUE(StatusFromProto(monta::v1::Status()).ok());
  EXPECT_EQ(StatusToProto(absl::OkStatus()).code(), 0);
}

TEST(StatusProtoTest, UnknownCodeKeepsTheMessage) {
  monta::v1::Status wire;
  wire.set_code(99);
  wire.set_message("from the future");
  const absl::Status s = StatusFromProto(wire);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "from the future");
}

}  // namespace
}  // namespace monta
