#include "client/plan_render.h"

#include <string>

#include "gtest/gtest.h"

namespace monta::client {
namespace {

monta::v1::StrategyReply Reply() {
  monta::v1::StrategyReply r;
  r.set_expert_layout(monta::v1::EXPERT_LAYOUT_TENSOR_PARALLEL);
  r.mutable_traffic()->set_dispatch_bytes(128ull << 20);
  r.mutable_traffic()->set_capacity_tokens(4096);
  r.mutable_traffic()->set_nodes(2);
  monta::v1::Candidate* c = r.add_candidates();
  c->set_kind(monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  c->set_feasible(true);
  c->set_rank(1);
  c->set_chunks_requested(6);
  c->set_chunks_effective(6);
  c->set_forward_seconds_per_layer(2.1912e-3);
  c->set_backward_seconds_per_layer(2.1912e-3);
  c->set_total_seconds_per_layer(4.3824e-3);
  c->set_alltoalls_per_layer(4);
  c->set_allgathers_per_layer(4);
  c->set_speedup_over_flat(5.165);
  c->set_limited_by(monta::v1::BOTTLENECK_NVLINK);
  monta::v1::Candidate* h = r.add_candidates();
  h->set_kind(monta::v1::STRATEGY_KIND_HIERARCHICAL);
  h->set_infeasible_reason("one EP member per node");
  *r.mutable_chosen() = *c;
  r.mutable_evidence()->set_origin(monta::v1::EVIDENCE_SOURCE_PROFILE);
  r.mutable_evidence()->add_notes("a note");
  return r;
}

TEST(PlanText, NamesTheLayoutAndTheCollectivesPerLayer) {
  const std::string text = PlanText(Reply());
  EXPECT_NE(text.find("Experts priced as tensor_parallel"), std::string::npos)
      << text;
  EXPECT_NE(text.find("A2A+AG/LAYER"), std::string::npos) << text;
  EXPECT_NE(text.find(" 4+4 "), std::string::npos) << text;
  EXPECT_NE(text.find("2.191 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("4.382 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("5.17x"), std::string::npos) << text;
  EXPECT_NE(text.find("infeasible: hierarchical: one EP member per node"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Chosen: tp_dedup_pipelined with 6 chunk(s), 5.17x"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  note: a note\n"), std::string::npos) << text;
  monta::v1::StrategyReply whole = Reply();
  whole.set_expert_layout(monta::v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL);
  EXPECT_NE(PlanText(whole).find("Experts priced as not_tensor_parallel"),
            std::string::npos);
}

TEST(PlanText, SaysWhichLinkBoundsAndTheRankOrderToStartWith) {
  monta::v1::StrategyReply r = Reply();
  monta::v1::FabricLevelLoad uplink;
  uplink.set_level(monta::v1::FABRIC_LEVEL_RACK_UPLINK);
  uplink.set_name("r1");
  uplink.set_bytes_per_second(10 << 20);
  uplink.set_task_id("level-r1");
  uplink.set_bytes_per_rank_byte(2);
  uplink.set_dispatch_seconds(3.2);
  *r.mutable_chosen()->mutable_fabric_bound() = uplink;
  *r.mutable_evidence()->mutable_fabric()->add_uplinks() = uplink;
  monta::v1::RankOrderAdvice* a = r.mutable_rank_order();
  for (const char* n : {"a0", "a1", "b0", "b1"}) a->add_nodes(n);
  a->set_ranks_per_node(2);
  a->set_given_dispatch_seconds(3.2);
  a->set_advised_dispatch_seconds(0.4);
  *a->mutable_given_bound() = uplink;
  a->mutable_advised_bound()->set_level(monta::v1::FABRIC_LEVEL_NODE_LINK);
  a->mutable_advised_bound()->set_name("a0,a1");
  a->mutable_advised_bound()->set_declared(true);
  a->mutable_advised_bound()->set_bytes_per_second(50 << 20);
  a->set_given_seconds_per_layer(12.8);
  a->set_advised_seconds_per_layer(1.6);
  a->set_advised_kind(monta::v1::STRATEGY_KIND_FLAT);
  a->set_note("nodes grouped by rack");
  const std::string text = PlanText(r);
  EXPECT_NE(text.find("Network bounded by: rack uplink r1 at 10 MiB/s "
                      "(measured, task level-r1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Rank order: a0,a1,b0,b1 (2 ranks per node"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("3.200 s with the given order (rack uplink r1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("400.000 ms with the advised one (node link a0,a1 at "
                      "50 MiB/s (declared))"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  fabric: rack uplink r1 at 10 MiB/s (measured, task "
                      "level-r1): 2.00 bytes per byte a rank sends, 3.200 s "
                      "per dispatch"),
            std::string::npos)
      << text;
  // Without a fabric nothing of it shows.
  EXPECT_EQ(PlanText(Reply()).find("Rank order"), std::string::npos);
}

}  // namespace
}  // namespace monta::client
