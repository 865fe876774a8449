// Predicted times of the AllToAll schedules for one job on one cluster view
// (docs/MODEL.md §3-4). Pure arithmetic: no search, no I/O.

#ifndef MONTA_SERVER_MODEL_COST_MODEL_H_
#define MONTA_SERVER_MODEL_COST_MODEL_H_

#include <cstdint>

#include "common/schedule/schedule.h"
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
  // Groups the per-peer latency was sourced on (0 = unknown): groups outside
  // it extrapolate the latency law, and the decision says so.
  schedule::LatencySourceRange alltoall_latency_source;
  ModelCalibration calibration;
  // The fabric tree above the nodes (docs/MODEL.md §12): seconds the
  // slowest uplink needs per byte each rank sends in one AllToAll over its
  // EP group, every EP group at once (FabricPrice::seconds_per_rank_byte).
  // An AllToAll that leaves the node takes at least that times its bytes.
  // 0 = no fabric priced (node and pair curves alone, as before).
  double uplink_seconds_per_rank_byte = 0;
  // The same for a pipeline's steady state (docs/MODEL.md §12): seconds per
  // byte each rank sends that the slowest uplink needs at its declared
  // capacity. A level measurement times one AllToAll alone (its ramp and
  // tail on the shared uplink included); back to back, a pipeline's chunks
  // keep the uplink busy, so chunks after the first move at the capacity.
  // 0 = nothing declared: the steady state pays uplink_seconds_per_rank_byte.
  double uplink_steady_seconds_per_rank_byte = 0;
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

// Which pipeline stages share a resource (docs/MODEL.md §8.3, an open
// question for measurement). kCopySharesGpu (the default, conservative): the
// reorder copy contends with the AllToAll's NVLink share and the AllGather
// on the GPU (SMs, copy engines, HBM). kCopySeparate: the copy hides behind
// the AllGather and bounds the steady state only on its own.
enum class PipelineResources { kCopySharesGpu, kCopySeparate };

// Busy time per resource; used for the pipeline's steady state and to name
// the bottleneck.
struct ResourceBusy {
  // The network: the slower of the node's own link (the inter-node curve)
  // and the fabric's slowest uplink, per AllToAll (docs/MODEL.md §12); both
  // parts are kept to say which level bounds the network.
  double network_seconds = 0;
  double node_link_seconds = 0;
  double uplink_seconds = 0;
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
  // An AllToAll's network time in a pipeline's steady state: busy's
  // network_seconds with the uplink at its steady price
  // (ClusterView::uplink_steady_seconds_per_rank_byte); equal to it when no
  // steady price is known.
  double steady_network_seconds = 0;
};

// The four communication ops of one MoE layer, in the order they run:
// dispatch and combine forward, then the combine's gradient and the
// dispatch's (docs/MODEL.md §4).
struct LayerOps {
  double dispatch_forward_seconds = 0;
  double combine_forward_seconds = 0;
  double combine_backward_seconds = 0;
  double dispatch_backward_seconds = 0;
};

// Per MoE layer (forward = dispatch + combine; backward = their gradients).
struct StrategyTime {
  double forward_seconds = 0;
  double backward_seconds = 0;
  double total_seconds() const { return forward_seconds + backward_seconds; }
  LayerOps ops;
  // Collectives per layer, forward and backward: the MoE AllToAll ops (each
  // counted once however it runs: a pipeline's chunks, hierarchical's two
  // phases) and the TP AllGathers that restore dropped duplicates.
  int alltoalls_per_layer = 0;
  int allgathers_per_layer = 0;
  // The part of forward + backward that the chunk count changes (the ops
  // cut into chunks); the chunk search's tolerance is taken on it.
  double chunked_seconds = 0;
  ResourceBusy busy;
  // Bytes one rank moves per AllToAll op (the AllGather that restores its
  // duplicates included), the mean over the layer's four ops.
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
  // gamma >= 1 for the pipelined steady state. `layout` decides what each
  // op's backward runs (docs/MODEL.md §4). expert_compute_seconds is the
  // expert FFN forward per layer per rank (0 = unknown).
  CostModel(const Traffic& traffic, const ClusterView& cluster,
            double contention_factor, ExpertLayout layout,
            double expert_compute_seconds,
            PipelineResources pipeline = PipelineResources::kCopySharesGpu);

  // Schedules (docs/MODEL.md §4): one MoE layer, forward and backward, in
  // the model's expert layout. `flags` (nullable) collects extrapolation.
  StrategyTime Flat(ExtrapolationFlags* flags) const;
  StrategyTime TpDedup(ExtrapolationFlags* flags) const;
  StrategyTime TpDedupPipelined(int chunks, ExtrapolationFlags* flags) const;
  StrategyTime Hierarchical(ExtrapolationFlags* flags) const;
  StrategyTime ExpertOverlap(int chunks, ExtrapolationFlags* flags) const;

  // The chunk bound (docs/MODEL.md §5): a chunk of a chunked schedule must
  // take at least kChunkLaunchFloorMultiple times the fixed cost of a chunk:
  // the launch floor (BandwidthCurve::launch_floor_seconds) of the curve its
  // AllToAll launch reads, the inter-node one when the EP group leaves the
  // node, and for tp_dedup_pipelined the calibration's per-chunk overhead,
  // which every one of its chunks pays on top (§11). Below it, a fixed cost
  // the sweep or the calibration measured but the curve's line does not
  // price is more than 36% of every chunk. The floor, the pipeline's fixed
  // cost per chunk, and whether one chunk of a tp_dedup_pipelined
  // (expert_overlap) split into `chunks` keeps above it.
  static constexpr double kChunkLaunchFloorMultiple = 2.75;
  double ChunkLaunchFloorSeconds() const;
  double PipelineChunkFixedSeconds() const;
  bool PipelineChunkResolved(int chunks) const;
  bool OverlapChunkResolved(int chunks) const;

  // Building blocks. AllToAll of `bytes` per rank over a group of `group`
  // ranks, `members_on_node` of them on the rank's node.
  Stage AllToAll(double bytes, int group, int members_on_node,
                 ExtrapolationFlags* flags) const;
  // AllGather over the TP group; `input_bytes` per rank in, t times out.
  Stage AllGather(double input_bytes, ExtrapolationFlags* flags) const;
  Stage Copy(double bytes, ExtrapolationFlags* flags) const;

 private:
  // Whether an AllToAll of `bytes` per rank over the EP group takes at least
  // kChunkLaunchFloorMultiple times `fixed_seconds`.
  bool ChunkResolved(double bytes, double fixed_seconds) const;

  // A pipeline's steady-state interval tau and the resource that sets it.
  struct SteadyStateInterval {
    double seconds;
    const char* name;
  };
  SteadyStateInterval SteadyState(const Stage& a, const Stage& g,
                                  const Stage& c) const;

  // One MoE communication op: its time, the resources it keeps busy, the
  // collectives it runs and the bytes it moves per rank.
  struct Op {
    double seconds = 0;
    ResourceBusy busy;
    int allgathers = 0;
    bool chunked = false;  // the chunk count changes it
    const char* steady_state = nullptr;
    double intra_node_bytes = 0;
    double inter_node_bytes = 0;
  };
  // An AllToAll of `bytes` per rank over the EP group; `dropped`: its input
  // had the TP duplicates dropped (a calibrated per-chunk cost, one chunk).
  Op PlainOp(double bytes, bool dropped, ExtrapolationFlags* flags) const;
  // drop -> AllToAll(D/t) -> AllGather -> reorder copy, in `chunks`,
  // pipelined or one after another.
  Op GatheredOp(int chunks, bool pipelined, ExtrapolationFlags* flags) const;
  // Hierarchical AllToAll of `bytes`: intra-node, layout copy, inter-node.
  Op HierarchicalOp(double bytes, ExtrapolationFlags* flags) const;
  // `op` followed by the AllGather and copy that restore dropped duplicates.
  Op WithGather(Op op, ExtrapolationFlags* flags) const;
  // A layer whose four ops are `op` (each op's backward is itself).
  StrategyTime Mirrored(const Op& op) const;
  // A layer of DeepSpeed's layout for whole experts: dispatch forward and
  // combine backward run `plain`, combine forward and dispatch backward
  // `gathered`.
  StrategyTime Split(const Op& plain, const Op& gathered) const;
  StrategyTime Layer(const Op& dispatch_forward, const Op& combine_forward,
                     const Op& combine_backward,
                     const Op& dispatch_backward) const;
  // Whether every schedule of this layer drops the TP duplicates (experts
  // not tensor-parallel, DeepSpeed's drop_tokens) and gathers them once per
  // direction.
  bool DropsEverywhere() const;

  const Traffic& traffic_;
  const ClusterView& cluster_;
  double gamma_;  // contention factor >= 1
  ExpertLayout layout_;
  double expert_compute_seconds_;
  PipelineResources pipeline_;
};

// Launch latency of an AllToAll over `group` ranks read from `curve`: its
// alpha moved by the per-peer latency from the curve's rank count to the
// group (schedule::LatencyForGroupSeconds). A function of the op's group and
// the curve only.
double AllToAllLatencySeconds(const BandwidthCurve& curve, int group,
                              double per_peer_seconds);

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_COST_MODEL_H_
