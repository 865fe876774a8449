// Every validation rule, checked through PlanStrategy so the tests hold for
// whatever the gRPC handler passes in.

#include "server/planning/request_validation.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/model/paper_job_shape.h"
#include "server/planning/strategy_planner.h"
#include "tests/testing/paper_job.h"

namespace monta::planning {
namespace {

v1::StrategyRequest PaperRequest() { return testing::PaperJobRequest(); }

struct Case {
  std::string name;
  std::function<void(v1::StrategyRequest&)> mutate;
  std::string expected_substring;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
};

class ValidationTest : public ::testing::TestWithParam<Case> {};

TEST_P(ValidationTest, RejectsWithFieldAndExpectation) {
  v1::StrategyRequest r = PaperRequest();
  GetParam().mutate(r);
  auto reply = PlanStrategy(r, nullptr, absl::UnixEpoch());
  ASSERT_FALSE(reply.ok()) << GetParam().name;
  EXPECT_EQ(reply.status().code(), GetParam().code) << reply.status();
  EXPECT_NE(reply.status().message().find(GetParam().expected_substring),
            std::string::npos)
      << reply.status();
}

// long-function: one table with a row per validation rule; split, the rows
// would only be scattered.
std::vector<Case> Cases() {
  using R = v1::StrategyRequest;
  return {
      {"no_job", [](R& r) { r.clear_job(); }, "job: required"},
      {"zero_hidden", [](R& r) { r.mutable_job()->set_hidden_size(0); },
       "job.hidden_size: must be in 1..1048576, got 0"},
      {"negative_hidden", [](R& r) { r.mutable_job()->set_hidden_size(-5); },
       "job.hidden_size"},
      {"absurd_hidden",
       [](R& r) { r.mutable_job()->set_hidden_size(2'000'000); },
       "job.hidden_size"},
      {"absurd_sequence",
       [](R& r) { r.mutable_job()->set_sequence_length(17'000'000); },
       "job.sequence_length: must be in 1..16777216"},
      {"negative_micro_batch",
       [](R& r) { r.mutable_job()->set_micro_batch_size(-1); },
       "job.micro_batch_size"},
      {"experts_not_divisible_by_ep",
       [](R& r) { r.mutable_job()->set_num_experts(3); },
       "job.num_experts: must be divisible by expert_parallel_size (2), got 3"},
      {"top_k_above_experts", [](R& r) { r.mutable_job()->set_top_k(3); },
       "job.top_k: must be in 1..num_experts (2), got 3"},
      {"capacity_negative",
       [](R& r) { r.mutable_job()->set_capacity_factor(-0.5); },
       "job.capacity_factor"},
      {"capacity_too_large",
       [](R& r) { r.mutable_job()->set_capacity_factor(65); },
       "job.capacity_factor: must be 0 (dropless) or in (0, 64]"},
      {"bytes_per_element",
       [](R& r) { r.mutable_job()->set_bytes_per_element(3); },
       "job.bytes_per_element: must be 1 (fp8), 2 (bf16) or 4 (fp32), got 3"},
      {"zero_layers", [](R& r) { r.mutable_job()->set_moe_layers(0); },
       "job.moe_layers"},
      {"parallel_product",
       [](R& r) { r.mutable_job()->set_data_parallel_size(4); },
       "job.world_size: must equal tensor x pipeline x data"},
      {"zero_tensor",
       [](R& r) { r.mutable_job()->set_tensor_parallel_size(0); },
       "job.tensor_parallel_size"},
      {"tp_larger_than_node",
       [](R& r) {
         r.mutable_job()->set_tensor_parallel_size(16);
         r.mutable_job()->set_data_parallel_size(1);
         r.mutable_job()->set_expert_parallel_size(1);
         r.mutable_job()->set_num_experts(2);
       },
       "job.tensor_parallel_size: must divide gpus per node (8), got 16"},
      {"world_not_nodes_times_gpus",
       [](R& r) { r.mutable_placement()->set_nodes(4); },
       "job.world_size: must equal placement nodes x gpus per node (4 x 8 = "
       "32), got 16"},
      {"ep_not_dividing_data",
       [](R& r) { r.mutable_job()->set_expert_parallel_size(4); },
       "job.expert_parallel_size: must divide data_parallel_size (2)"},
      {"imbalance_below_one",
       [](R& r) { r.mutable_job()->set_imbalance_factor(0.5); },
       "job.imbalance_factor"},
      {"share_above_one",
       [](R& r) { r.mutable_job()->set_alltoall_share_ratio(1.5); },
       "job.alltoall_share_ratio"},
      {"negative_compute",
       [](R& r) { r.mutable_job()->set_expert_compute_seconds(-1); },
       "job.expert_compute_seconds"},
      {"negative_step_time",
       [](R& r) { r.mutable_job()->set_step_time_seconds(-1); },
       "job.step_time_seconds"},
      {"cp_not_dividing_sequence",
       [](R& r) { r.mutable_job()->set_context_parallel_size(3); },
       "job.context_parallel_size: must divide sequence_length"},
      {"max_chunks_out_of_range",
       [](R& r) { r.mutable_options()->set_max_chunks(2000); },
       "options.max_chunks: must be in 0..1024, got 2000"},
      {"fixed_chunks_out_of_range",
       [](R& r) { r.mutable_options()->set_fixed_chunks(1025); },
       "options.fixed_chunks: must be in 0..1024, got 1025"},
      {"max_chunks_negative",
       [](R& r) { r.mutable_options()->set_max_chunks(-1); },
       "options.max_chunks"},
      {"contention_below_one",
       [](R& r) { r.mutable_options()->set_contention_factor(0.5); },
       "options.contention_factor"},
      {"allowed_unspecified",
       [](R& r) {
         r.mutable_options()->add_allowed(v1::STRATEGY_KIND_UNSPECIFIED);
       },
       "options.allowed[0]"},
      {"allowed_200000_entries",
       [](R& r) {
         for (int i = 0; i < 200000; ++i) {
           r.mutable_options()->add_allowed(v1::STRATEGY_KIND_FLAT);
         }
       },
       "options.allowed: at most 16 entries, got 200000 entries"},
      {"dispatch_above_64_gib",
       [](R& r) {
         // D = E C M b = 2 x (8 x 1M / 2 x 64... ) far beyond 64 GiB.
         r.mutable_job()->set_micro_batch_size(64);
         r.mutable_job()->set_capacity_factor(64);
         r.mutable_job()->set_sequence_length(1 << 20);
       },
       "64 GiB"},
      {"unknown_profile",
       [](R& r) { r.mutable_placement()->set_profile("tpu-v5"); },
       "placement.profile: \"tpu-v5\": unknown hardware profile; known: "},
      {"zero_nodes", [](R& r) { r.mutable_placement()->set_nodes(0); },
       "placement.nodes"},
      {"no_placement", [](R& r) { r.clear_placement(); },
       "placement: required"},
      {"both_placements",
       [](R& r) { r.mutable_placement()->add_node_names("a"); }, "not both"},
      {"gpus_per_node_above_profile",
       [](R& r) { r.mutable_placement()->set_gpus_per_node(16); },
       "placement.gpus_per_node: must be in 0..8"},
      {"node_names_without_registry",
       [](R& r) {
         r.mutable_placement()->clear_profile();
         r.mutable_placement()->add_node_names("a");
       },
       "no node registry", absl::StatusCode::kFailedPrecondition},
  };
}

INSTANTIATE_TEST_SUITE_P(Rules, ValidationTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// A 10 KB input comes back as a bounded prefix with its length, never whole
// (gRPC would refuse an error larger than its metadata limit).
TEST(Validation, LongInputsAreEchoedAsABoundedPrefix) {
  v1::StrategyRequest r = PaperRequest();
  r.mutable_placement()->set_profile(std::string(10240, 'p'));
  auto reply = PlanStrategy(r, nullptr, absl::UnixEpoch());
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("(10240 bytes)"), std::string::npos)
      << reply.status();
  EXPECT_LT(reply.status().message().size(), 1000u);
}

TEST(Validation, TheBaseRequestIsValid) {
  auto reply = PlanStrategy(PaperRequest(), nullptr, absl::UnixEpoch());
  EXPECT_TRUE(reply.ok()) << reply.status();
}

TEST(Validation, InfeasibleStrategyIsNotAnError) {
  v1::StrategyRequest r = PaperRequest();
  // Tokens already split over the TP group: nothing to deduplicate.
  r.mutable_job()->set_sequence_parallel(true);
  auto reply = PlanStrategy(r, nullptr, absl::UnixEpoch());
  ASSERT_TRUE(reply.ok()) << reply.status();
  bool found = false;
  for (const v1::Candidate& c : reply->candidates()) {
    if (c.kind() == v1::STRATEGY_KIND_TP_DEDUP) {
      found = true;
      EXPECT_FALSE(c.feasible());
      EXPECT_NE(c.infeasible_reason().find("sequence_parallel"),
                std::string::npos);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(reply->chosen().kind(), v1::STRATEGY_KIND_FLAT);
}

// The model's tests use a struct twin of the paper's example
// (server/model/paper_job_shape.h); it must say what the example says.
// The layout has presence: true and false are the job's word, unset is left
// to the model's named default (never a silent false).
TEST(ToJobShape, ExpertLayoutKeepsNotGivenApart) {
  v1::MoeJob job = testing::PaperJobRequest().job();
  job.set_experts_tensor_parallel(false);
  EXPECT_EQ(ToJobShape(job).expert_layout,
            model::ExpertLayout::kNotTensorParallel);
  job.set_experts_tensor_parallel(true);
  EXPECT_EQ(ToJobShape(job).expert_layout,
            model::ExpertLayout::kTensorParallel);
  job.clear_experts_tensor_parallel();
  EXPECT_FALSE(ToJobShape(job).expert_layout.has_value());
  // An explicit false survives the wire (proto3 optional serializes it).
  job.set_experts_tensor_parallel(false);
  v1::MoeJob round_trip;
  ASSERT_TRUE(round_trip.ParseFromString(job.SerializeAsString()));
  EXPECT_TRUE(round_trip.has_experts_tensor_parallel());
}

TEST(PaperJobShape, MatchesTheExampleFile) {
  const model::MoeJobShape from_file =
      ToJobShape(testing::PaperJobRequest().job());
  const model::MoeJobShape twin = model::PaperJobShape();
  EXPECT_EQ(from_file.hidden_size, twin.hidden_size);
  EXPECT_EQ(from_file.num_experts, twin.num_experts);
  EXPECT_EQ(from_file.top_k, twin.top_k);
  EXPECT_EQ(from_file.capacity_factor, twin.capacity_factor);
  EXPECT_EQ(from_file.micro_batch_size, twin.micro_batch_size);
  EXPECT_EQ(from_file.sequence_length, twin.sequence_length);
  EXPECT_EQ(from_file.context_parallel_size, twin.context_parallel_size);
  EXPECT_EQ(from_file.sequence_parallel, twin.sequence_parallel);
  EXPECT_EQ(from_file.bytes_per_element, twin.bytes_per_element);
  EXPECT_EQ(from_file.moe_layers, twin.moe_layers);
  EXPECT_EQ(from_file.microbatches_per_step, twin.microbatches_per_step);
  EXPECT_EQ(from_file.world_size, twin.world_size);
  EXPECT_EQ(from_file.tensor_parallel_size, twin.tensor_parallel_size);
  EXPECT_EQ(from_file.expert_parallel_size, twin.expert_parallel_size);
  EXPECT_EQ(from_file.pipeline_parallel_size, twin.pipeline_parallel_size);
  EXPECT_EQ(from_file.data_parallel_size, twin.data_parallel_size);
  EXPECT_EQ(from_file.expert_layout, twin.expert_layout);
  EXPECT_EQ(from_file.expert_layout, model::ExpertLayout::kTensorParallel);
  EXPECT_EQ(from_file.imbalance_factor, twin.imbalance_factor);
  EXPECT_EQ(from_file.expert_compute_seconds, twin.expert_compute_seconds);
  EXPECT_EQ(from_file.step_time_seconds, twin.step_time_seconds);
  EXPECT_EQ(from_file.alltoall_share_ratio, twin.alltoall_share_ratio);
}

}  // namespace
}  // namespace monta::planning
