// Every strategy on every GPU of the machine (NCCL, one rank per GPU as
// threads) must deliver exactly the reference AllToAll's bytes. Skips with
// "no GPU: ..." where there is none.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/bench/moe_groups.h"
#include "agent/bench/schedule.h"
#include "agent/comm/communicator_factory.h"
#include "agent/comm/rendezvous_store.h"
#include "gtest/gtest.h"

namespace monta::bench {
namespace {

TEST(ScheduleGpuTest, EveryStrategyMatchesReferenceOnNccl) {
  absl::StatusOr<int> gpus = comm::GpuCount();
  if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
  const int n = *gpus;
  MoeLayout layout;
  layout.tp_size = n % 2 == 0 ? 2 : 1;
  layout.ranks_per_node = n % 4 == 0 ? n / 2 : 0;
  auto store = std::make_shared<comm::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      auto world = comm::CreateCommunicator(comm::Backend::kNccl, store, "gpu",
                                            r, n, {}, deadline);
      ASSERT_TRUE(world.ok()) << world.status();
      absl::StatusOr<MoeGroups> groups =
          MakeMoeGroups(**world, layout, deadline);
      ASSERT_TRUE(groups.ok()) << groups.status();
      const struct {
        Strategy strategy;
        int chunks;
      } cases[] = {{Strategy::kFlat, 1},
                   {Strategy::kTpDedup, 1},
                   {Strategy::kTpDedupPipelined, 3},
                   {Strategy::kTpDedupPipelined, 8},
                   {Strategy::kHierarchical, 1}};
      const DispatchShape shapes[] = {{64, 1024}, {7, 13}, {33, 3}};
      for (const auto& c : cases) {
        for (const DispatchShape& shape : shapes) {
          SCOPED_TRACE(absl::StrCat(StrategyName(c.strategy), " K=", c.chunks,
                                    " rows=", shape.rows));
          auto schedule =
              DispatchSchedule::Create(*groups, c.strategy, c.chunks, shape);
          ASSERT_TRUE(schedule.ok()) << schedule.status();
          ASSERT_TRUE((*schedule)->PoisonOutput().ok());
          absl::Status run = (*schedule)->Run();
          ASSERT_TRUE(run.ok()) << run;
          absl::StatusOr<uint64_t> wrong = (*schedule)->CountWrongBytes();
          ASSERT_TRUE(wrong.ok()) << wrong.status();
          EXPECT_EQ(*wrong, 0u);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace monta::bench
