#include "server/planning/strategy_planner.h"

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/strategy/strategy_proto.h"
#include "gtest/gtest.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "tests/testing/paper_job.h"

namespace monta::planning {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

class FakeLookup : public NodeLookup {
 public:
  void Add(NodeFacts facts) { nodes_[facts.name] = std::move(facts); }
  NodeFacts& at(const std::string& name) { return nodes_.at(name); }
  std::optional<NodeFacts> Find(absl::string_view name) const override {
    auto it = nodes_.find(std::string(name));
    if (it == nodes_.end()) return std::nullopt;
    return it->second;
  }
  void SetFabric(const v1::FabricReply* fabric) { fabric_ = fabric; }
  const v1::FabricReply* Fabric() const override { return fabric_; }

 private:
  std::map<std::string, NodeFacts> nodes_;
  const v1::FabricReply* fabric_ = nullptr;
};

NodeFacts A800(const std::string& name) {
  NodeFacts f;
  f.name = name;
  f.gpu_count = 8;
  f.gpu_name = "NVIDIA A800-SXM4-80GB";
  return f;
}

// The paper's job (examples/monta-paper-2x70b.yaml) placed on registered
// nodes by name instead of the example's profile.
v1::StrategyRequest PaperJobOn(const std::vector<std::string>& nodes) {
  v1::StrategyRequest r = testing::PaperJobRequest();
  r.clear_placement();
  for (const std::string& n : nodes) r.mutable_placement()->add_node_names(n);
  return r;
}

// An nccl-tests-shaped curve: T = alpha + link_share * x / rate, over
// [min_bytes, max_bytes] by factors of 4, that the planner received at
// `received_at` (its sequence: the seconds since the epoch, so later is
// newer; the agents' measured_at claims the same time).
v1::BandwidthCurve Curve(v1::Collective collective,
                         const std::vector<std::string>& nodes, int nranks,
                         double alpha_seconds, double link_bytes_per_second,
                         double min_bytes, double max_bytes,
                         absl::Time received_at, const std::string& task) {
  v1::BandwidthCurve c;
  c.set_collective(collective);
  const int n_nodes = static_cast<int>(nodes.size());
  c.set_scope(n_nodes > 1 ? v1::SCOPE_INTER_NODE : v1::SCOPE_INTRA_NODE);
  c.set_backend(v1::BACKEND_NCCL);
  c.set_nranks(nranks);
  c.set_n_nodes(n_nodes);
  for (const std::string& n : nodes) c.add_nodes(n);
  c.set_task_id(task);
  c.mutable_measured_at()->set_seconds(absl::ToUnixSeconds(received_at));
  c.mutable_received_at()->set_seconds(absl::ToUnixSeconds(received_at));
  c.set_sequence(static_cast<uint64_t>(absl::ToUnixSeconds(received_at)));
  const double n = nranks;
  const double share = collective == v1::COLLECTIVE_COPY ? 1.0
                       : n_nodes > 1                     ? (n - n / n_nodes) / n
                                                         : (n - 1) / n;
  for (double x = min_bytes; x <= max_bytes; x *= 4) {
    v1::CurvePoint* p = c.add_points();
    p->set_message_bytes(static_cast<uint64_t>(x));
    p->set_time_seconds(alpha_seconds + share * x / link_bytes_per_second);
  }
  return c;
}

const v1::CurveEvidence* Evidence(const v1::StrategyReply& r,
                                  v1::CurveRole role) {
  for (const v1::CurveEvidence& c : r.evidence().curves()) {
    if (c.used_as() == role) return &c;
  }
  return nullptr;
}

TEST(PlanStrategy, ProfilePlacementReproducesThePaper) {
  // The example as written: profile a800-hgx, 2 nodes, AllToAll 30% of the
  // step.
  auto reply = PlanStrategy(testing::PaperJobRequest(), nullptr, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->chosen().kind(), v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  EXPECT_GT(reply->chosen().chunks_effective(), 1);
  EXPECT_GE(reply->chosen().speedup_over_flat(), 4.0);
  EXPECT_GT(reply->chosen().predicted_step_gain_ratio(), 0.1);
  EXPECT_EQ(reply->chosen().rank(), 1);
  EXPECT_EQ(reply->evidence().origin(), v1::EVIDENCE_SOURCE_PROFILE);
  EXPECT_EQ(reply->evidence().profile(), "a800-hgx");
  EXPECT_FALSE(reply->evidence().profile_version().empty());
  EXPECT_EQ(reply->traffic().nodes(), 2);
  EXPECT_EQ(reply->traffic().ep_members_on_node(), 1);
  EXPECT_EQ(reply->traffic().capacity_tokens(), 4096);
  EXPECT_EQ(reply->traffic().dispatch_bytes(), 2ull * 4096 * 8192 * 2);
  EXPECT_EQ(reply->candidates_size(), 5);
  // Every feasible candidate names its bottleneck: the model's resource names
  // all map onto the Bottleneck enum.
  for (const v1::Candidate& c : reply->candidates()) {
    if (c.feasible()) {
      EXPECT_NE(c.limited_by(), v1::BOTTLENECK_UNSPECIFIED) << c.DebugString();
    }
  }
}

TEST(PlanStrategy, FixedChunksEvaluatesExactlyThatK) {
  v1::StrategyRequest request = testing::PaperJobRequest();
  request.mutable_options()->add_allowed(v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  auto searched = PlanStrategy(request, nullptr, kNow);
  ASSERT_TRUE(searched.ok()) << searched.status();
  const int best_k = searched->chosen().chunks_effective();
  request.mutable_options()->set_fixed_chunks(best_k == 2 ? 3 : 2);
  auto fixed = PlanStrategy(request, nullptr, kNow);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->chosen().chunks_requested(), best_k == 2 ? 3 : 2);
  // The search's K is the best: any other K costs at least as much.
  EXPECT_GE(fixed->chosen().total_seconds_per_layer(),
            searched->chosen().total_seconds_per_layer());
}

TEST(PlanStrategy, RegisteredNodesInferTheirProfile) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->evidence().profile(), "a800-hgx");
  EXPECT_EQ(reply->evidence().origin(), v1::EVIDENCE_SOURCE_PROFILE);
  EXPECT_EQ(reply->chosen().kind(), v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
}

TEST(PlanStrategy, UnknownNodeIsNotFound) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  auto reply = PlanStrategy(PaperJobOn({"a", "ghost"}), &lookup, kNow);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(reply.status().message().find("placement.node_names[1]"),
            std::string::npos);
  EXPECT_NE(reply.status().message().find("ghost"), std::string::npos);
}

TEST(PlanStrategy, NodeProblemsNameTheNode) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  NodeFacts t4 = A800("b");
  t4.gpu_name = "Tesla T4";
  lookup.Add(t4);
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(reply.status().message().find("node_names[1]"), std::string::npos);

  NodeFacts small = A800("c");
  small.gpu_count = 4;
  lookup.Add(small);
  reply = PlanStrategy(PaperJobOn({"a", "c"}), &lookup, kNow);
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("placement.gpus_per_node"),
            std::string::npos);

  reply = PlanStrategy(PaperJobOn({"a", "a"}), &lookup, kNow);
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("listed twice"), std::string::npos);
}

TEST(PlanStrategy, MeasuredCurvesWinAndCarryTheirAge) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  const absl::Time then = kNow - absl::Seconds(120);
  // Both nodes measured inside; the inter-node pair measured too, with a
  // network half as fast as the profile claims.
  for (const char* n : {"a", "b"}) {
    lookup.at(n).curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {n}, 8, 15e-6,
                                        150e9, 1024, 4e9, then, "t-intra"));
    lookup.at(n).curves.push_back(Curve(v1::COLLECTIVE_ALLGATHER, {n}, 8, 12e-6,
                                        150e9, 1024, 4e9, then, "t-ag"));
    lookup.at(n).curves.push_back(Curve(v1::COLLECTIVE_COPY, {n}, 1, 5e-6,
                                        700e9, 1024, 4e9, then, "t-copy"));
    lookup.at(n).curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"}, 16,
                                        30e-6, 6e9, 1024, 4e9, then,
                                        "t-inter"));
  }
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->evidence().origin(), v1::EVIDENCE_SOURCE_MEASURED);
  const v1::CurveEvidence* inter =
      Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTER);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->origin(), v1::EVIDENCE_SOURCE_MEASURED);
  EXPECT_EQ(inter->task_id(), "t-inter");
  EXPECT_DOUBLE_EQ(inter->age_seconds(), 120);
  EXPECT_EQ(inter->nodes_size(), 2);
  EXPECT_FALSE(inter->extrapolated());
  EXPECT_EQ(inter->min_bytes(), 1024u);

  // The slower measured network makes flat slower than the profile predicts.
  v1::StrategyRequest by_profile = PaperJobOn({});
  by_profile.mutable_placement()->set_profile("a800-hgx");
  by_profile.mutable_placement()->set_nodes(2);
  auto profile_reply = PlanStrategy(by_profile, nullptr, kNow);
  ASSERT_TRUE(profile_reply.ok());
  auto flat_total = [](const v1::StrategyReply& r) {
    for (const v1::Candidate& c : r.candidates()) {
      if (c.kind() == v1::STRATEGY_KIND_FLAT)
        return c.total_seconds_per_layer();
    }
    return 0.0;
  };
  EXPECT_GT(flat_total(*reply), 1.5 * flat_total(*profile_reply));
}

TEST(PlanStrategy, SlowestNodeBoundsAndMissingNodesMakeItMixed) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  lookup.Add(A800("c"));
  lookup.Add(A800("d"));
  const absl::Time then = kNow - absl::Seconds(10);
  lookup.at("a").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {"a"}, 8,
                                        15e-6, 160e9, 1024, 4e9, then, "fast"));
  lookup.at("b").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {"b"}, 8,
                                        15e-6, 40e9, 1024, 4e9, then, "slow"));
  // Four nodes, TP 2, EP 4: n_s = 4, so the AllToAll uses NVLink too.
  v1::StrategyRequest r = PaperJobOn({"a", "b"});
  r.mutable_job()->set_tensor_parallel_size(2);
  r.mutable_job()->set_expert_parallel_size(4);
  r.mutable_job()->set_num_experts(4);
  r.mutable_job()->set_data_parallel_size(8);
  auto reply = PlanStrategy(r, &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const v1::CurveEvidence* intra =
      Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTRA);
  ASSERT_NE(intra, nullptr);
  EXPECT_EQ(intra->task_id(), "slow");
  EXPECT_EQ(reply->evidence().origin(), v1::EVIDENCE_SOURCE_MIXED);

  // With c and d unmeasured the profile (164 GB/s) is faster than b's 40
  // GB/s, so b still bounds, and the notes say who fell back.
  r.mutable_placement()->add_node_names("c");
  r.mutable_placement()->add_node_names("d");
  r.mutable_job()->set_world_size(32);
  r.mutable_job()->set_data_parallel_size(16);
  reply = PlanStrategy(r, &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTRA)->task_id(), "slow");
  bool noted = false;
  for (const std::string& n : reply->evidence().notes()) {
    if (n.find("c, d not measured") != std::string::npos) noted = true;
  }
  EXPECT_TRUE(noted);
}

TEST(PlanStrategy, ShortCurvesAreExtrapolatedAndSaySo) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  // Measured only up to 1 MiB; the job needs tens of MiB.
  lookup.at("a").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"}, 16,
                                        30e-6, 11e9, 1024, 1 << 20,
                                        kNow - absl::Hours(1), "short"));
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const v1::CurveEvidence* inter =
      Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTER);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->origin(), v1::EVIDENCE_SOURCE_MEASURED);
  EXPECT_TRUE(inter->extrapolated());
  EXPECT_EQ(reply->evidence().origin(), v1::EVIDENCE_SOURCE_MIXED);
}

TEST(PlanStrategy, BrokenCurvesAreIgnoredWithANote) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  v1::BandwidthCurve bad = Curve(v1::COLLECTIVE_ALLTOALL, {"a"}, 8, 15e-6,
                                 150e9, 1024, 4e9, kNow, "bad");
  bad.mutable_points(1)->set_wrong_bytes(7);
  lookup.at("a").curves.push_back(bad);
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTRA)->origin(),
            v1::EVIDENCE_SOURCE_PROFILE);
  bool noted = false;
  for (const std::string& n : reply->evidence().notes()) {
    if (n.find("\"bad\" ignored") != std::string::npos) noted = true;
  }
  EXPECT_TRUE(noted);
}

// Which curve is newest is the planner's sequence; the agents' measured_at
// (here a forgery dated 100 years ahead) neither orders nor ages evidence.
TEST(PlanStrategy, TheSequenceOrdersEvidenceNotTheAgentsClock) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  v1::BandwidthCurve forged =
      Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"}, 16, 10, 1e3, 1024, 4e9,
            kNow - absl::Hours(2), "forged");
  forged.mutable_measured_at()->set_seconds(
      absl::ToUnixSeconds(kNow + absl::Hours(24 * 365 * 100)));
  forged.set_nranks(8);  // another measurement than the honest one
  const v1::BandwidthCurve honest =
      Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"}, 16, 30e-6, 6e9, 1024, 4e9,
            kNow - absl::Hours(1), "honest");
  for (const char* n : {"a", "b"}) {
    lookup.at(n).curves.push_back(forged);
    lookup.at(n).curves.push_back(honest);
  }
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const v1::CurveEvidence* inter =
      Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTER);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->task_id(), "honest");
  EXPECT_DOUBLE_EQ(inter->age_seconds(), 3600);
  // Newer by sequence wins even when its claim is older.
  for (const char* n : {"a", "b"}) {
    lookup.at(n).curves.clear();
    v1::BandwidthCurve later = forged;
    later.set_task_id("later");
    later.set_sequence(honest.sequence() + 1);
    later.mutable_measured_at()->set_seconds(0);
    lookup.at(n).curves.push_back(honest);
    lookup.at(n).curves.push_back(later);
  }
  reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTER)->task_id(),
            "later");
}

// A curve measured on a node set affects only plans that include all of its
// nodes: neither b's slow curves (its own, a pair with a, a pair with c), nor
// its exclusions, nor a "single-node" curve that names b besides a change the
// plan for a and c.
TEST(PlanStrategy, ANodesCurvesChangeNoPlanWithoutIt) {
  FakeLookup lookup;
  for (const char* n : {"a", "b", "c"}) lookup.Add(A800(n));
  const absl::Time then = kNow - absl::Minutes(5);
  for (const char* n : {"a", "c"}) {
    lookup.at(n).curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {n}, 8, 15e-6,
                                        150e9, 1024, 4e9, then, "intra"));
  }
  lookup.at("a").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL, {"a", "c"}, 16,
                                        30e-6, 6e9, 1024, 4e9, then, "ac"));
  lookup.at("c").curves.push_back(lookup.at("a").curves.back());
  auto before = PlanStrategy(PaperJobOn({"a", "c"}), &lookup, kNow);
  ASSERT_TRUE(before.ok()) << before.status();

  const absl::Time later = kNow - absl::Minutes(1);
  const v1::BandwidthCurve slow_b = Curve(v1::COLLECTIVE_ALLTOALL, {"b"}, 8, 10,
                                          1e3, 1024, 4e9, later, "slow-b");
  const v1::BandwidthCurve slow_ab = Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"},
                                           16, 10, 1e3, 1024, 4e9, later, "ab");
  const v1::BandwidthCurve slow_bc = Curve(v1::COLLECTIVE_ALLTOALL, {"b", "c"},
                                           16, 10, 1e3, 1024, 4e9, later, "bc");
  v1::BandwidthCurve b_speaks_for_a = slow_ab;  // intra-shaped, naming both
  b_speaks_for_a.set_scope(v1::SCOPE_INTRA_NODE);
  b_speaks_for_a.set_n_nodes(1);
  b_speaks_for_a.set_task_id("b-for-a");
  lookup.at("b").curves = {slow_b, slow_ab, slow_bc};
  lookup.at("a").curves.push_back(slow_ab);
  lookup.at("a").curves.push_back(b_speaks_for_a);
  lookup.at("c").curves.push_back(slow_bc);
  v1::ExcludedCurve excluded;
  *excluded.mutable_curve() = slow_ab;
  excluded.set_reason(v1::EXCLUSION_REASON_NODES_DISAGREE);
  excluded.set_detail("b claimed 10 s");
  lookup.at("a").excluded.push_back(excluded);
  lookup.at("b").excluded.push_back(excluded);

  auto after = PlanStrategy(PaperJobOn({"a", "c"}), &lookup, kNow);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->SerializeAsString(), before->SerializeAsString())
      << "before:\n"
      << before->evidence().DebugString() << "after:\n"
      << after->evidence().DebugString();
  // The plan with b does see them.
  auto with_b = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(with_b.ok()) << with_b.status();
  EXPECT_GT(with_b->chosen().total_seconds_per_layer(),
            100 * after->chosen().total_seconds_per_layer());
}

// An exclusion newer than the curve planned with is named in the notes.
TEST(PlanStrategy, ANewerExclusionIsNoted) {
  FakeLookup lookup;
  lookup.Add(A800("a"));
  lookup.Add(A800("b"));
  const v1::BandwidthCurve honest =
      Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"}, 16, 30e-6, 6e9, 1024, 4e9,
            kNow - absl::Hours(1), "honest");
  v1::ExcludedCurve excluded;
  *excluded.mutable_curve() =
      Curve(v1::COLLECTIVE_ALLTOALL, {"a", "b"}, 16, 10, 1e3, 1024, 4e9,
            kNow - absl::Minutes(1), "forged");
  excluded.mutable_curve()->clear_points();
  excluded.set_reason(v1::EXCLUSION_REASON_NODES_DISAGREE);
  excluded.set_detail("node b's median 10 s is 1000x node a's");
  for (const char* n : {"a", "b"}) {
    lookup.at(n).curves.push_back(honest);
    lookup.at(n).excluded.push_back(excluded);
  }
  auto reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(Evidence(*reply, v1::CURVE_ROLE_ALLTOALL_INTER)->task_id(),
            "honest");
  int notes = 0;
  for (const std::string& n : reply->evidence().notes()) {
    if (n.find("task forged on a,b was excluded (nodes_disagree") !=
            std::string::npos &&
        n.find("planning with task honest") != std::string::npos) {
      ++notes;
    }
  }
  EXPECT_EQ(notes, 1);  // once, though both nodes hold the exclusion
  // An older exclusion is history: no note.
  for (const char* n : {"a", "b"}) {
    lookup.at(n)
        .excluded[0]
        .mutable_curve()
        ->mutable_received_at()
        ->set_seconds(absl::ToUnixSeconds(kNow - absl::Hours(2)));
  }
  reply = PlanStrategy(PaperJobOn({"a", "b"}), &lookup, kNow);
  for (const std::string& n : reply->evidence().notes()) {
    EXPECT_EQ(n.find("excluded"), std::string::npos) << n;
  }
}

TEST(PlanStrategy, CpuNodesUseTheGlooProfile) {
  FakeLookup lookup;
  for (const char* n : {"dev-0", "dev-1"}) {
    NodeFacts f;
    f.name = n;
    lookup.Add(f);
  }
  v1::StrategyRequest r;
  v1::MoeJob* j = r.mutable_job();
  j->set_hidden_size(256);
  j->set_num_experts(4);
  j->set_top_k(2);
  j->set_capacity_factor(1);
  j->set_micro_batch_size(1);
  j->set_sequence_length(512);
  j->set_bytes_per_element(4);
  j->set_moe_layers(2);
  j->set_world_size(4);
  j->set_tensor_parallel_size(1);
  j->set_expert_parallel_size(4);
  j->set_pipeline_parallel_size(1);
  j->set_data_parallel_size(4);
  r.mutable_placement()->add_node_names("dev-0");
  r.mutable_placement()->add_node_names("dev-1");
  auto reply = PlanStrategy(r, &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->evidence().profile(), "cpu-gloo");
  EXPECT_EQ(reply->traffic().gpus_per_node(), 2);
  // CPU ranks have no NVLink: their intra-node path is loopback.
  for (const v1::Candidate& c : reply->candidates()) {
    EXPECT_NE(c.limited_by(), v1::BOTTLENECK_NVLINK) << c.DebugString();
  }
  // On one node everything rides the host's loopback stack: named so.
  r.mutable_placement()->clear_node_names();
  r.mutable_placement()->add_node_names("dev-0");
  j->set_world_size(2);
  j->set_expert_parallel_size(2);
  j->set_data_parallel_size(2);
  j->set_sequence_length(65536);
  reply = PlanStrategy(r, &lookup, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  int loopback = 0;
  for (const v1::Candidate& c : reply->candidates()) {
    EXPECT_NE(c.limited_by(), v1::BOTTLENECK_NVLINK) << c.DebugString();
    loopback += c.limited_by() == v1::BOTTLENECK_LOOPBACK;
  }
  EXPECT_GT(loopback, 0) << reply->DebugString();
}

TEST(PlanStrategy, ClusterPastTheBoundsNamesTheField) {
  v1::StrategyRequest r = testing::PaperJobRequest();
  r.mutable_placement()->set_nodes(100000);
  auto reply = PlanStrategy(r, nullptr, kNow);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      reply.status().message().find("placement.nodes: must be in 1..8192"),
      std::string::npos)
      << reply.status();
  r = testing::PaperJobRequest();
  r.mutable_job()->set_world_size(8 * 16384);
  r.mutable_job()->set_data_parallel_size(16384);
  r.mutable_placement()->set_nodes(16384);
  reply = PlanStrategy(r, nullptr, kNow);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      reply.status().message().find("job.world_size: must be in 1..65536"),
      std::string::npos)
      << reply.status();
}

bool HasNote(const v1::StrategyReply& r, const std::string& text) {
  for (const std::string& n : r.evidence().notes()) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(PlanStrategy, PaddedDedupIsOfferedAndTheUnpaddedReasonKept) {
  v1::StrategyRequest r = testing::PaperJobRequest();
  r.mutable_job()->set_sequence_length(8200);  // C = 4100, C mod 8 = 4
  auto reply = PlanStrategy(r, nullptr, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->chosen().kind(), v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  EXPECT_GT(reply->chosen().speedup_over_flat(), 4.0);
  EXPECT_TRUE(HasNote(*reply, "tp_dedup unpadded infeasible: capacity C=4100"));
  EXPECT_TRUE(HasNote(*reply, "4100 -> 4104"));
  // The traffic is the job's own, unpadded.
  EXPECT_EQ(reply->traffic().capacity_tokens(), 4100);
}

TEST(PlanStrategy, LatencyPastItsSourcedGroupsIsFlagged) {
  v1::StrategyRequest r = testing::PaperJobRequest();
  v1::MoeJob* j = r.mutable_job();
  j->set_num_experts(64);
  j->set_expert_parallel_size(64);
  j->set_world_size(512 * 8);
  j->set_data_parallel_size(512);
  r.mutable_placement()->set_profile("h100-hgx");
  r.mutable_placement()->set_nodes(512);
  auto reply = PlanStrategy(r, nullptr, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->chosen().kind(), v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  EXPECT_GT(reply->chosen().chunks_effective(), 1);
  EXPECT_TRUE(HasNote(*reply, "alltoall latency extrapolated"));
  EXPECT_TRUE(
      HasNote(*reply, "groups of 8 to 32 ranks and applied to a group of 64"));
  // Below the source range too: the paper's EP group of 2 (issue 18).
  auto paper = PlanStrategy(testing::PaperJobRequest(), nullptr, kNow);
  ASSERT_TRUE(paper.ok()) << paper.status();
  EXPECT_TRUE(
      HasNote(*paper, "groups of 8 to 32 ranks and applied to a group of 2"));
  // Inside it (EP 16, flat only: hierarchical's groups would be 8 and 2).
  v1::StrategyRequest inside = testing::PaperJobRequest();
  inside.mutable_job()->set_tensor_parallel_size(1);
  inside.mutable_job()->set_expert_parallel_size(16);
  inside.mutable_job()->set_num_experts(16);
  inside.mutable_job()->set_data_parallel_size(16);
  inside.mutable_job()->set_world_size(16);
  inside.mutable_options()->add_allowed(v1::STRATEGY_KIND_FLAT);
  auto within = PlanStrategy(inside, nullptr, kNow);
  ASSERT_TRUE(within.ok()) << within.status();
  EXPECT_FALSE(HasNote(*within, "latency extrapolated"));
}

const v1::Candidate& KindOf(const v1::StrategyReply& r, v1::StrategyKind k) {
  for (const v1::Candidate& c : r.candidates()) {
    if (c.kind() == k) return c;
  }
  ADD_FAILURE() << "no candidate " << k;
  return v1::Candidate::default_instance();
}

// Issue 18's done-when: the paper job and the same job with experts not
// tensor-parallel each name the layout priced; the tensor-parallel one
// charges 4 AllGathers per layer and the other 2, its tp_dedup the cheaper.
// A job that does not say gets the named default, never a silent false.
TEST(PlanStrategy, RepliesNameTheExpertLayoutPriced) {
  v1::StrategyRequest tp = testing::PaperJobRequest();
  auto a = PlanStrategy(tp, nullptr, kNow);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->expert_layout(), v1::EXPERT_LAYOUT_TENSOR_PARALLEL);
  const v1::Candidate& tp_dedup = KindOf(*a, v1::STRATEGY_KIND_TP_DEDUP);
  EXPECT_EQ(tp_dedup.alltoalls_per_layer(), 4);
  EXPECT_EQ(tp_dedup.allgathers_per_layer(), 4);
  EXPECT_EQ(KindOf(*a, v1::STRATEGY_KIND_FLAT).allgathers_per_layer(), 0);
  EXPECT_FALSE(HasNote(*a, "not given"));

  v1::StrategyRequest whole = tp;
  whole.mutable_job()->set_experts_tensor_parallel(false);
  auto b = PlanStrategy(whole, nullptr, kNow);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->expert_layout(), v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL);
  const v1::Candidate& whole_dedup = KindOf(*b, v1::STRATEGY_KIND_TP_DEDUP);
  EXPECT_EQ(whole_dedup.alltoalls_per_layer(), 4);
  EXPECT_EQ(whole_dedup.allgathers_per_layer(), 2);
  EXPECT_LT(whole_dedup.total_seconds_per_layer(),
            tp_dedup.total_seconds_per_layer());
  EXPECT_FALSE(HasNote(*b, "not given"));

  v1::StrategyRequest unsaid = tp;
  unsaid.mutable_job()->clear_experts_tensor_parallel();
  auto c = PlanStrategy(unsaid, nullptr, kNow);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->expert_layout(), v1::EXPERT_LAYOUT_NOT_TENSOR_PARALLEL);
  EXPECT_TRUE(HasNote(*c,
                      "experts_tensor_parallel not given: priced as "
                      "not_tensor_parallel"));
  EXPECT_EQ(c->chosen().total_seconds_per_layer(),
            b->chosen().total_seconds_per_layer());
}

TEST(ListProfiles, EveryConstantCarriesItsSource) {
  const std::vector<v1::HardwareProfile> profiles = ListProfiles();
  ASSERT_GE(profiles.size(), 7u);
  for (const v1::HardwareProfile& p : profiles) {
    EXPECT_FALSE(p.name().empty());
    EXPECT_FALSE(p.version().empty());
    EXPECT_GT(p.nvlink_bytes_per_second(), 0) << p.name();
    EXPECT_GT(p.constants_size(), 0) << p.name();
    for (const v1::ProfileConstant& c : p.constants()) {
      EXPECT_FALSE(c.source().empty()) << p.name() << "." << c.name();
      EXPECT_FALSE(c.unit().empty()) << p.name() << "." << c.name();
    }
  }
}

// docs/MODEL.md §12 through the planner: 2 racks x 2 CPU nodes x 2 ranks,
// EP groups of 2 nodes (e = 4), data parallel 2, 16 MiB per rank. Rack r0's
// uplink is declared at 100 Mbit/s, r1's measured at 10 MB/s; the node
// links come from pairs inside the racks (r0's, 25 MB/s per rank, is the
// slower and bounds); a pair measured
// across the racks saw the uplink and is left to the tree.
class FabricPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : {"a0", "a1", "b0", "b1"}) {
      NodeFacts f;
      f.name = n;
      lookup_.Add(f);
    }
    lookup_.at("a0").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL,
                                            {"a0", "a1"}, 4, 1e-3, 25e6, 1024,
                                            16 << 20, kNow, "pair-in"));
    lookup_.at("b0").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL,
                                            {"b0", "b1"}, 4, 1e-3, 30e6, 1024,
                                            16 << 20, kNow, "pair-in-r1"));
    lookup_.at("a0").curves.push_back(Curve(v1::COLLECTIVE_ALLTOALL,
                                            {"a0", "b0"}, 4, 1e-3, 5e6, 1024,
                                            16 << 20, kNow, "pair-across"));
    v1::FabricBlock* block = tree_.add_blocks();
    v1::FabricRack* r0 = block->add_racks();
    r0->set_name("r0");
    r0->mutable_uplink()->set_declared_bytes_per_second(12.5e6);
    r0->mutable_uplink()->set_declared_at("line 3");
    for (const char* n : {"a0", "a1"}) r0->add_nodes()->set_name(n);
    v1::FabricRack* r1 = block->add_racks();
    r1->set_name("r1");
    r1->mutable_uplink()->set_declared_bytes_per_second(12.5e6);
    r1->mutable_uplink()->mutable_measured()->set_bytes_per_second(10e6);
    r1->mutable_uplink()->mutable_measured()->set_task_id("level-r1");
    for (const char* n : {"b0", "b1"}) r1->add_nodes()->set_name(n);
    lookup_.SetFabric(&tree_);
    v1::MoeJob* j = request_.mutable_job();
    j->set_hidden_size(1024);
    j->set_num_experts(4);
    j->set_top_k(1);
    j->set_capacity_factor(1);
    j->set_micro_batch_size(1);
    j->set_sequence_length(8192);
    j->set_bytes_per_element(2);
    j->set_moe_layers(1);
    j->set_world_size(8);
    j->set_tensor_parallel_size(1);
    j->set_expert_parallel_size(4);
    j->set_pipeline_parallel_size(1);
    j->set_data_parallel_size(8);
  }
  void On(const std::vector<std::string>& nodes) {
    request_.mutable_placement()->clear_node_names();
    for (const std::string& n : nodes) {
      request_.mutable_placement()->add_node_names(n);
    }
  }
  FakeLookup lookup_;
  v1::FabricReply tree_;
  v1::StrategyRequest request_;
};

TEST_F(FabricPlanTest, InterleavedRacksAreBoundByTheSlowestUplink) {
  On({"a0", "b0", "a1", "b1"});
  auto reply = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const double d = 16 << 20;
  ASSERT_EQ(reply->traffic().dispatch_bytes(), uint64_t{16} << 20);
  const v1::FabricEvidence& f = reply->evidence().fabric();
  ASSERT_EQ(f.uplinks_size(), 2) << f.DebugString();
  // r1 (measured, 10 MB/s) is slower than r0 (declared, 12.5 MB/s); each
  // carries 2 bytes per byte a rank sends (4 ranks, half of each across).
  EXPECT_EQ(f.uplinks(0).name(), "r1");
  EXPECT_EQ(f.uplinks(0).level(), v1::FABRIC_LEVEL_RACK_UPLINK);
  EXPECT_EQ(f.uplinks(0).task_id(), "level-r1");
  EXPECT_FALSE(f.uplinks(0).declared());
  EXPECT_DOUBLE_EQ(f.uplinks(0).bytes_per_rank_byte(), 2);
  EXPECT_DOUBLE_EQ(f.uplinks(0).dispatch_seconds(), 2 * d / 10e6);
  EXPECT_EQ(f.uplinks(1).name(), "r0");
  EXPECT_TRUE(f.uplinks(1).declared());
  EXPECT_TRUE(f.uplinks(1).task_id().empty());
  for (const v1::Candidate& c : reply->candidates()) {
    if (!c.feasible()) continue;
    EXPECT_EQ(c.fabric_bound().level(), v1::FABRIC_LEVEL_RACK_UPLINK)
        << c.DebugString();
    EXPECT_EQ(c.fabric_bound().name(), "r1");
  }
  // The pair across the racks measured the uplink: left to the tree.
  bool noted = false;
  for (const std::string& n : reply->evidence().notes()) {
    noted |=
        n.find("task pair-across on a0,b0 crossed racks") != std::string::npos;
  }
  EXPECT_TRUE(noted) << reply->evidence().DebugString();
  // The advice: EP groups inside the racks.
  const v1::RankOrderAdvice& a = reply->rank_order();
  EXPECT_EQ(std::vector<std::string>(a.nodes().begin(), a.nodes().end()),
            (std::vector<std::string>{"a0", "a1", "b0", "b1"}));
  EXPECT_EQ(a.ranks_per_node(), 2);
  EXPECT_EQ(a.given_bound().name(), "r1");
  EXPECT_EQ(a.advised_bound().level(), v1::FABRIC_LEVEL_NODE_LINK);
  EXPECT_EQ(a.advised_bound().task_id(), "pair-in");
  // Flat: the uplink needs 2D / 10 MB/s; inside a rack half of D leaves each
  // rank at 25 MB/s (plus the launch either way).
  EXPECT_GE(a.given_dispatch_seconds(), 2 * d / 10e6);
  EXPECT_GE(a.advised_dispatch_seconds(), d / 2 / 25e6);
  EXPECT_LT(a.advised_dispatch_seconds(), d / 2 / 25e6 + 0.05);
  EXPECT_LT(a.advised_seconds_per_layer(), a.given_seconds_per_layer() / 2);
  EXPECT_NE(a.note().find("r0: a0, a1; r1: b0, b1"), std::string::npos)
      << a.note();
}

TEST_F(FabricPlanTest, TheAdvisedOrderIsKeptAndNodesOutsideAreNotPriced) {
  On({"a0", "a1", "b0", "b1"});
  auto reply = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->evidence().fabric().uplinks_size(), 0);
  EXPECT_EQ(reply->chosen().fabric_bound().level(), v1::FABRIC_LEVEL_NODE_LINK);
  const v1::RankOrderAdvice& a = reply->rank_order();
  EXPECT_EQ(std::vector<std::string>(a.nodes().begin(), a.nodes().end()),
            (std::vector<std::string>{"a0", "a1", "b0", "b1"}));
  EXPECT_DOUBLE_EQ(a.given_dispatch_seconds(), a.advised_dispatch_seconds());
  EXPECT_NE(a.note().find("the given order is as fast"), std::string::npos);

  NodeFacts x;
  x.name = "x";
  lookup_.Add(x);
  On({"a0", "b0", "a1", "x"});
  auto outside = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(outside.ok()) << outside.status();
  ASSERT_EQ(outside->evidence().fabric().outside_size(), 1);
  EXPECT_EQ(outside->evidence().fabric().outside(0), "x");
  EXPECT_EQ(outside->evidence().fabric().uplinks_size(), 0);
  EXPECT_FALSE(outside->has_rank_order());
  EXPECT_FALSE(outside->chosen().has_fabric_bound());
  // Without a tree nothing changes.
  lookup_.SetFabric(nullptr);
  auto plain = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->evidence().has_fabric());
  EXPECT_DOUBLE_EQ(plain->chosen().total_seconds_per_layer(),
                   outside->chosen().total_seconds_per_layer());
}

// Issue 19's first bar: in a 2 x 2 cluster the level round's task of every
// node of both racks at once is the job's own node set. It is a level
// measurement: it prices the uplinks (through the tree's measured rate),
// never the job directly, so the plan is what it is without that curve.
TEST_F(FabricPlanTest, ALevelTaskOnTheJobsOwnNodesPricesItsLevelNotTheJob) {
  On({"a0", "b0", "a1", "b1"});
  auto without = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(without.ok()) << without.status();
  v1::BandwidthCurve level =
      Curve(v1::COLLECTIVE_ALLTOALL, {"a0", "a1", "b0", "b1"}, 8, 1e-3, 2e6,
            1024, 16 << 20, kNow + absl::Seconds(5), "level-4");
  level.mutable_fabric()->set_level(v1::FABRIC_SPAN_LEVEL_CROSS_RACK);
  level.mutable_fabric()->set_concurrent_nodes(4);
  lookup_.at("b1").curves.push_back(level);
  auto with = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_DOUBLE_EQ(with->chosen().total_seconds_per_layer(),
                   without->chosen().total_seconds_per_layer());
  const v1::CurveEvidence* inter =
      Evidence(*with, v1::CURVE_ROLE_ALLTOALL_INTER);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->task_id(), "pair-in");
  bool noted = false;
  for (const std::string& n : with->evidence().notes()) {
    noted |= n.find(
                 "task level-4 on a0,a1,b0,b1 (cross_rack, 4 nodes at "
                 "once)") != std::string::npos &&
             n.find("a level measurement") != std::string::npos;
  }
  EXPECT_TRUE(noted) << with->evidence().DebugString();
  // Without pairs inside a rack a pair across racks prices the node links
  // (noted as pessimistic), the task of four nodes still never does.
  lookup_.at("a0").curves.erase(lookup_.at("a0").curves.begin());
  lookup_.at("b0").curves.clear();
  auto across = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(across.ok()) << across.status();
  inter = Evidence(*across, v1::CURVE_ROLE_ALLTOALL_INTER);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->task_id(), "pair-across");
}

// Verify's predictions (PreparePlan, PredictMeasuredSeconds) price the tree
// through the same path as GetStrategy (PlanStrategy): for the same nodes in
// the same order they give the chosen candidate's time exactly, with the
// uplink in it; without the tree they do not.
TEST_F(FabricPlanTest, PreparePlanPricesTheTreeAsPlanStrategyDoes) {
  On({"a0", "b0", "a1", "b1"});
  auto reply = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  absl::StatusOr<PreparedPlan> plan = PreparePlan(request_, &lookup_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_DOUBLE_EQ(plan->view.uplink_seconds_per_rank_byte, 2 / 10e6);
  for (const v1::Candidate& c : reply->candidates()) {
    if (!c.feasible()) continue;
    std::optional<double> predicted =
        PredictMeasuredSeconds(*plan, MeasuredScope::kLayer,
                               strategy::StrategyFromProto(c.kind()).value(),
                               c.chunks_requested(), {}, 1);
    ASSERT_TRUE(predicted.has_value()) << c.DebugString();
    EXPECT_DOUBLE_EQ(*predicted, c.total_seconds_per_layer())
        << c.DebugString();
  }
  lookup_.SetFabric(nullptr);
  absl::StatusOr<PreparedPlan> plain = PreparePlan(request_, &lookup_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->view.uplink_seconds_per_rank_byte, 0);
  EXPECT_LT(*PredictMeasuredSeconds(*plain, MeasuredScope::kLayer,
                                    strategy::StrategyKind::kFlat, 1, {}, 1),
            *PredictMeasuredSeconds(*plan, MeasuredScope::kLayer,
                                    strategy::StrategyKind::kFlat, 1, {}, 1));
}

// docs/MODEL.md §12: with a declared capacity above an uplink's level
// measurement, a pipeline's chunks after the first cross at the declared
// rate, through BuildPriced for GetStrategy and verify alike; K = 1, flat
// and tp_dedup keep the measured price, and without a declaration nothing
// changes.
TEST_F(FabricPlanTest, PipelinedChunksCrossTheUplinkAtTheDeclaredCapacity) {
  request_.mutable_job()->set_tensor_parallel_size(2);
  request_.mutable_job()->set_data_parallel_size(4);
  request_.mutable_job()->set_experts_tensor_parallel(true);
  On({"a0", "a1", "b0", "b1"});
  absl::StatusOr<PreparedPlan> plan = PreparePlan(request_, &lookup_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_DOUBLE_EQ(plan->view.uplink_seconds_per_rank_byte, 2 / 10e6);
  EXPECT_DOUBLE_EQ(plan->view.uplink_steady_seconds_per_rank_byte, 2 / 12.5e6);
  auto reply = PlanStrategy(request_, &lookup_, kNow);
  ASSERT_TRUE(reply.ok()) << reply.status();
  bool noted = false;
  for (const std::string& n : reply->evidence().notes()) {
    noted |= n.find(
                 "after the first cross the uplinks at their declared "
                 "capacity (the slowest, r1: 12.5 MB/s declared, 10 MB/s "
                 "measured") != std::string::npos;
  }
  EXPECT_TRUE(noted) << reply->evidence().DebugString();
  const auto kPipe = strategy::StrategyKind::kTpDedupPipelined;
  auto predict = [](const PreparedPlan& p, strategy::StrategyKind kind, int k) {
    return *PredictMeasuredSeconds(p, MeasuredScope::kLayer, kind, k, {}, 1);
  };
  tree_.mutable_blocks(0)
      ->mutable_racks(1)
      ->mutable_uplink()
      ->clear_declared_bytes_per_second();
  absl::StatusOr<PreparedPlan> undeclared = PreparePlan(request_, &lookup_);
  ASSERT_TRUE(undeclared.ok()) << undeclared.status();
  EXPECT_DOUBLE_EQ(undeclared->view.uplink_steady_seconds_per_rank_byte,
                   2 / 10e6);
  EXPECT_LT(predict(*plan, kPipe, 8), 0.95 * predict(*undeclared, kPipe, 8));
  EXPECT_DOUBLE_EQ(predict(*plan, kPipe, 1), predict(*undeclared, kPipe, 1));
  for (auto kind :
       {strategy::StrategyKind::kFlat, strategy::StrategyKind::kTpDedup}) {
    EXPECT_DOUBLE_EQ(predict(*plan, kind, 1), predict(*undeclared, kind, 1));
  }
}

// docs/MODEL.md §5: the chunk bound verify's sweep stops at. On the paper's
// profile a chunk of more than 16 falls under 2.75x the profile's launch
// latency; on an inter-node curve whose smallest launch measured four times
// that, the bound is lower, and a calibration that makes the link faster
// makes chunks shorter, so it falls again. A K above it is still priced
// when asked for.
TEST(ChunkBound, FollowsTheInterNodeLaunchFloorAndTheCalibration) {
  absl::StatusOr<PreparedPlan> plan =
      PreparePlan(monta::testing::PaperJobRequest(), nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto kPipe = strategy::StrategyKind::kTpDedupPipelined;
  EXPECT_EQ(ChunkBound(*plan, MeasuredScope::kLayer, kPipe, {}, 1), 16);
  const model::BandwidthCurve& inter = plan->view.alltoall_inter;
  const double floor_seconds = inter.launch_floor_seconds();
  EXPECT_DOUBLE_EQ(floor_seconds, inter.alpha_seconds());
  std::vector<model::CurveSample> samples;
  for (double x = 65536; x <= 4.0 * (1ull << 30); x *= 4) {
    samples.push_back({x, inter.TimeSeconds(x).seconds});
  }
  samples.front().time_seconds += 3 * floor_seconds;
  absl::StatusOr<model::BandwidthCurve> floored =
      model::BandwidthCurve::FromSamples(inter.collective(), inter.nranks(),
                                         inter.ranks_per_node(), samples);
  ASSERT_TRUE(floored.ok()) << floored.status();
  EXPECT_NEAR(floored->launch_floor_seconds(), 4 * floor_seconds,
              0.1 * floor_seconds);
  plan->view.alltoall_inter = *floored;
  const int bound = ChunkBound(*plan, MeasuredScope::kLayer, kPipe, {}, 1);
  EXPECT_GT(bound, 1);
  EXPECT_LT(bound, 16);
  model::ModelCalibration faster;
  faster.network_scale = 0.5;
  const int faster_bound =
      ChunkBound(*plan, MeasuredScope::kLayer, kPipe, faster, 1);
  EXPECT_GE(faster_bound, 1);
  EXPECT_LT(faster_bound, bound);
  EXPECT_TRUE(PredictMeasuredSeconds(*plan, MeasuredScope::kLayer, kPipe,
                                     bound + 1, {}, 1)
                  .has_value());
  EXPECT_EQ(ChunkBound(*plan, MeasuredScope::kLayer,
                       strategy::StrategyKind::kFlat, {}, 1),
            0);
}

}  // namespace
}  // namespace monta::planning
