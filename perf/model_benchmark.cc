// Micro-benchmarks of the planner's model: a full decision (every strategy,
// K up to 64) must stay well under a millisecond even for 4096 GPUs, so that
// GetStrategy meets its latency goal with room for RPC and validation.
//
//   bazel run -c opt //perf:model_benchmark -- --benchmark_repetitions=5

#include <cstdlib>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/model/hardware_profile.h"
#include "server/model/paper_job_shape.h"
#include "server/model/profile_view.h"
#include "server/model/strategy_search.h"
#include "server/planning/strategy_planner.h"

namespace monta {
namespace {

// 512 nodes x 8 H100, DeepSeek-like layer with TP 2 so that every strategy is
// feasible: dedup (C/t = 80 rows, K up to 64), hierarchical (n_s = 4) and
// expert overlap (compute time given).
model::MoeJobShape Job4096() {
  model::MoeJobShape j;
  j.hidden_size = 7168;
  j.num_experts = 256;
  j.top_k = 8;
  j.capacity_factor = 1.25;
  j.micro_batch_size = 1;
  j.sequence_length = 4096;
  j.bytes_per_element = 2;
  j.moe_layers = 58;
  j.microbatches_per_step = 16;
  j.world_size = 4096;
  j.tensor_parallel_size = 2;
  j.expert_parallel_size = 64;
  j.pipeline_parallel_size = 8;
  j.data_parallel_size = 256;
  j.expert_compute_seconds = 3e-3;
  j.alltoall_share_ratio = 0.3;
  return j;
}

model::ClusterView ViewOrDie(const char* profile, int nodes) {
  auto p = model::FindProfile(profile);
  if (!p.ok()) std::abort();
  auto v = model::ProfileClusterView(*p, nodes, 8);
  if (!v.ok()) std::abort();
  return *v;
}

void Decide(benchmark::State& state, const model::MoeJobShape& job,
            model::NodeShape shape, const model::ClusterView& view) {
  model::SearchOptions options;
  options.max_chunks = 64;
  int candidates = 0;
  for (auto _ : state) {
    auto d = model::Decide(job, shape, view, options);
    if (!d.ok()) state.SkipWithError("decision failed");
    candidates = static_cast<int>(d->candidates.size());
    benchmark::DoNotOptimize(d);
  }
  state.counters["candidates"] = candidates;
}

void BM_Decide4096Gpus(benchmark::State& state) {
  Decide(state, Job4096(), {512, 8}, ViewOrDie("h100-hgx", 512));
}
BENCHMARK(BM_Decide4096Gpus);

void BM_DecidePaper(benchmark::State& state) {
  Decide(state, model::PaperJobShape(), {2, 8}, ViewOrDie("a800-hgx", 2));
}
BENCHMARK(BM_DecidePaper);

// The whole planning path a GetStrategy call takes (validation, profile
// views, curve choice, model, reply), without the RPC.
void BM_PlanStrategy4096Gpus(benchmark::State& state) {
  v1::StrategyRequest r;
  v1::MoeJob* j = r.mutable_job();
  const model::MoeJobShape s = Job4096();
  j->set_hidden_size(s.hidden_size);
  j->set_num_experts(s.num_experts);
  j->set_top_k(s.top_k);
  j->set_capacity_factor(s.capacity_factor);
  j->set_micro_batch_size(s.micro_batch_size);
  j->set_sequence_length(s.sequence_length);
  j->set_bytes_per_element(s.bytes_per_element);
  j->set_moe_layers(s.moe_layers);
  j->set_microbatches_per_step(s.microbatches_per_step);
  j->set_world_size(s.world_size);
  j->set_tensor_parallel_size(s.tensor_parallel_size);
  j->set_expert_parallel_size(s.expert_parallel_size);
  j->set_pipeline_parallel_size(s.pipeline_parallel_size);
  j->set_data_parallel_size(s.data_parallel_size);
  j->set_expert_compute_seconds(s.expert_compute_seconds);
  r.mutable_placement()->set_profile("h100-hgx");
  r.mutable_placement()->set_nodes(512);
  for (auto _ : state) {
    auto reply = planning::PlanStrategy(r, nullptr, absl::UnixEpoch());
    if (!reply.ok()) state.SkipWithError("planning failed");
    benchmark::DoNotOptimize(reply);
  }
}
BENCHMARK(BM_PlanStrategy4096Gpus);

}  // namespace
}  // namespace monta
