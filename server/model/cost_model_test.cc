#include "server/model/cost_model.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "server/model/hardware_profile.h"
#include "server/model/paper_job_shape.h"
#include "server/model/profile_view.h"
#include "server/model/traffic.h"

namespace monta::model {
namespace {

class CostModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto profile = FindProfile("a800-hgx");
    ASSERT_TRUE(profile.ok());
    profile_ = *profile;
    auto view = ProfileClusterView(profile_, 2, 8);
    ASSERT_TRUE(view.ok());
    view_ = *view;
    auto tr = ComputeTraffic(PaperJobShape(), {2, 8});
    ASSERT_TRUE(tr.ok());
    traffic_ = *tr;
  }
  HardwareProfile profile_;
  ClusterView view_;
  Traffic traffic_;
};

TEST_F(CostModelTest, AllToAllIsAlphaPlusNetworkShareOverLinkRate) {
  const CostModel model(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0);
  const double x = 64e6;
  const Stage a = model.AllToAll(x, 2, 1, nullptr);
  // Half of the bytes go to the EP peer on the other node.
  const double expected = profile_.alltoall_latency_seconds +
                          (2 - 8) * profile_.alltoall_per_peer_latency_seconds +
                          0.5 * x / profile_.InterNodeLinkBytesPerSecond();
  EXPECT_NEAR(a.seconds, expected, 1e-9);
  EXPECT_EQ(a.busy.nvlink_seconds, 0);
  EXPECT_STREQ(a.busy.Bottleneck(), "network");
}

constexpr ExpertLayout kLayouts[] = {ExpertLayout::kTensorParallel,
                                     ExpertLayout::kNotTensorParallel};

TEST_F(CostModelTest, OneChunkPipelineEqualsUnpipelinedDedup) {
  for (ExpertLayout layout : kLayouts) {
    const CostModel model(traffic_, view_, 1, layout, 0);
    const StrategyTime s1 = model.TpDedup(nullptr);
    const StrategyTime s2 = model.TpDedupPipelined(1, nullptr);
    EXPECT_DOUBLE_EQ(s1.forward_seconds, s2.forward_seconds);
    EXPECT_DOUBLE_EQ(s1.backward_seconds, s2.backward_seconds);
  }
}

// Tensor-parallel experts: drop -> AllToAll -> gather on dispatch and on
// combine, and autograd mirrors each (the gradient of a gather is a drop and
// of a drop a gather): the four ops are one op, gathers and pipeline
// included.
TEST_F(CostModelTest, TensorParallelExpertsEveryOpIsItsOwnAdjoint) {
  const CostModel model(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0);
  for (int k : {1, 6}) {
    const StrategyTime s = model.TpDedupPipelined(k, nullptr);
    EXPECT_EQ(s.alltoalls_per_layer, 4);
    EXPECT_EQ(s.allgathers_per_layer, 4);
    EXPECT_DOUBLE_EQ(s.ops.dispatch_forward_seconds,
                     s.ops.combine_forward_seconds);
    EXPECT_DOUBLE_EQ(s.ops.dispatch_backward_seconds,
                     s.ops.dispatch_forward_seconds);
    EXPECT_DOUBLE_EQ(s.ops.combine_backward_seconds,
                     s.ops.dispatch_forward_seconds);
    EXPECT_DOUBLE_EQ(s.backward_seconds, s.forward_seconds);
    EXPECT_DOUBLE_EQ(s.chunked_seconds, s.forward_seconds + s.backward_seconds);
  }
  // Flat sends every TP rank's whole copy: no gathers at all.
  const StrategyTime flat = model.Flat(nullptr);
  EXPECT_EQ(flat.alltoalls_per_layer, 4);
  EXPECT_EQ(flat.allgathers_per_layer, 0);
  const Stage whole =
      model.AllToAll(traffic_.dispatch_bytes, traffic_.ep_group_size,
                     traffic_.ep_members_on_node, nullptr);
  EXPECT_DOUBLE_EQ(flat.total_seconds(), 4 * whole.seconds);
}

// Whole experts (DeepSpeed's path): dispatch = drop -> AllToAll, combine =
// AllToAll -> gather; backward mirrored: the combine's gradient is a slice
// and an AllToAll, the dispatch's an AllToAll and a gather.
TEST_F(CostModelTest, WholeExpertsGatherOncePerDirection) {
  const CostModel model(traffic_, view_, 1, ExpertLayout::kNotTensorParallel,
                        0);
  const double t = traffic_.tensor_parallel_size;
  const double d = traffic_.dispatch_bytes;
  const Stage a = model.AllToAll(d / t, traffic_.ep_group_size,
                                 traffic_.ep_members_on_node, nullptr);
  const Stage g = model.AllGather(d / t, nullptr);
  const Stage c = model.Copy(d, nullptr);
  const StrategyTime s = model.TpDedup(nullptr);
  EXPECT_EQ(s.alltoalls_per_layer, 4);
  EXPECT_EQ(s.allgathers_per_layer, 2);
  EXPECT_DOUBLE_EQ(s.ops.dispatch_forward_seconds, a.seconds);
  EXPECT_DOUBLE_EQ(s.ops.combine_backward_seconds, a.seconds);
  EXPECT_DOUBLE_EQ(s.ops.combine_forward_seconds,
                   a.seconds + g.seconds + c.seconds);
  EXPECT_DOUBLE_EQ(s.ops.dispatch_backward_seconds,
                   s.ops.combine_forward_seconds);
  // Flat is what DeepSpeed runs for whole experts: the same schedule.
  const StrategyTime flat = model.Flat(nullptr);
  EXPECT_DOUBLE_EQ(flat.total_seconds(), s.total_seconds());
  EXPECT_EQ(flat.allgathers_per_layer, 2);
  // Cheaper than tensor-parallel experts' tp_dedup: two gathers fewer.
  const CostModel tp(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0);
  EXPECT_NEAR(tp.TpDedup(nullptr).total_seconds() - s.total_seconds(),
              2 * (g.seconds + c.seconds), 1e-12);
}

// Whole experts: only the two ops that end in a gather have anything to
// overlap; the plain AllToAlls of D/t do not change with K.
TEST_F(CostModelTest, WholeExpertsPipelineOnlyTheGatheredOps) {
  const CostModel model(traffic_, view_, 1, ExpertLayout::kNotTensorParallel,
                        0);
  const StrategyTime s1 = model.TpDedup(nullptr);
  for (int k : {2, 8, 32}) {
    const StrategyTime s = model.TpDedupPipelined(k, nullptr);
    EXPECT_DOUBLE_EQ(s.ops.dispatch_forward_seconds,
                     s1.ops.dispatch_forward_seconds)
        << "K=" << k;
    EXPECT_DOUBLE_EQ(s.ops.combine_backward_seconds,
                     s1.ops.combine_backward_seconds);
    EXPECT_DOUBLE_EQ(s.chunked_seconds, s.ops.combine_forward_seconds +
                                            s.ops.dispatch_backward_seconds);
  }
  EXPECT_LT(model.TpDedupPipelined(8, nullptr).ops.combine_forward_seconds,
            s1.ops.combine_forward_seconds);
}

// Without duplicates (t = 1, or sequence parallelism) nothing is dropped:
// flat is the same plain AllToAll of D in both layouts.
TEST_F(CostModelTest, WithoutDuplicatesTheLayoutsPriceTheSame) {
  Traffic tr = traffic_;
  tr.tp_duplicates = false;
  const CostModel tp(tr, view_, 1, ExpertLayout::kTensorParallel, 0);
  const CostModel whole(tr, view_, 1, ExpertLayout::kNotTensorParallel, 0);
  EXPECT_DOUBLE_EQ(tp.Flat(nullptr).total_seconds(),
                   whole.Flat(nullptr).total_seconds());
  EXPECT_EQ(whole.Flat(nullptr).allgathers_per_layer, 0);
  EXPECT_DOUBLE_EQ(tp.Hierarchical(nullptr).total_seconds(),
                   whole.Hierarchical(nullptr).total_seconds());
}

TEST_F(CostModelTest, ContentionSlowsTheSteadyState) {
  const CostModel calm(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0);
  const CostModel busy(traffic_, view_, 1.5, ExpertLayout::kTensorParallel, 0);
  EXPECT_GT(busy.TpDedupPipelined(8, nullptr).forward_seconds,
            calm.TpDedupPipelined(8, nullptr).forward_seconds);
  // Without a pipeline there is no steady state to slow down.
  EXPECT_DOUBLE_EQ(busy.TpDedup(nullptr).forward_seconds,
                   calm.TpDedup(nullptr).forward_seconds);
}

TEST_F(CostModelTest, BytesPerRankFollowTheShares) {
  const CostModel model(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0);
  const double d = traffic_.dispatch_bytes;
  EXPECT_DOUBLE_EQ(model.Flat(nullptr).inter_node_bytes, d / 2);
  EXPECT_DOUBLE_EQ(model.TpDedup(nullptr).inter_node_bytes, d / 16);
  // The AllGather rebuilds the other 7/8 over NVLink.
  EXPECT_DOUBLE_EQ(model.TpDedup(nullptr).intra_node_bytes, d * 7 / 8);
  // Whole experts gather after two of the four ops: half of that per op.
  const CostModel whole(traffic_, view_, 1, ExpertLayout::kNotTensorParallel,
                        0);
  EXPECT_DOUBLE_EQ(whole.TpDedup(nullptr).inter_node_bytes, d / 16);
  EXPECT_DOUBLE_EQ(whole.TpDedup(nullptr).intra_node_bytes, d * 7 / 16);
}

TEST_F(CostModelTest, ExpertOverlapHidesCommunicationBehindCompute) {
  const double compute = 5e-3;
  const CostModel model(traffic_, view_, 1, ExpertLayout::kTensorParallel,
                        compute);
  const StrategyTime flat = model.Flat(nullptr);
  const StrategyTime one = model.ExpertOverlap(1, nullptr);
  EXPECT_NEAR(one.forward_seconds, flat.forward_seconds, 1e-12);
  EXPECT_LT(model.ExpertOverlap(8, nullptr).forward_seconds,
            flat.forward_seconds);
}

TEST_F(CostModelTest, PipelineNamesTheResourceThatSetsTheSteadyState) {
  // Paper setting, K = 6: the GPU stages (AllGather + copy + NVLink share)
  // set tau. Whole experts gather in two of the four ops, and there the
  // network has the largest summed busy time; tensor-parallel experts gather
  // in all four, and NVLink has it too.
  const CostModel whole(traffic_, view_, 1, ExpertLayout::kNotTensorParallel,
                        0);
  const StrategyTime w = whole.TpDedupPipelined(6, nullptr);
  ASSERT_NE(w.steady_state_bottleneck, nullptr);
  EXPECT_STREQ(w.steady_state_bottleneck, "nvlink");
  EXPECT_STREQ(w.busy.Bottleneck(), "network");
  const CostModel model(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0);
  const StrategyTime s2 = model.TpDedupPipelined(6, nullptr);
  ASSERT_NE(s2.steady_state_bottleneck, nullptr);
  EXPECT_STREQ(s2.steady_state_bottleneck, "nvlink");
  EXPECT_STREQ(s2.busy.Bottleneck(), "nvlink");
  // Unpipelined schedules have no steady state.
  EXPECT_EQ(model.TpDedup(nullptr).steady_state_bottleneck, nullptr);
  EXPECT_EQ(model.TpDedupPipelined(1, nullptr).steady_state_bottleneck,
            nullptr);
}

TEST_F(CostModelTest, CopyOffTheGpuResourceShortensThePipeline) {
  const CostModel shared(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0,
                         PipelineResources::kCopySharesGpu);
  const CostModel split(traffic_, view_, 1, ExpertLayout::kTensorParallel, 0,
                        PipelineResources::kCopySeparate);
  const StrategyTime a = shared.TpDedupPipelined(6, nullptr);
  const StrategyTime b = split.TpDedupPipelined(6, nullptr);
  EXPECT_LT(b.forward_seconds, a.forward_seconds);
  // K = 1 has no steady state: the option changes nothing.
  EXPECT_DOUBLE_EQ(shared.TpDedup(nullptr).forward_seconds,
                   split.TpDedup(nullptr).forward_seconds);
}

// The per-AllToAll latency follows the op's group, not the cluster: a
// profile view of 2 or 2048 nodes gives a 2-member EP group the same launch.
TEST(AllToAllLatency, FollowsTheGroupNotTheCluster) {
  auto profile = FindProfile("h100-hgx");
  ASSERT_TRUE(profile.ok());
  auto small = ProfileClusterView(*profile, 2, 8);
  auto large = ProfileClusterView(*profile, 2048, 8);
  ASSERT_TRUE(small.ok() && large.ok());
  for (int group : {2, 16, 64, 256}) {
    const double lambda = profile->alltoall_per_peer_latency_seconds;
    const double expected =
        std::max(profile->alltoall_latency_seconds + lambda * (group - 8),
                 0.25 * small->alltoall_inter.alpha_seconds());
    EXPECT_DOUBLE_EQ(
        AllToAllLatencySeconds(small->alltoall_inter, group, lambda), expected)
        << group;
    EXPECT_DOUBLE_EQ(
        AllToAllLatencySeconds(large->alltoall_inter, group, lambda), expected)
        << group;
  }
}

}  // namespace
}  // namespace monta::model
