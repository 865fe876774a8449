#include "server/planning/request_validation.h"

#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/strategy/strategy_proto.h"
#include "server/model/traffic.h"

namespace monta::planning {
namespace {

using monta::v1::MoeJob;

absl::Status Bad(absl::string_view field, absl::string_view expectation,
                 absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", expectation, ", got ", got));
}

template <typename T>
absl::Status InRange(absl::string_view field, T value, T lo, T hi) {
  if (value < lo || value > hi) {
    return Bad(field, absl::StrCat("must be in ", lo, "..", hi),
               absl::StrCat(value));
  }
  return absl::OkStatus();
}

// A finite number in [lo, hi]. With `zero_means_lo`, 0 is accepted too: the
// unset field, which stands for `lo`.
absl::Status FiniteInRange(absl::string_view field, double value, double lo,
                           double hi, bool zero_means_lo = false) {
  if (!std::isfinite(value) || (value < lo && !(zero_means_lo && value == 0)) ||
      value > hi) {
    return Bad(field,
               zero_means_lo ? absl::StrCat("must be 0 (= ", lo, ") or in [",
                                            lo, ", ", hi, "]")
                             : absl::StrCat("must be in [", lo, ", ", hi, "]"),
               absl::StrCat(value));
  }
  return absl::OkStatus();
}

#define MONTA_RETURN_IF_ERROR(expr)    \
  do {                                 \
    absl::Status _status = (expr);     \
    if (!_status.ok()) return _status; \
  } while (0)

// The layer and batch shape: sizes, routing, sequence, element width, layers.
absl::Status ValidateLayerShape(const MoeJob& job) {
  if (job.name().size() > 253) {
    return Bad("job.name", "must be at most 253 characters",
               absl::StrCat(job.name().size(), " characters"));
  }
  MONTA_RETURN_IF_ERROR(
      InRange<int64_t>("job.hidden_size", job.hidden_size(), 1, 1 << 20));
  MONTA_RETURN_IF_ERROR(
      InRange<int32_t>("job.num_experts", job.num_experts(), 1, 65536));
  if (job.top_k() < 1 || job.top_k() > job.num_experts()) {
    return Bad(
        "job.top_k",
        absl::StrCat("must be in 1..num_experts (", job.num_experts(), ")"),
        absl::StrCat(job.top_k()));
  }
  const double cf = job.capacity_factor();
  if (!std::isfinite(cf) || cf < 0 || cf > 64) {
    return Bad("job.capacity_factor", "must be 0 (dropless) or in (0, 64]",
               absl::StrCat(cf));
  }
  MONTA_RETURN_IF_ERROR(InRange<int32_t>("job.micro_batch_size",
                                         job.micro_batch_size(), 1, 1 << 20));
  MONTA_RETURN_IF_ERROR(InRange<int64_t>("job.sequence_length",
                                         job.sequence_length(), 1, 16777216));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>(
      "job.context_parallel_size", job.context_parallel_size(), 0, 1 << 20));
  const int cp =
      job.context_parallel_size() == 0 ? 1 : job.context_parallel_size();
  if (job.sequence_length() % cp != 0) {
    return Bad("job.context_parallel_size",
               absl::StrCat("must divide sequence_length (",
                            job.sequence_length(), ")"),
               absl::StrCat(cp));
  }
  const int b = job.bytes_per_element();
  if (b != 1 && b != 2 && b != 4) {
    return Bad("job.bytes_per_element", "must be 1 (fp8), 2 (bf16) or 4 (fp32)",
               absl::StrCat(b));
  }
  MONTA_RETURN_IF_ERROR(
      InRange<int32_t>("job.moe_layers", job.moe_layers(), 1, 10000));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>(
      "job.microbatches_per_step", job.microbatches_per_step(), 0, 1 << 20));
  return absl::OkStatus();
}

// The parallel layout: sizes in range and their relations (strategy.proto's
// MoeJob comment states them).
absl::Status ValidateParallelism(const MoeJob& job) {
  const int cp =
      job.context_parallel_size() == 0 ? 1 : job.context_parallel_size();
  MONTA_RETURN_IF_ERROR(InRange<int32_t>("job.world_size", job.world_size(), 1,
                                         monta::model::kMaxWorldSize));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>(
      "job.tensor_parallel_size", job.tensor_parallel_size(), 1, 1 << 20));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>(
      "job.expert_parallel_size", job.expert_parallel_size(), 1, 1 << 20));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>(
      "job.pipeline_parallel_size", job.pipeline_parallel_size(), 1, 1 << 20));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>("job.data_parallel_size",
                                         job.data_parallel_size(), 1, 1 << 20));
  const int64_t product = static_cast<int64_t>(job.tensor_parallel_size()) *
                          job.pipeline_parallel_size() *
                          job.data_parallel_size();
  if (product != job.world_size()) {
    return Bad("job.world_size",
               absl::StrCat("must equal tensor x pipeline x data (",
                            job.tensor_parallel_size(), " x ",
                            job.pipeline_parallel_size(), " x ",
                            job.data_parallel_size(), " = ", product, ")"),
               absl::StrCat(job.world_size()));
  }
  if (job.data_parallel_size() % job.expert_parallel_size() != 0) {
    return Bad("job.expert_parallel_size",
               absl::StrCat("must divide data_parallel_size (",
                            job.data_parallel_size(),
                            "): expert ranks are drawn from data-parallel "
                            "ranks"),
               absl::StrCat(job.expert_parallel_size()));
  }
  if (job.num_experts() % job.expert_parallel_size() != 0) {
    return Bad("job.num_experts",
               absl::StrCat("must be divisible by expert_parallel_size (",
                            job.expert_parallel_size(), ")"),
               absl::StrCat(job.num_experts()));
  }
  if (job.sequence_parallel()) {
    const int64_t tokens = static_cast<int64_t>(job.micro_batch_size()) *
                           job.sequence_length() / cp;
    if (tokens % job.tensor_parallel_size() != 0) {
      return Bad("job.sequence_parallel",
                 absl::StrCat("needs micro_batch_size x sequence_length / "
                              "context_parallel_size (",
                              tokens, ") divisible by tensor_parallel_size"),
                 absl::StrCat(job.tensor_parallel_size()));
    }
  }
  return absl::OkStatus();
}

// The optional inputs: imbalance, expert compute and step time or share.
absl::Status ValidateOptionalInputs(const MoeJob& job) {
  MONTA_RETURN_IF_ERROR(FiniteInRange("job.imbalance_factor",
                                      job.imbalance_factor(), 1, 64,
                                      /*zero_means_lo=*/true));
  MONTA_RETURN_IF_ERROR(FiniteInRange("job.expert_compute_seconds",
                                      job.expert_compute_seconds(), 0, 3600));
  MONTA_RETURN_IF_ERROR(FiniteInRange("job.step_time_seconds",
                                      job.step_time_seconds(), 0, 86400));
  MONTA_RETURN_IF_ERROR(FiniteInRange("job.alltoall_share_ratio",
                                      job.alltoall_share_ratio(), 0, 1));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJob(const MoeJob& job) {
  MONTA_RETURN_IF_ERROR(ValidateLayerShape(job));
  MONTA_RETURN_IF_ERROR(ValidateParallelism(job));
  return ValidateOptionalInputs(job);
}

absl::Status ValidateOptions(const monta::v1::StrategyOptions& options) {
  MONTA_RETURN_IF_ERROR(
      InRange<int32_t>("options.max_chunks", options.max_chunks(), 0, 1024));
  MONTA_RETURN_IF_ERROR(InRange<int32_t>("options.fixed_chunks",
                                         options.fixed_chunks(), 0, 1024));
  MONTA_RETURN_IF_ERROR(FiniteInRange("options.contention_factor",
                                      options.contention_factor(), 1, 100,
                                      /*zero_means_lo=*/true));
  if (options.allowed_size() > kMaxAllowedEntries) {
    return Bad("options.allowed",
               absl::StrCat("at most ", kMaxAllowedEntries, " entries"),
               absl::StrCat(options.allowed_size(), " entries"));
  }
  for (int i = 0; i < options.allowed_size(); ++i) {
    const int kind = options.allowed(i);
    if (kind < monta::v1::STRATEGY_KIND_FLAT ||
        kind > monta::v1::STRATEGY_KIND_EXPERT_OVERLAP) {
      return Bad(absl::StrCat("options.allowed[", i, "]"),
                 "must be a strategy kind (FLAT .. EXPERT_OVERLAP)",
                 absl::StrCat(kind));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateJobOnPlacement(const MoeJob& job, int nodes,
                                    int gpus_per_node) {
  const int64_t world = static_cast<int64_t>(nodes) * gpus_per_node;
  if (world != job.world_size()) {
    return Bad("job.world_size",
               absl::StrCat("must equal placement nodes x gpus per node (",
                            nodes, " x ", gpus_per_node, " = ", world, ")"),
               absl::StrCat(job.world_size()));
  }
  const int t = job.tensor_parallel_size();
  if (t > gpus_per_node || gpus_per_node % t != 0) {
    return Bad("job.tensor_parallel_size",
               absl::StrCat("must divide gpus per node (", gpus_per_node, ")"),
               absl::StrCat(t));
  }
  const absl::StatusOr<monta::model::Traffic> traffic =
      monta::model::ComputeTraffic(ToJobShape(job), {nodes, gpus_per_node});
  if (!traffic.ok()) {
    return absl::InvalidArgumentError(traffic.status().message());
  }
  if (traffic->dispatch_bytes > kMaxDispatchBytesPerRank) {
    return Bad("job",
               "dispatch bytes per rank D = E x C x M x b must be at most "
               "64 GiB",
               absl::StrCat(traffic->dispatch_bytes / (1ull << 30), " GiB"));
  }
  return absl::OkStatus();
}

monta::model::MoeJobShape ToJobShape(const MoeJob& job) {
  monta::model::MoeJobShape s;
  s.hidden_size = job.hidden_size();
  s.num_experts = job.num_experts();
  s.top_k = job.top_k();
  s.capacity_factor = job.capacity_factor();
  s.micro_batch_size = job.micro_batch_size();
  s.sequence_length = job.sequence_length();
  s.context_parallel_size =
      job.context_parallel_size() == 0 ? 1 : job.context_parallel_size();
  s.sequence_parallel = job.sequence_parallel();
  s.bytes_per_element = job.bytes_per_element();
  s.moe_layers = job.moe_layers();
  s.microbatches_per_step =
      job.microbatches_per_step() == 0 ? 1 : job.microbatches_per_step();
  s.world_size = job.world_size();
  s.tensor_parallel_size = job.tensor_parallel_size();
  s.expert_parallel_size = job.expert_parallel_size();
  s.pipeline_parallel_size = job.pipeline_parallel_size();
  s.data_parallel_size = job.data_parallel_size();
  if (job.has_experts_tensor_parallel()) {
    s.expert_layout = job.experts_tensor_parallel()
                          ? monta::model::ExpertLayout::kTensorParallel
                          : monta::model::ExpertLayout::kNotTensorParallel;
  }
  s.imbalance_factor = job.imbalance_factor();
  s.expert_compute_seconds = job.expert_compute_seconds();
  s.step_time_seconds = job.step_time_seconds();
  s.alltoall_share_ratio = job.alltoall_share_ratio();
  return s;
}

monta::model::SearchOptions ToSearchOptions(
    const monta::v1::StrategyOptions& options) {
  monta::model::SearchOptions s;
  s.max_chunks = options.max_chunks() == 0 ? 64 : options.max_chunks();
  s.fixed_chunks = options.fixed_chunks();
  s.contention_factor =
      options.contention_factor() == 0 ? 1.0 : options.contention_factor();
  for (int kind : options.allowed()) {
    // Unknown numbers are skipped, as the contract's UNSPECIFIED is.
    if (std::optional<monta::strategy::StrategyKind> k =
            monta::strategy::StrategyFromProto(kind)) {
      s.allowed.push_back(*k);
    }
  }
  return s;
}

}  // namespace monta::planning
