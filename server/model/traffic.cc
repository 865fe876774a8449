#include "server/model/traffic.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace monta::model {

const char* ExpertLayoutName(ExpertLayout layout) {
  return layout == ExpertLayout::kTensorParallel ? "tensor_parallel"
                                                 : "not_tensor_parallel";
}

int MinEpMembersOnNode(int ep_group_size, int stride_ranks, int gpus_per_node,
                       int64_t world_ranks) {
  const int e = ep_group_size;
  const int t = stride_ranks;
  const int g = gpus_per_node;
  if (e <= 0 || t <= 0 || g <= 0 || g % t != 0) return 0;
  // Groups start every t*e ranks (TP innermost, EP next); a member sits in
  // one of the G/t slots of its node. Only the start offset within a node
  // matters, and offsets repeat after at most G/t groups.
  const int64_t slots = g / t;
  const int64_t span = static_cast<int64_t>(t) * e;
  const int64_t groups = std::max<int64_t>(1, world_ranks / span);
  int64_t result = e;
  for (int64_t k = 0; k < std::min<int64_t>(groups, slots); ++k) {
    const int64_t slot = (k * span % g) / t;
    const int64_t first = std::min<int64_t>(e, slots - slot);
    int64_t m = first;
    const int64_t rest = e - first;
    if (rest >= slots) m = std::min(m, slots);
    if (rest % slots != 0) m = std::min(m, rest % slots);
    result = std::min(result, m);
  }
  return static_cast<int>(result);
}

absl::StatusOr<Traffic> ComputeTraffic(const MoeJobShape& job,
                                       const NodeShape& shape) {
  const int t = job.tensor_parallel_size;
  const int e = job.expert_parallel_size;
  const int cp = job.context_parallel_size == 0 ? 1 : job.context_parallel_size;
  if (job.hidden_size < 1 || job.num_experts < 1 || job.top_k < 1 ||
      job.micro_batch_size < 1 || job.sequence_length < 1 ||
      job.bytes_per_element < 1 || t < 1 || e < 1 || cp < 1) {
    return absl::InvalidArgumentError(
        "job: hidden, experts, top_k, micro batch, sequence, bytes per "
        "element and parallel sizes must be >= 1");
  }
  if (job.capacity_factor < 0 || !std::isfinite(job.capacity_factor)) {
    return absl::InvalidArgumentError("job: capacity_factor must be >= 0");
  }
  if (shape.nodes < 1 || shape.gpus_per_node < 1) {
    return absl::InvalidArgumentError("placement: need >= 1 node and rank");
  }
  if (shape.nodes > kMaxNodes ||
      static_cast<int64_t>(shape.nodes) * shape.gpus_per_node > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: at most ", kMaxNodes, " nodes and ", kMaxWorldSize,
        " ranks, got ", shape.nodes, " x ", shape.gpus_per_node));
  }
  if (shape.gpus_per_node % t != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job: tensor_parallel_size ", t,
                     " must divide gpus per node ", shape.gpus_per_node));
  }
  const int64_t world = static_cast<int64_t>(shape.nodes) * shape.gpus_per_node;
  if (static_cast<int64_t>(e) * t > world) {
    return absl::InvalidArgumentError(
        absl::StrCat("job: expert x tensor parallel sizes (", e, " x ", t,
                     ") exceed the world (", world, ")"));
  }

  Traffic tr;
  // Tokens per rank: context parallelism splits the sequence, and sequence
  // parallelism splits it again over the TP group.
  const int64_t tokens =
      static_cast<int64_t>(job.micro_batch_size) * job.sequence_length;
  const int64_t split =
      static_cast<int64_t>(cp) * (job.sequence_parallel ? t : 1);
  tr.tokens_per_rank = std::max<int64_t>(1, tokens / split);

  const double bytes_per_row =
      static_cast<double>(job.hidden_size) * job.bytes_per_element;
  const double routed = static_cast<double>(job.top_k) * tr.tokens_per_rank;
  // Keeps the integer row counts below meaningful and far from overflow.
  if (routed * std::max(1.0, job.capacity_factor) > 1e15) {
    return absl::InvalidArgumentError(
        "job: routed tokens per rank (top_k x tokens x capacity factor) "
        "exceed 1e15");
  }
  if (job.capacity_factor > 0) {
    tr.capacity_tokens = static_cast<int64_t>(
        std::ceil(routed * job.capacity_factor / job.num_experts));
    tr.split_rows = tr.capacity_tokens;
    tr.dispatch_bytes = static_cast<double>(job.num_experts) *
                        tr.capacity_tokens * bytes_per_row;
  } else {
    const double imbalance =
        job.imbalance_factor > 0 ? job.imbalance_factor : 1.0;
    tr.capacity_tokens = 0;
    tr.split_rows = static_cast<int64_t>(routed);
    tr.dispatch_bytes = routed * bytes_per_row * imbalance;
  }

  tr.ep_group_size = e;
  tr.tensor_parallel_size = t;
  tr.tp_duplicates = t > 1 && !job.sequence_parallel;
  tr.gpus_per_node = shape.gpus_per_node;
  tr.nodes = shape.nodes;
  tr.ep_members_on_node = MinEpMembersOnNode(e, t, shape.gpus_per_node, world);
  tr.local_share = 1.0 / e;
  tr.intra_node_share = static_cast<double>(tr.ep_members_on_node - 1) / e;
  tr.inter_node_share = static_cast<double>(e - tr.ep_members_on_node) / e;
  return tr;
}

}  // namespace monta::model
