#include "server/model/fabric_price.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "server/model/cost_model.h"
#include "server/model/strategy_search.h"
#include "server/model/traffic.h"

namespace monta::model {
namespace {

using bandwidth::Collective;

// 2 racks x 2 nodes, the job's nodes given interleaved: n0 (r0), n1 (r1),
// n2 (r0), n3 (r1); each rack's uplink 12.5 MB/s (100 Mbit/s).
JobFabric TwoRacks() {
  JobFabric f;
  f.racks = {{"r0", -1, 12.5e6}, {"r1", -1, 12.5e6}};
  f.node_rack = {0, 1, 0, 1};
  return f;
}

TEST(FabricPriceTest, InterleavedEpGroupsLoadEveryRackUplink) {
  // G = 2, t = 1, e = 4: EP groups {n0, n1} and {n2, n3}, each half in each
  // rack. Each rank sends x/4 to each of the 2 members across, x/2 per rank;
  // the 4 ranks of a rack send 2x through its uplink (both groups at once).
  auto p = PriceFabric(TwoRacks(), {0, 1, 2, 3}, {2, 1, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->uplinks.size(), 2u);
  EXPECT_EQ(p->uplinks[0].level, UplinkLevel::kRack);
  EXPECT_EQ(p->uplinks[0].index, 0);
  EXPECT_DOUBLE_EQ(p->uplinks[0].bytes_per_rank_byte, 2);
  EXPECT_DOUBLE_EQ(p->uplinks[1].bytes_per_rank_byte, 2);
  EXPECT_DOUBLE_EQ(p->seconds_per_rank_byte(), 2 / 12.5e6);
}

TEST(FabricPriceTest, RackMajorOrderKeepsEpGroupsInsideRacks) {
  auto advice = AdviseOrder(TwoRacks(), {2, 1, 4});
  ASSERT_TRUE(advice.ok()) << advice.status();
  EXPECT_TRUE(advice->changed);
  EXPECT_EQ(advice->order, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_TRUE(advice->advised.uplinks.empty());
  EXPECT_DOUBLE_EQ(advice->advised.seconds_per_rank_byte(), 0);
  EXPECT_DOUBLE_EQ(advice->given.seconds_per_rank_byte(), 2 / 12.5e6);
}

TEST(FabricPriceTest, TensorParallelRanksFormOneEpGroupEach) {
  // G = 2, t = 2, e = 2: ranks 0..3 hold EP groups {0, 2} and {1, 3}, on
  // nodes n0 (r0) and n1 (r1): each rank sends x/2 across; ranks 4..7 the
  // same on n2, n3. 4 ranks per rack: 2x through each uplink.
  auto p = PriceFabric(TwoRacks(), {0, 1, 2, 3}, {2, 2, 2});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->uplinks.size(), 2u);
  EXPECT_DOUBLE_EQ(p->uplinks[0].bytes_per_rank_byte, 2);
  // EP groups inside a node cross nothing.
  auto inside = PriceFabric(TwoRacks(), {0, 1, 2, 3}, {2, 1, 2});
  ASSERT_TRUE(inside.ok());
  EXPECT_TRUE(inside->uplinks.empty());
}

TEST(FabricPriceTest, TheSlowerOfRackAndSpineBounds) {
  // Blocks b0 = {r0, r1}, b1 = {r2, r3}, one node per rack; racks 50 MB/s,
  // blocks 20 MB/s. Given n0 (r0), n1 (r2), n2 (r1), n3 (r3), G = 2, e = 4:
  // both EP groups span the blocks: each rack 1x (2 ranks x x/2), each block
  // 2x; the block uplink (2 / 20e6 s per byte) is slower than a rack's
  // (1 / 50e6).
  JobFabric f;
  f.blocks = {{"b0", 20e6}, {"b1", 20e6}};
  f.racks = {
      {"r0", 0, 50e6}, {"r1", 0, 50e6}, {"r2", 1, 50e6}, {"r3", 1, 50e6}};
  f.node_rack = {0, 2, 1, 3};
  auto p = PriceFabric(f, {0, 1, 2, 3}, {2, 1, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->uplinks.size(), 6u);
  EXPECT_EQ(p->uplinks[0].level, UplinkLevel::kBlock);
  EXPECT_DOUBLE_EQ(p->uplinks[0].bytes_per_rank_byte, 2);
  EXPECT_DOUBLE_EQ(p->seconds_per_rank_byte(), 2 / 20e6);
  // Block-major: the groups stay in a block, and only racks are crossed.
  auto advice = AdviseOrder(f, {2, 1, 4});
  ASSERT_TRUE(advice.ok());
  EXPECT_EQ(advice->order, (std::vector<int>{0, 2, 1, 3}));
  ASSERT_EQ(advice->advised.uplinks.size(), 4u);
  EXPECT_EQ(advice->advised.uplinks[0].level, UplinkLevel::kRack);
  EXPECT_DOUBLE_EQ(advice->advised.seconds_per_rank_byte(), 1 / 50e6);
}

// docs/MODEL.md §12, a pipeline's steady state: each uplink at its declared
// capacity, never slower than measured; the slowest that way may be another
// uplink than the slowest measured one.
TEST(FabricPriceTest, SteadyStatePricesEachUplinkAtItsDeclaredCapacity) {
  JobFabric f = TwoRacks();
  f.racks[0].uplink_bytes_per_second = 10e6;  // measured
  f.racks[0].uplink_declared_bytes_per_second = 12.5e6;
  f.racks[1].uplink_bytes_per_second = 12e6;  // measured, nothing declared
  auto p = PriceFabric(f, {0, 1, 2, 3}, {2, 1, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->uplinks.size(), 2u);
  EXPECT_DOUBLE_EQ(p->seconds_per_rank_byte(), 2 / 10e6);
  EXPECT_DOUBLE_EQ(p->uplinks[0].steady_seconds_per_rank_byte(), 2 / 12.5e6);
  EXPECT_DOUBLE_EQ(p->steady_seconds_per_rank_byte(), 2 / 12e6);
  // A declaration below the measurement never slows the steady state.
  f.racks[1].uplink_declared_bytes_per_second = 5e6;
  p = PriceFabric(f, {0, 1, 2, 3}, {2, 1, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->steady_seconds_per_rank_byte(), 2 / 12e6);
  // Nothing declared anywhere: the steady state is the measured price.
  f.racks[0].uplink_declared_bytes_per_second = 0;
  f.racks[1].uplink_declared_bytes_per_second = 0;
  p = PriceFabric(f, {0, 1, 2, 3}, {2, 1, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->steady_seconds_per_rank_byte(),
                   p->seconds_per_rank_byte());
}

TEST(FabricPriceTest, NoFasterOrderKeepsTheGivenOne) {
  // Racks of 3 nodes and 1, EP groups of 2 nodes (G = 1, e = 2): one group
  // must cross whatever the order; the given order already crosses once.
  JobFabric f;
  f.racks = {{"r0", -1, 10e6}, {"r1", -1, 10e6}};
  f.node_rack = {0, 1, 0, 0};
  auto advice = AdviseOrder(f, {1, 1, 2});
  ASSERT_TRUE(advice.ok());
  EXPECT_FALSE(advice->changed);
  EXPECT_EQ(advice->order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(advice->given.seconds_per_rank_byte(), 0.5 / 10e6);
}

TEST(FabricPriceTest, UnknownCapacitiesStillPreferFewerBytesAcross) {
  JobFabric f = TwoRacks();
  f.racks[0].uplink_bytes_per_second = 0;
  f.racks[1].uplink_bytes_per_second = 0;
  auto advice = AdviseOrder(f, {2, 1, 4});
  ASSERT_TRUE(advice.ok());
  EXPECT_TRUE(advice->changed);
  EXPECT_DOUBLE_EQ(advice->given.seconds_per_rank_byte(), 0);
  EXPECT_EQ(advice->given.uplinks.size(), 2u);
}

TEST(FabricPriceTest, BadInputIsRefusedNamingWhat) {
  auto bad_t = PriceFabric(TwoRacks(), {0, 1, 2, 3}, {2, 3, 1});
  EXPECT_EQ(bad_t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_t.status().message().find("must divide the ranks per node"),
            std::string::npos);
  auto bad_e = PriceFabric(TwoRacks(), {0, 1, 2, 3}, {2, 1, 3});
  EXPECT_NE(bad_e.status().message().find("must divide the world"),
            std::string::npos);
  auto twice = PriceFabric(TwoRacks(), {0, 1, 1, 3}, {2, 1, 4});
  EXPECT_NE(twice.status().message().find("permutation"), std::string::npos);
  JobFabric outside = TwoRacks();
  outside.node_rack[2] = -1;
  auto no_rack = PriceFabric(outside, {0, 1, 2, 3}, {2, 1, 4});
  EXPECT_NE(no_rack.status().message().find("node 2: not in a rack"),
            std::string::npos);
}

// The cost model takes the slower of the node's link and the uplink, per
// AllToAll that leaves the node, and keeps both parts.
class FabricCostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 2 ranks per node: 25 MB/s per rank on a node link of 50 MB/s (400
    // Mbit/s); a fast loopback inside the node; no latencies.
    view_.alltoall_inter =
        *BandwidthCurve::FromAlphaBeta(Collective::kAllToAll, 4, 2, 0, 25e6);
    view_.alltoall_intra =
        *BandwidthCurve::FromAlphaBeta(Collective::kAllToAll, 2, 2, 0, 1e9);
    view_.allgather_intra =
        *BandwidthCurve::FromAlphaBeta(Collective::kAllGather, 2, 2, 0, 1e9);
    view_.copy =
        *BandwidthCurve::FromAlphaBeta(Collective::kCopy, 1, 1, 0, 1e9);
    job_.hidden_size = 1024;
    job_.num_experts = 4;
    job_.top_k = 1;
    job_.capacity_factor = 1;
    job_.micro_batch_size = 1;
    job_.sequence_length = 8192;
    job_.bytes_per_element = 2;
    job_.world_size = 8;
    job_.expert_parallel_size = 4;
    job_.data_parallel_size = 8;
    job_.expert_layout = ExpertLayout::kNotTensorParallel;
  }
  ClusterView view_;
  MoeJobShape job_;
};

TEST_F(FabricCostTest, AnAllToAllTakesTheSlowerOfNodeLinkAndUplink) {
  auto tr = ComputeTraffic(job_, {4, 2});
  ASSERT_TRUE(tr.ok()) << tr.status();
  ASSERT_DOUBLE_EQ(tr->dispatch_bytes, 16 << 20);
  const double d = tr->dispatch_bytes;
  {
    CostModel m(*tr, view_, 1, ExpertLayout::kNotTensorParallel, 0);
    const Stage a = m.AllToAll(d, 4, 2, nullptr);
    // Half of D leaves the node at 25 MB/s per rank.
    EXPECT_DOUBLE_EQ(a.busy.node_link_seconds, d / 2 / 25e6);
    EXPECT_DOUBLE_EQ(a.busy.uplink_seconds, 0);
    EXPECT_DOUBLE_EQ(a.seconds, d / 2 / 25e6);
  }
  view_.uplink_seconds_per_rank_byte = 2 / 12.5e6;
  CostModel m(*tr, view_, 1, ExpertLayout::kNotTensorParallel, 0);
  const Stage a = m.AllToAll(d, 4, 2, nullptr);
  EXPECT_DOUBLE_EQ(a.busy.uplink_seconds, d * 2 / 12.5e6);
  EXPECT_DOUBLE_EQ(a.busy.network_seconds, d * 2 / 12.5e6);
  EXPECT_DOUBLE_EQ(a.seconds, d * 2 / 12.5e6);
  // Inside a node nothing crosses an uplink.
  EXPECT_DOUBLE_EQ(m.AllToAll(d, 2, 2, nullptr).busy.uplink_seconds, 0);
  // The search reports both parts per layer (4 AllToAlls of D).
  auto decision = Decide(job_, {4, 2}, view_, {});
  ASSERT_TRUE(decision.ok()) << decision.status();
  const Candidate& flat = decision->candidates[decision->chosen];
  EXPECT_EQ(flat.kind, StrategyKind::kFlat);
  EXPECT_NEAR(flat.uplink_seconds_per_layer, 4 * d * 2 / 12.5e6, 1e-9);
  EXPECT_NEAR(flat.node_link_seconds_per_layer, 4 * d / 2 / 25e6, 1e-9);
}

// docs/MODEL.md §12: under a priced uplink with a declared capacity, a
// pipeline's first chunk pays the measured uplink (one AllToAll alone) and
// every later one the declared capacity: tau = 2 x / 12.5 MB/s where the
// lone chunk takes 2 x / 10 MB/s. K = 1 and every unpipelined schedule are
// unchanged, and so is everything without an uplink.
TEST_F(FabricCostTest, PipelineSteadyStateMovesChunksAtTheDeclaredCapacity) {
  job_.world_size = 8;
  job_.tensor_parallel_size = 2;
  job_.data_parallel_size = 4;
  job_.expert_layout = ExpertLayout::kTensorParallel;
  auto tr = ComputeTraffic(job_, {4, 2});
  ASSERT_TRUE(tr.ok()) << tr.status();
  ASSERT_EQ(tr->ep_members_on_node, 1);
  const double d = tr->dispatch_bytes;
  auto layer = [&](const ClusterView& v, int k) {
    return CostModel(*tr, v, 1, ExpertLayout::kTensorParallel, 0)
        .TpDedupPipelined(k, nullptr)
        .total_seconds();
  };
  auto flat = [&](const ClusterView& v) {
    return CostModel(*tr, v, 1, ExpertLayout::kTensorParallel, 0)
        .Flat(nullptr)
        .total_seconds();
  };
  ClusterView measured = view_;
  measured.uplink_seconds_per_rank_byte = 2 / 10e6;
  ClusterView steady = measured;
  steady.uplink_steady_seconds_per_rank_byte = 2 / 12.5e6;
  const int k = 4;
  const double x = d / (2 * k);  // a chunk per rank
  // AllGather (t - 1) x and the copy of t x, at 1 GB/s, no latencies.
  const double gc = x / 1e9 + 2 * x / 1e9;
  const double lone = 2 * x / 10e6;
  EXPECT_NEAR(layer(measured, k), 4 * (lone + gc + (k - 1) * lone), 1e-9);
  EXPECT_NEAR(layer(steady, k), 4 * (lone + gc + (k - 1) * 2 * x / 12.5e6),
              1e-9);
  EXPECT_LT(layer(steady, 32), layer(steady, 4));
  EXPECT_DOUBLE_EQ(layer(steady, 1), layer(measured, 1));
  EXPECT_DOUBLE_EQ(flat(steady), flat(measured));
  // A declared capacity below the measurement does not slow the pipeline.
  ClusterView slow = measured;
  slow.uplink_steady_seconds_per_rank_byte = 2 / 5e6;
  EXPECT_DOUBLE_EQ(layer(slow, k), layer(measured, k));
  // Each later chunk pays the launch the sweep measured (the inter-node
  // curve's launch floor: a 64 KiB AllToAll that took 50 ms, beyond the
  // robust line); where that makes the steady state slower than chunks
  // priced alone, they are priced alone.
  auto stalled =
      BandwidthCurve::FromSamples(Collective::kAllToAll, 4, 2,
                                  {{65536, 0.05},
                                   {1 << 20, 0.5 * (1 << 20) / 25e6},
                                   {16 << 20, 0.5 * (16 << 20) / 25e6}});
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  const double floor = stalled->launch_floor_seconds();
  ASSERT_GT(floor, 0.04);
  ClusterView floored = steady;
  floored.alltoall_inter = *stalled;
  ClusterView floored_measured = measured;
  floored_measured.alltoall_inter = *stalled;
  EXPECT_NEAR(layer(floored, k),
              4 * (lone + gc + (k - 1) * (2 * x / 12.5e6 + floor)), 1e-9);
  EXPECT_DOUBLE_EQ(layer(floored, 32), layer(floored_measured, 32));
  // Without a priced uplink the steady price is never read.
  ClusterView none = view_;
  ClusterView none_steady = view_;
  none_steady.uplink_steady_seconds_per_rank_byte = 2 / 12.5e6;
  EXPECT_DOUBLE_EQ(layer(none_steady, k), layer(none, k));
}

std::string ReadModelDoc() {
  std::ifstream in("docs/MODEL.md");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// docs/MODEL.md §12's worked example, digit for digit: the model computes
// each row and the page must quote it.
TEST_F(FabricCostTest, ModelDocWorkedExampleIsWhatTheModelComputes) {
  const std::string doc = ReadModelDoc();
  ASSERT_FALSE(doc.empty()) << "docs/MODEL.md not found in the runfiles";
  auto tr = ComputeTraffic(job_, {4, 2});
  ASSERT_TRUE(tr.ok());
  const double d = tr->dispatch_bytes;
  auto advice = AdviseOrder(TwoRacks(), {2, 1, 4});
  ASSERT_TRUE(advice.ok());
  struct Row {
    const char* order;
    const FabricPrice* price;
  } rows[] = {{"n0, n1, n2, n3 (given)", &advice->given},
              {"n0, n2, n1, n3 (advised)", &advice->advised}};
  for (const Row& row : rows) {
    ClusterView view = view_;
    view.uplink_seconds_per_rank_byte = row.price->seconds_per_rank_byte();
    CostModel m(*tr, view, 1, ExpertLayout::kNotTensorParallel, 0);
    const Stage a = m.AllToAll(d, 4, 2, nullptr);
    const double across = row.price->uplinks.empty()
                              ? 0
                              : row.price->uplinks[0].bytes_per_rank_byte;
    const std::string line = absl::StrFormat(
        "| %s | %.2f | %.3f s | %.3f s | %s | %.3f s |", row.order, across,
        a.busy.node_link_seconds, a.busy.uplink_seconds,
        a.busy.uplink_seconds > a.busy.node_link_seconds ? "rack uplink"
                                                         : "node link",
        a.seconds);
    EXPECT_NE(doc.find(line), std::string::npos)
        << "docs/MODEL.md §12 should quote: " << line;
  }
}

}  // namespace
}  // namespace monta::model
