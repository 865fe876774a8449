#include "server/model/strategy_search.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/schedule/schedule.h"

namespace monta::model {
namespace {

constexpr StrategyKind kAllKinds[] = {
    StrategyKind::kFlat, StrategyKind::kTpDedup,
    StrategyKind::kTpDedupPipelined, StrategyKind::kHierarchical,
    StrategyKind::kExpertOverlap};

// Whether every schedule of the layer drops the TP duplicates: experts that
// are not tensor-parallel, where DeepSpeed always does (docs/MODEL.md §4).
bool DropsEverywhere(ExpertLayout layout, const Traffic& tr) {
  return layout == ExpertLayout::kNotTensorParallel && tr.tp_duplicates;
}

// The rows a chunked schedule cuts: each TP rank's 1/t share when its
// AllToAll carries the dropped rows (the pipeline; expert overlap with whole
// experts), else the whole axis.
int64_t ChunkedRows(StrategyKind kind, const Traffic& tr, bool drops) {
  if (kind == StrategyKind::kTpDedupPipelined || drops) {
    return tr.split_rows / std::max(1, tr.tensor_parallel_size);
  }
  return tr.split_rows;
}

// Why `kind` cannot run for this job, or nullopt when it can.
std::optional<std::string> InfeasibleReason(StrategyKind kind,
                                            const MoeJobShape& job,
                                            const Traffic& tr, bool drops) {
  const int t = tr.tensor_parallel_size;
  const int e = tr.ep_group_size;
  const int ns = tr.ep_members_on_node;
  switch (kind) {
    case StrategyKind::kFlat:
      return std::nullopt;
    case StrategyKind::kTpDedup:
    case StrategyKind::kTpDedupPipelined: {
      if (e <= 1) return "expert_parallel_size is 1: there is no AllToAll";
      if (t <= 1) {
        return "tensor_parallel_size is 1: no TP ranks hold duplicate tokens";
      }
      if (job.sequence_parallel) {
        return "sequence_parallel: tokens are already split over the TP "
               "group, nothing is duplicated";
      }
      if (tr.split_rows % t != 0) {
        return absl::StrCat(
            tr.capacity_tokens > 0 ? "capacity C=" : "routed rows k*S=",
            tr.split_rows, " is not divisible by tensor_parallel_size ", t,
            " (C mod t = ", tr.split_rows % t, ")");
      }
      if (kind == StrategyKind::kTpDedupPipelined && tr.split_rows / t < 2) {
        return absl::StrCat("C/t = ", tr.split_rows / t,
                            " row per TP rank: nothing to cut into chunks");
      }
      return std::nullopt;
    }
    case StrategyKind::kHierarchical:
      if (e <= 1) return "expert_parallel_size is 1: there is no AllToAll";
      if (ns <= 1) {
        return "one EP member per node (n_s = 1): no intra-node step to "
               "aggregate";
      }
      if (ns >= e) return "EP group inside one node: no inter-node step";
      if (e % ns != 0) {
        return absl::StrCat("EP group of ", e, " spreads unevenly (n_s = ", ns,
                            " does not divide it)");
      }
      return std::nullopt;
    case StrategyKind::kExpertOverlap:
      if (e <= 1) return "expert_parallel_size is 1: there is no AllToAll";
      if (job.expert_compute_seconds <= 0) {
        return "needs job.expert_compute_seconds to overlap with";
      }
      if (ChunkedRows(kind, tr, drops) < 2) {
        return "one row: nothing to cut into chunks";
      }
      return std::nullopt;
  }
  return "unknown strategy";
}

struct Evaluated {
  int chunks = 1;
  StrategyTime time;
  int resolved_max = 0;  // Candidate::chunks_resolved_max
};

double Total(const StrategyTime& t) {
  return t.forward_seconds + t.backward_seconds;
}

// Best K in 1..k_max for a chunked schedule: the smallest K whose total is
// within kChunkTolerance of the fastest K's chunked ops above the fastest.
// Near its optimum the predicted time is flat in K while every extra chunk
// adds real risk (per-chunk costs the curves do not see, more
// synchronisation), so a K that buys less than 0.5% is not worth it
// (docs/MODEL.md §5). The tolerance is taken on the ops K changes: on the
// total, ops that K does not touch would widen it (verify runs chose K = 2
// where K = 4 predicted 1.7% faster and measured 4% faster). Every chunked op
// of a layer is the same op, so this is the smallest K within 0.5% of the
// fastest per op. A K whose split yields fewer pieces costs exactly what
// K_eff costs, so only K == K_eff is evaluated.
constexpr double kChunkTolerance = 0.005;

template <typename Fn>
Evaluated BestChunks(int64_t rows, int k_max, Fn evaluate) {
  std::vector<Evaluated> all;
  all.push_back(Evaluated{1, evaluate(1)});
  const int limit =
      static_cast<int>(std::min<int64_t>(std::max(1, k_max), rows));
  for (int k = 2; k <= limit; ++k) {
    if (schedule::EffectiveChunks(rows, k) != k) continue;
    all.push_back(Evaluated{k, evaluate(k)});
  }
  const Evaluated* fastest = &all[0];
  for (const Evaluated& e : all) {
    if (Total(e.time) < Total(fastest->time)) fastest = &e;
  }
  const double bound =
      Total(fastest->time) + kChunkTolerance * fastest->time.chunked_seconds;
  for (const Evaluated& e : all) {
    if (Total(e.time) <= bound) return e;
  }
  return *fastest;
}

int KindOrder(StrategyKind k) { return static_cast<int>(k); }

absl::Status CheckInputs(const ClusterView& cluster,
                         const SearchOptions& options) {
  if (options.max_chunks < 1 || options.max_chunks > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.max_chunks: must be in 1..1024, got ", options.max_chunks));
  }
  if (options.fixed_chunks < 0 || options.fixed_chunks > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.fixed_chunks: must be in 0..1024, got ",
                     options.fixed_chunks));
  }
  if (!std::isfinite(options.contention_factor) ||
      options.contention_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.contention_factor: must be >= 1, got ",
                     options.contention_factor));
  }
  if (!cluster.alltoall_intra.valid() || !cluster.alltoall_inter.valid() ||
      !cluster.allgather_intra.valid() || !cluster.copy.valid()) {
    return absl::InvalidArgumentError(
        "cluster view: every curve (alltoall intra/inter, allgather, copy) "
        "must be set");
  }
  return absl::OkStatus();
}

StrategyTime Evaluate(const CostModel& model, StrategyKind kind,
                      ExtrapolationFlags* flags, int k) {
  switch (kind) {
    case StrategyKind::kFlat:
      return model.Flat(flags);
    case StrategyKind::kTpDedup:
      return model.TpDedup(flags);
    case StrategyKind::kTpDedupPipelined:
      return model.TpDedupPipelined(k, flags);
    case StrategyKind::kHierarchical:
      return model.Hierarchical(flags);
    case StrategyKind::kExpertOverlap:
      return model.ExpertOverlap(k, flags);
  }
  return {};
}

// What every candidate is compared with, whether or not it is allowed.
struct References {
  double flat_total = 0;
  double dedup_total = 0;  // 0 when tp_dedup cannot run
  double share = 0;        // f, the AllToAll share of the step under flat
  double steps = 0;        // MoE layers times micro-batches per step: L * m
};

// The job's traffic with the split axis padded up to a multiple of t (the
// rows and D grow in proportion), or nullopt when it already is one.
std::optional<Traffic> PaddedTraffic(const Traffic& tr) {
  const int t = tr.tensor_parallel_size;
  if (t <= 1 || tr.split_rows < 1 || tr.split_rows % t == 0) {
    return std::nullopt;
  }
  Traffic padded = tr;
  padded.split_rows = schedule::PaddedRows(tr.split_rows, t);
  if (tr.capacity_tokens > 0) padded.capacity_tokens = padded.split_rows;
  padded.dispatch_bytes = tr.dispatch_bytes *
                          static_cast<double>(padded.split_rows) /
                          static_cast<double>(tr.split_rows);
  return padded;
}

// Everything a decision prices with: the job's traffic and model, and the
// padded ones when the split axis is not a multiple of t.
class Pricing {
 public:
  Pricing(const MoeJobShape& job, const Traffic& tr, const ClusterView& cluster,
          const SearchOptions& options)
      : job_(job),
        tr_(tr),
        layout_(job.expert_layout.value_or(kDefaultExpertLayout)),
        drops_(DropsEverywhere(layout_, tr)),
        model_(tr, cluster, options.contention_factor, layout_,
               job.expert_compute_seconds, options.pipeline),
        padded_traffic_(PaddedTraffic(tr)) {
    if (padded_traffic_) {
      padded_model_.emplace(*padded_traffic_, cluster,
                            options.contention_factor, layout_,
                            job.expert_compute_seconds, options.pipeline);
    }
  }

  ExpertLayout layout() const { return layout_; }
  bool drops() const { return drops_; }
  const Traffic& traffic() const { return tr_; }

  // Whole experts make every schedule drop duplicates, and DeepSpeed's
  // drop_tokens needs C mod t = 0: then every candidate is costed padded.
  bool PadsEverything() const { return drops_ && padded_traffic_; }

  // The model and traffic `kind` is costed with, and why it cannot run
  // (nullopt when it can). A dedup kind that only padding makes feasible is
  // costed padded; `padding_reason` then holds the unpadded reason.
  struct Choice {
    const CostModel* model = nullptr;
    const Traffic* traffic = nullptr;
    std::optional<std::string> infeasible;
    std::optional<std::string> padding_reason;
  };
  Choice For(StrategyKind kind) const {
    if (PadsEverything()) {
      return {&*padded_model_, &*padded_traffic_,
              InfeasibleReason(kind, job_, *padded_traffic_, drops_),
              std::nullopt};
    }
    Choice c{&model_, &tr_, InfeasibleReason(kind, job_, tr_, drops_),
             std::nullopt};
    const bool dedup = kind == StrategyKind::kTpDedup ||
                       kind == StrategyKind::kTpDedupPipelined;
    if (c.infeasible && dedup && padded_model_ &&
        !InfeasibleReason(kind, job_, *padded_traffic_, drops_)) {
      c.padding_reason = std::move(c.infeasible);
      c.infeasible.reset();
      c.model = &*padded_model_;
      c.traffic = &*padded_traffic_;
    }
    return c;
  }

  References ComputeReferences() const {
    References r;
    r.flat_total = Total(For(StrategyKind::kFlat).model->Flat(nullptr));
    const Choice dedup = For(StrategyKind::kTpDedup);
    if (!dedup.infeasible) r.dedup_total = Total(dedup.model->TpDedup(nullptr));
    r.steps = static_cast<double>(job_.moe_layers) *
              std::max(1, job_.microbatches_per_step);
    if (job_.alltoall_share_ratio > 0) {
      r.share = std::min(1.0, job_.alltoall_share_ratio);
    } else if (job_.step_time_seconds > 0) {
      r.share = std::min(1.0, r.steps * r.flat_total / job_.step_time_seconds);
    }
    return r;
  }

  // The padded traffic (valid when padded_rows or PadsEverything).
  const Traffic& padded_traffic() const { return *padded_traffic_; }

 private:
  const MoeJobShape& job_;
  const Traffic& tr_;
  const ExpertLayout layout_;
  const bool drops_;
  const CostModel model_;
  const std::optional<Traffic> padded_traffic_;
  std::optional<CostModel> padded_model_;
};

std::vector<StrategyKind> KindsToConsider(const SearchOptions& options) {
  std::vector<StrategyKind> kinds = options.allowed;
  if (kinds.empty()) kinds.assign(std::begin(kAllKinds), std::end(kAllKinds));
  std::sort(kinds.begin(), kinds.end());
  kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
  return kinds;
}

// The chunk bound (docs/MODEL.md §5): the largest K in 1..min(k_max, rows)
// whose chunk, and every smaller K's, keeps above the curve's launch floor
// (1 at least); 0 when every K up to that limit does.
int ChunkBound(StrategyKind kind, const CostModel& model, int64_t rows,
               int k_max) {
  const int limit =
      static_cast<int>(std::min<int64_t>(std::max(1, k_max), rows));
  for (int k = 2; k <= limit; ++k) {
    const bool resolved = kind == StrategyKind::kTpDedupPipelined
                              ? model.PipelineChunkResolved(k)
                              : model.OverlapChunkResolved(k);
    if (!resolved) return k - 1;
  }
  return 0;
}

// The best chunk count of `kind` (1 for unchunked kinds) and its time.
Evaluated BestOf(StrategyKind kind, const Traffic& tr, bool drops,
                 const CostModel& model, const SearchOptions& options) {
  auto at = [&](int k) { return Evaluate(model, kind, nullptr, k); };
  const bool chunked = kind == StrategyKind::kTpDedupPipelined ||
                       kind == StrategyKind::kExpertOverlap;
  if (!chunked) return Evaluated{1, at(1)};
  const int64_t rows = ChunkedRows(kind, tr, drops);
  const int bound = ChunkBound(kind, model, rows, options.max_chunks);
  Evaluated best;
  if (options.fixed_chunks > 0) {
    const int k =
        static_cast<int>(schedule::EffectiveChunks(rows, options.fixed_chunks));
    best = Evaluated{k, at(k)};
  } else {
    best = BestChunks(rows, bound > 0 ? bound : options.max_chunks, at);
  }
  best.resolved_max = bound;
  return best;
}

// A feasible kind at its best chunk count, with its times and speedups;
// `extrapolated` learns which curves the winner read outside their sizes.
Candidate EvaluateFeasible(StrategyKind kind, const Traffic& tr, bool drops,
                           const CostModel& model, const SearchOptions& options,
                           const References& refs,
                           ExtrapolationFlags* extrapolated) {
  Candidate c;
  c.kind = kind;
  c.name = StrategyName(kind);
  c.feasible = true;
  const Evaluated best = BestOf(kind, tr, drops, model, options);
  // Evaluate the winner once more to learn which curves it extrapolated.
  Evaluate(model, kind, extrapolated, best.chunks);
  const bool chunked = kind == StrategyKind::kTpDedupPipelined ||
                       kind == StrategyKind::kExpertOverlap;
  c.chunks_requested =
      chunked && options.fixed_chunks > 0 ? options.fixed_chunks : best.chunks;
  c.chunks_effective = best.chunks;
  c.chunks_resolved_max = best.resolved_max;
  c.forward_seconds_per_layer = best.time.forward_seconds;
  c.backward_seconds_per_layer = best.time.backward_seconds;
  c.total_seconds_per_layer = Total(best.time);
  c.ops = best.time.ops;
  c.alltoalls_per_layer = best.time.alltoalls_per_layer;
  c.allgathers_per_layer = best.time.allgathers_per_layer;
  c.step_seconds = refs.steps * c.total_seconds_per_layer;
  c.intra_node_bytes_per_rank = best.time.intra_node_bytes;
  c.inter_node_bytes_per_rank = best.time.inter_node_bytes;
  c.node_link_seconds_per_layer = best.time.busy.node_link_seconds;
  c.uplink_seconds_per_layer = best.time.busy.uplink_seconds;
  c.bottleneck = best.time.steady_state_bottleneck != nullptr
                     ? best.time.steady_state_bottleneck
                     : best.time.busy.Bottleneck();
  if (c.total_seconds_per_layer > 0) {
    if (refs.flat_total > 0) {
      c.speedup_over_flat = refs.flat_total / c.total_seconds_per_layer;
    }
    if (refs.dedup_total > 0) {
      c.speedup_over_tp_dedup = refs.dedup_total / c.total_seconds_per_layer;
    }
  }
  if (refs.share > 0 && c.speedup_over_flat > 0) {
    c.predicted_step_gain_ratio = refs.share * (1 - 1 / c.speedup_over_flat);
  }
  return c;
}

// Fastest first; equal times keep the strategies' order (simpler first).
void RankFeasible(std::vector<Candidate>* feasible) {
  std::stable_sort(
      feasible->begin(), feasible->end(),
      [](const Candidate& a, const Candidate& b) {
        if (a.total_seconds_per_layer != b.total_seconds_per_layer) {
          return a.total_seconds_per_layer < b.total_seconds_per_layer;
        }
        return KindOrder(a.kind) < KindOrder(b.kind);
      });
  for (size_t i = 0; i < feasible->size(); ++i) (*feasible)[i].rank = i + 1;
}

// What the layout means for this job, and where it came from.
void AddLayoutNotes(const MoeJobShape& job, const Pricing& p,
                    std::vector<std::string>* notes) {
  const Traffic& tr = p.traffic();
  if (!job.expert_layout) {
    notes->push_back(absl::StrCat(
        "experts_tensor_parallel not given: priced as ",
        ExpertLayoutName(p.layout()),
        " (DeepSpeed's default, enable_expert_tensor_parallelism=False); set "
        "experts_tensor_parallel: true for tensor-parallel experts "
        "(Megatron-Core's default)",
        tr.tp_duplicates ? ""
                         : "; no TP rank holds duplicate tokens here, so both "
                           "layouts price the same"));
  }
  if (p.drops()) {
    notes->push_back(
        "experts not tensor-parallel: flat is what DeepSpeed runs for them, "
        "drop -> AllToAll (dispatch) and AllToAll -> gather (combine), the "
        "schedule tp_dedup names too: 4 AllToAlls of D/t and 2 AllGathers "
        "per layer");
  }
  if (tr.ep_group_size <= 1) {
    notes->push_back(
        "expert_parallel_size is 1: experts are local, no AllToAll runs");
  }
}

std::string PaddingNote(const std::string& what, const std::string& why,
                        const Traffic& tr, const Traffic& padded) {
  return absl::StrCat(
      what, ": ", why, "; offered padded (",
      tr.capacity_tokens > 0 ? "C" : "k*S", " ", tr.split_rows, " -> ",
      padded.split_rows, ", +", padded.split_rows - tr.split_rows, " rows, +",
      std::llround(padded.dispatch_bytes - tr.dispatch_bytes),
      " bytes per rank per AllToAll), costed with the padded D");
}

Candidate InfeasibleCandidate(StrategyKind kind, const std::string& why) {
  Candidate c;
  c.kind = kind;
  c.name = StrategyName(kind);
  c.infeasible_reason = why;
  return c;
}

// The AllToAll groups a candidate runs: the EP group, or hierarchical's
// n_s intra group and e/n_s same-local-rank group.
std::vector<int> Groups(const Candidate& c, const Traffic& tr) {
  if (c.kind == StrategyKind::kHierarchical) {
    const int ns = std::max(1, tr.ep_members_on_node);
    return {ns, tr.ep_group_size / ns};
  }
  return {tr.ep_group_size};
}

// Flags AllToAll groups outside the range the per-peer latency was sourced
// on, above it and below it: both extrapolate the latency law.
void AddLatencyNotes(const ClusterView& cluster, const Traffic& tr,
                     const std::vector<Candidate>& feasible, Decision* d) {
  const schedule::LatencySourceRange& range = cluster.alltoall_latency_source;
  if (!range.known()) return;
  for (const Candidate& c : feasible) {
    for (int g : Groups(c, tr)) {
      if (g < 2) continue;  // no AllToAll runs
      if (range.Above(g)) {
        d->latency_group_above_source =
            std::max(d->latency_group_above_source, g);
      }
      if (range.Below(g) && (d->latency_group_below_source == 0 ||
                             g < d->latency_group_below_source)) {
        d->latency_group_below_source = g;
      }
    }
  }
  const double per_peer_us = cluster.alltoall_per_peer_latency_seconds * 1e6;
  for (int g : {d->latency_group_above_source, d->latency_group_below_source}) {
    if (g == 0) continue;
    d->notes.push_back(absl::StrCat(
        "alltoall latency extrapolated: the per-peer latency (", per_peer_us,
        " us) is sourced from groups of ", range.min_ranks, " to ",
        range.max_ranks, " ranks and applied to a group of ", g));
  }
}

// Where the chunk bound cut a chunked kind's K search, and why.
std::string ChunkBoundNote(StrategyKind kind, const Candidate& c,
                           const CostModel& model) {
  const double floor = model.ChunkLaunchFloorSeconds();
  const double overhead = kind == StrategyKind::kTpDedupPipelined
                              ? model.PipelineChunkFixedSeconds() - floor
                              : 0;
  return absl::StrCat(
      c.name, ": K searched up to ", c.chunks_resolved_max,
      ": a chunk of more would take under ",
      CostModel::kChunkLaunchFloorMultiple, "x the ",
      absl::SixDigits(floor * 1e3),
      " ms launch floor of its AllToAll curve (what the smallest size swept "
      "took beyond its bytes; a profile's latency)",
      overhead > 0 ? absl::StrCat(" plus the calibrated ",
                                  absl::SixDigits(overhead * 1e3),
                                  " ms per-chunk overhead")
                   : "");
}

}  // namespace

absl::StatusOr<Decision> Decide(const MoeJobShape& job, const NodeShape& shape,
                                const ClusterView& cluster,
                                const SearchOptions& options) {
  if (absl::Status s = CheckInputs(cluster, options); !s.ok()) return s;
  absl::StatusOr<Traffic> traffic = ComputeTraffic(job, shape);
  if (!traffic.ok()) return traffic.status();

  Decision decision;
  decision.traffic = *traffic;
  const Traffic& tr = decision.traffic;
  const Pricing pricing(job, tr, cluster, options);
  decision.layout = pricing.layout();
  decision.layout_defaulted = !job.expert_layout.has_value();
  const References refs = pricing.ComputeReferences();
  if (pricing.PadsEverything()) {
    decision.notes.push_back(PaddingNote(
        "experts not tensor-parallel: every schedule drops duplicates",
        absl::StrCat("DeepSpeed's drop_tokens needs ",
                     tr.capacity_tokens > 0 ? "C" : "k*S", " mod t = 0, got ",
                     tr.split_rows % tr.tensor_parallel_size),
        tr, pricing.padded_traffic()));
  }

  std::vector<Candidate> feasible;
  std::vector<Candidate> infeasible;
  for (StrategyKind kind : KindsToConsider(options)) {
    const Pricing::Choice choice = pricing.For(kind);
    if (choice.padding_reason) {
      decision.notes.push_back(
          PaddingNote(absl::StrCat(StrategyName(kind), " unpadded infeasible"),
                      *choice.padding_reason, tr, *choice.traffic));
    }
    if (choice.infeasible) {
      decision.notes.push_back(absl::StrCat(
          StrategyName(kind), " infeasible: ", *choice.infeasible));
      infeasible.push_back(InfeasibleCandidate(kind, *choice.infeasible));
      continue;
    }
    Candidate c =
        EvaluateFeasible(kind, *choice.traffic, pricing.drops(), *choice.model,
                         options, refs, &decision.extrapolated);
    if (c.chunks_resolved_max > 0) {
      decision.notes.push_back(ChunkBoundNote(kind, c, *choice.model));
    }
    c.padded_rows = choice.traffic->split_rows - tr.split_rows;
    c.padding_bytes_per_rank =
        choice.traffic->dispatch_bytes - tr.dispatch_bytes;
    feasible.push_back(std::move(c));
  }
  RankFeasible(&feasible);
  decision.chosen = feasible.empty() ? -1 : 0;
  AddLayoutNotes(job, pricing, &decision.notes);
  AddLatencyNotes(cluster, tr, feasible, &decision);
  decision.candidates = std::move(feasible);
  for (Candidate& c : infeasible) decision.candidates.push_back(std::move(c));
  return decision;
}

}  // namespace monta::model
