#include "common/bandwidth/collective_proto.h"

#include "gtest/gtest.h"

namespace monta::bandwidth {
namespace {

TEST(CollectiveProtoTest, RoundTripsEveryCollective) {
  for (Collective c :
       {Collective::kAllToAll, Collective::kAllGather, Collective::kCopy}) {
    absl::StatusOr<Collective> back = CollectiveFromProto(CollectiveToProto(c));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, c);
  }
  EXPECT_EQ(CollectiveToProto(Collective::kAllGather),
            monta::v1::COLLECTIVE_ALLGATHER);
}

TEST(CollectiveProtoTest, NamesWireValues) {
  EXPECT_STREQ(CollectiveProtoName(monta::v1::COLLECTIVE_COPY), "copy");
  EXPECT_STREQ(CollectiveProtoName(monta::v1::COLLECTIVE_UNSPECIFIED),
               "unknown");
}

TEST(CollectiveProtoTest, RejectsUnspecifiedAndUnknownNumbers) {
  absl::StatusOr<Collective> unspecified =
      CollectiveFromProto(monta::v1::COLLECTIVE_UNSPECIFIED);
  EXPECT_EQ(unspecified.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unspecified.status().message().find("unspecified"),
            std::string::npos);
  // A newer peer's collective: named by its number, not guessed.
  absl::StatusOr<Collective> unknown =
      CollectiveFromProto(static_cast<monta::v1::Collective>(42));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("42"), std::string::npos);
}

}  // namespace
}  // namespace monta::bandwidth
