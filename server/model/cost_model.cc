#include "server/model/cost_model.h"

#include <algorithm>
#include <initializer_list>

#include "common/schedule/schedule.h"

namespace monta::model {
namespace {

// Seconds for `link_bytes` on the curve's link, evaluated at the curve size
// whose per-peer message equals ours (message_bytes / group per peer).
double LinkSeconds(const BandwidthCurve& curve, double link_bytes,
                   double message_bytes, int group, bool* extrapolated) {
  if (link_bytes <= 0) return 0;
  const double curve_bytes = message_bytes * curve.nranks() / group;
  const LinkRate rate = curve.LinkRateAt(curve_bytes);
  if (rate.extrapolated && extrapolated != nullptr) *extrapolated = true;
  return rate.bytes_per_second > 0 ? link_bytes / rate.bytes_per_second : 0;
}

// One resource a pipeline stage occupies, with the name the bottleneck
// label uses.
struct Resource {
  double seconds;
  const char* name;
};

// The resource with the longest occupation; the first wins ties.
Resource Slowest(std::initializer_list<Resource> resources) {
  Resource best{0, "none"};
  for (const Resource& r : resources) {
    if (r.seconds > best.seconds) best = r;
  }
  return best;
}

}  // namespace

double AllToAllLatencySeconds(const BandwidthCurve& curve, int group,
                              double per_peer_seconds) {
  return schedule::LatencyForGroupSeconds(curve.alpha_seconds(), curve.nranks(),
                                          group, per_peer_seconds);
}

void ExtrapolationFlags::Merge(const ExtrapolationFlags& o) {
  alltoall_intra |= o.alltoall_intra;
  alltoall_inter |= o.alltoall_inter;
  allgather_intra |= o.allgather_intra;
  copy |= o.copy;
}

void ResourceBusy::Add(const ResourceBusy& o, double times) {
  network_seconds += o.network_seconds * times;
  node_link_seconds += o.node_link_seconds * times;
  uplink_seconds += o.uplink_seconds * times;
  nvlink_seconds += o.nvlink_seconds * times;
  copy_seconds += o.copy_seconds * times;
  launch_seconds += o.launch_seconds * times;
  compute_seconds += o.compute_seconds * times;
}

const char* ResourceBusy::Bottleneck() const {
  const char* name = "network";
  double best = network_seconds;
  auto consider = [&](double v, const char* n) {
    if (v > best) {
      best = v;
      name = n;
    }
  };
  consider(nvlink_seconds, "nvlink");
  consider(copy_seconds, "copy");
  consider(launch_seconds, "launch_latency");
  consider(compute_seconds, "compute");
  return best > 0 ? name : "none";
}

CostModel::CostModel(const Traffic& traffic, const ClusterView& cluster,
                     double contention_factor, ExpertLayout layout,
                     double expert_compute_seconds, PipelineResources pipeline)
    : traffic_(traffic),
      cluster_(cluster),
      gamma_(std::max(1.0, contention_factor)),
      layout_(layout),
      expert_compute_seconds_(std::max(0.0, expert_compute_seconds)),
      pipeline_(pipeline) {}

Stage CostModel::AllToAll(double bytes, int group, int members_on_node,
                          ExtrapolationFlags* flags) const {
  Stage s;
  if (group <= 1 || bytes <= 0) return s;  // nothing leaves the rank
  const double inter_bytes = bytes * (group - members_on_node) / group;
  const double intra_bytes = bytes * (members_on_node - 1) / group;
  bool inter_x = false;
  bool intra_x = false;
  s.busy.node_link_seconds =
      cluster_.calibration.network_scale *
      LinkSeconds(cluster_.alltoall_inter, inter_bytes, bytes, group, &inter_x);
  // The fabric's uplinks (docs/MODEL.md §12): an AllToAll over the EP group,
  // or hierarchical's network phase over the same group's nodes, sends the
  // same bytes across each rack as the flat one.
  if (inter_bytes > 0) {
    s.busy.uplink_seconds = cluster_.calibration.network_scale *
                            cluster_.uplink_seconds_per_rank_byte * bytes;
  }
  s.busy.network_seconds =
      std::max(s.busy.node_link_seconds, s.busy.uplink_seconds);
  // Back to back in a pipeline, chunks move through the uplink at its
  // declared capacity, never slower than one AllToAll alone (§12).
  s.steady_network_seconds = s.busy.network_seconds;
  if (inter_bytes > 0 && cluster_.uplink_steady_seconds_per_rank_byte > 0) {
    const double steady_uplink =
        cluster_.calibration.network_scale *
        std::min(cluster_.uplink_steady_seconds_per_rank_byte,
                 cluster_.uplink_seconds_per_rank_byte) *
        bytes;
    s.steady_network_seconds =
        std::max(s.busy.node_link_seconds, steady_uplink);
  }
  s.busy.nvlink_seconds =
      cluster_.calibration.local_scale *
      LinkSeconds(cluster_.alltoall_intra, intra_bytes, bytes, group, &intra_x);
  // The launch pays the latency of the slowest path involved.
  const BandwidthCurve& latency_curve =
      inter_bytes > 0 ? cluster_.alltoall_inter : cluster_.alltoall_intra;
  s.busy.launch_seconds =
      cluster_.calibration.latency_scale *
      AllToAllLatencySeconds(latency_curve, group,
                             cluster_.alltoall_per_peer_latency_seconds);
  s.seconds = s.busy.launch_seconds +
              std::max(s.busy.network_seconds, s.busy.nvlink_seconds);
  if (flags != nullptr) {
    flags->alltoall_inter |= inter_x;
    flags->alltoall_intra |= intra_x;
  }
  return s;
}

double CostModel::ChunkLaunchFloorSeconds() const {
  const bool leaves_node = traffic_.ep_group_size > traffic_.ep_members_on_node;
  return (leaves_node ? cluster_.alltoall_inter : cluster_.alltoall_intra)
      .launch_floor_seconds();
}

double CostModel::PipelineChunkFixedSeconds() const {
  // GatheredOp charges every chunk the calibrated overhead on top of its
  // stages (0 uncalibrated): a fixed cost per chunk like the launch's.
  return ChunkLaunchFloorSeconds() +
         cluster_.calibration.per_chunk_overhead_seconds;
}

bool CostModel::ChunkResolved(double bytes, double fixed_seconds) const {
  const Stage a = AllToAll(bytes, traffic_.ep_group_size,
                           traffic_.ep_members_on_node, nullptr);
  return a.seconds >= kChunkLaunchFloorMultiple * fixed_seconds;
}

bool CostModel::PipelineChunkResolved(int chunks) const {
  // GatheredOp's chunk: D / (t K) per rank.
  const double t = std::max(1, traffic_.tensor_parallel_size);
  return ChunkResolved(traffic_.dispatch_bytes / (t * std::max(1, chunks)),
                       PipelineChunkFixedSeconds());
}

bool CostModel::OverlapChunkResolved(int chunks) const {
  // ExpertOverlap's chunk: the op's bytes / K (its chunks pay no calibrated
  // overhead: ExpertOverlap charges none).
  const double bytes =
      traffic_.dispatch_bytes /
      (DropsEverywhere() ? std::max(1, traffic_.tensor_parallel_size) : 1);
  return ChunkResolved(bytes / std::max(1, chunks), ChunkLaunchFloorSeconds());
}

Stage CostModel::AllGather(double input_bytes,
                           ExtrapolationFlags* flags) const {
  Stage s;
  const int t = traffic_.tensor_parallel_size;
  if (t <= 1 || input_bytes <= 0) return s;
  const BandwidthCurve& c = cluster_.allgather_intra;
  bool x = false;
  // nccl-tests sizes an AllGather by its output; per peer that is our input.
  s.busy.nvlink_seconds =
      cluster_.calibration.local_scale *
      LinkSeconds(c, (t - 1) * input_bytes, input_bytes * t, t, &x);
  s.busy.launch_seconds =
      cluster_.calibration.latency_scale * c.alpha_seconds();
  s.seconds = s.busy.launch_seconds + s.busy.nvlink_seconds;
  if (flags != nullptr) flags->allgather_intra |= x;
  return s;
}

Stage CostModel::Copy(double bytes, ExtrapolationFlags* flags) const {
  Stage s;
  if (bytes <= 0) return s;
  const BandwidthCurve& c = cluster_.copy;
  bool x = false;
  s.busy.copy_seconds = cluster_.calibration.local_scale *
                        LinkSeconds(c, bytes, bytes, c.nranks(), &x);
  s.busy.launch_seconds =
      cluster_.calibration.latency_scale * c.alpha_seconds();
  s.seconds = s.busy.launch_seconds + s.busy.copy_seconds;
  if (flags != nullptr) flags->copy |= x;
  return s;
}

bool CostModel::DropsEverywhere() const {
  return layout_ == ExpertLayout::kNotTensorParallel && traffic_.tp_duplicates;
}

CostModel::Op CostModel::PlainOp(double bytes, bool dropped,
                                 ExtrapolationFlags* flags) const {
  const Stage a = AllToAll(bytes, traffic_.ep_group_size,
                           traffic_.ep_members_on_node, flags);
  Op op;
  // A calibrated fixed cost per chunk of a dropped op (docs/MODEL.md §11).
  op.seconds = a.seconds +
               (dropped ? cluster_.calibration.per_chunk_overhead_seconds : 0);
  op.busy = a.busy;
  op.intra_node_bytes = bytes * traffic_.intra_node_share;
  op.inter_node_bytes = bytes * traffic_.inter_node_share;
  return op;
}

CostModel::Op CostModel::GatheredOp(int chunks, bool pipelined,
                                    ExtrapolationFlags* flags) const {
  const int t = traffic_.tensor_parallel_size;
  const double d = traffic_.dispatch_bytes;
  const int k = std::max(1, chunks);
  const double x = d / (static_cast<double>(t) * k);  // chunk per rank
  const Stage a =
      AllToAll(x, traffic_.ep_group_size, traffic_.ep_members_on_node, flags);
  const Stage g = AllGather(x, flags);
  // Gathered chunks arrive as [t, rows] and must be reordered along the
  // capacity axis (torch.cat in DeepSpeed's gather_tokens), so the
  // unpipelined schedule pays the copy too and S2(K=1) equals S1.
  const Stage c = Copy(t * x, flags);
  Op op;
  // A calibrated fixed cost per chunk (docs/MODEL.md §11): what a chunk costs
  // beyond the curves' latencies (synchronisation, host-side work).
  op.seconds = a.seconds + g.seconds + c.seconds +
               k * cluster_.calibration.per_chunk_overhead_seconds;
  if (pipelined && k > 1) {
    const SteadyStateInterval tau = SteadyState(a, g, c);
    op.seconds += (k - 1) * tau.seconds;
    op.steady_state = tau.name;
  }
  op.chunked = pipelined;
  op.allgathers = 1;
  op.busy.Add(a.busy, k);
  op.busy.Add(g.busy, k);
  op.busy.Add(c.busy, k);
  const double sent = d / t;
  op.intra_node_bytes = sent * traffic_.intra_node_share + (t - 1) * sent;
  op.inter_node_bytes = sent * traffic_.inter_node_share;
  return op;
}

CostModel::Op CostModel::HierarchicalOp(double bytes,
                                        ExtrapolationFlags* flags) const {
  const int e = traffic_.ep_group_size;
  const int ns = traffic_.ep_members_on_node;
  // Phase 1 regroups by destination node inside the node; phase 2 sends each
  // node's bundle to the same-local-rank peer there (DeepSpeed-MoE, Tutel
  // 2DH): fewer, n_s-times larger messages over the network.
  const Stage intra = AllToAll(bytes, ns, ns, flags);
  const Stage layout = Copy(bytes, flags);
  const Stage inter = AllToAll(bytes, e / std::max(1, ns), 1, flags);
  Op op;
  op.seconds = intra.seconds + layout.seconds + inter.seconds;
  op.busy.Add(intra.busy);
  op.busy.Add(layout.busy);
  op.busy.Add(inter.busy);
  op.intra_node_bytes = ns > 1 ? bytes * (ns - 1) / ns : 0;
  op.inter_node_bytes = bytes * traffic_.inter_node_share;
  return op;
}

CostModel::Op CostModel::WithGather(Op op, ExtrapolationFlags* flags) const {
  const int t = traffic_.tensor_parallel_size;
  const double sent = traffic_.dispatch_bytes / t;
  const Stage g = AllGather(sent, flags);
  const Stage c = Copy(traffic_.dispatch_bytes, flags);
  op.seconds += g.seconds + c.seconds;
  op.busy.Add(g.busy);
  op.busy.Add(c.busy);
  op.allgathers += 1;
  op.intra_node_bytes += (t - 1) * sent;
  return op;
}

StrategyTime CostModel::Layer(const Op& dispatch_forward,
                              const Op& combine_forward,
                              const Op& combine_backward,
                              const Op& dispatch_backward) const {
  StrategyTime st;
  st.ops = {dispatch_forward.seconds, combine_forward.seconds,
            combine_backward.seconds, dispatch_backward.seconds};
  st.forward_seconds = dispatch_forward.seconds + combine_forward.seconds;
  st.backward_seconds = combine_backward.seconds + dispatch_backward.seconds;
  for (const Op* op : {&dispatch_forward, &combine_forward, &combine_backward,
                       &dispatch_backward}) {
    st.alltoalls_per_layer += 1;
    st.allgathers_per_layer += op->allgathers;
    if (op->chunked) st.chunked_seconds += op->seconds;
    st.busy.Add(op->busy);
    st.intra_node_bytes += op->intra_node_bytes / 4;
    st.inter_node_bytes += op->inter_node_bytes / 4;
    if (op->steady_state != nullptr) {
      st.steady_state_bottleneck = op->steady_state;
    }
  }
  return st;
}

StrategyTime CostModel::Mirrored(const Op& op) const {
  return Layer(op, op, op, op);
}

// DeepSpeed's MOELayer for experts that are not tensor-parallel: dispatch =
// drop -> AllToAll, combine = AllToAll -> gather; autograd runs the gradient
// of gather (a slice) before the combine's AllToAll and the gradient of drop
// (a gather) after the dispatch's (docs/MODEL.md §4).
StrategyTime CostModel::Split(const Op& plain, const Op& gathered) const {
  return Layer(plain, gathered, plain, gathered);
}

StrategyTime CostModel::Flat(ExtrapolationFlags* flags) const {
  if (!DropsEverywhere()) {
    // Every TP rank sends its whole copy (the paper's baseline; DeepSpeed
    // before v0.14.5 for tensor-parallel experts).
    return Mirrored(PlainOp(traffic_.dispatch_bytes, false, flags));
  }
  // What DeepSpeed runs for whole experts: it always drops duplicates.
  return TpDedup(flags);
}

StrategyTime CostModel::TpDedup(ExtrapolationFlags* flags) const {
  return TpDedupPipelined(1, flags);
}

StrategyTime CostModel::TpDedupPipelined(int chunks,
                                         ExtrapolationFlags* flags) const {
  const Op gathered = GatheredOp(chunks, /*pipelined=*/true, flags);
  if (layout_ == ExpertLayout::kTensorParallel) {
    // Each op is its own adjoint: the backward gathers and pipelines too.
    return Mirrored(gathered);
  }
  const int t = traffic_.tensor_parallel_size;
  return Split(PlainOp(traffic_.dispatch_bytes / t, true, flags), gathered);
}

// A stage cannot repeat faster than itself, nor faster than a resource it
// shares with the other stages can serve them all. The network carries the
// AllToAll's inter-node share; the GPU (SMs, copy engines, HBM) drives its
// NVLink share and the AllGather, and under kCopySharesGpu the reorder copy
// too (docs/MODEL.md §4, deviation 3 in §8). Inside one node every stage then
// lands on the GPU, so the pipeline cannot beat S1 there.
CostModel::SteadyStateInterval CostModel::SteadyState(const Stage& a,
                                                      const Stage& g,
                                                      const Stage& c) const {
  const bool has_network = a.busy.network_seconds > 0;
  const bool copy_shares = pipeline_ == PipelineResources::kCopySharesGpu;
  // The interval when the AllToAll's network part takes `net` and each
  // launch `launch`.
  auto interval = [&](double net, double launch) -> SteadyStateInterval {
    const double network = has_network ? net + launch : 0;
    const double device = a.busy.nvlink_seconds + g.seconds +
                          (copy_shares ? c.seconds : 0) +
                          (has_network ? 0 : launch);
    // The AllToAll stage alone is bound by whatever dominates it.
    const Resource a2a = Slowest({{net, "network"},
                                  {a.busy.nvlink_seconds, "nvlink"},
                                  {launch, "launch_latency"}});
    // Order matters for ties: shared resources before single stages.
    const Resource slowest =
        Slowest({{network, "network"},
                 {device, "nvlink"},
                 {launch + std::max(net, a.busy.nvlink_seconds), a2a.name},
                 {g.seconds, "nvlink"},
                 {c.seconds, "copy"}});
    return {gamma_ * slowest.seconds, slowest.name};
  };
  const SteadyStateInterval lone =
      interval(a.busy.network_seconds, a.busy.launch_seconds);
  if (a.steady_network_seconds >= a.busy.network_seconds) return lone;
  // Under a priced uplink with a declared capacity (docs/MODEL.md §12):
  // back to back, a chunk moves its bytes at the declared capacity and pays
  // its launch as the sweep measured it (the curve's launch floor, which the
  // measured uplink rate carried and the declared one does not); never
  // slower than chunks priced alone.
  const SteadyStateInterval steady =
      interval(a.steady_network_seconds,
               std::max(a.busy.launch_seconds, ChunkLaunchFloorSeconds()));
  return steady.seconds < lone.seconds ? steady : lone;
}

StrategyTime CostModel::Hierarchical(ExtrapolationFlags* flags) const {
  if (!DropsEverywhere()) {
    return Mirrored(HierarchicalOp(traffic_.dispatch_bytes, flags));
  }
  // Whole experts: every op moves the dropped D/t, and the combine (and the
  // dispatch's gradient) gathers the duplicates back.
  const Op hier = HierarchicalOp(
      traffic_.dispatch_bytes / traffic_.tensor_parallel_size, flags);
  return Split(hier, WithGather(hier, flags));
}

StrategyTime CostModel::ExpertOverlap(int chunks,
                                      ExtrapolationFlags* flags) const {
  const int k = std::max(1, chunks);
  const bool drops = DropsEverywhere();
  const double bytes =
      traffic_.dispatch_bytes / (drops ? traffic_.tensor_parallel_size : 1);
  const Stage a = AllToAll(bytes / k, traffic_.ep_group_size,
                           traffic_.ep_members_on_node, flags);
  // Dispatch of chunk i+1, experts on chunk i, combine of chunk i-1 (Tutel).
  // Dispatch and combine share the links, so they bound the steady state
  // together; the reported time is the communication left exposed, half to
  // each of the two ops it overlaps.
  auto exposed = [&](double compute_seconds) {
    const double per_chunk = compute_seconds / k;
    const double tau = gamma_ * std::max(2 * a.seconds, per_chunk);
    const double total = 2 * a.seconds + per_chunk + (k - 1) * tau;
    return std::max(0.0, total - compute_seconds);
  };
  Op forward;
  forward.seconds = exposed(expert_compute_seconds_) / 2;
  forward.chunked = true;
  forward.busy.Add(a.busy, k);
  forward.intra_node_bytes = bytes * traffic_.intra_node_share;
  forward.inter_node_bytes = bytes * traffic_.inter_node_share;
  // Backward computes input and weight gradients: about twice the forward.
  Op backward = forward;
  backward.seconds = exposed(2 * expert_compute_seconds_) / 2;
  StrategyTime st = drops ? Layer(forward, WithGather(forward, flags), backward,
                                  WithGather(backward, flags))
                          : Layer(forward, forward, backward, backward);
  // The gathers are not cut into chunks: only the exposed part changes.
  st.chunked_seconds = forward.seconds * 2 + backward.seconds * 2;
  st.busy.compute_seconds = 3 * expert_compute_seconds_;
  return st;
}

}  // namespace monta::model
