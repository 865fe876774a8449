#include "agent/comm/communicator_factory.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace monta::comm {
namespace {

TEST(CommunicatorFactoryTest, ParsesBackends) {
  EXPECT_EQ(*ParseBackend("gloo"), Backend::kGloo);
  EXPECT_EQ(*ParseBackend("nccl"), Backend::kNccl);
  EXPECT_FALSE(ParseBackend("mpi").ok());
}

TEST(CommunicatorFactoryTest, SingleRankGloo) {
  auto c = CreateCommunicator(Backend::kGloo, std::make_shared<InMemoryStore>(),
                              "one", 0, 1, {}, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->size(), 1);
  EXPECT_EQ((*c)->memory_kind(), MemoryKind::kHost);
}

TEST(CommunicatorFactoryTest, NcclWithoutGpuSaysNoGpu) {
  if (GpuCount().ok()) GTEST_SKIP() << "this machine has a GPU";
  auto c = CreateCommunicator(Backend::kNccl, std::make_shared<InMemoryStore>(),
                              "gpu", 0, 1, {}, absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StartsWith(c.status().message(), "no GPU")) << c.status();
}

}  // namespace
}  // namespace monta::comm
