#include "agent/bench/sweep.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "agent/bench/curve.h"
#include "agent/comm/gloo_communicator.h"
#include "agent/comm/rendezvous_store.h"
#include "gtest/gtest.h"

namespace monta::bench {
namespace {

using ::monta::bandwidth::BusBwFactor;
using ::monta::bandwidth::Collective;
using ::monta::bandwidth::CollectiveName;

constexpr int kRanks = 4;

void RunRanks(const std::string& scope,
              const std::function<void(comm::Communicator&)>& fn) {
  auto store = std::make_shared<comm::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto world = comm::GlooCommunicator::Create(
          store, scope, r, kRanks, {}, absl::Now() + absl::Seconds(20));
      ASSERT_TRUE(world.ok()) << world.status();
      fn(**world);
    });
  }
  for (auto& t : threads) t.join();
}

SweepOptions SmallSweep() {
  SweepOptions o;
  o.min_bytes = 1024;
  o.max_bytes = 16 * 1024;
  o.step_factor = 4;
  o.warmup_iterations = 1;
  o.iterations = 3;
  o.row_bytes = 64;
  return o;
}

TEST(SweepTest, SizesAndShapes) {
  EXPECT_EQ(SweepSizes(1024, 8192, 2),
            (std::vector<uint64_t>{1024, 2048, 4096, 8192}));
  EXPECT_EQ(SweepSizes(1000, 9000, 3),
            (std::vector<uint64_t>{1000, 3000, 9000}));
  DispatchShape s = ShapeForBytes(1 << 20, 4, 1024);
  EXPECT_EQ(s.rows, 256u);
  EXPECT_EQ(s.row_bytes, 1024u);
  s = ShapeForBytes(64, 4, 1024);
  EXPECT_EQ(s.rows, 1u);
  EXPECT_EQ(s.row_bytes, 16u);
}

TEST(SweepTest, StrategySweepIsCorrectAndAgreedByAllRanks) {
  RunRanks("strategy", [](comm::Communicator& world) {
    absl::StatusOr<MoeGroups> groups =
        MakeMoeGroups(world, {2, 0}, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(groups.ok()) << groups.status();
    absl::StatusOr<std::vector<SweepPoint>> points =
        SweepStrategy(*groups, Strategy::kTpDedupPipelined, 3, SmallSweep());
    ASSERT_TRUE(points.ok()) << points.status();
    ASSERT_EQ(points->size(), 3u);
    for (const SweepPoint& p : *points) {
      EXPECT_EQ(p.wrong, 0u);
      EXPECT_GT(p.time_us, 0);
      // EP group of 2: busbw is half of algbw.
      EXPECT_DOUBLE_EQ(p.busbw_gbps, p.algbw_gbps / 2);
    }
    EXPECT_EQ((*points)[0].bytes, 1024u);
    EXPECT_EQ((*points)[2].chunks_effective, 3);

    CurveInfo info;
    info.nranks = world.size();
    info.strategy = monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED;
    info.chunks = 3;
    monta::v1::BandwidthCurve curve = ToBandwidthCurve(*points, info);
    ASSERT_EQ(curve.points_size(), 3);
    EXPECT_EQ(curve.collective(), monta::v1::COLLECTIVE_ALLTOALL);
    EXPECT_EQ(curve.points(1).message_bytes(), 4096u);
    EXPECT_NEAR(curve.points(1).busbw_bytes_per_second(),
                (*points)[1].busbw_gbps * 1e9, 1);
  });
}

TEST(SweepTest, ChunkSweepGivesOneCurvePerK) {
  RunRanks("chunks", [](comm::Communicator& world) {
    absl::StatusOr<MoeGroups> groups =
        MakeMoeGroups(world, {2, 0}, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(groups.ok()) << groups.status();
    SweepOptions o = SmallSweep();
    o.min_bytes = o.max_bytes = 16 * 1024;  // 2 x 128 rows of 64 bytes
    absl::StatusOr<std::vector<ChunkCurve>> curves =
        SweepChunks(*groups, Strategy::kTpDedupPipelined, {1, 2, 3, 8}, o);
    ASSERT_TRUE(curves.ok()) << curves.status();
    ASSERT_EQ(curves->size(), 4u);
    const int k_eff[] = {1, 2, 3, 8};  // 64 rows per TP rank
    for (size_t i = 0; i < curves->size(); ++i) {
      ASSERT_EQ((*curves)[i].points.size(), 1u);
      EXPECT_EQ((*curves)[i].points[0].chunks_effective, k_eff[i]);
      EXPECT_EQ((*curves)[i].points[0].wrong, 0u);
    }
  });
}

TEST(SweepTest, CollectiveSweepsAreCorrect) {
  RunRanks("collectives", [](comm::Communicator& world) {
    for (Collective c :
         {Collective::kAllToAll, Collective::kAllGather, Collective::kCopy}) {
      absl::StatusOr<std::vector<SweepPoint>> points =
          SweepCollective(world, c, SmallSweep());
      ASSERT_TRUE(points.ok()) << points.status();
      ASSERT_EQ(points->size(), 3u);
      for (const SweepPoint& p : *points) {
        EXPECT_EQ(p.wrong, 0u) << CollectiveName(c) << " " << p.bytes;
        EXPECT_DOUBLE_EQ(p.busbw_gbps, p.algbw_gbps * BusBwFactor(c, 4));
      }
    }
  });
}

}  // namespace
}  // namespace monta::bench
