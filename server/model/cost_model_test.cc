#include "server/model/cost_model.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "server/model/hardware_profile.h"
#include "server/model/paper_job_shape.h"
#include "server/model/profile_view.h"
#include "server/model/traffic.h"

namespace monta::model {
namespace {

TEST(EffectiveChunks, CountsThePiecesASplitReallyYields) {
  EXPECT_EQ(EffectiveChunks(6, 4), 3);  // pieces of 2 rows
  EXPECT_EQ(EffectiveChunks(6, 6), 6);
  EXPECT_EQ(EffectiveChunks(512, 64), 64);
  EXPECT_EQ(EffectiveChunks(10, 64), 10);  // cannot exceed the rows
  EXPECT_EQ(EffectiveChunks(7, 1), 1);
  EXPECT_EQ(EffectiveChunks(100, 30), 25);  // ceil(100/30)=4 rows, 25 pieces
}

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
  const CostModel model(traffic_, view_, 1, BackwardSchedule::kAutograd, 0);
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

TEST_F(CostModelTest, OneChunkPipelineEqualsUnpipelinedDedup) {
  const CostModel model(traffic_, view_, 1, BackwardSchedule::kAutograd, 0);
  const StrategyTime s1 = model.TpDedup(nullptr);
  const StrategyTime s2 = model.TpDedupPipelined(1, nullptr);
  EXPECT_DOUBLE_EQ(s1.forward_seconds, s2.forward_seconds);
  EXPECT_DOUBLE_EQ(s1.backward_seconds, s2.backward_seconds);
}

TEST_F(CostModelTest, PipeliningOverlapsForwardOnly) {
  const CostModel model(traffic_, view_, 1, BackwardSchedule::kAutograd, 0);
  const StrategyTime s1 = model.TpDedup(nullptr);
  const StrategyTime s2 = model.TpDedupPipelined(8, nullptr);
  EXPECT_LT(s2.forward_seconds, s1.forward_seconds);
  // Backward runs the chunks one after another: more launches, no overlap.
  EXPECT_GT(s2.backward_seconds, s1.backward_seconds);
}

TEST_F(CostModelTest, SliceOnlyBackwardIsJustTheAllToAlls) {
  const CostModel autograd(traffic_, view_, 1, BackwardSchedule::kAutograd, 0);
  const CostModel slice(traffic_, view_, 1, BackwardSchedule::kSliceOnly, 0);
  const double t = traffic_.tensor_parallel_size;
  const Stage a =
      slice.AllToAll(traffic_.dispatch_bytes / t, traffic_.ep_group_size,
                     traffic_.ep_members_on_node, nullptr);
  EXPECT_DOUBLE_EQ(slice.TpDedup(nullptr).backward_seconds, 2 * a.seconds);
  EXPECT_GT(autograd.TpDedup(nullptr).backward_seconds,
            slice.TpDedup(nullptr).backward_seconds);
}

// Slice-only backward has no gather to overlap, so the pipelined schedule's
// backward is one AllToAll of D/t at any K: K is the forward's choice alone.
TEST_F(CostModelTest, SliceOnlyPipelinedBackwardDoesNotChunk) {
  const CostModel slice(traffic_, view_, 1, BackwardSchedule::kSliceOnly, 0);
  const double s1 = slice.TpDedup(nullptr).backward_seconds;
  for (int k : {2, 8, 32}) {
    EXPECT_DOUBLE_EQ(slice.TpDedupPipelined(k, nullptr).backward_seconds, s1)
        << "K=" << k;
  }
}

TEST_F(CostModelTest, ContentionSlowsTheSteadyState) {
  const CostModel calm(traffic_, view_, 1, BackwardSchedule::kAutograd, 0);
  const CostModel busy(traffic_, view_, 1.5, BackwardSchedule::kAutograd, 0);
  EXPECT_GT(busy.TpDedupPipelined(8, nullptr).forward_seconds,
            calm.TpDedupPipelined(8, nullptr).forward_seconds);
  // Without a pipeline there is no steady state to slow down.
  EXPECT_DOUBLE_EQ(busy.TpDedup(nullptr).forward_seconds,
                   calm.TpDedup(nullptr).forward_seconds);
}

TEST_F(CostModelTest, BytesPerRankFollowTheShares) {
  const CostModel model(traffic_, view_, 1, BackwardSchedule::kAutograd, 0);
  const double d = traffic_.dispatch_bytes;
  EXPECT_DOUBLE_EQ(model.Flat(nullptr).inter_node_bytes, d / 2);
  EXPECT_DOUBLE_EQ(model.TpDedup(nullptr).inter_node_bytes, d / 16);
  // The AllGather rebuilds the other 7/8 over NVLink.
  EXPECT_DOUBLE_EQ(model.TpDedup(nullptr).intra_node_bytes, d * 7 / 8);
}

TEST_F(CostModelTest, ExpertOverlapHidesCommunicationBehindCompute) {
  const double compute = 5e-3;
  const CostModel model(traffic_, view_, 1, BackwardSchedule::kAutograd,
                        compute);
  const StrategyTime flat = model.Flat(nullptr);
  const StrategyTime one = model.ExpertOverlap(1, nullptr);
  EXPECT_NEAR(one.forward_seconds, flat.forward_seconds, 1e-12);
  EXPECT_LT(model.ExpertOverlap(8, nullptr).forward_seconds,
            flat.forward_seconds);
}

TEST_F(CostModelTest, PipelineNamesTheResourceThatSetsTheSteadyState) {
  // Paper setting, K = 6: the GPU stages (AllGather + copy + NVLink share)
  // set tau although the network has the largest summed busy time.
  const CostModel model(traffic_, view_, 1, BackwardSchedule::kSliceOnly, 0);
  const StrategyTime s2 = model.TpDedupPipelined(6, nullptr);
  ASSERT_NE(s2.steady_state_bottleneck, nullptr);
  EXPECT_STREQ(s2.steady_state_bottleneck, "nvlink");
  EXPECT_STREQ(s2.busy.Bottleneck(), "network");
  // Unpipelined schedules have no steady state.
  EXPECT_EQ(model.TpDedup(nullptr).steady_state_bottleneck, nullptr);
  EXPECT_EQ(model.TpDedupPipelined(1, nullptr).steady_state_bottleneck,
            nullptr);
}

TEST_F(CostModelTest, CopyOffTheGpuResourceShortensThePipeline) {
  const CostModel shared(traffic_, view_, 1, BackwardSchedule::kSliceOnly, 0,
                         PipelineResources::kCopySharesGpu);
  const CostModel split(traffic_, view_, 1, BackwardSchedule::kSliceOnly, 0,
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
