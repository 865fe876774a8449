#include "server/model/strategy_search.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace monta::model {
namespace {

constexpr StrategyKind kAllKinds[] = {
    StrategyKind::kFlat, StrategyKind::kTpDedup,
    StrategyKind::kTpDedupPipelined, StrategyKind::kHierarchical,
    StrategyKind::kExpertOverlap};

// Why `kind` cannot run for this job, or nullopt when it can.
std::optional<std::string> InfeasibleReason(StrategyKind kind,
                                            const MoeJobShape& job,
                                            const Traffic& tr) {
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
      if (tr.split_rows < 2) return "one row: nothing to cut into chunks";
      return std::nullopt;
  }
  return "unknown strategy";
}

struct Evaluated {
  int chunks = 1;
  StrategyTime time;
};

double Total(const StrategyTime& t) {
  return t.forward_seconds + t.backward_seconds;
}

// Best K in 1..k_max for a chunked schedule: the smallest K whose total is
// within kChunkTolerance of the fastest K's forward time above the fastest.
// Near its optimum the predicted time is flat in K while every extra chunk
// adds real risk (per-chunk costs the curves do not see, more
// synchronisation), so a K that buys less than 0.5% is not worth it
// (docs/MODEL.md §5). The tolerance is taken on the forward, the part K
// changes: on the total, a backward that K does not touch would widen it
// (verify runs chose K = 2 where K = 4 predicted 1.7% faster forward and
// measured 4% faster). A K whose split yields fewer pieces costs exactly
// what K_eff costs, so only K == K_eff is evaluated.
constexpr double kChunkTolerance = 0.005;

template <typename Fn>
Evaluated BestChunks(int64_t rows, int k_max, Fn evaluate) {
  std::vector<Evaluated> all;
  all.push_back(Evaluated{1, evaluate(1)});
  const int limit =
      static_cast<int>(std::min<int64_t>(std::max(1, k_max), rows));
  for (int k = 2; k <= limit; ++k) {
    if (EffectiveChunks(rows, k) != k) continue;
    all.push_back(Evaluated{k, evaluate(k)});
  }
  const Evaluated* fastest = &all[0];
  for (const Evaluated& e : all) {
    if (Total(e.time) < Total(fastest->time)) fastest = &e;
  }
  const double bound =
      Total(fastest->time) + kChunkTolerance * fastest->time.forward_seconds;
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

// tp_dedup's model: the job's own, or the padded one when only padding
// makes the split even; null when neither can run it.
struct Models {
  const CostModel* job = nullptr;
  const CostModel* padded = nullptr;  // null when nothing needs padding
  const Traffic* padded_traffic = nullptr;
};

const CostModel* DedupModel(StrategyKind kind, const MoeJobShape& job,
                            const Traffic& tr, const Models& m) {
  if (!InfeasibleReason(kind, job, tr)) return m.job;
  const bool dedup =
      kind == StrategyKind::kTpDedup || kind == StrategyKind::kTpDedupPipelined;
  if (dedup && m.padded != nullptr &&
      !InfeasibleReason(kind, job, *m.padded_traffic)) {
    return m.padded;
  }
  return nullptr;
}

References ComputeReferences(const MoeJobShape& job, const Traffic& tr,
                             const Models& models) {
  References r;
  r.flat_total = Total(models.job->Flat(nullptr));
  if (const CostModel* dedup =
          DedupModel(StrategyKind::kTpDedup, job, tr, models)) {
    r.dedup_total = Total(dedup->TpDedup(nullptr));
  }
  r.steps = static_cast<double>(job.moe_layers) *
            std::max(1, job.microbatches_per_step);
  if (job.alltoall_share_ratio > 0) {
    r.share = std::min(1.0, job.alltoall_share_ratio);
  } else if (job.step_time_seconds > 0) {
    r.share = std::min(1.0, r.steps * r.flat_total / job.step_time_seconds);
  }
  return r;
}

std::vector<StrategyKind> KindsToConsider(const SearchOptions& options) {
  std::vector<StrategyKind> kinds = options.allowed;
  if (kinds.empty()) kinds.assign(std::begin(kAllKinds), std::end(kAllKinds));
  std::sort(kinds.begin(), kinds.end());
  kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
  return kinds;
}

// A feasible kind at its best chunk count, with its times and speedups;
// `extrapolated` learns which curves the winner read outside their sizes.
Candidate EvaluateFeasible(StrategyKind kind, const Traffic& tr,
                           const CostModel& model, const SearchOptions& options,
                           const References& refs,
                           ExtrapolationFlags* extrapolated) {
  Candidate c;
  c.kind = kind;
  c.name = StrategyName(kind);
  c.feasible = true;
  auto at = [&](int k) { return Evaluate(model, kind, nullptr, k); };
  Evaluated best;
  const bool chunked = kind == StrategyKind::kTpDedupPipelined ||
                       kind == StrategyKind::kExpertOverlap;
  // Pipelining cuts each TP rank's 1/t share; expert overlap the whole axis.
  const int64_t rows = kind == StrategyKind::kTpDedupPipelined
                           ? tr.split_rows / tr.tensor_parallel_size
                           : tr.split_rows;
  if (chunked && options.fixed_chunks > 0) {
    best.chunks = EffectiveChunks(rows, options.fixed_chunks);
    best.time = at(best.chunks);
  } else if (chunked) {
    best = BestChunks(rows, options.max_chunks, at);
  } else {
    best.time = at(1);
  }
  // Evaluate the winner once more to learn which curves it extrapolated.
  Evaluate(model, kind, extrapolated, best.chunks);
  c.chunks_requested =
      chunked && options.fixed_chunks > 0 ? options.fixed_chunks : best.chunks;
  c.chunks_effective = best.chunks;
  c.forward_seconds_per_layer = best.time.forward_seconds;
  c.backward_seconds_per_layer = best.time.backward_seconds;
  c.total_seconds_per_layer = Total(best.time);
  c.step_seconds = refs.steps * c.total_seconds_per_layer;
  c.intra_node_bytes_per_rank = best.time.intra_node_bytes;
  c.inter_node_bytes_per_rank = best.time.inter_node_bytes;
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

void AddJobNotes(const MoeJobShape& job, const Traffic& tr,
                 std::vector<std::string>* notes) {
  if (tr.ep_group_size <= 1) {
    notes->push_back(
        "expert_parallel_size is 1: experts are local, no AllToAll runs");
  }
  if (!job.experts_tensor_parallel && tr.tensor_parallel_size > 1) {
    notes->push_back(
        "experts are not tensor-parallel: DeepSpeed already drops duplicate "
        "tokens before the AllToAll, so flat overstates what such a job "
        "runs today");
  }
}

// The job's traffic with the split axis padded up to a multiple of t (the
// rows and D grow in proportion), or nullopt when it already is one.
std::optional<Traffic> PaddedTraffic(const Traffic& tr) {
  const int t = tr.tensor_parallel_size;
  if (t <= 1 || tr.split_rows < 1 || tr.split_rows % t == 0) {
    return std::nullopt;
  }
  Traffic padded = tr;
  padded.split_rows = (tr.split_rows + t - 1) / t * t;
  if (tr.capacity_tokens > 0) padded.capacity_tokens = padded.split_rows;
  padded.dispatch_bytes = tr.dispatch_bytes *
                          static_cast<double>(padded.split_rows) /
                          static_cast<double>(tr.split_rows);
  return padded;
}

std::string PaddingNote(StrategyKind kind, const std::string& why,
                        const Traffic& tr, const Traffic& padded) {
  return absl::StrCat(
      StrategyName(kind), " unpadded infeasible: ", why, "; offered padded (",
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
int LargestGroup(const Candidate& c, const Traffic& tr) {
  if (c.kind == StrategyKind::kHierarchical) {
    const int ns = std::max(1, tr.ep_members_on_node);
    return std::max(ns, tr.ep_group_size / ns);
  }
  return tr.ep_group_size;
}

// Flags an AllToAll group past the range the per-peer latency was sourced on.
void AddLatencyNote(const ClusterView& cluster, const Traffic& tr,
                    const std::vector<Candidate>& feasible, Decision* d) {
  const int source = cluster.alltoall_latency_source_max_ranks;
  if (source <= 0) return;
  int largest = 0;
  for (const Candidate& c : feasible) {
    largest = std::max(largest, LargestGroup(c, tr));
  }
  if (largest <= source) return;
  d->latency_extrapolated_group = largest;
  d->notes.push_back(
      absl::StrCat("alltoall latency extrapolated: the per-peer latency (",
                   cluster.alltoall_per_peer_latency_seconds * 1e6,
                   " us) is sourced from groups of up to ", source,
                   " ranks and applied to a group of ", largest));
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
  const CostModel model(tr, cluster, options.contention_factor,
                        options.backward, job.expert_compute_seconds,
                        options.pipeline);
  const std::optional<Traffic> padded_traffic = PaddedTraffic(tr);
  std::optional<CostModel> padded_model;
  if (padded_traffic) {
    padded_model.emplace(*padded_traffic, cluster, options.contention_factor,
                         options.backward, job.expert_compute_seconds,
                         options.pipeline);
  }
  const Models models{&model, padded_model ? &*padded_model : nullptr,
                      padded_traffic ? &*padded_traffic : nullptr};
  const References refs = ComputeReferences(job, tr, models);

  std::vector<Candidate> feasible;
  std::vector<Candidate> infeasible;
  for (StrategyKind kind : KindsToConsider(options)) {
    std::optional<std::string> why = InfeasibleReason(kind, job, tr);
    const CostModel* chosen_model = &model;
    const Traffic* chosen_traffic = &tr;
    if (why && DedupModel(kind, job, tr, models) == models.padded &&
        models.padded != nullptr) {
      // Padding the split axis to a multiple of t makes it run.
      decision.notes.push_back(PaddingNote(kind, *why, tr, *padded_traffic));
      chosen_model = models.padded;
      chosen_traffic = models.padded_traffic;
      why.reset();
    }
    if (why) {
      decision.notes.push_back(
          absl::StrCat(StrategyName(kind), " infeasible: ", *why));
      infeasible.push_back(InfeasibleCandidate(kind, *why));
      continue;
    }
    Candidate c = EvaluateFeasible(kind, *chosen_traffic, *chosen_model,
                                   options, refs, &decision.extrapolated);
    c.padded_rows = chosen_traffic->split_rows - tr.split_rows;
    c.padding_bytes_per_rank =
        chosen_traffic->dispatch_bytes - tr.dispatch_bytes;
    feasible.push_back(std::move(c));
  }
  RankFeasible(&feasible);
  decision.chosen = feasible.empty() ? -1 : 0;
  AddJobNotes(job, tr, &decision.notes);
  AddLatencyNote(cluster, tr, feasible, &decision);
  decision.candidates = std::move(feasible);
  for (Candidate& c : infeasible) decision.candidates.push_back(std::move(c));
  return decision;
}

}  // namespace monta::model
