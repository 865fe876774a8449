#include "server/model/strategy_search.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/model/hardware_profile.h"
#include "server/model/paper_job_shape.h"
#include "server/model/profile_view.h"

namespace monta::model {
namespace {

ClusterView View(const std::string& profile_name, int nodes, int g = 8) {
  auto profile = FindProfile(profile_name);
  EXPECT_TRUE(profile.ok()) << profile.status();
  auto view = ProfileClusterView(*profile, nodes, g);
  EXPECT_TRUE(view.ok()) << view.status();
  return *view;
}

Decision DecideOrDie(const MoeJobShape& job, const NodeShape& shape,
                     const ClusterView& view, SearchOptions options = {}) {
  auto d = Decide(job, shape, view, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Decision{};
}

const Candidate& Find(const Decision& d, StrategyKind kind) {
  for (const Candidate& c : d.candidates) {
    if (c.kind == kind) return c;
  }
  ADD_FAILURE() << "no candidate " << StrategyName(kind);
  static const Candidate kNone;
  return kNone;
}

const Candidate& Chosen(const Decision& d) {
  EXPECT_GE(d.chosen, 0);
  return d.candidates.at(d.chosen);
}

MoeJobShape WholeExperts(MoeJobShape job) {
  job.expert_layout = ExpertLayout::kNotTensorParallel;
  return job;
}

TEST(StrategySearch, PaperSettingPicksPipelinedDedupAtLeastFourTimesFlat) {
  const MoeJobShape job = PaperJobShape();
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  ASSERT_GE(d.traffic.dispatch_bytes, 64.0 * (1 << 20));
  EXPECT_EQ(d.layout, ExpertLayout::kTensorParallel);
  EXPECT_FALSE(d.layout_defaulted);
  const Candidate& c = Chosen(d);
  EXPECT_EQ(c.kind, StrategyKind::kTpDedupPipelined);
  EXPECT_GT(c.chunks_effective, 1);
  EXPECT_GE(c.speedup_over_flat, 4.0);
  EXPECT_GT(c.speedup_over_tp_dedup, 1.0);
  EXPECT_FALSE(c.bottleneck.empty());
  EXPECT_EQ(c.rank, 1);
}

// The paper job with experts that are not tensor-parallel: 2 AllGathers per
// layer where tensor-parallel experts need 4, so its tp_dedup layer is the
// cheaper; flat is DeepSpeed's own drop path, so only the pipeline gains.
TEST(StrategySearch, PaperSettingWithWholeExpertsGathersTwicePerLayer) {
  const Decision tp = DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2));
  const Decision whole =
      DecideOrDie(WholeExperts(PaperJobShape()), {2, 8}, View("a800-hgx", 2));
  EXPECT_EQ(whole.layout, ExpertLayout::kNotTensorParallel);
  EXPECT_EQ(Find(tp, StrategyKind::kTpDedup).allgathers_per_layer, 4);
  EXPECT_EQ(Find(whole, StrategyKind::kTpDedup).allgathers_per_layer, 2);
  EXPECT_EQ(Find(tp, StrategyKind::kFlat).allgathers_per_layer, 0);
  EXPECT_EQ(Find(whole, StrategyKind::kFlat).allgathers_per_layer, 2);
  for (const Decision* d : {&tp, &whole}) {
    for (const Candidate& c : d->candidates) {
      if (c.feasible) {
        EXPECT_EQ(c.alltoalls_per_layer, 4) << c.name;
      }
    }
  }
  EXPECT_LT(Find(whole, StrategyKind::kTpDedup).total_seconds_per_layer,
            Find(tp, StrategyKind::kTpDedup).total_seconds_per_layer);
  EXPECT_DOUBLE_EQ(Find(whole, StrategyKind::kFlat).total_seconds_per_layer,
                   Find(whole, StrategyKind::kTpDedup).total_seconds_per_layer);
  const Candidate& c = Chosen(whole);
  EXPECT_EQ(c.kind, StrategyKind::kTpDedupPipelined);
  EXPECT_GT(c.speedup_over_flat, 1.1);
  EXPECT_DOUBLE_EQ(c.speedup_over_flat, c.speedup_over_tp_dedup);
  // The same K: every op that pipelines is the same op in both layouts.
  EXPECT_EQ(c.chunks_effective, Chosen(tp).chunks_effective);
  bool noted = false;
  for (const std::string& n : whole.notes) {
    noted |= n.find("flat is what DeepSpeed runs") != std::string::npos;
  }
  EXPECT_TRUE(noted);
}

// A job that does not say gets DeepSpeed's default, and the decision says
// so; with sequence parallelism nothing is duplicated and it does not matter.
TEST(StrategySearch, UnsaidLayoutIsTheNamedDefault) {
  MoeJobShape job = PaperJobShape();
  job.expert_layout.reset();
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  EXPECT_EQ(d.layout, kDefaultExpertLayout);
  EXPECT_EQ(d.layout, ExpertLayout::kNotTensorParallel);
  EXPECT_TRUE(d.layout_defaulted);
  const Decision said =
      DecideOrDie(WholeExperts(PaperJobShape()), {2, 8}, View("a800-hgx", 2));
  EXPECT_EQ(Chosen(d).total_seconds_per_layer,
            Chosen(said).total_seconds_per_layer);
  int defaulted_notes = 0;
  for (const std::string& n : d.notes) {
    if (n.find("experts_tensor_parallel not given") != std::string::npos) {
      ++defaulted_notes;
      EXPECT_EQ(n.find("both layouts price the same"), std::string::npos);
    }
  }
  EXPECT_EQ(defaulted_notes, 1);
  for (const std::string& n : said.notes) {
    EXPECT_EQ(n.find("not given"), std::string::npos) << n;
  }
  job.sequence_parallel = true;
  const Decision sp = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  MoeJobShape tp_sp = PaperJobShape();
  tp_sp.sequence_parallel = true;
  EXPECT_EQ(Chosen(sp).total_seconds_per_layer,
            Chosen(DecideOrDie(tp_sp, {2, 8}, View("a800-hgx", 2)))
                .total_seconds_per_layer);
  bool same_noted = false;
  for (const std::string& n : sp.notes) {
    same_noted |= n.find("both layouts price the same") != std::string::npos;
  }
  EXPECT_TRUE(same_noted);
}

TEST(StrategySearch, PaperSettingHoldsFrom64MiBTo1GiBPerRank) {
  // D = E C M b with C = 4096: hidden 4096 .. 65536 is 64 MiB .. 1 GiB.
  for (int64_t hidden = 4096; hidden <= 65536; hidden *= 2) {
    MoeJobShape job = PaperJobShape();
    job.hidden_size = hidden;
    const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
    ASSERT_GE(d.traffic.dispatch_bytes, 64.0 * (1 << 20));
    const Candidate& c = Chosen(d);
    EXPECT_EQ(c.kind, StrategyKind::kTpDedupPipelined) << "hidden " << hidden;
    EXPECT_GT(c.chunks_effective, 1) << "hidden " << hidden;
    // Tensor-parallel experts: every op is the pipelined op, forward and
    // backward, against the paper's flat AllToAll of every TP rank's copy.
    EXPECT_GE(c.speedup_over_flat, 4.0) << "hidden " << hidden;
    EXPECT_DOUBLE_EQ(c.backward_seconds_per_layer, c.forward_seconds_per_layer);
    // Whole experts: DeepSpeed already drops; the pipeline still gains.
    const Decision w =
        DecideOrDie(WholeExperts(job), {2, 8}, View("a800-hgx", 2));
    EXPECT_EQ(Chosen(w).kind, StrategyKind::kTpDedupPipelined)
        << "hidden " << hidden;
    EXPECT_GT(Chosen(w).speedup_over_flat, 1.1) << "hidden " << hidden;
  }
}

TEST(StrategySearch, InterNodeBytesFlatDedupPipelinedAreTToOneToOne) {
  for (int t : {2, 4, 8}) {
    MoeJobShape job = PaperJobShape();
    job.tensor_parallel_size = t;
    job.expert_parallel_size = 16 / t;
    job.data_parallel_size = 16 / t;
    job.num_experts = 16 / t;
    const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
    const double flat = Find(d, StrategyKind::kFlat).inter_node_bytes_per_rank;
    const double dedup =
        Find(d, StrategyKind::kTpDedup).inter_node_bytes_per_rank;
    const double piped =
        Find(d, StrategyKind::kTpDedupPipelined).inter_node_bytes_per_rank;
    ASSERT_GT(dedup, 0) << "t=" << t;
    EXPECT_DOUBLE_EQ(flat / dedup, t);
    EXPECT_DOUBLE_EQ(piped, dedup);
  }
}

TEST(StrategySearch, TpOneCannotDedupOrPipeline) {
  MoeJobShape job = PaperJobShape();
  job.tensor_parallel_size = 1;
  job.expert_parallel_size = 16;
  job.num_experts = 16;
  job.data_parallel_size = 16;
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  const Candidate& piped = Find(d, StrategyKind::kTpDedupPipelined);
  EXPECT_FALSE(piped.feasible);
  EXPECT_NE(piped.infeasible_reason.find("tensor_parallel_size is 1"),
            std::string::npos);
  EXPECT_EQ(piped.rank, 0);
  EXPECT_EQ(Chosen(d).chunks_effective, 1);
}

TEST(StrategySearch, EpGroupInsideOneNodeGainsNothingFromPipelining) {
  // t = 2, e = 4 on one node: the EP group spans its 8 ranks, so the
  // AllToAll and the AllGather share NVLink and there is nothing to overlap.
  MoeJobShape job = PaperJobShape();
  job.world_size = 8;
  job.tensor_parallel_size = 2;
  job.expert_parallel_size = 4;
  job.num_experts = 4;
  job.data_parallel_size = 4;
  const Decision d = DecideOrDie(job, {1, 8}, View("a800-hgx", 1));
  EXPECT_EQ(d.traffic.ep_members_on_node, 4);
  EXPECT_EQ(Find(d, StrategyKind::kFlat).inter_node_bytes_per_rank, 0);
  const Candidate& chosen = Chosen(d);
  EXPECT_EQ(chosen.chunks_effective, 1);
  EXPECT_GE(Find(d, StrategyKind::kTpDedupPipelined).total_seconds_per_layer,
            Find(d, StrategyKind::kTpDedup).total_seconds_per_layer);
  // Tensor-parallel experts gather in every op: halving the AllToAll over
  // NVLink does not pay for four AllGathers and copies, so flat wins.
  EXPECT_EQ(chosen.kind, StrategyKind::kFlat);
  EXPECT_LT(Find(d, StrategyKind::kTpDedup).speedup_over_flat, 1);
  // Whole experts gather twice, and DeepSpeed's flat is that very schedule.
  const Decision w =
      DecideOrDie(WholeExperts(job), {1, 8}, View("a800-hgx", 1));
  EXPECT_EQ(Chosen(w).kind, StrategyKind::kFlat);
  EXPECT_DOUBLE_EQ(Find(w, StrategyKind::kTpDedup).speedup_over_flat, 1);
}

TEST(StrategySearch, SmallDispatchChoosesOneChunk) {
  MoeJobShape job = PaperJobShape();
  job.hidden_size = 16;  // D = 256 KiB per rank: launch latency dominates
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  EXPECT_EQ(Find(d, StrategyKind::kTpDedupPipelined).chunks_effective, 1);
  EXPECT_EQ(Chosen(d).chunks_effective, 1);
}

TEST(StrategySearch, BestChunksNeverDecreaseAsDispatchGrows) {
  // D = E C M b with C = 4096 fixed: hidden 4 .. 65536 sweeps D over
  // 64 KiB .. 1 GiB per rank while C/t = 512 rows bounds K the same way.
  int previous = 0;
  int first = 0;
  for (int64_t hidden = 4; hidden <= 65536; hidden *= 2) {
    MoeJobShape job = PaperJobShape();
    job.hidden_size = hidden;
    const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
    const int k = Find(d, StrategyKind::kTpDedupPipelined).chunks_effective;
    EXPECT_GE(k, previous) << "D=" << d.traffic.dispatch_bytes;
    if (first == 0) first = k;
    previous = k;
  }
  EXPECT_EQ(first, 1);
  EXPECT_GT(previous, 4);
}

TEST(StrategySearch, PipelinedSpeedupRisesTowardTWithBandwidthRatio) {
  // 16 nodes x 8, TP=8, one EP member per node: r_inter = 15/16.
  MoeJobShape job = PaperJobShape();
  job.world_size = 128;
  job.num_experts = 16;
  job.expert_parallel_size = 16;
  job.data_parallel_size = 16;
  auto base = FindProfile("a800-hgx");
  ASSERT_TRUE(base.ok());
  double previous = 0;
  for (int ratio = 8; ratio <= 18; ratio += 2) {
    HardwareProfile p = *base;
    // Keep NVLink fixed and set the NIC so that line rates are ratio:1.
    p.nic_bytes_per_second =
        p.nvlink_bytes_per_second / ratio * 8 / p.nics_per_node;
    auto view = ProfileClusterView(p, 16, 8);
    ASSERT_TRUE(view.ok());
    const Decision d = DecideOrDie(job, {16, 8}, *view);
    const double s = Find(d, StrategyKind::kTpDedupPipelined).speedup_over_flat;
    EXPECT_GT(s, previous) << "ratio " << ratio;
    EXPECT_LT(s, 8.0);
    previous = s;
  }
  EXPECT_GT(previous, 5.0);
}

TEST(StrategySearch, MoreNicsShrinkTheGainOverFlat) {
  const MoeJobShape job = PaperJobShape();
  const Decision four = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  const Decision eight = DecideOrDie(job, {2, 8}, View("a800-hgx-8nic", 2));
  EXPECT_GT(Chosen(four).speedup_over_flat, Chosen(eight).speedup_over_flat);
}

TEST(StrategySearch, ForwardPlusBackwardIsTheRankedTotal) {
  MoeJobShape job = PaperJobShape();
  job.expert_compute_seconds = 2e-3;
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  double previous = 0;
  bool seen_infeasible = false;
  for (const Candidate& c : d.candidates) {
    if (!c.feasible) {
      seen_infeasible = true;
      EXPECT_EQ(c.rank, 0);
      EXPECT_FALSE(c.infeasible_reason.empty());
      continue;
    }
    EXPECT_FALSE(seen_infeasible) << "feasible after infeasible";
    EXPECT_DOUBLE_EQ(c.forward_seconds_per_layer + c.backward_seconds_per_layer,
                     c.total_seconds_per_layer);
    EXPECT_DOUBLE_EQ(c.step_seconds, 80 * c.total_seconds_per_layer);
    EXPECT_GE(c.total_seconds_per_layer, previous);
    previous = c.total_seconds_per_layer;
    if (c.speedup_over_flat > 1) {
      EXPECT_NEAR(c.predicted_step_gain_ratio,
                  0.3 * (1 - 1 / c.speedup_over_flat), 1e-12);
    }
  }
  EXPECT_EQ(d.candidates.size(), 5u);
}

TEST(StrategySearch, CapacityNotDivisibleByTIsOfferedPadded) {
  MoeJobShape job = PaperJobShape();
  job.sequence_length = 8190;  // C = 4095, not a multiple of 8
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  const Candidate& dedup = Find(d, StrategyKind::kTpDedup);
  ASSERT_TRUE(dedup.feasible);
  EXPECT_EQ(dedup.padded_rows, 1);
  EXPECT_DOUBLE_EQ(dedup.padding_bytes_per_rank,
                   d.traffic.dispatch_bytes / 4095);
  // Padded to C = 4096 the dispatch is exactly the paper's: same cost.
  const Decision paper =
      DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2));
  EXPECT_DOUBLE_EQ(dedup.total_seconds_per_layer,
                   Find(paper, StrategyKind::kTpDedup).total_seconds_per_layer);
  EXPECT_EQ(Chosen(d).kind, StrategyKind::kTpDedupPipelined);
  EXPECT_EQ(Chosen(d).padded_rows, 1);
  EXPECT_GT(Chosen(d).speedup_over_flat, 4);
  // The unpadded version's reason stays visible.
  int unpadded_notes = 0;
  for (const std::string& n : d.notes) {
    if (n.find("unpadded infeasible") != std::string::npos &&
        n.find("C mod t = 7") != std::string::npos &&
        n.find("4095 -> 4096") != std::string::npos) {
      ++unpadded_notes;
    }
  }
  EXPECT_EQ(unpadded_notes, 2);  // tp_dedup and tp_dedup_pipelined
  // Flat is not padded.
  EXPECT_EQ(Find(d, StrategyKind::kFlat).padded_rows, 0);
}

// Whole experts make every schedule drop duplicates, and DeepSpeed's
// drop_tokens needs C mod t = 0: every candidate, flat included, is costed
// on the padded axis, and one note says so.
TEST(StrategySearch, WholeExpertsPadEverySchedule) {
  MoeJobShape job = WholeExperts(PaperJobShape());
  job.sequence_length = 8190;  // C = 4095
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  const Decision paper =
      DecideOrDie(WholeExperts(PaperJobShape()), {2, 8}, View("a800-hgx", 2));
  for (const Candidate& c : d.candidates) {
    if (!c.feasible) continue;
    EXPECT_EQ(c.padded_rows, 1) << c.name;
    EXPECT_DOUBLE_EQ(c.total_seconds_per_layer,
                     Find(paper, c.kind).total_seconds_per_layer)
        << c.name;
  }
  int notes = 0;
  for (const std::string& n : d.notes) {
    notes += n.find("every schedule drops duplicates") != std::string::npos &&
             n.find("4095 -> 4096") != std::string::npos;
    EXPECT_EQ(n.find("unpadded infeasible"), std::string::npos) << n;
  }
  EXPECT_EQ(notes, 1);
}

TEST(StrategySearch, FlatTimeForAFixedEpGroupDoesNotChangeWithNodes) {
  // EP 2, t = 8 on H100: the audit saw 7 us (2 nodes) -> 3.3 ms (2048).
  double flat_at_two = 0;
  StrategyKind chosen_at_two = StrategyKind::kFlat;
  for (int nodes : {2, 16, 64, 512, 2048}) {
    MoeJobShape job = PaperJobShape();
    job.world_size = nodes * 8;
    job.data_parallel_size = nodes;
    const Decision d = DecideOrDie(job, {nodes, 8}, View("h100-hgx", nodes));
    const Candidate& flat = Find(d, StrategyKind::kFlat);
    if (nodes == 2) {
      flat_at_two = flat.total_seconds_per_layer;
      chosen_at_two = Chosen(d).kind;
    }
    EXPECT_DOUBLE_EQ(flat.total_seconds_per_layer, flat_at_two) << nodes;
    EXPECT_EQ(Chosen(d).kind, chosen_at_two) << nodes;
  }
  EXPECT_EQ(chosen_at_two, StrategyKind::kTpDedupPipelined);
}

// 512 H100 nodes, EP 64, t = 8, 128 MiB dispatch per rank (issue 10's
// done-when): pipelined with K > 1 wins, and flat is the alpha-beta value
// of the profile's constants with the EP group's latency.
TEST(StrategySearch, LargeClusterFlatIsAlphaBetaOfTheEpGroup) {
  MoeJobShape job = PaperJobShape();
  job.num_experts = 64;
  job.expert_parallel_size = 64;
  job.world_size = 512 * 8;
  job.data_parallel_size = 512;
  const Decision d = DecideOrDie(job, {512, 8}, View("h100-hgx", 512));
  const double dispatch = 128.0 * (1 << 20);
  ASSERT_DOUBLE_EQ(d.traffic.dispatch_bytes, dispatch);
  ASSERT_EQ(d.traffic.ep_members_on_node, 1);
  EXPECT_EQ(Chosen(d).kind, StrategyKind::kTpDedupPipelined);
  EXPECT_GT(Chosen(d).chunks_effective, 1);

  auto p = FindProfile("h100-hgx");
  ASSERT_TRUE(p.ok());
  // Independently of the curves: alpha of 64 ranks from the 8-rank latency
  // and the per-peer latency; 63/64 of D over the NIC share of one GPU.
  const double alpha = p->alltoall_latency_seconds +
                       p->alltoall_per_peer_latency_seconds * (64 - 8);
  const double nic_share = p->nics_per_node * p->nic_bytes_per_second *
                           p->nic_efficiency / p->gpus_per_node;
  const double one_op = alpha + dispatch * 63 / 64 / nic_share;
  EXPECT_NEAR(Find(d, StrategyKind::kFlat).total_seconds_per_layer, 4 * one_op,
              1e-12);
  // 64 ranks are past the 8- and 32-GPU runs the per-peer latency comes from.
  EXPECT_EQ(d.latency_group_above_source, 64);
  EXPECT_EQ(d.latency_group_below_source, 0);
  bool noted = false;
  for (const std::string& n : d.notes) {
    noted |= n.find("alltoall latency extrapolated") != std::string::npos;
  }
  EXPECT_TRUE(noted);
}

TEST(StrategySearch, LatencyWithinItsSourceRangeIsNotFlagged) {
  // EP 16 on 2 nodes of 8 (t = 1): inside the 8..32 ranks of the source.
  MoeJobShape job = PaperJobShape();
  job.tensor_parallel_size = 1;
  job.expert_parallel_size = 16;
  job.num_experts = 16;
  job.data_parallel_size = 16;
  SearchOptions flat_only;  // hierarchical's groups would be 8 and 2
  flat_only.allowed = {StrategyKind::kFlat};
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2), flat_only);
  EXPECT_EQ(d.latency_group_above_source, 0);
  EXPECT_EQ(d.latency_group_below_source, 0);
  for (const std::string& n : d.notes) {
    EXPECT_EQ(n.find("latency extrapolated"), std::string::npos) << n;
  }
}

// The paper's EP group of 2 is below the 8- and 32-GPU runs the per-peer
// latency comes from: moving it there extrapolates too, and is said.
TEST(StrategySearch, LatencyBelowItsSourceRangeIsFlagged) {
  const Decision d = DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2));
  EXPECT_EQ(d.latency_group_below_source, 2);
  EXPECT_EQ(d.latency_group_above_source, 0);
  int noted = 0;
  for (const std::string& n : d.notes) {
    if (n.find("alltoall latency extrapolated") != std::string::npos &&
        n.find("groups of 8 to 32 ranks and applied to a group of 2") !=
            std::string::npos) {
      ++noted;
    }
  }
  EXPECT_EQ(noted, 1);
  // cpu-gloo's latency is an assumption with no sourced range: not flagged.
  MoeJobShape cpu = PaperJobShape();
  cpu.world_size = 4;
  cpu.tensor_parallel_size = 2;
  cpu.data_parallel_size = 2;
  const Decision c = DecideOrDie(cpu, {2, 2}, View("cpu-gloo", 2, 2));
  EXPECT_EQ(c.latency_group_below_source, 0);
}

TEST(StrategySearch, PipelinedBottleneckIsTheSteadyStateResource) {
  const Decision d = DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2));
  ASSERT_EQ(Chosen(d).kind, StrategyKind::kTpDedupPipelined);
  // AllGather + copy (on the GPU) set tau. Unpipelined, tensor-parallel
  // experts gather in all four ops and NVLink is busiest summed; whole
  // experts gather in two, and the network is.
  EXPECT_EQ(Chosen(d).bottleneck, "nvlink");
  EXPECT_EQ(Find(d, StrategyKind::kTpDedup).bottleneck, "nvlink");
  const Decision w =
      DecideOrDie(WholeExperts(PaperJobShape()), {2, 8}, View("a800-hgx", 2));
  EXPECT_EQ(Chosen(w).bottleneck, "nvlink");
  EXPECT_EQ(Find(w, StrategyKind::kTpDedup).bottleneck, "network");
  SearchOptions split;
  split.pipeline = PipelineResources::kCopySeparate;
  const Decision s =
      DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2), split);
  EXPECT_LT(Chosen(s).total_seconds_per_layer,
            Chosen(d).total_seconds_per_layer);
}

TEST(StrategySearch, HierarchicalWinsOnlyWhenLatencyBound) {
  // 32 nodes x 8, t = 1, EP 256: flat pays 255 peers of launch latency.
  MoeJobShape job = PaperJobShape();
  job.world_size = 256;
  job.tensor_parallel_size = 1;
  job.expert_parallel_size = 256;
  job.num_experts = 256;
  job.data_parallel_size = 256;
  job.top_k = 8;
  job.hidden_size = 64;
  job.sequence_length = 1024;
  const ClusterView view = View("h100-hgx", 32);
  const Decision small = DecideOrDie(job, {32, 8}, view);
  EXPECT_EQ(Chosen(small).kind, StrategyKind::kHierarchical);
  job.hidden_size = 8192;
  job.sequence_length = 8192;
  const Decision large = DecideOrDie(job, {32, 8}, view);
  EXPECT_LT(Find(large, StrategyKind::kFlat).rank,
            Find(large, StrategyKind::kHierarchical).rank);
}

TEST(StrategySearch, ExpertOverlapNeedsComputeTime) {
  MoeJobShape job = PaperJobShape();
  job.tensor_parallel_size = 1;
  job.expert_parallel_size = 16;
  job.num_experts = 16;
  job.data_parallel_size = 16;
  Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  EXPECT_FALSE(Find(d, StrategyKind::kExpertOverlap).feasible);
  job.expert_compute_seconds = 0.02;
  d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  const Candidate& overlap = Find(d, StrategyKind::kExpertOverlap);
  EXPECT_TRUE(overlap.feasible);
  EXPECT_GT(overlap.chunks_effective, 1);
  EXPECT_GT(overlap.speedup_over_flat, 1);
}

TEST(StrategySearch, AllowedListAndOptionsAreHonoured) {
  SearchOptions options;
  options.allowed = {StrategyKind::kFlat, StrategyKind::kTpDedup};
  const Decision d =
      DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2), options);
  EXPECT_EQ(d.candidates.size(), 2u);
  EXPECT_EQ(Chosen(d).kind, StrategyKind::kTpDedup);
  options = {};
  options.max_chunks = 2;
  const Decision capped =
      DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2), options);
  EXPECT_LE(Find(capped, StrategyKind::kTpDedupPipelined).chunks_effective, 2);
  options.max_chunks = 0;
  EXPECT_FALSE(
      Decide(PaperJobShape(), {2, 8}, View("a800-hgx", 2), options).ok());
  EXPECT_FALSE(Decide(PaperJobShape(), {2, 8}, ClusterView{}, {}).ok());
}

TEST(StrategySearch, MeasuredCurveOutsideItsRangeIsReported) {
  ClusterView view = View("a800-hgx", 2);
  // A measured inter-node curve that stops at 1 MiB per rank.
  std::vector<CurveSample> samples;
  for (double x = 1024; x <= (1 << 20); x *= 4) {
    samples.push_back({x, 30e-6 + 0.5 * x / 11e9});
  }
  auto measured = BandwidthCurve::FromSamples(bandwidth::Collective::kAllToAll,
                                              16, 8, std::move(samples));
  ASSERT_TRUE(measured.ok());
  view.alltoall_inter = *measured;
  const Decision d = DecideOrDie(PaperJobShape(), {2, 8}, view);
  EXPECT_TRUE(d.extrapolated.alltoall_inter);
  EXPECT_FALSE(d.extrapolated.copy);  // profile curves never extrapolate
}

TEST(StrategySearch, NoExpertParallelismMeansNoAllToAll) {
  MoeJobShape job = PaperJobShape();
  job.expert_parallel_size = 1;
  const Decision d = DecideOrDie(job, {2, 8}, View("a800-hgx", 2));
  const Candidate& c = Chosen(d);
  EXPECT_EQ(c.kind, StrategyKind::kFlat);
  EXPECT_EQ(c.total_seconds_per_layer, 0);
  EXPECT_EQ(c.bottleneck, "none");
  EXPECT_FALSE(Find(d, StrategyKind::kTpDedup).feasible);
  ASSERT_FALSE(d.notes.empty());
}

// A curve "measured" on a profile's own alpha-beta line, 1 KiB .. 16 GiB.
BandwidthCurve Sampled(const BandwidthCurve& profile_curve) {
  std::vector<CurveSample> samples;
  for (double x = 1024; x <= 16.0 * (1ull << 30); x *= 2) {
    samples.push_back({x, profile_curve.TimeSeconds(x).seconds});
  }
  auto c = BandwidthCurve::FromSamples(profile_curve.collective(),
                                       profile_curve.nranks(),
                                       profile_curve.ranks_per_node(), samples);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(StrategySearch, MeasuredCurvesOfTheProfileGiveTheProfilesAnswer) {
  const ClusterView profile = View("a800-hgx", 2);
  ClusterView measured = profile;
  measured.alltoall_intra = Sampled(profile.alltoall_intra);
  measured.alltoall_inter = Sampled(profile.alltoall_inter);
  measured.allgather_intra = Sampled(profile.allgather_intra);
  measured.copy = Sampled(profile.copy);
  for (int64_t hidden : {256, 2048, 8192, 32768}) {
    MoeJobShape job = PaperJobShape();
    job.hidden_size = hidden;
    const Decision a = DecideOrDie(job, {2, 8}, profile);
    const Decision b = DecideOrDie(job, {2, 8}, measured);
    EXPECT_FALSE(b.extrapolated.any());
    EXPECT_EQ(Chosen(a).kind, Chosen(b).kind) << "hidden " << hidden;
    EXPECT_NEAR(Chosen(b).total_seconds_per_layer,
                Chosen(a).total_seconds_per_layer,
                0.03 * Chosen(a).total_seconds_per_layer)
        << "hidden " << hidden;
  }
}

// perf/verify_bench.sh's 4 MiB job (examples/cpu-dev.yaml at sequence 1024):
// TP 2 inside each of 2 CPU nodes, EP 2 across them, tensor-parallel experts.
MoeJobShape VerifyBenchJob(int sequence_length = 1024) {
  MoeJobShape j = PaperJobShape();  // bf16, capacity factor 1, one micro-batch
  j.hidden_size = 1024;
  j.num_experts = 8;
  j.top_k = 2;
  j.sequence_length = sequence_length;  // 1024: 4 MiB per rank, 4096: 16 MiB
  j.moe_layers = 4;
  j.world_size = 4;
  j.tensor_parallel_size = 2;
  return j;  // EP 2, DP 2, tensor-parallel experts as the paper's
}

// The inter-node AllToAll curve of the quiet verify bench at 400 Mbit/s
// (4 ranks on 2 nodes; docs/notes bench vb/2x400mbit-bench.txt), the 64 KiB
// launch at `first_seconds` (3.984 ms measured).
// The pipeline's chunk bound for `job` on 2 nodes x 2 ranks of `view`.
int PipelineBound(const MoeJobShape& job, const ClusterView& view) {
  return Find(DecideOrDie(job, {2, 2}, view), StrategyKind::kTpDedupPipelined)
      .chunks_resolved_max;
}

// Whether a note of `d` starts with `prefix` and contains `part`.
bool Noted(const Decision& d, const std::string& prefix,
           const std::string& part = "") {
  for (const std::string& n : d.notes) {
    if (n.find(prefix) == 0 && n.find(part) != std::string::npos) return true;
  }
  return false;
}

ClusterView InterLinkView(std::vector<CurveSample> samples) {
  ClusterView view = View("cpu-gloo", 2, 2);
  auto inter = BandwidthCurve::FromSamples(bandwidth::Collective::kAllToAll, 4,
                                           2, std::move(samples));
  EXPECT_TRUE(inter.ok()) << inter.status();
  view.alltoall_inter = *inter;
  return view;
}

ClusterView ShapedLinkView(double first_seconds) {
  return InterLinkView({{65536, first_seconds},
                        {262144, 5.601e-3},
                        {1048576, 23.299e-3},
                        {4194304, 89.106e-3},
                        {16777216, 377.779e-3}});
}

// docs/MODEL.md §5, the chunk bound. At 4 MiB the verify bench measured
// K = 8 at 355 ms against 194 ms predicted (chunks of 256 KiB per rank,
// 5.9 ms on the link: 2.4x the 2.48 ms the 64 KiB launch took beyond its
// bytes); the bound stops the search where a chunk falls under 2.75x that
// floor: 2 MiB / K >= 2.75 * 2.48 ms * 22.2 MB/s * 2, K <= 6.
TEST(StrategySearch, ChunksStayAboveTheCurvesLaunchFloor) {
  const ClusterView view = ShapedLinkView(3.984e-3);
  EXPECT_NEAR(view.alltoall_inter.launch_floor_seconds(), 2.480e-3, 0.01e-3);
  const Decision d = DecideOrDie(VerifyBenchJob(), {2, 2}, view);
  const Candidate& pipe = Find(d, StrategyKind::kTpDedupPipelined);
  EXPECT_EQ(pipe.chunks_resolved_max, 6);
  EXPECT_LE(pipe.chunks_effective, 6);
  EXPECT_TRUE(Noted(d, "tp_dedup_pipelined: K searched up to 6"));
  // Without the bound the same curve's best K is above it: the bound, not
  // the prices, keeps the choice small.
  const Decision free = DecideOrDie(VerifyBenchJob(), {2, 2},
                                    ShapedLinkView(0.74e-3));  // on the line
  EXPECT_EQ(Find(free, StrategyKind::kTpDedupPipelined).chunks_resolved_max, 0);
  EXPECT_GT(Find(free, StrategyKind::kTpDedupPipelined).chunks_effective, 6);
  // A K the caller fixes is priced as asked; the bound is still reported.
  SearchOptions fixed;
  fixed.fixed_chunks = 16;
  const Decision f = DecideOrDie(VerifyBenchJob(), {2, 2}, view, fixed);
  EXPECT_EQ(Find(f, StrategyKind::kTpDedupPipelined).chunks_effective, 16);
  EXPECT_EQ(Find(f, StrategyKind::kTpDedupPipelined).chunks_resolved_max, 6);
  // 16 MiB: chunks four times larger, the bound four times higher.
  EXPECT_EQ(PipelineBound(VerifyBenchJob(4096), view), 27);
}

// The 1 Gbit/s inter-node AllToAll curve of issue 18's quiet verify bench at
// d867e2a (4 ranks on 2 nodes): its 64 KiB launch ran at the link's rate
// (0.583 ms), so the curve's launch floor is nearly 0 and bounds no K.
ClusterView GigabitLinkView() {
  return InterLinkView({{65536, 0.583e-3},
                        {262144, 2.531e-3},
                        {1048576, 9.010e-3},
                        {4194304, 35.753e-3},
                        {16777216, 147.542e-3}});
}

// docs/MODEL.md §5 and §11: the calibration's per-chunk overhead is a fixed
// cost every pipelined chunk pays, so it raises the chunk bound's floor. That
// bench's fit (per-chunk overhead 0.76 ms, network x0.917, from its 8 and
// 32 MiB runs) priced K = 32 at 4 MiB (64 KiB chunks) 278 ms against 166 ms
// measured: the K search, and verify's sweep, ran K = 16 and 32 there
// because the near-zero launch floor bounded nothing. With the overhead in
// the floor a chunk must take 2.75 x 0.76 ms: at 4 MiB K <= 8 (256 KiB
// chunks, 2.2 ms on the link), at 16 MiB K <= 32.
TEST(StrategySearch, TheCalibratedChunkOverheadRaisesTheChunkBound) {
  ClusterView view = GigabitLinkView();
  EXPECT_LT(view.alltoall_inter.launch_floor_seconds(), 0.01e-3);
  const Decision free = DecideOrDie(VerifyBenchJob(), {2, 2}, view);
  EXPECT_EQ(Find(free, StrategyKind::kTpDedupPipelined).chunks_resolved_max, 0);
  view.calibration.per_chunk_overhead_seconds = 0.7616e-3;
  view.calibration.network_scale = 0.917;
  const Decision d = DecideOrDie(VerifyBenchJob(), {2, 2}, view);
  const Candidate& pipe = Find(d, StrategyKind::kTpDedupPipelined);
  EXPECT_EQ(pipe.chunks_resolved_max, 8);
  EXPECT_LE(pipe.chunks_effective, 8);
  EXPECT_TRUE(Noted(d, "tp_dedup_pipelined: K searched up to 8",
                    "plus the calibrated 0.7616 ms per-chunk overhead"));
  EXPECT_EQ(PipelineBound(VerifyBenchJob(4096), view), 33);
  // Experts not tensor-parallel: the gathered ops' chunks are the same D/(tK).
  MoeJobShape whole = VerifyBenchJob();
  whole.expert_layout = ExpertLayout::kNotTensorParallel;
  EXPECT_EQ(PipelineBound(whole, view), 8);
}

TEST(StrategySearch, SameInputSameAnswer) {
  const Decision a = DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2));
  const Decision b = DecideOrDie(PaperJobShape(), {2, 8}, View("a800-hgx", 2));
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  for (size_t i = 0; i < a.candidates.size(); ++i) {
    EXPECT_EQ(a.candidates[i].name, b.candidates[i].name);
    EXPECT_EQ(a.candidates[i].total_seconds_per_layer,
              b.candidates[i].total_seconds_per_layer);
    EXPECT_EQ(a.candidates[i].chunks_effective,
              b.candidates[i].chunks_effective);
  }
}

}  // namespace
}  // namespace monta::model
