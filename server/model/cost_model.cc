#include "server/model/cost_model.h"

#include <algorithm>
#include <initializer_list>

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
  const double a =
      curve.alpha_seconds() + per_peer_seconds * (group - curve.nranks());
  return std::max(a, 0.25 * curve.alpha_seconds());
}

void ExtrapolationFlags::Merge(const ExtrapolationFlags& o) {
  alltoall_intra |= o.alltoall_intra;
  alltoall_inter |= o.alltoall_inter;
  allgather_intra |= o.allgather_intra;
  copy |= o.copy;
}

void ResourceBusy::Add(const ResourceBusy& o, double times) {
  network_seconds += o.network_seconds * times;
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

int EffectiveChunks(int64_t rows, int requested) {
  if (rows < 1) return 1;
  const int64_t k = std::clamp<int64_t>(requested, 1, rows);
  const int64_t rows_per_chunk = (rows + k - 1) / k;
  return static_cast<int>((rows + rows_per_chunk - 1) / rows_per_chunk);
}

CostModel::CostModel(const Traffic& traffic, const ClusterView& cluster,
                     double contention_factor, BackwardSchedule backward,
                     double expert_compute_seconds, PipelineResources pipeline)
    : traffic_(traffic),
      cluster_(cluster),
      gamma_(std::max(1.0, contention_factor)),
      backward_(backward),
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
  s.busy.network_seconds =
      cluster_.calibration.network_scale *
      LinkSeconds(cluster_.alltoall_inter, inter_bytes, bytes, group, &inter_x);
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

StrategyTime CostModel::Flat(ExtrapolationFlags* flags) const {
  const Stage a = AllToAll(traffic_.dispatch_bytes, traffic_.ep_group_size,
                           traffic_.ep_members_on_node, flags);
  StrategyTime st;
  // Dispatch and combine forward; their two gradients backward.
  st.forward_seconds = 2 * a.seconds;
  st.backward_seconds = 2 * a.seconds;
  st.busy.Add(a.busy, 4);
  st.intra_node_bytes = traffic_.dispatch_bytes * traffic_.intra_node_share;
  st.inter_node_bytes = traffic_.dispatch_bytes * traffic_.inter_node_share;
  return st;
}

StrategyTime CostModel::TpDedup(ExtrapolationFlags* flags) const {
  return Dedup(1, false, flags);
}

StrategyTime CostModel::TpDedupPipelined(int chunks,
                                         ExtrapolationFlags* flags) const {
  return Dedup(chunks, true, flags);
}

StrategyTime CostModel::Dedup(int chunks, bool pipelined,
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

  // A calibrated fixed cost per chunk (docs/MODEL.md §11): what a chunk costs
  // beyond the curves' latencies (synchronisation, host-side work).
  const double per_chunk = cluster_.calibration.per_chunk_overhead_seconds;
  double forward_op = a.seconds + g.seconds + c.seconds + k * per_chunk;
  const char* steady_state_bottleneck = nullptr;
  if (pipelined && k > 1) {
    const SteadyStateInterval tau = SteadyState(a, g, c);
    forward_op += (k - 1) * tau.seconds;
    steady_state_bottleneck = tau.name;
  }
  // Slice-only backward (docs/MODEL.md §8.1) has no gather to hide, so it
  // runs one AllToAll of D/t whatever K is: chunking it would only add K
  // latencies, so forward alone decides K.
  const bool slice_only = backward_ == BackwardSchedule::kSliceOnly;
  const Stage whole = k == 1 || !slice_only
                          ? a
                          : AllToAll(d / t, traffic_.ep_group_size,
                                     traffic_.ep_members_on_node, flags);
  const double backward_op =
      slice_only ? whole.seconds + per_chunk
                 : k * (a.seconds + g.seconds + c.seconds + per_chunk);

  StrategyTime st;
  st.forward_seconds = 2 * forward_op;
  st.backward_seconds = 2 * backward_op;
  // Two forward ops of k chunks; two backward ops of one AllToAll of D/t
  // (slice-only) or of k chunks (autograd).
  st.busy.Add(a.busy, 2.0 * k);
  if (slice_only) {
    st.busy.Add(whole.busy, 2.0);
  } else {
    st.busy.Add(a.busy, 2.0 * k);
  }
  const double gc_ops = slice_only ? 2.0 : 4.0;
  st.busy.Add(g.busy, gc_ops * k);
  st.busy.Add(c.busy, gc_ops * k);
  const double sent = d / t;
  st.intra_node_bytes = sent * traffic_.intra_node_share + (t - 1) * sent;
  st.inter_node_bytes = sent * traffic_.inter_node_share;
  st.steady_state_bottleneck = steady_state_bottleneck;
  return st;
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
  const double network =
      has_network ? a.busy.network_seconds + a.busy.launch_seconds : 0;
  const bool copy_shares = pipeline_ == PipelineResources::kCopySharesGpu;
  const double device = a.busy.nvlink_seconds + g.seconds +
                        (copy_shares ? c.seconds : 0) +
                        (has_network ? 0 : a.busy.launch_seconds);
  // The AllToAll stage alone is bound by whatever dominates it.
  const Resource a2a = Slowest({{a.busy.network_seconds, "network"},
                                {a.busy.nvlink_seconds, "nvlink"},
                                {a.busy.launch_seconds, "launch_latency"}});
  // Order matters for ties: shared resources before single stages.
  const Resource slowest = Slowest({{network, "network"},
                                    {device, "nvlink"},
                                    {a.seconds, a2a.name},
                                    {g.seconds, "nvlink"},
                                    {c.seconds, "copy"}});
  return {gamma_ * slowest.seconds, slowest.name};
}

StrategyTime CostModel::Hierarchical(ExtrapolationFlags* flags) const {
  const double d = traffic_.dispatch_bytes;
  const int e = traffic_.ep_group_size;
  const int ns = traffic_.ep_members_on_node;
  // Phase 1 regroups by destination node inside the node; phase 2 sends each
  // node's bundle to the same-local-rank peer there (DeepSpeed-MoE, Tutel
  // 2DH): fewer, n_s-times larger messages over the network.
  const Stage intra = AllToAll(d, ns, ns, flags);
  const Stage layout = Copy(d, flags);
  const Stage inter = AllToAll(d, e / std::max(1, ns), 1, flags);
  const double op = intra.seconds + layout.seconds + inter.seconds;
  StrategyTime st;
  st.forward_seconds = 2 * op;
  st.backward_seconds = 2 * op;
  st.busy.Add(intra.busy, 4);
  st.busy.Add(layout.busy, 4);
  st.busy.Add(inter.busy, 4);
  st.intra_node_bytes = ns > 1 ? d * (ns - 1) / ns : 0;
  st.inter_node_bytes = d * traffic_.inter_node_share;
  return st;
}

StrategyTime CostModel::ExpertOverlap(int chunks,
                                      ExtrapolationFlags* flags) const {
  const int k = std::max(1, chunks);
  const Stage a = AllToAll(traffic_.dispatch_bytes / k, traffic_.ep_group_size,
                           traffic_.ep_members_on_node, flags);
  // Dispatch of chunk i+1, experts on chunk i, combine of chunk i-1 (Tutel).
  // Dispatch and combine share the links, so they bound the steady state
  // together; the reported time is the communication left exposed.
  auto exposed = [&](double compute_seconds) {
    const double per_chunk = compute_seconds / k;
    const double tau = gamma_ * std::max(2 * a.seconds, per_chunk);
    const double total = 2 * a.seconds + per_chunk + (k - 1) * tau;
    return std::max(0.0, total - compute_seconds);
  };
  StrategyTime st;
  st.forward_seconds = exposed(expert_compute_seconds_);
  // Backward computes input and weight gradients: about twice the forward.
  st.backward_seconds = exposed(2 * expert_compute_seconds_);
  st.busy.Add(a.busy, 4.0 * k);
  st.busy.compute_seconds = 3 * expert_compute_seconds_;
  st.intra_node_bytes = traffic_.dispatch_bytes * traffic_.intra_node_share;
  st.inter_node_bytes = traffic_.dispatch_bytes * traffic_.inter_node_share;
  return st;
}

}  // namespace monta::model
