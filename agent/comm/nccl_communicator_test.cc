// Runs on every GPU of the machine (one rank per GPU, as threads); skips with
// "no GPU: ..." where there is none.
#include "agent/comm/nccl_communicator.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "agent/comm/rendezvous_store.h"
#include "gtest/gtest.h"

namespace monta::comm {
namespace {

TEST(NcclCommunicatorTest, AllToAllAllGatherAndCopyOnEveryGpu) {
  absl::StatusOr<int> gpus = CudaDeviceCount();
  if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
  const int n = *gpus;
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      NcclOptions options;
      options.device = r;
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
          NcclCommunicator::Create(store, "nccl", r, n, options,
                                   absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(comm.ok()) << comm.status();
      Communicator& c = **comm;
      const size_t block = 1 << 16;
      std::vector<uint8_t> host(n * block), out(n * block);
      for (int d = 0; d < n; ++d) {
        for (size_t i = 0; i < block; ++i) {
          host[d * block + i] = static_cast<uint8_t>(r * 31 + d * 7 + i);
        }
      }
      auto send = c.Allocate(n * block), recv = c.Allocate(n * block),
           gathered = c.Allocate(n * n * block);
      ASSERT_TRUE(send.ok() && recv.ok() && gathered.ok());
      ASSERT_TRUE(
          c.CopyFromHost((*send)->data(), host.data(), host.size()).ok());
      WorkPtr a2a = c.AllToAll((*send)->data(), (*recv)->data(), block, {});
      OpOptions after;
      after.stream = 1;
      after.after = {a2a};
      WorkPtr ag =
          c.AllGather((*recv)->data(), (*gathered)->data(), n * block, after);
      ASSERT_TRUE(ag->Wait().ok());
      ASSERT_TRUE(c.CopyToHost(out.data(), (*recv)->data(), out.size()).ok());
      for (int s = 0; s < n; ++s) {
        for (size_t i = 0; i < block; i += 97) {
          ASSERT_EQ(out[s * block + i],
                    static_cast<uint8_t>(s * 31 + r * 7 + i));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(NcclCommunicatorTest, MissingPeerFailsInitWithinDeadline) {
  absl::StatusOr<int> gpus = CudaDeviceCount();
  if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
  auto store = std::make_shared<InMemoryStore>();
  // Rank 1 of 2 waits for an id that rank 0 never publishes.
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(store, "lonely", 1, 2, {},
                               absl::Now() + absl::Seconds(1));
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
}

TEST(NcclCommunicatorTest, PeerThatNeverInitsEndsInAbortNotHang) {
  absl::StatusOr<int> gpus = CudaDeviceCount();
  if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
  auto store = std::make_shared<InMemoryStore>();
  // Rank 0 publishes the id and starts a non-blocking init of a 2-rank comm;
  // rank 1 never comes, so init must be aborted at the deadline (or fail
  // earlier in NCCL's bootstrap) instead of hanging.
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(store, "half", 0, 2, {},
                               absl::Now() + absl::Seconds(3));
  EXPECT_FALSE(comm.ok());
}

}  // namespace
}  // namespace monta::comm
