#include "server/registry/registry.h"

#include "gtest/gtest.h"

namespace monta::registry {
namespace {

using monta::v1::NODE_STATE_ALIVE;
using monta::v1::NODE_STATE_GONE;
using monta::v1::NODE_STATE_STALE;

monta::v1::RegisterRequest Req(const std::string& name,
                               const std::string& instance) {
  monta::v1::RegisterRequest r;
  r.set_node_name(name);
  r.set_instance_id(instance);
  r.mutable_topology()->set_hostname(name);
  return r;
}

class RegistryTest : public ::testing::Test {
 protected:
  RegistryOptions Options() {
    RegistryOptions o;
    o.lease = absl::Seconds(10);
    return o;
  }
  absl::Time t0_ = absl::FromUnixSeconds(1'700'000'000);
};

TEST_F(RegistryTest, RegisteredNodeIsAliveThenStaleAfterLease) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), t0_).ok());
  auto info = r.Get("node-a", t0_ + absl::Seconds(3));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), NODE_STATE_ALIVE);
  EXPECT_DOUBLE_EQ(info->lease_age_seconds(), 3.0);
  info = r.Get("node-a", t0_ + absl::Seconds(11));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), NODE_STATE_STALE);
}

TEST_F(RegistryTest, HeartbeatRenewsLease) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), t0_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  ASSERT_TRUE(r.Heartbeat(hb, t0_ + absl::Seconds(8)).ok());
  EXPECT_EQ(r.Get("node-a", t0_ + absl::Seconds(15))->state(),
            NODE_STATE_ALIVE);
  EXPECT_TRUE(r.IsAlive("node-a", "i1", t0_ + absl::Seconds(15)));
  EXPECT_FALSE(r.IsAlive("node-a", "other", t0_ + absl::Seconds(15)));
}

TEST_F(RegistryTest, HeartbeatForUnknownNodeAsksToRegister) {
  Registry r(Options());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  absl::Status s = r.Heartbeat(hb, t0_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("register again"), std::string::npos);
}

TEST_F(RegistryTest, DuplicateNameRefusedWhileLeaseAliveThenTakenOver) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), t0_).ok());
  absl::Status dup = r.Register(Req("node-a", "i2"), t0_ + absl::Seconds(2));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.message().find("i1"), std::string::npos) << dup;
  // Same instance re-registering (planner restart, reconnect) is fine.
  EXPECT_TRUE(r.Register(Req("node-a", "i1"), t0_ + absl::Seconds(3)).ok());
  // Once the lease expired, a new instance may take the name.
  EXPECT_TRUE(r.Register(Req("node-a", "i2"), t0_ + absl::Seconds(20)).ok());
  EXPECT_EQ(r.Get("node-a", t0_ + absl::Seconds(20))->instance_id(), "i2");
}

TEST_F(RegistryTest, InvalidNamesRejectedWithField) {
  Registry r(Options());
  for (const char* bad : {"", "Node_A", "-a", "a-", "has space"}) {
    absl::Status s = r.Register(Req(bad, "i1"), t0_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("node_name"), std::string::npos) << s;
  }
  EXPECT_EQ(r.Register(Req("ok", ""), t0_).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, BrokenTopologyIsRefusedAtRegisterAndHeartbeat) {
  Registry r(Options());
  auto req = Req("node-a", "i1");
  req.mutable_topology()->add_nics()->set_rate_bytes_per_second(-1);
  absl::Status s = r.Register(req, t0_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("topology.nics[0]"), std::string::npos) << s;
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), t0_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  hb.mutable_topology()->add_gpus()->set_index(-3);
  EXPECT_EQ(r.Heartbeat(hb, t0_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, DeregisterMakesNodeGoneAndHiddenByDefault) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), t0_).ok());
  ASSERT_TRUE(r.Register(Req("node-b", "i2"), t0_).ok());
  EXPECT_EQ(r.Deregister("node-a", "wrong", t0_).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(r.Deregister("node-a", "i1", t0_).ok());
  EXPECT_EQ(r.List(t0_, false).size(), 1u);
  auto all = r.List(t0_, true);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name(), "node-a");
  EXPECT_EQ(all[0].state(), NODE_STATE_GONE);
}

TEST_F(RegistryTest, TopologyChangesBecomeEvents) {
  TopologyDiffer differ = [](const monta::v1::NodeTopology& a,
                             const monta::v1::NodeTopology& b) {
    std::vector<monta::v1::TopologyEvent> events;
    if (a.nics_size() == 1 && b.nics_size() == 1 &&
        a.nics(0).rate_bytes_per_second() !=
            b.nics(0).rate_bytes_per_second()) {
      monta::v1::TopologyEvent e;
      e.set_change(monta::v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED);
      events.push_back(e);
    }
    return events;
  };
  Registry r(Options(), differ);
  auto req = Req("node-a", "i1");
  auto* nic = req.mutable_topology()->add_nics();
  nic->set_name("mlx5_0");
  nic->set_rate_bytes_per_second(400e9 / 8);
  ASSERT_TRUE(r.Register(req, t0_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  *hb.mutable_topology() = req.topology();
  hb.mutable_topology()->mutable_nics(0)->set_rate_bytes_per_second(200e9 / 8);
  ASSERT_TRUE(r.Heartbeat(hb, t0_ + absl::Seconds(1)).ok());
  auto info = r.Get("node-a", t0_ + absl::Seconds(1));
  ASSERT_EQ(info->events_size(), 1);
  EXPECT_EQ(info->events(0).change(),
            monta::v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED);
  EXPECT_EQ(info->topology().nics(0).rate_bytes_per_second(), 200e9 / 8);
}

TEST_F(RegistryTest, CurvesReplaceSameMeasurementAndNeedKnownNodes) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("a", "i1"), t0_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), t0_).ok());
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.set_scope(monta::v1::SCOPE_INTER_NODE);
  c.set_nranks(4);
  c.add_nodes("a");
  c.add_nodes("b");
  c.add_points()->set_message_bytes(1024);
  ASSERT_TRUE(r.AddCurve(c).ok());
  c.mutable_points(0)->set_message_bytes(2048);
  ASSERT_TRUE(r.AddCurve(c).ok());
  auto a = r.Get("a", t0_);
  ASSERT_EQ(a->curves_size(), 1);
  EXPECT_EQ(a->curves(0).points(0).message_bytes(), 2048u);
  EXPECT_EQ(r.Get("b", t0_)->curves_size(), 1);
  c.add_nodes("zzz");
  EXPECT_EQ(r.AddCurve(c).code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, CurvesPerNodeAreBoundedAndReplacementsStillFit) {
  RegistryOptions options = Options();
  options.max_curves_per_node = 3;
  Registry r(options);
  ASSERT_TRUE(r.Register(Req("a", "i1"), t0_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), t0_).ok());
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.add_nodes("a");
  c.add_points()->set_message_bytes(1024);
  for (int chunks = 1; chunks <= 3; ++chunks) {
    c.set_chunks(chunks);
    ASSERT_TRUE(r.AddCurve(c).ok());
  }
  c.set_chunks(4);  // a fourth distinct measurement
  const absl::Status s = r.AddCurve(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max_curves_per_node"), std::string::npos) << s;
  c.set_chunks(2);  // a re-measurement replaces its predecessor
  EXPECT_TRUE(r.AddCurve(c).ok());
  EXPECT_EQ(r.Get("a", t0_)->curves_size(), 3);
  // A curve over two nodes is refused whole when one of them is full.
  c.set_chunks(5);
  c.clear_nodes();
  c.add_nodes("b");
  c.add_nodes("a");
  EXPECT_EQ(r.AddCurve(c).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.Get("b", t0_)->curves_size(), 0);
}

TEST_F(RegistryTest, OversizedTopologyIsRefusedAtRegisterAndHeartbeat) {
  RegistryOptions options = Options();
  options.topology_limits.max_string_bytes = 64;
  Registry r(options);
  auto req = Req("a", "i1");
  req.mutable_topology()->add_nics()->set_name("mlx5_0");
  req.mutable_topology()->mutable_nics(0)->set_state(std::string(65, 'A'));
  EXPECT_EQ(r.Register(req, t0_).code(), absl::StatusCode::kResourceExhausted);
  req.mutable_topology()->mutable_nics(0)->set_state("ACTIVE");
  ASSERT_TRUE(r.Register(req, t0_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("a");
  hb.set_instance_id("i1");
  *hb.mutable_topology() = req.topology();
  hb.mutable_topology()->mutable_nics(0)->set_state(std::string(1 << 20, 'A'));
  const absl::Status s = r.Heartbeat(hb, t0_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("topology.nics[0].state"), std::string::npos);
  EXPECT_EQ(r.Get("a", t0_)->topology().nics(0).state(), "ACTIVE");
}

}  // namespace
}  // namespace monta::registry
