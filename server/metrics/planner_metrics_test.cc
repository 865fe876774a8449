#include "server/metrics/planner_metrics.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace monta::metrics {
namespace {

TEST(PlannerMetricsTest, MessageSizeBucketsAreBounded) {
  EXPECT_EQ(MessageSizeBucket(1024), "<64KiB");
  EXPECT_EQ(MessageSizeBucket(64 << 10), "64-256KiB");
  EXPECT_EQ(MessageSizeBucket(300 << 10), "256KiB-1MiB");
  EXPECT_EQ(MessageSizeBucket(1 << 20), "1-4MiB");
  EXPECT_EQ(MessageSizeBucket(uint64_t{300} << 20), "256MiB-1GiB");
  EXPECT_EQ(MessageSizeBucket(uint64_t{8} << 30), ">=1GiB");
}

TEST(PlannerMetricsTest, LineRateFromNicsOrProfile) {
  monta::v1::NodeTopology t;
  t.add_gpus()->set_name("NVIDIA H100 80GB HBM3");
  for (int i = 0; i < 8; ++i) {
    auto* nic = t.add_nics();
    nic->set_rate_bytes_per_second(400e9 / 8);
    nic->set_state("ACTIVE");
    nic->set_state_kind(monta::v1::NIC_PORT_STATE_ACTIVE);
  }
  // 8 x 400 Gb/s shared by 8 ranks: 50 GB/s per rank.
  EXPECT_DOUBLE_EQ(BottleneckLineRate(t, monta::v1::SCOPE_INTER_NODE, 8), 50e9);
  // A NIC that went down no longer counts.
  t.mutable_nics(0)->set_state("DOWN");
  t.mutable_nics(0)->set_state_kind(monta::v1::NIC_PORT_STATE_DOWN);
  EXPECT_DOUBLE_EQ(BottleneckLineRate(t, monta::v1::SCOPE_INTER_NODE, 8),
                   7 * 50e9 / 8);
  // Neither does one in a state Monta cannot name, nor an older agent's
  // "DOWN" without the enum; a port whose state is not known at all does.
  t.mutable_nics(1)->set_state("NOP");
  t.mutable_nics(1)->set_state_kind(monta::v1::NIC_PORT_STATE_UNKNOWN);
  t.mutable_nics(2)->set_state("DOWN");
  t.mutable_nics(2)->clear_state_kind();
  t.mutable_nics(3)->clear_state();
  t.mutable_nics(3)->clear_state_kind();
  EXPECT_DOUBLE_EQ(BottleneckLineRate(t, monta::v1::SCOPE_INTER_NODE, 8),
                   5 * 50e9 / 8);
  for (int i = 0; i < 3; ++i) {
    t.mutable_nics(i)->set_state("ACTIVE");
    t.mutable_nics(i)->set_state_kind(monta::v1::NIC_PORT_STATE_ACTIVE);
  }
  // Intra-node: the H100 profile's NVLink line rate per direction.
  EXPECT_GT(BottleneckLineRate(t, monta::v1::SCOPE_INTRA_NODE, 8), 100e9);
  // Without NICs a GPU node falls back to its class's NICs (8 x 400 Gb/s).
  t.clear_nics();
  EXPECT_DOUBLE_EQ(BottleneckLineRate(t, monta::v1::SCOPE_INTER_NODE, 8), 50e9);
  // A CPU node with no NIC known: the network is unknown, no ratio.
  monta::v1::NodeTopology cpu;
  EXPECT_EQ(BottleneckLineRate(cpu, monta::v1::SCOPE_INTER_NODE, 2), 0);
}

TEST(PlannerMetricsTest, HeldBytesAreReadAtScrapeTime) {
  HeldBytesCollector collector;
  double rendezvous = 0;
  collector.Add("rendezvous", [&rendezvous] { return rendezvous; });
  rendezvous = 4096;
  const std::string text =
      prometheus::TextSerializer().Serialize(collector.Collect());
  EXPECT_NE(text.find("monta_planner_held_bytes{kind=\"rendezvous\"} 4096"),
            std::string::npos)
      << text;
}

TEST(PlannerMetricsTest, CollectorExposesStatesCurvesAndEfficiency) {
  registry::Registry registry{registry::RegistryOptions{}};
  monta::v1::RegisterRequest r;
  r.set_node_name("a");
  r.set_instance_id("i");
  ASSERT_TRUE(registry.Register(r, Instant::Now()).ok());
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.set_scope(monta::v1::SCOPE_INTRA_NODE);
  c.set_nranks(2);
  c.set_n_nodes(1);
  c.add_nodes("a");
  for (uint64_t bytes : {uint64_t{1} << 20, uint64_t{4} << 20}) {
    auto* p = c.add_points();
    p->set_message_bytes(bytes);
    p->set_busbw_bytes_per_second(1e9);
  }
  ASSERT_TRUE(registry.AddCurve(c).ok());
  auto collector = std::make_shared<ClusterCollector>(&registry);
  const std::string text =
      prometheus::TextSerializer().Serialize(collector->Collect());
  EXPECT_NE(text.find("monta_node_state{node=\"a\",state=\"alive\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("monta_node_state{node=\"a\",state=\"stale\"} 0"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          "monta_collective_busbw_bytes_per_second{node=\"a\",scope=\"intra\","
          "collective=\"alltoall\",nranks=\"2\",n_nodes=\"1\",message_size=\"1-"
          "4MiB\"}"),
      std::string::npos)
      << text;
  // No topology: the cpu-gloo profile gives the loopback line rate.
  EXPECT_NE(
      text.find("monta_alltoall_efficiency_ratio{node=\"a\",scope=\"intra\""),
      std::string::npos)
      << text;
}

TEST(PlannerMetricsTest, DecisionsCountedByStrategyAndResult) {
  prometheus::Registry registry;
  PlannerMetrics metrics(registry);
  monta::v1::StrategyReply reply;
  reply.mutable_chosen()->set_kind(monta::v1::STRATEGY_KIND_TP_DEDUP_PIPELINED);
  reply.mutable_chosen()->set_speedup_over_flat(5.5);
  metrics.RecordDecision(absl::OkStatus(), &reply, 0.0002);
  metrics.RecordDecision(absl::InvalidArgumentError("x"), nullptr, 0.0001);
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(
      text.find(
          "monta_strategy_decisions_total{result=\"ok\",strategy=\"tp_dedup_"
          "pipelined\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("monta_strategy_decisions_total{result=\"invalid\","
                      "strategy=\"none\"} 1"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          "monta_strategy_predicted_speedup_ratio_bucket{strategy=\"tp_dedup_"
          "pipelined\",le=\"6\"} 1"),
      std::string::npos)
      << text;
}

TEST(PlannerMetricsTest, StoreErrorsStartAtZeroPerOperation) {
  prometheus::Registry registry;
  PlannerMetrics metrics(registry);
  metrics.RecordStoreError("curve");
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  for (const char* series :
       {"monta_store_errors_total{operation=\"node\"} 0",
        "monta_store_errors_total{operation=\"curve\"} 1",
        "monta_store_errors_total{operation=\"decision\"} 0"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
}

TEST(PlannerMetricsTest, FabricCollectorCountsPlacementsAndDisagreements) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string map =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/metrics-fabric.yaml";
  std::ofstream(map) << "version: 1\nracks:\n- name: r0\n  nodes: [a, b]\n";
  fabric::FabricOptions options;
  options.map_file = map;
  auto fabric = fabric::Fabric::Open(options, absl::Now());
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  registry::Registry registry{registry::RegistryOptions{}};
  for (const auto& [name, claim] :
       {std::pair<std::string, std::string>{"a", "r0"},
        {"b", "r7"},
        {"c", ""}}) {
    monta::v1::RegisterRequest r;
    r.set_node_name(name);
    r.set_instance_id("i");
    if (!claim.empty()) {
      (*r.mutable_topology()
            ->mutable_labels())["network.topology.nvidia.com/leaf"] = claim;
    }
    ASSERT_TRUE(registry.Register(r, Instant::Now()).ok());
  }
  FabricCollector collector(&registry, fabric->get());
  const std::string text =
      prometheus::TextSerializer().Serialize(collector.Collect());
  for (const char* series : {"monta_fabric_nodes{source=\"map\"} 2",
                             "monta_fabric_nodes{source=\"none\"} 1",
                             "monta_fabric_nodes{source=\"node_labels\"} 0",
                             "monta_fabric_hint_disagreement{node=\"b\"} 1",
                             "monta_fabric_source_valid{source=\"map\"} 1"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
  EXPECT_EQ(text.find("monta_fabric_hint_disagreement{node=\"a\"}"),
            std::string::npos)
      << text;

  for (const char* series :
       {"monta_fabric_source_loads_total{source=\"map\",result=\"ok\"} 1",
        "monta_fabric_source_loads_total{source=\"map\",result=\"error\"} "
        "0"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
  // A map that stops parsing: counted, and no longer valid.
  // (Another size than before: the check is stat, then content.)
  std::ofstream(map) << "version: 1\nracks:\n- name: r0\n  nodes: [a, a, a]\n";
  (*fabric)->Refresh(absl::Now());
  const std::string after =
      prometheus::TextSerializer().Serialize(collector.Collect());
  for (const char* series :
       {"monta_fabric_source_loads_total{source=\"map\",result=\"error\"} 1",
        "monta_fabric_source_valid{source=\"map\"} 0"}) {
    EXPECT_NE(after.find(series), std::string::npos) << series << "\n" << after;
  }
}

TEST(PlannerMetricsTest, VerifyRunsCarryTheirScope) {
  prometheus::Registry registry;
  PlannerMetrics metrics(registry);
  monta::v1::VerifyReply layer;
  layer.set_regret_ratio(0.03);
  for (double e : {0.1, -0.3, 0.2}) {
    monta::v1::VerifiedCandidate* c = layer.add_candidates();
    c->set_kind(monta::v1::STRATEGY_KIND_FLAT);
    c->set_error_ratio(e);
  }
  metrics.RecordVerify(absl::OkStatus(), monta::v1::VERIFY_SCOPE_LAYER, &layer);
  metrics.RecordVerify(absl::AbortedError("x"), monta::v1::VERIFY_SCOPE_OP,
                       nullptr);
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  for (const char* series :
       {"monta_verify_runs_total{result=\"ok\",scope=\"layer\"} 1",
        "monta_verify_runs_total{result=\"failed\",scope=\"op\"} 1",
        "monta_verify_runs_total{result=\"ok\",scope=\"op\"} 0",
        "monta_prediction_error_ratio{scope=\"layer\",strategy=\"flat\"} "
        "0.2",
        "monta_plan_regret_ratio{scope=\"layer\"} 0.03"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
  EXPECT_EQ(text.find("monta_plan_regret_ratio{scope=\"op\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace monta::metrics
