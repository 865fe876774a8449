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

}  // namespace
}  // namespace monta::client
