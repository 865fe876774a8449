// Every strategy, on four Gloo ranks over TCP on 127.0.0.1 (threads of this
// process), must deliver exactly the bytes of one reference AllToAll,
// including shapes that split unevenly across TP ranks and chunks.
#include "agent/bench/schedule.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/bench/layer.h"
#include "agent/bench/moe_groups.h"
#include "agent/comm/gloo_communicator.h"
#include "agent/comm/rendezvous_store.h"
#include "gtest/gtest.h"

namespace monta::bench {
namespace {

constexpr int kRanks = 4;

void RunRanks(const std::string& scope, const MoeLayout& layout,
              const std::function<void(MoeGroups&)>& fn) {
  auto store = std::make_shared<comm::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      comm::GlooOptions options;
      options.op_timeout = absl::Seconds(20);
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      auto world = comm::GlooCommunicator::Create(store, scope, r, kRanks,
                                                  options, deadline);
      ASSERT_TRUE(world.ok()) << world.status();
      absl::StatusOr<MoeGroups> groups =
          MakeMoeGroups(**world, layout, deadline);
      ASSERT_TRUE(groups.ok()) << groups.status();
      fn(*groups);
    });
  }
  for (auto& t : threads) t.join();
}

struct Case {
  Strategy strategy;
  int chunks;
};

const std::vector<Case>& AllCases() {
  static const auto* cases = new std::vector<Case>{
      {Strategy::kFlat, 1},
      {Strategy::kTpDedup, 1},
      {Strategy::kTpDedupPipelined, 1},
      {Strategy::kTpDedupPipelined, 2},
      {Strategy::kTpDedupPipelined, 3},
      {Strategy::kTpDedupPipelined, 8},
      {Strategy::kHierarchical, 1},
  };
  return *cases;
}

// rows x row_bytes per destination: divisible, uneven over t and K, odd row
// sizes, a single row.
const DispatchShape kShapes[] = {{16, 64}, {7, 13}, {6, 8}, {1, 5}, {33, 3}};

void CheckEverything(MoeGroups& groups, Step step = Step::kExchange) {
  for (const Case& c : AllCases()) {
    for (const DispatchShape& shape : kShapes) {
      SCOPED_TRACE(absl::StrCat(StrategyName(c.strategy), " ", StepName(step),
                                " K=", c.chunks, " rows=", shape.rows,
                                " row_bytes=", shape.row_bytes,
                                " t=", groups.tp->size()));
      auto schedule =
          DispatchSchedule::Create(groups, c.strategy, c.chunks, shape, step);
      ASSERT_TRUE(schedule.ok()) << schedule.status();
      for (int iteration = 0; iteration < 2; ++iteration) {
        ASSERT_TRUE((*schedule)->PoisonOutput().ok());
        absl::Status run = (*schedule)->Run();
        ASSERT_TRUE(run.ok()) << run;
        absl::StatusOr<uint64_t> wrong = (*schedule)->CountWrongBytes();
        ASSERT_TRUE(wrong.ok()) << wrong.status();
        EXPECT_EQ(*wrong, 0u);
      }
    }
  }
}

TEST(ScheduleTest, EveryStrategyMatchesReferenceWithoutTp) {
  RunRanks("t1", {1, 0}, [](MoeGroups& g) { CheckEverything(g); });
}

TEST(ScheduleTest, EveryStrategyMatchesReferenceWithTp2) {
  RunRanks("t2", {2, 0}, [](MoeGroups& g) { CheckEverything(g); });
}

TEST(ScheduleTest, EveryStrategyMatchesReferenceOnTwoEmulatedNodes) {
  // Two "nodes" of two ranks: hierarchical really takes two steps.
  RunRanks("nodes", {1, 2}, [](MoeGroups& groups) {
    EXPECT_EQ(groups.ep_per_node, 2);
    EXPECT_EQ(groups.nodes, 2);
    CheckEverything(groups);
  });
}

TEST(ScheduleTest, EveryStrategyMatchesReferenceWithTp2OnTwoNodes) {
  // t = G = 2: one EP member per node, so the intra-node step is a copy.
  RunRanks("tp_nodes", {2, 2}, [](MoeGroups& groups) {
    EXPECT_EQ(groups.ep_per_node, 1);
    EXPECT_EQ(groups.nodes, 2);
    CheckEverything(groups);
  });
}

// The ops of a layer whose experts are not tensor-parallel: the drop (this
// TP rank's rows, padding zero) and the gather (every row back), under every
// strategy, uneven shapes included, in one node and over two.
TEST(ScheduleTest, DropAndGatherStepsMatchTheirReferences) {
  for (const MoeLayout& layout :
       {MoeLayout{2, 0}, MoeLayout{2, 2}, MoeLayout{1, 2}}) {
    RunRanks(absl::StrCat("steps", layout.tp_size, "_", layout.ranks_per_node),
             layout, [](MoeGroups& groups) {
               CheckEverything(groups, Step::kDrop);
               CheckEverything(groups, Step::kGather);
             });
  }
}

// A layer's four ops, as the layout dictates, every byte checked; and a drop
// that leaves its output unwritten is caught.
TEST(ScheduleTest, ALayerRunsItsLayoutsOps) {
  RunRanks("layer", {2, 2}, [](MoeGroups& groups) {
    for (Strategy strategy :
         {Strategy::kFlat, Strategy::kTpDedup, Strategy::kTpDedupPipelined,
          Strategy::kHierarchical}) {
      for (ExpertLayout layout :
           {ExpertLayout::kTensorParallel, ExpertLayout::kNotTensorParallel}) {
        SCOPED_TRACE(absl::StrCat(StrategyName(strategy), " layout ",
                                  static_cast<int>(layout)));
        auto layer =
            LayerSchedule::Create(groups, strategy, 3, {7, 13}, layout);
        ASSERT_TRUE(layer.ok()) << layer.status();
        std::vector<std::string> steps;
        for (DispatchSchedule* op : (*layer)->ops()) {
          steps.push_back(StepName(op->step()));
        }
        const std::vector<std::string> want =
            layout == ExpertLayout::kTensorParallel
                ? std::vector<std::string>(4, "exchange")
                : std::vector<std::string>{"drop", "gather", "drop", "gather"};
        EXPECT_EQ(steps, want);
        absl::StatusOr<uint64_t> wrong = (*layer)->CountWrongBytes();
        ASSERT_TRUE(wrong.ok()) << wrong.status();
        EXPECT_EQ(*wrong, 0u);
        ASSERT_TRUE((*layer)->Run().ok());
        EXPECT_EQ((*layer)->bytes_per_rank(), 2u * 7 * 13);  // D = e C row
        EXPECT_EQ(
            (*layer)->effective_chunks(),
            strategy == Strategy::kTpDedupPipelined
                ? schedule::EffectiveChunks(schedule::RowsPerTpRank(7, 2), 3)
                : 1);
      }
    }
    auto drop = DispatchSchedule::Create(groups, Strategy::kFlat, 1, {4, 8},
                                         Step::kDrop);
    ASSERT_TRUE(drop.ok());
    ASSERT_TRUE((*drop)->PoisonOutput().ok());
    absl::StatusOr<uint64_t> wrong = (*drop)->CountWrongBytes();
    ASSERT_TRUE(wrong.ok());
    EXPECT_GT(*wrong, 24u);  // 2 sources x 2 rows x 8 bytes, poisoned
  });
  // Without duplicates (t = 1) whole experts run the exchange.
  RunRanks("layer_t1", {1, 0}, [](MoeGroups& groups) {
    auto layer = LayerSchedule::Create(groups, Strategy::kFlat, 1, {4, 8},
                                       ExpertLayout::kNotTensorParallel);
    ASSERT_TRUE(layer.ok());
    for (DispatchSchedule* op : (*layer)->ops()) {
      EXPECT_EQ(op->step(), Step::kExchange);
    }
  });
}

TEST(ScheduleTest, EffectiveChunksAreReported) {
  RunRanks("keff", {2, 0}, [](MoeGroups& groups) {
    // 11 rows over t=2: 6 per TP rank; K=4 -> chunks of 2 -> 3 chunks.
    auto schedule = DispatchSchedule::Create(
        groups, Strategy::kTpDedupPipelined, 4, {11, 16});
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    EXPECT_EQ((*schedule)->effective_chunks(), 3);
    EXPECT_EQ((*schedule)->bytes_per_rank(), 2u * 11 * 16);
    ASSERT_TRUE((*schedule)->Run().ok());
  });
}

// The chunks the agent runs are the ones the model prices: K_eff of the
// rows a TP rank keeps, by common/schedule's rule (which the golden vectors
// pin, and python/monta is checked against), on real schedules.
TEST(ScheduleTest, ChunksMatchTheModel) {
  RunRanks("model", {2, 0}, [](MoeGroups& groups) {
    const int t = groups.tp->size();
    for (uint64_t rows : {1, 2, 7, 11, 33, 100}) {
      for (int k : {1, 2, 3, 4, 5, 8, 16, 64}) {
        auto schedule = DispatchSchedule::Create(
            groups, Strategy::kTpDedupPipelined, k, {rows, 1});
        ASSERT_TRUE(schedule.ok()) << schedule.status();
        EXPECT_EQ(
            (*schedule)->effective_chunks(),
            schedule::EffectiveChunks(
                schedule::RowsPerTpRank(static_cast<int64_t>(rows), t), k))
            << "rows " << rows << " K " << k;
      }
    }
    // tp_dedup is one chunk whatever K is asked.
    auto one = DispatchSchedule::Create(groups, Strategy::kTpDedup, 8, {16, 1});
    ASSERT_TRUE(one.ok());
    EXPECT_EQ((*one)->effective_chunks(), 1);
  });
}

TEST(ScheduleTest, CheckCountsBytesASchedulesLeftUnwritten) {
  RunRanks("poison", {1, 0}, [](MoeGroups& groups) {
    auto schedule =
        DispatchSchedule::Create(groups, Strategy::kFlat, 1, {4, 8});
    ASSERT_TRUE(schedule.ok());
    ASSERT_TRUE((*schedule)->PoisonOutput().ok());
    absl::StatusOr<uint64_t> wrong = (*schedule)->CountWrongBytes();
    ASSERT_TRUE(wrong.ok());
    EXPECT_GT(*wrong, 100u);  // 4*4*8 bytes, ~1/256 of them equal to poison
  });
}

}  // namespace
}  // namespace monta::bench
