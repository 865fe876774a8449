#include "server/model/traffic.h"

#include <algorithm>
#include <map>

#include "gtest/gtest.h"

namespace monta::model {
namespace {

MoeJobShape Job() {
  MoeJobShape j;
  j.hidden_size = 4096;
  j.num_experts = 8;
  j.top_k = 2;
  j.capacity_factor = 1.0;
  j.micro_batch_size = 1;
  j.sequence_length = 4096;
  j.bytes_per_element = 2;
  j.world_size = 16;
  j.tensor_parallel_size = 1;
  j.expert_parallel_size = 8;
  j.data_parallel_size = 16;
  return j;
}

TEST(Traffic, CapacityAndDispatchBytes) {
  auto tr = ComputeTraffic(Job(), {2, 8});
  ASSERT_TRUE(tr.ok()) << tr.status();
  EXPECT_EQ(tr->tokens_per_rank, 4096);
  EXPECT_EQ(tr->capacity_tokens, 2 * 4096 / 8);  // ceil(k S cf / E)
  EXPECT_DOUBLE_EQ(tr->dispatch_bytes, 8.0 * 1024 * 4096 * 2);  // E C M b
}

TEST(Traffic, CapacityRoundsUp) {
  MoeJobShape j = Job();
  j.sequence_length = 4095;
  j.capacity_factor = 1.25;
  auto tr = ComputeTraffic(j, {2, 8});
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->capacity_tokens, 1280);  // ceil(2*4095*1.25/8) = ceil(1279.7)
}

TEST(Traffic, DroplessUsesRoutedTokensAndImbalance) {
  MoeJobShape j = Job();
  j.capacity_factor = 0;
  j.imbalance_factor = 1.5;
  auto tr = ComputeTraffic(j, {2, 8});
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->capacity_tokens, 0);
  EXPECT_EQ(tr->split_rows, 2 * 4096);
  EXPECT_DOUBLE_EQ(tr->dispatch_bytes, 2.0 * 4096 * 4096 * 2 * 1.5);
}

TEST(Traffic, ContextAndSequenceParallelSplitTokens) {
  MoeJobShape j = Job();
  j.context_parallel_size = 2;
  j.sequence_parallel = true;
  j.tensor_parallel_size = 2;
  j.expert_parallel_size = 4;
  auto tr = ComputeTraffic(j, {2, 8});
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->tokens_per_rank, 4096 / 2 / 2);
}

TEST(Traffic, EpPlacementTpInnermost) {
  // t = G: every EP peer is on another node.
  EXPECT_EQ(MinEpMembersOnNode(2, 8, 8, 16), 1);
  // t = 2 on 8 GPUs: four EP members share a node.
  EXPECT_EQ(MinEpMembersOnNode(4, 2, 8, 16), 4);
  EXPECT_EQ(MinEpMembersOnNode(8, 2, 8, 16), 4);
  // EP group inside one node.
  EXPECT_EQ(MinEpMembersOnNode(4, 1, 8, 16), 4);
  // Uneven: 12 members on 8-GPU nodes; every group has a node with 4.
  EXPECT_EQ(MinEpMembersOnNode(12, 1, 8, 48), 4);
  // Groups of 6 start at ranks 0, 6, 12, ...: the one at 6 has only ranks 6
  // and 7 on its first node.
  EXPECT_EQ(MinEpMembersOnNode(6, 1, 8, 48), 2);
  // Same answer as walking every rank of every group.
  for (int e : {1, 2, 3, 5, 6, 7, 12, 16, 24}) {
    for (int t : {1, 2, 4}) {
      const int world = 8 * 24;
      if (world % (e * t) != 0) continue;
      int expected = e;
      for (int start = 0; start < world; start += e * t) {
        std::map<int, int> per_node;
        for (int j = 0; j < e; ++j) ++per_node[(start + j * t) / 8];
        for (const auto& [node, count] : per_node) {
          expected = std::min(expected, count);
        }
      }
      EXPECT_EQ(MinEpMembersOnNode(e, t, 8, world), expected)
          << "e=" << e << " t=" << t;
    }
  }
}

TEST(Traffic, SharesAddUpToOne) {
  MoeJobShape j = Job();
  j.tensor_parallel_size = 2;
  j.expert_parallel_size = 8;  // spans 16 ranks: 4 per node
  auto tr = ComputeTraffic(j, {2, 8});
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->ep_members_on_node, 4);
  EXPECT_DOUBLE_EQ(tr->local_share, 1.0 / 8);
  EXPECT_DOUBLE_EQ(tr->intra_node_share, 3.0 / 8);
  EXPECT_DOUBLE_EQ(tr->inter_node_share, 4.0 / 8);
  EXPECT_DOUBLE_EQ(
      tr->local_share + tr->intra_node_share + tr->inter_node_share, 1.0);
}

TEST(Traffic, RejectsInconsistentShapes) {
  MoeJobShape j = Job();
  j.tensor_parallel_size = 16;
  EXPECT_FALSE(ComputeTraffic(j, {2, 8}).ok());  // t > G
  j = Job();
  j.expert_parallel_size = 32;
  EXPECT_FALSE(ComputeTraffic(j, {2, 8}).ok());  // e * t > world
  j = Job();
  j.hidden_size = 0;
  EXPECT_FALSE(ComputeTraffic(j, {2, 8}).ok());
  EXPECT_FALSE(ComputeTraffic(Job(), {0, 8}).ok());
}

}  // namespace
}  // namespace monta::model
