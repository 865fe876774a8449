// What one MoE AllToAll moves: the job's shape turned into bytes per rank and
// the shares of them that stay local, cross the node's fabric, or leave it
// (docs/MODEL.md §1).

#ifndef MONTA_SERVER_MODEL_TRAFFIC_H_
#define MONTA_SERVER_MODEL_TRAFFIC_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace monta::model {

// How the experts' weights sit on the tensor-parallel ranks, which decides
// what a MoE layer communicates forward and backward (docs/MODEL.md §4):
// - kTensorParallel: experts split over the TP group (DeepSpeed
//   enable_expert_tensor_parallelism=True, Megatron-Core's default). Every
//   TP rank must see every token, so each op that drops duplicates gathers
//   them back, and each op's backward is the op itself.
// - kNotTensorParallel: every TP rank holds its experts whole (DeepSpeed's
//   default). DeepSpeed drops the duplicates before the dispatch and gathers
//   them after the combine only (and autograd mirrors that).
enum class ExpertLayout { kTensorParallel, kNotTensorParallel };

// The layout a job that does not say is priced with: DeepSpeed's default
// (enable_expert_tensor_parallelism=False), the one framework whose MoE
// layer runs tensor-parallel non-experts without sequence parallelism, the
// only case where the layout changes the price (Megatron-Core, whose default
// is tensor-parallel experts, requires sequence parallelism with TP and EP,
// and then no TP rank holds duplicates). docs/MODEL.md §4.
inline constexpr ExpertLayout kDefaultExpertLayout =
    ExpertLayout::kNotTensorParallel;

// "tensor_parallel", "not_tensor_parallel" (the contract's short names).
const char* ExpertLayoutName(ExpertLayout layout);

// The MoE layer and parallel layout; mirrors monta.v1.MoeJob without protobuf.
// Zero means "default" only where a comment says so.
struct MoeJobShape {
  int64_t hidden_size = 0;        // M
  int num_experts = 0;            // E
  int top_k = 0;                  // k
  double capacity_factor = 0;     // cf; 0 = dropless
  int micro_batch_size = 0;       // sequences
  int64_t sequence_length = 0;    // tokens per sequence
  int context_parallel_size = 1;  // 0 = 1
  bool sequence_parallel = false;
  int bytes_per_element = 2;      // b
  int moe_layers = 1;             // L
  int microbatches_per_step = 1;  // m; 0 = 1
  int world_size = 0;
  int tensor_parallel_size = 1;  // t
  int expert_parallel_size = 1;  // e
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  // nullopt: the job did not say; priced as kDefaultExpertLayout, and the
  // decision says so.
  std::optional<ExpertLayout> expert_layout;
  double imbalance_factor = 0;  // dropless multiplier; 0 = 1
  double expert_compute_seconds =
      0;                            // per layer forward, per rank; 0 = unknown
  double step_time_seconds = 0;     // 0 = unknown
  double alltoall_share_ratio = 0;  // f; 0 = unknown
};

// Largest cluster the model answers for (docs/MODEL.md §7, "Bounds"): 4x
// the largest published single training job (16,384 GPUs), past which the
// per-peer latency law (sourced on <= 32 ranks) is guesswork. Past them the
// planner answers INVALID_ARGUMENT naming the field.
constexpr int kMaxNodes = 8192;
constexpr int kMaxWorldSize = 65536;  // ranks: kMaxNodes x 8 GPUs

// The cluster's shape as the job sees it: N nodes of G ranks.
struct NodeShape {
  int nodes = 0;
  int gpus_per_node = 0;
};

struct Traffic {
  int64_t tokens_per_rank = 0;  // S
  int64_t capacity_tokens = 0;  // C; 0 when dropless
  // Rows along the axis that tp_dedup slices and pipelining chunks: C when
  // capacity-bound, k*S routed tokens when dropless.
  int64_t split_rows = 0;
  double dispatch_bytes = 0;  // D per rank per AllToAll
  int ep_group_size = 0;      // e
  // n_s for the rank whose EP group has the fewest members on its node (the
  // rank that sends the most over the network bounds the op).
  int ep_members_on_node = 0;
  int tensor_parallel_size = 1;  // t
  // The TP ranks of an EP rank hold the same tokens (t > 1 without sequence
  // parallelism): what tp_dedup drops, and what DeepSpeed drops for experts
  // that are not tensor-parallel.
  bool tp_duplicates = false;
  int gpus_per_node = 0;  // G
  int nodes = 0;          // N
  // Shares of D: 1/e local, (n_s-1)/e over the intra-node fabric, (e-n_s)/e
  // over the network. They add up to 1.
  double local_share = 0;
  double intra_node_share = 0;
  double inter_node_share = 0;
};

// Computes S, C, D and the EP placement with rank order TP innermost, then EP
// at stride t (DeepSpeed and Megatron layouts). INVALID_ARGUMENT when the
// shape is inconsistent (sizes < 1, t not dividing G, e*t > world, ...);
// detailed request validation with field names lives in server/planning.
absl::StatusOr<Traffic> ComputeTraffic(const MoeJobShape& job,
                                       const NodeShape& shape);

// n_s: members of an EP group (ranks start + j*stride, j < e, groups starting
// every stride*e ranks) on one node, minimum over every node and group of a
// world of `world_ranks`. Needs stride dividing gpus_per_node (else 0).
int MinEpMembersOnNode(int ep_group_size, int stride_ranks, int gpus_per_node,
                       int64_t world_ranks);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_TRAFFIC_H_
