// Four ranks as threads of this process, each with its own Gloo context over
// TCP on 127.0.0.1.
#include "agent/comm/gloo_communicator.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/comm/rendezvous_store.h"
#include "gtest/gtest.h"

namespace monta::comm {
namespace {

constexpr int kRanks = 4;

// Runs fn(rank) on kRanks threads (or `ranks`), each with a connected
// communicator over one shared in-memory store.
void RunRanks(const std::string& scope,
              const std::function<void(GlooCommunicator&)>& fn,
              int ranks = kRanks) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.op_timeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create(store, scope, r, ranks, options,
                                   absl::Now() + absl::Seconds(20));
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

uint8_t Byte(int src, int dst, size_t i) {
  return static_cast<uint8_t>(src * 64 + dst * 16 + i * 7);
}

TEST(GlooCommunicatorTest, AllToAllMovesBlockJToRankJ) {
  RunRanks("a2a", [](GlooCommunicator& comm) {
    const size_t block = 1001;  // odd on purpose
    const int n = comm.size(), me = comm.rank();
    std::vector<uint8_t> send(n * block), recv(n * block, 0);
    for (int dst = 0; dst < n; ++dst) {
      for (size_t i = 0; i < block; ++i)
        send[dst * block + i] = Byte(me, dst, i);
    }
    ASSERT_TRUE(
        comm.AllToAll(send.data(), recv.data(), block, {})->Wait().ok());
    for (int src = 0; src < n; ++src) {
      for (size_t i = 0; i < block; ++i) {
        ASSERT_EQ(recv[src * block + i], Byte(src, me, i)) << src << " " << i;
      }
    }
  });
}

TEST(GlooCommunicatorTest, AllGatherAndSendRecvRing) {
  RunRanks("ag", [](GlooCommunicator& comm) {
    const int n = comm.size(), me = comm.rank();
    std::vector<uint8_t> mine(333, static_cast<uint8_t>(me + 1));
    std::vector<uint8_t> all(n * mine.size());
    ASSERT_TRUE(
        comm.AllGather(mine.data(), all.data(), mine.size(), {})->Wait().ok());
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r * mine.size()], r + 1);

    std::vector<uint8_t> from_left(mine.size());
    PeerTransfer to_right{(me + 1) % n, mine.data(), mine.size()};
    PeerTransfer left{(me + n - 1) % n, from_left.data(), from_left.size()};
    ASSERT_TRUE(comm.SendRecv({to_right}, {left}, {})->Wait().ok());
    EXPECT_EQ(from_left[0], (me + n - 1) % n + 1);
  });
}

TEST(GlooCommunicatorTest, StreamsRunConcurrentlyAndRespectDependencies) {
  RunRanks("streams", [](GlooCommunicator& comm) {
    ASSERT_GE(comm.num_streams(), 2);
    const int n = comm.size();
    const size_t block = 4096;
    std::vector<uint8_t> a(n * block, comm.rank()), b(n * block), c(n * block);
    // Stream 0 AllToAll, then stream 1 AllGather of its result's first block,
    // chained only by the handle.
    WorkPtr first = comm.AllToAll(a.data(), b.data(), block, {});
    OpOptions second_opts;
    second_opts.stream = 1;
    second_opts.after = {first};
    WorkPtr second = comm.AllGather(b.data(), c.data(), block, second_opts);
    ASSERT_TRUE(second->Wait().ok());
    ASSERT_TRUE(first->Wait().ok());
    // Block 0 of every rank's b came from rank 0, so it is all zeros.
    for (int r = 0; r < n; ++r) EXPECT_EQ(c[r * block], 0);
  });
}

TEST(GlooCommunicatorTest, StridedCopy) {
  RunRanks(
      "copy",
      [](GlooCommunicator& comm) {
        std::vector<uint8_t> src = {1, 2, 3, 9, 4, 5, 6, 9}, dst(6, 0);
        ASSERT_TRUE(
            comm.Copy(dst.data(), 3, src.data(), 4, 3, 2, {})->Wait().ok());
        EXPECT_EQ(dst, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
      },
      1);
}

TEST(GlooCommunicatorTest, SplitFormsTpAndEpGroups) {
  RunRanks("split", [](GlooCommunicator& world) {
    const int t = 2, me = world.rank();
    absl::StatusOr<std::unique_ptr<Communicator>> tp =
        world.Split(me / t, me % t, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(tp.ok()) << tp.status();
    absl::StatusOr<std::unique_ptr<Communicator>> ep =
        world.Split(me % t, me / t, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(ep.ok()) << ep.status();
    EXPECT_EQ((*tp)->size(), 2);
    EXPECT_EQ((*tp)->rank(), me % t);
    EXPECT_EQ((*ep)->rank(), me / t);
    int mine = me, all[2] = {-1, -1};
    ASSERT_TRUE((*ep)->AllGather(&mine, all, sizeof(int), {})->Wait().ok());
    EXPECT_EQ(all[0], me % t);
    EXPECT_EQ(all[1], me % t + t);
  });
}

TEST(GlooCommunicatorTest, MissingRankFailsRendezvousNamingIt) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(3);
  // Ranks 0..2 of 4 come; rank 3 never does.
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      results[r] = GlooCommunicator::Create(store, "missing", r, 4, {},
                                            absl::Now() + absl::Seconds(1))
                       .status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank(s) 3 of 4")) << s;
  }
}

TEST(GlooCommunicatorTest, SilentPeerEndsInDeadlineExceededAndPoisons) {
  auto store = std::make_shared<InMemoryStore>();
  absl::Notification rank0_done;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.op_timeout = absl::Milliseconds(300);
      auto comm = GlooCommunicator::Create(store, "silent", r, 2, options,
                                           absl::Now() + absl::Seconds(20));
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (r == 1) {
        // Connected, but never takes part: rank 0 must not hang.
        rank0_done.WaitForNotification();
        return;
      }
      std::vector<uint8_t> send(64), recv(64);
      absl::Status s =
          (*comm)->AllToAll(send.data(), recv.data(), 32, {})->Wait();
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      // Later operations on the stream fail at once with the same error.
      absl::Status later =
          (*comm)->AllToAll(send.data(), recv.data(), 32, {})->Wait();
      EXPECT_TRUE(absl::IsDeadlineExceeded(later)) << later;
      rank0_done.Notify();
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicatorTest, AbortFailsQueuedOperations) {
  RunRanks(
      "abort",
      [](GlooCommunicator& comm) {
        comm.Abort();
        uint8_t x = 0, y = 0;
        absl::Status s = comm.Copy(&y, 1, &x, 1, 1, 1, {})->Wait();
        EXPECT_TRUE(absl::IsAborted(s)) << s;
      },
      1);
}

}  // namespace
}  // namespace monta::comm
