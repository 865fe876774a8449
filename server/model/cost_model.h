// Predicted times of the AllToAll schedules for one job on one cluster view
// (docs/MODEL.md §3-4). Pure arithmetic: no search, no I/O.

#ifndef MONTA_SERVER_MODEL_COST_MODEL_H_
#define MONTA_SERVER_MODEL_COST_MODEL_H_

#include <cstdint>

#include "server/model/bandwidth_curve.h"
#include "server/model/traffic.h"

namespace monta::model {

// What verify runs on these nodes taught the model (docs/MODEL.md §11): the
// curves' bandwidth terms scaled, and a fixed cost per pipeline chunk. The
// pipeline's overlap (gamma) travels as SearchOptions::contention_factor.
struct ModelCalibration {
  // Multiply the busy times of the network (inter-node AllToAll share) and of
  // the node's own paths (intra-node AllToAll share, AllGather, copy): 1 =
  // the curves were right.
  double network_scale = 1;
  double local_scale = 1;
  // Added once per chunk to each dedup op (K chunks pay K times).
  double per_chunk_overhead_seconds = 0;
  // Multiplies every launch latency the curves give (AllToAll, AllGather,
  // copy): what an op's fixed cost is inside the job's schedule over what the
  // primitive benchmark measured for an op alone (on an oversubscribed host
  // an isolated small op stalls where back-to-back chunks do not).
  double latency_scale = 1;
};

// The bandwidth the model may use. Curves can come from measurements or from
// a hardware profile; the model does not care which.
struct ClusterView {
  BandwidthCurve alltoall_intra;   // AllToAll among ranks of one node
  BandwidthCurve alltoall_inter;   // AllToAll across nodes
  BandwidthCurve allgather_intra;  // AllGather inside a node (TP group)
  BandwidthCurve copy;             // device-to-device copy
  // AllToAll launch latency grows with the number of peers (one send/recv
  // pair each); this moves a curve's alpha from the curve's own rank count to
  // the op's group (docs/MODEL.md §2), never to the cluster's size.
  double alltoall_per_peer_latency_seconds = 0;
  // Largest group the per-peer latency was sourced on (0 = unknown): groups
  // beyond it extrapolate the latency law, and the decision says so.
  int alltoall_latency_source_max_ranks = 0;
  ModelCalibration calibration;
};

// Which curves a prediction needed outside their measured range.
struct ExtrapolationFlags {
  bool alltoall_intra = false;
  bool alltoall_inter = false;
  bool allgather_intra = false;
  bool copy = false;
  void Merge(const ExtrapolationFlags& o);
  bool any() const {
    return alltoall_intra || alltoall_inter || allgather_intra || copy;
  }
};

// How backward runs. kSliceOnly (the default) is docs/MODEL.md §8.1's reading:
// forward charges an AllGather to each of its two ops, backward runs
// AllToAll(D/t) only. Per layer that is 4 AllToAlls and 2 AllGathers, exactly
// what DeepSpeed's MoE layer issues (deepspeed/moe/sharded_moe.py: forward runs
// drop -> AllToAll and AllToAll -> gather; autograd runs slice -> AllToAll and
// AllToAll -> AllGather), only attributed to forward rather than split.
// kAutograd charges an AllGather to every backward op as well (4 per layer);
// it over-counts DeepSpeed's backward and is kept for comparison.
enum class BackwardSchedule { kAutograd, kSliceOnly };

// Which pipeline stages share a resource (docs/MODEL.md §8.3, an open
// question for measurement). kCopySharesGpu (the default, conservative): the
// reorder copy contends with the AllToAll's NVLink share and the AllGather
// on the GPU (SMs, copy engines, HBM). kCopySeparate: the copy hides behind
// the AllGather and bounds the steady state only on its own.
enum class PipelineResources { kCopySharesGpu, kCopySeparate };

// Busy time per resource; used for the pipeline's steady state and to name
// the bottleneck.
struct ResourceBusy {
  double network_seconds = 0;
  double nvlink_seconds = 0;
  double copy_seconds = 0;
  double launch_seconds = 0;  // fixed costs (alphas)
  double compute_seconds = 0;
  void Add(const ResourceBusy& o, double times = 1);
  // "network", "nvlink", "copy", "launch_latency" or "compute"; "none" when
  // nothing is busy.
  const char* Bottleneck() const;
};

// One collective or copy on one rank: latency plus link busy times.
struct Stage {
  double seconds = 0;
  ResourceBusy busy;
};

// Per MoE layer (forward = dispatch + combine; backward = their gradients).
struct StrategyTime {
  double forward_seconds = 0;
  double backward_seconds = 0;
  ResourceBusy busy;
  // Bytes one rank moves per AllToAll op.
  double intra_node_bytes = 0;
  double inter_node_bytes = 0;
  // The resource that sets a pipeline's steady-state interval (a name as
  // ResourceBusy::Bottleneck gives); null when the schedule is not
  // pipelined, and the summed busy time names the bottleneck instead.
  const char* steady_state_bottleneck = nullptr;
};

class CostModel {
 public:
  // `traffic` and `cluster` must outlive the model. contention_factor is
  // gamma >= 1 for the pipelined steady state. expert_compute_seconds is the
  // expert FFN forward per layer per rank (0 = unknown).
  CostModel(const Traffic& traffic, const ClusterView& cluster,
            double contention_factor, BackwardSchedule backward,
            double expert_compute_seconds,
            PipelineResources pipeline = PipelineResources::kCopySharesGpu);

  // Schedules (docs/MODEL.md §4). `flags` (nullable) collects extrapolation.
  StrategyTime Flat(ExtrapolationFlags* flags) const;
  StrategyTime TpDedup(ExtrapolationFlags* flags) const;
  StrategyTime TpDedupPipelined(int chunks, ExtrapolationFlags* flags) const;
  StrategyTime Hierarchical(ExtrapolationFlags* flags) const;
  StrategyTime ExpertOverlap(int chunks, ExtrapolationFlags* flags) const;

  // Building blocks. AllToAll of `bytes` per rank over a group of `group`
  // ranks, `members_on_node` of them on the rank's node.
  Stage AllToAll(double bytes, int group, int members_on_node,
                 ExtrapolationFlags* flags) const;
  // AllGather over the TP group; `input_bytes` per rank in, t times out.
  Stage AllGather(double input_bytes, ExtrapolationFlags* flags) const;
  Stage Copy(double bytes, ExtrapolationFlags* flags) const;

 private:
  // A pipeline's steady-state interval tau and the resource that sets it.
  struct SteadyStateInterval {
    double seconds;
    const char* name;
  };
  SteadyStateInterval SteadyState(const Stage& a, const Stage& g,
                                  const Stage& c) const;

  // Forward and backward of one dedup op split into `chunks`.
  StrategyTime Dedup(int chunks, bool pipelined,
                     ExtrapolationFlags* flags) const;

  const Traffic& traffic_;
  const ClusterView& cluster_;
  double gamma_;  // contention factor >= 1
  BackwardSchedule backward_;
  double expert_compute_seconds_;
  PipelineResources pipeline_;
};

// Launch latency of an AllToAll over `group` ranks read from `curve`: its
// alpha moved by the per-peer latency from the curve's rank count to the
// group, floored at a quarter of the alpha (fewer peers cannot make a launch
// free). A function of the op's group and the curve only.
double AllToAllLatencySeconds(const BandwidthCurve& curve, int group,
                              double per_peer_seconds);

// Chunks a split really yields: n rows cut into pieces of ceil(n/K) rows give
// ceil(n / ceil(n/K)) pieces (n=6, K=4 gives 3). K is clamped to [1, n].
int EffectiveChunks(int64_t rows, int requested);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_COST_MODEL_H_
