#include "server/registry/registry.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
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
  // Both clocks `d` after the start: the wall clock at t0_, the monotonic one
  // at m0_ (tests that step one clock build an Instant by hand).
  Instant At(absl::Duration d) const {
    return Instant{t0_ + d, MonoAfter(m0_, d)};
  }
  // node-a (instance i1) and node-b (i2) registered at start_; removed 30 s
  // after they went quiet.
  std::unique_ptr<Registry> TwoNodesGoneAfter30s() {
    RegistryOptions options = Options();
    options.gone_after = absl::Seconds(30);
    auto r = std::make_unique<Registry>(options);
    EXPECT_TRUE(r->Register(Req("node-a", "i1"), start_).ok());
    EXPECT_TRUE(r->Register(Req("node-b", "i2"), start_).ok());
    return r;
  }
  const absl::Time t0_ = absl::FromUnixSeconds(1'700'000'000);
  const MonoTime m0_ = MonoTime() + std::chrono::hours(1000);
  const Instant start_ = At(absl::ZeroDuration());
};

TEST_F(RegistryTest, RegisteredNodeIsAliveThenStaleAfterLease) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  auto info = r.Get("node-a", At(absl::Seconds(3)));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), NODE_STATE_ALIVE);
  EXPECT_DOUBLE_EQ(info->lease_age_seconds(), 3.0);
  info = r.Get("node-a", At(absl::Seconds(11)));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), NODE_STATE_STALE);
}

TEST_F(RegistryTest, HeartbeatRenewsLease) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  ASSERT_TRUE(r.Heartbeat(hb, At(absl::Seconds(8))).ok());
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(15)))->state(), NODE_STATE_ALIVE);
  EXPECT_TRUE(r.IsAlive("node-a", "i1", At(absl::Seconds(15))));
  EXPECT_FALSE(r.IsAlive("node-a", "other", At(absl::Seconds(15))));
}

// A planner on etcd: a node heartbeating to another replica is alive here
// through its attachment (its instance's), and Heard lists only the nodes
// this process hears itself (what it attaches).
TEST_F(RegistryTest, AttachedNodeIsAliveWithoutHeartbeatsHere) {
  std::unique_ptr<Registry> registry = TwoNodesGoneAfter30s();
  Registry& r = *registry;
  const Instant later = At(absl::Seconds(40));
  EXPECT_EQ(r.Get("node-a", later)->state(), NODE_STATE_STALE);
  r.ApplyAttached(
      {{"node-a", "i1", true}, {"node-b", "another-instance", true}}, later);
  EXPECT_EQ(r.Get("node-a", later)->state(), NODE_STATE_ALIVE);
  EXPECT_TRUE(r.IsAlive("node-a", "i1", later));
  // Another instance's attachment is not this one's lease.
  EXPECT_EQ(r.Get("node-b", later)->state(), NODE_STATE_STALE);
  EXPECT_EQ(r.StaleNodes(later), std::vector<std::string>{"node-b"});
  // A node alive through its attachment is not removed, however long this
  // process has not heard it; once detached it is quiet from then on.
  EXPECT_EQ(r.RemoveGone(later), std::vector<std::string>{"node-b"});
  r.ApplyAttached(
      {{"node-b", "another-instance", false}, {"node-a", "i1", false}},
      At(absl::Seconds(50)));
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(50)))->state(), NODE_STATE_STALE);
  EXPECT_TRUE(r.RemoveGone(At(absl::Seconds(79))).empty());
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(80))),
            std::vector<std::string>{"node-a"});
}

// Attachments come as changes (first attached, last detached): a node stays
// alive while any instance of it that is its own is attached, an unrelated
// node is untouched, and the detachment of its own instance makes it quiet
// from that moment, not from its last heartbeat here.
TEST_F(RegistryTest, AttachmentChangesApplyOnlyToTheirNode) {
  std::unique_ptr<Registry> registry = TwoNodesGoneAfter30s();
  Registry& r = *registry;
  // node-a: its own instance and an older one of the same node attached.
  r.ApplyAttached({{"node-a", "i1", true}, {"node-a", "i0", true}},
                  At(absl::Seconds(5)));
  r.ApplyAttached({{"node-b", "i2", true}}, At(absl::Seconds(5)));
  const Instant t20 = At(absl::Seconds(20));
  EXPECT_EQ(r.Get("node-a", t20)->state(), NODE_STATE_ALIVE);
  // The older instance's attachment goes: node-a stays alive (its own
  // instance is still attached) and nothing is quiet yet.
  r.ApplyAttached({{"node-a", "i0", false}}, t20);
  EXPECT_EQ(r.Get("node-a", t20)->state(), NODE_STATE_ALIVE);
  EXPECT_TRUE(r.IsAlive("node-a", "i1", At(absl::Seconds(60))));
  // A detachment of an instance never attached changes nothing.
  r.ApplyAttached({{"node-a", "never", false}}, t20);
  EXPECT_TRUE(r.IsAlive("node-a", "i1", At(absl::Seconds(60))));
  // node-b's last attachment goes at 25 s: stale from then, removed
  // gone_after (30 s) after that, while node-a, still attached, stays.
  r.ApplyAttached({{"node-b", "i2", false}}, At(absl::Seconds(25)));
  EXPECT_EQ(r.Get("node-b", At(absl::Seconds(25)))->state(), NODE_STATE_STALE);
  EXPECT_TRUE(r.RemoveGone(At(absl::Seconds(54))).empty());
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(55))),
            std::vector<std::string>{"node-b"});
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(55)))->state(), NODE_STATE_ALIVE);
  // Its own instance's last attachment goes at 60 s: quiet from then, not
  // from its registration.
  r.ApplyAttached({{"node-a", "i1", false}}, At(absl::Seconds(60)));
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(60)))->state(), NODE_STATE_STALE);
  EXPECT_TRUE(r.RemoveGone(At(absl::Seconds(89))).empty());
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(90))),
            std::vector<std::string>{"node-a"});
}

// lease_age_seconds of a node alive only through an attachment: the time
// since this replica last heard it or saw the attachment appear, the later;
// never the growing time since its last heartbeat here.
TEST_F(RegistryTest, LeaseAgeOfAnAttachedNodeCountsFromTheAttachment) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  EXPECT_DOUBLE_EQ(r.Get("node-a", At(absl::Seconds(4)))->lease_age_seconds(),
                   4.0);
  r.ApplyAttached({{"node-a", "i1", true}}, At(absl::Seconds(30)));
  auto info = r.Get("node-a", At(absl::Seconds(42)));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), NODE_STATE_ALIVE);
  EXPECT_DOUBLE_EQ(info->lease_age_seconds(), 12.0);
  // Heard here again: its heartbeat is the newer evidence.
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  ASSERT_TRUE(r.Heartbeat(hb, At(absl::Seconds(45))).ok());
  EXPECT_DOUBLE_EQ(r.Get("node-a", At(absl::Seconds(47)))->lease_age_seconds(),
                   2.0);
  // Detached: back to the time since its last heartbeat here.
  r.ApplyAttached({{"node-a", "i1", false}}, At(absl::Seconds(50)));
  EXPECT_DOUBLE_EQ(r.Get("node-a", At(absl::Seconds(70)))->lease_age_seconds(),
                   25.0);
}

TEST_F(RegistryTest, HeardListsOnlyNodesHeardHereAndDeregisteredGoes) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-b", "i2"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-c", "i3"), start_).ok());
  ASSERT_TRUE(r.Deregister("node-c", "i3", start_).ok());
  r.ApplyAttached({{"node-b", "i2", true}}, start_);
  EXPECT_EQ(r.Heard(At(absl::Seconds(5))),
            (HeardNodes{{"node-a", "i1"}, {"node-b", "i2"}}));
  // node-b's lease here expired: alive through its attachment, not heard.
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  ASSERT_TRUE(r.Heartbeat(hb, At(absl::Seconds(8))).ok());
  EXPECT_EQ(r.Heard(At(absl::Seconds(12))), (HeardNodes{{"node-a", "i1"}}));
  // A deregistered node is gone even while an attachment names it.
  r.ApplyAttached({{"node-c", "i3", true}}, At(absl::Seconds(12)));
  EXPECT_EQ(r.Get("node-c", At(absl::Seconds(12)))->state(), NODE_STATE_GONE);
}

// A replica reloading its registry from the store (it starts leading, or its
// cache lists again) keeps the leases of the agents it heard, of the same
// instance only.
TEST_F(RegistryTest, ClearThenRestoreKeepsTheLeasesHeard) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-b", "i2"), start_).ok());
  const monta::v1::NodeInfo a = *r.Get("node-a", start_);
  monta::v1::NodeInfo b = *r.Get("node-b", start_);
  b.set_instance_id("i2-restarted");
  r.Clear();
  r.Restore(a, At(absl::Seconds(1)));
  r.Restore(b, At(absl::Seconds(1)));
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(5)))->state(), NODE_STATE_ALIVE);
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(11)))->state(), NODE_STATE_STALE);
  EXPECT_EQ(r.Get("node-b", At(absl::Seconds(5)))->state(), NODE_STATE_STALE);
  // A follower applying a change of a node it hears keeps the lease too.
  r.Restore(a, At(absl::Seconds(2)));
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(5)))->state(), NODE_STATE_ALIVE);
}

TEST_F(RegistryTest, ReplaceSwapsInTheLoadedNodesKeepingTheLeasesHeard) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-b", "i2"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-c", "i3"), start_).ok());
  const monta::v1::NodeInfo a = *r.Get("node-a", start_);
  monta::v1::NodeInfo b = *r.Get("node-b", start_);
  b.set_instance_id("i2-restarted");
  // What a store lists (node-c is no longer stored), loaded beside `r`.
  Registry loaded(Options());
  loaded.Restore(a, At(absl::Seconds(1)));
  loaded.Restore(b, At(absl::Seconds(1)));
  r.Replace(loaded);
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(5)))->state(), NODE_STATE_ALIVE);
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(11)))->state(), NODE_STATE_STALE);
  EXPECT_EQ(r.Get("node-b", At(absl::Seconds(5)))->state(), NODE_STATE_STALE);
  EXPECT_EQ(r.Get("node-c", start_).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(loaded.Get("node-a", start_).status().code(),
            absl::StatusCode::kNotFound)
      << "the loaded registry is left empty";
}

TEST_F(RegistryTest, StaleNodesListsExpiredLeasesOnly) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-b", "i2"), At(absl::Seconds(5))).ok());
  ASSERT_TRUE(r.Register(Req("node-c", "i3"), start_).ok());
  ASSERT_TRUE(r.Deregister("node-c", "i3", start_).ok());
  EXPECT_TRUE(r.StaleNodes(At(absl::Seconds(9))).empty());
  // node-a's lease ended at 10 s, node-b's runs to 15 s; gone node-c is not
  // stale.
  EXPECT_EQ(r.StaleNodes(At(absl::Seconds(12))),
            std::vector<std::string>{"node-a"});
  EXPECT_EQ(r.StaleNodes(At(absl::Seconds(15))),
            (std::vector<std::string>{"node-a", "node-b"}));
}

TEST_F(RegistryTest, HeartbeatForUnknownNodeAsksToRegister) {
  Registry r(Options());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  absl::Status s = r.Heartbeat(hb, start_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("register again"), std::string::npos);
}

TEST_F(RegistryTest, DuplicateNameRefusedWhileLeaseAliveThenTakenOver) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  absl::Status dup = r.Register(Req("node-a", "i2"), At(absl::Seconds(2)));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  // Names no instance id: they are not handed out (issue 11).
  EXPECT_EQ(dup.message().find("i1"), std::string::npos) << dup;
  EXPECT_NE(dup.message().find("another agent instance"), std::string::npos)
      << dup;
  // Same instance re-registering (planner restart, reconnect) is fine.
  EXPECT_TRUE(r.Register(Req("node-a", "i1"), At(absl::Seconds(3))).ok());
  // Once the lease expired, a new instance may take the name.
  EXPECT_TRUE(r.Register(Req("node-a", "i2"), At(absl::Seconds(20))).ok());
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(20)))->instance_id(), "i2");
}

TEST_F(RegistryTest, InvalidNamesRejectedWithField) {
  Registry r(Options());
  for (const char* bad : {"", "Node_A", "-a", "a-", "has space"}) {
    absl::Status s = r.Register(Req(bad, "i1"), start_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("node_name"), std::string::npos) << s;
  }
  EXPECT_EQ(r.Register(Req("ok", ""), start_).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, BrokenTopologyIsRefusedAtRegisterAndHeartbeat) {
  Registry r(Options());
  auto req = Req("node-a", "i1");
  req.mutable_topology()->add_nics()->set_rate_bytes_per_second(-1);
  absl::Status s = r.Register(req, start_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("topology.nics[0]"), std::string::npos) << s;
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  hb.mutable_topology()->add_gpus()->set_index(-3);
  EXPECT_EQ(r.Heartbeat(hb, start_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, DeregisterMakesNodeGoneAndHiddenByDefault) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("node-a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("node-b", "i2"), start_).ok());
  EXPECT_EQ(r.Deregister("node-a", "wrong", start_).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(r.Deregister("node-a", "i1", start_).ok());
  EXPECT_EQ(r.List(start_, false).size(), 1u);
  auto all = r.List(start_, true);
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
  ASSERT_TRUE(r.Register(req, start_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  *hb.mutable_topology() = req.topology();
  hb.mutable_topology()->mutable_nics(0)->set_rate_bytes_per_second(200e9 / 8);
  ASSERT_TRUE(r.Heartbeat(hb, At(absl::Seconds(1))).ok());
  auto info = r.Get("node-a", At(absl::Seconds(1)));
  ASSERT_EQ(info->events_size(), 1);
  EXPECT_EQ(info->events(0).change(),
            monta::v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED);
  EXPECT_EQ(info->topology().nics(0).rate_bytes_per_second(), 200e9 / 8);
}

// An agent older than the NIC enums sends the texts only: the registry fills
// the enums from them, so every reader of NodeInfo finds them set.
TEST_F(RegistryTest, NicKindsAreFilledFromTheTextOfOlderAgents) {
  Registry r(Options());
  auto req = Req("node-a", "i1");
  auto* nic = req.mutable_topology()->add_nics();
  nic->set_name("mlx5_0");
  nic->set_state("DOWN");
  nic->set_phys_state("Polling");
  nic->set_link_layer("InfiniBand");
  ASSERT_TRUE(r.Register(req, start_).ok());
  monta::v1::Nic stored = r.Get("node-a", start_)->topology().nics(0);
  EXPECT_EQ(stored.state(), "DOWN");
  EXPECT_EQ(stored.state_kind(), monta::v1::NIC_PORT_STATE_DOWN);
  EXPECT_EQ(stored.phys_state_kind(), monta::v1::NIC_PHYS_STATE_POLLING);
  EXPECT_EQ(stored.link_layer_kind(), monta::v1::NIC_LINK_LAYER_INFINIBAND);

  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("node-a");
  hb.set_instance_id("i1");
  *hb.mutable_topology() = req.topology();
  hb.mutable_topology()->mutable_nics(0)->set_state("ACTIVE");
  ASSERT_TRUE(r.Heartbeat(hb, At(absl::Seconds(1))).ok());
  stored = r.Get("node-a", At(absl::Seconds(1)))->topology().nics(0);
  EXPECT_EQ(stored.state_kind(), monta::v1::NIC_PORT_STATE_ACTIVE);

  // A kind that contradicts its text is refused, and nothing changes.
  hb.mutable_topology()->mutable_nics(0)->set_state_kind(
      monta::v1::NIC_PORT_STATE_DOWN);
  const absl::Status s = r.Heartbeat(hb, At(absl::Seconds(2)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("topology.nics[0].state_kind"), std::string::npos)
      << s;
  EXPECT_EQ(r.Get("node-a", At(absl::Seconds(2)))->topology().nics(0).state(),
            "ACTIVE");
}

TEST_F(RegistryTest, CurvesReplaceSameMeasurementAndNeedKnownNodes) {
  Registry r(Options());
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), start_).ok());
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
  auto a = r.Get("a", start_);
  ASSERT_EQ(a->curves_size(), 1);
  EXPECT_EQ(a->curves(0).points(0).message_bytes(), 2048u);
  EXPECT_EQ(r.Get("b", start_)->curves_size(), 1);
  c.add_nodes("zzz");
  EXPECT_EQ(r.AddCurve(c).code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, CurvesPerNodeAreBoundedAndReplacementsStillFit) {
  RegistryOptions options = Options();
  options.max_curves_per_node = 3;
  Registry r(options);
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), start_).ok());
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
  EXPECT_EQ(r.Get("a", start_)->curves_size(), 3);
  // A curve over two nodes is refused whole when one of them is full.
  c.set_chunks(5);
  c.clear_nodes();
  c.add_nodes("b");
  c.add_nodes("a");
  EXPECT_EQ(r.AddCurve(c).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.Get("b", start_)->curves_size(), 0);
}

monta::v1::BandwidthCurve PairCurve(const std::string& task, int nranks = 4) {
  monta::v1::BandwidthCurve c;
  c.set_collective(monta::v1::COLLECTIVE_ALLTOALL);
  c.set_scope(monta::v1::SCOPE_INTER_NODE);
  c.set_nranks(nranks);
  c.add_nodes("a");
  c.add_nodes("b");
  c.set_task_id(task);
  c.add_points()->set_message_bytes(1024);
  return c;
}

// Records what the registry tells its observer, and answers Forget with the
// curves it was given as "older rows". Checks that it is never called with the
// registry's lock held: it reads the registry from inside the call.
class RecordingObserver : public RegistryObserver {
 public:
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<Change>& changes) override {
    std::vector<monta::v1::BandwidthCurve> out;
    for (const Change& change : changes) {
      if (registry != nullptr) {
        // Would deadlock were the lock held (absl's Mutex is not reentrant).
        (void)registry->List(Instant::Now(), /*include_gone=*/true);
      }
      switch (change.kind) {
        case Change::Kind::kNode:
          nodes.push_back(change.node.name());
          break;
        case Change::Kind::kCurve:
          added.push_back(change.curve);
          break;
        case Change::Kind::kNodeRemoved:
          removed.push_back(change.node_name);
          break;
        case Change::Kind::kCurvesForgotten:
          forgotten_measurements = change.measurements;
          out = older;
          break;
      }
    }
    return out;
  }
  const Registry* registry = nullptr;
  std::vector<std::string> nodes;
  std::vector<monta::v1::BandwidthCurve> added;
  std::vector<std::string> removed;
  std::vector<std::string> forgotten_measurements;
  std::vector<monta::v1::BandwidthCurve> older;
};

TEST_F(RegistryTest, TheRegistryNumbersCurvesInTheOrderItTakesThem) {
  Registry r(Options());
  RecordingObserver observer;
  observer.registry = &r;
  r.SetObserver(&observer);
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), start_).ok());
  // A restored curve keeps its number; new ones count on above it, whatever
  // the agents' clocks say.
  monta::v1::BandwidthCurve restored = PairCurve("old");
  restored.set_sequence(41);
  ASSERT_TRUE(r.RestoreCurve(restored).ok());
  EXPECT_TRUE(observer.added.empty());
  monta::v1::BandwidthCurve future = PairCurve("t1", 8);
  future.mutable_measured_at()->set_seconds(
      absl::ToUnixSeconds(t0_ + absl::Hours(24 * 365 * 100)));
  future.set_sequence(999);  // whatever a client sent: replaced
  ASSERT_TRUE(r.AddCurve(future).ok());
  ASSERT_TRUE(r.AddCurve(PairCurve("t2")).ok());
  ASSERT_EQ(observer.added.size(), 2u);
  EXPECT_EQ(observer.added[0].sequence(), 42u);
  EXPECT_EQ(observer.added[1].sequence(), 43u);
  // A failed AddCurve uses no number; the store's highest row moves them on.
  monta::v1::BandwidthCurve unknown = PairCurve("t3");
  unknown.add_nodes("zzz");
  EXPECT_FALSE(r.AddCurve(unknown).ok());
  r.AdvanceSequence(100);
  ASSERT_TRUE(r.AddCurve(PairCurve("t4")).ok());
  EXPECT_EQ(observer.added.back().sequence(), 101u);
  auto listed = r.ListCurves("a");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->curves_size(), 2);           // t4 replaced t2's measurement
  EXPECT_EQ(listed->curves(0).task_id(), "t4");  // newest first
  EXPECT_EQ(listed->curves(1).task_id(), "t1");
  EXPECT_EQ(r.ListCurves("zzz").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, ExclusionsAreAShortRingPerNode) {
  RegistryOptions options = Options();
  options.max_exclusions_per_node = 2;
  Registry r(options);
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), start_).ok());
  for (const char* task : {"x1", "x2", "x3"}) {
    monta::v1::ExcludedCurve e;
    *e.mutable_curve() = PairCurve(task);
    e.set_reason(monta::v1::EXCLUSION_REASON_NODES_DISAGREE);
    r.AddExcluded(e);
  }
  const auto excluded = r.Excluded("b");
  ASSERT_EQ(excluded.size(), 2u);
  EXPECT_EQ(excluded[0].curve().task_id(), "x3");  // newest first
  EXPECT_EQ(excluded[1].curve().task_id(), "x2");
  EXPECT_EQ(r.ListCurves("a")->excluded_size(), 2);
  EXPECT_TRUE(r.Excluded("zzz").empty());
}

TEST_F(RegistryTest, ForgetDropsATasksOrANodesCurvesAndPutsBackOlderOnes) {
  Registry r(Options());
  RecordingObserver observer;
  observer.registry = &r;
  r.SetObserver(&observer);
  for (const char* n : {"a", "b", "c"}) {
    ASSERT_TRUE(r.Register(Req(n, std::string("i-") + n), start_).ok());
  }
  ASSERT_TRUE(r.AddCurve(PairCurve("forged")).ok());
  monta::v1::BandwidthCurve own_c = PairCurve("c-alone");
  own_c.clear_nodes();
  own_c.add_nodes("c");
  ASSERT_TRUE(r.AddCurve(own_c).ok());
  monta::v1::ExcludedCurve e;
  *e.mutable_curve() = PairCurve("forged", 8);
  r.AddExcluded(e);
  // The store still holds the honest curve the forged one replaced.
  monta::v1::BandwidthCurve honest = PairCurve("honest");
  honest.set_sequence(1);
  observer.older = {honest};

  EXPECT_EQ(r.Forget({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Forget({"x", "a"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Forget({"", "zzz"}).status().code(), absl::StatusCode::kNotFound);
  auto reply = r.Forget({"forged", ""});
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->forgotten_size(), 1);  // one curve, though held twice
  EXPECT_EQ(reply->forgotten(0).task_id(), "forged");
  EXPECT_EQ(reply->forgotten(0).points_size(), 0);
  EXPECT_EQ(observer.forgotten_measurements,
            std::vector<std::string>{CurveKey(PairCurve("forged"))});
  ASSERT_EQ(reply->restored_size(), 1);
  EXPECT_EQ(r.Get("a", start_)->curves(0).task_id(), "honest");
  EXPECT_EQ(r.Get("b", start_)->curves(0).task_id(), "honest");
  EXPECT_TRUE(r.Excluded("a").empty());
  EXPECT_EQ(r.Get("c", start_)->curves_size(), 1);

  // By node: everything naming b goes, c's own curve stays.
  observer.older.clear();
  reply = r.Forget({"", "b"});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->forgotten_size(), 1);
  EXPECT_EQ(r.Get("a", start_)->curves_size(), 0);
  EXPECT_EQ(r.Get("c", start_)->curves_size(), 1);
}

monta::v1::HeartbeatRequest Beat(const std::string& name,
                                 const std::string& instance) {
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name(name);
  hb.set_instance_id(instance);
  return hb;
}

// An observer that holds the first change of `kind` until released (a slow
// or stuck store).
class BlockingObserver : public RegistryObserver {
 public:
  explicit BlockingObserver(Change::Kind kind) : kind_(kind) {}
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<Change>& changes) override {
    batches.push_back(changes.size());
    for (const Change& change : changes) {
      kinds.push_back(change.kind);
      if (change.kind == Change::Kind::kNode) nodes.push_back(change.node);
      if (change.kind == kind_ && !entered.HasBeenNotified()) {
        entered.Notify();
        release.WaitForNotification();
        return older;
      }
    }
    return {};
  }
  absl::Notification entered;
  absl::Notification release;
  std::vector<monta::v1::BandwidthCurve> older;
  std::vector<Change::Kind> kinds;         // read after the writers joined
  std::vector<monta::v1::NodeInfo> nodes;  // of the kNode changes, as kinds
  std::vector<size_t> batches;             // the size of each Changed call

 private:
  const Change::Kind kind_;
};

// The store is written outside the registry's lock: while it hangs on one
// write, reads and heartbeats go on, and the write's caller returns only once
// it is persisted.
TEST_F(RegistryTest, AStuckStoreWriteBlocksNeitherReadsNorHeartbeats) {
  Registry r(Options());
  BlockingObserver observer(Change::Kind::kCurve);
  r.SetObserver(&observer);
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), start_).ok());
  absl::Notification added;
  std::thread writer([&] {
    EXPECT_TRUE(r.AddCurve(PairCurve("t1")).ok());
    added.Notify();
  });
  observer.entered.WaitForNotification();
  // The curve is in memory (the source of truth) while its write hangs.
  EXPECT_EQ(r.Get("a", start_)->curves(0).task_id(), "t1");
  EXPECT_EQ(r.List(start_, false).size(), 2u);
  EXPECT_TRUE(r.Heartbeat(Beat("a", "i1"), start_).ok());
  EXPECT_TRUE(r.IsAlive("b", "i2", start_));
  EXPECT_FALSE(added.HasBeenNotified());
  observer.release.Notify();
  writer.join();
  EXPECT_EQ(observer.kinds,
            (std::vector<Change::Kind>{Change::Kind::kNode, Change::Kind::kNode,
                                       Change::Kind::kCurve}));
}

// A store slower than the agents: the changes waiting for it are bounded (a
// registration over the bound is refused before it changes anything, so its
// agent backs off), and a retried registration whose change still waits
// replaces that change instead of queueing another.
TEST_F(RegistryTest, ChangesWaitingForTheStoreAreBoundedAndRetriesReplace) {
  RegistryOptions options = Options();
  options.max_pending_changes = 3;
  Registry r(options);
  BlockingObserver observer(Change::Kind::kNode);
  r.SetObserver(&observer);
  std::vector<std::thread> agents;
  agents.emplace_back(
      [&] { EXPECT_TRUE(r.Register(Req("a", "ia"), start_).ok()); });
  observer.entered.WaitForNotification();  // a's change: in the store's hands
  for (std::string name : {"b", "c"}) {
    agents.emplace_back([&r, this, name] {
      EXPECT_TRUE(r.Register(Req(name, "i" + name), start_).ok());
    });
  }
  while (r.PendingChanges() < 3) absl::SleepFor(absl::Milliseconds(1));
  monta::v1::RegisterRequest retry = Req("b", "ib");  // its RPC timed out
  retry.set_bench_address("10.0.0.2:7");
  agents.emplace_back([&] { EXPECT_TRUE(r.Register(retry, start_).ok()); });
  while (r.Get("b", start_)->bench_address() != "10.0.0.2:7") {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(r.PendingChanges(), 3);
  // d would be a fourth: refused at once (without the bound it would queue
  // and wait for the store).
  absl::Status d_status;
  absl::Notification d_returned;
  agents.emplace_back([&] {
    d_status = r.Register(Req("d", "id"), start_);
    d_returned.Notify();
  });
  while (!d_returned.HasBeenNotified() && r.PendingChanges() < 4) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(r.PendingChanges(), 3);
  EXPECT_TRUE(d_returned.HasBeenNotified());
  // A plain heartbeat queues nothing and is never refused.
  EXPECT_TRUE(r.Heartbeat(Beat("a", "ia"), start_).ok());
  observer.release.Notify();
  for (std::thread& agent : agents) agent.join();
  EXPECT_EQ(d_status.code(), absl::StatusCode::kResourceExhausted) << d_status;
  EXPECT_NE(d_status.message().find("--max_pending_registry_changes"),
            std::string::npos)
      << d_status;
  EXPECT_EQ(r.Get("d", start_).status().code(), absl::StatusCode::kNotFound);
  std::vector<std::string> persisted;
  for (const monta::v1::NodeInfo& node : observer.nodes) {
    persisted.push_back(node.name() + "@" + node.bench_address());
  }
  std::sort(persisted.begin(), persisted.end());  // b and c raced
  EXPECT_EQ(persisted, (std::vector<std::string>{"a@", "b@10.0.0.2:7", "c@"}));
  EXPECT_EQ(r.PendingChanges(), 0);
  // The store caught up: d is let in.
  EXPECT_TRUE(r.Register(Req("d", "id"), start_).ok());
}

// RegisterThen holds no thread while the store writes: the registrations
// that arrive meanwhile go to the store as one batch, and each caller hears
// back only once its change is persisted.
TEST_F(RegistryTest, RegisterThenAnswersOncePersistedAndBatchesTheWaiting) {
  Registry r(Options());
  BlockingObserver observer(Change::Kind::kNode);
  r.SetObserver(&observer);
  std::vector<absl::Status> answers(4, absl::UnknownError("no answer"));
  std::vector<absl::Notification> answered(4);
  auto register_then = [&](int i) {
    r.RegisterThen(Req(absl::StrCat("n", i), "i"), start_,
                   [&, i](absl::Status status) {
                     answers[i] = status;
                     answered[i].Notify();
                   });
  };
  register_then(0);  // returns at once: the delivery thread writes it
  observer.entered.WaitForNotification();
  for (int i = 1; i < 4; ++i) register_then(i);  // none blocks
  for (absl::Notification& a : answered) EXPECT_FALSE(a.HasBeenNotified());
  EXPECT_EQ(r.PendingChanges(), 4);
  // A refusal is answered at once, on the caller's thread.
  monta::v1::RegisterRequest bad = Req("Not_A_Name", "i");
  absl::Status refused;
  r.RegisterThen(bad, start_, [&](absl::Status s) { refused = s; });
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  observer.release.Notify();
  for (int i = 0; i < 4; ++i) {
    answered[i].WaitForNotification();
    EXPECT_TRUE(answers[i].ok()) << answers[i];
  }
  // n0 alone, then n1..n3 in one batch.
  EXPECT_EQ(observer.nodes.size(), 4u);
  EXPECT_EQ(observer.batches, (std::vector<size_t>{1, 3}));
}

// A store that takes each Changed call only when the test releases it.
class GatedObserver : public RegistryObserver {
 public:
  std::vector<monta::v1::BandwidthCurve> Changed(
      const std::vector<Change>& changes) override {
    absl::MutexLock lock(&mu_);
    batches.push_back(changes.size());
    for (const Change& change : changes) {
      nodes.push_back(change.node.name() + "@" + change.node.bench_address());
    }
    const int call = ++calls_;
    cv_.SignalAll();
    while (released_ < call) cv_.Wait(&mu_);
    return {};
  }
  // Waits until call `n` (from 1) is in the store's hands.
  void WaitForCall(int n) {
    absl::MutexLock lock(&mu_);
    while (calls_ < n) cv_.Wait(&mu_);
  }
  // Lets the calls up to `n` return.
  void Release(int n) {
    absl::MutexLock lock(&mu_);
    released_ = n;
    cv_.SignalAll();
  }
  std::vector<size_t> batches;     // read after the calls returned
  std::vector<std::string> nodes;  // name@bench_address of each change

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  int calls_ = 0;
  int released_ = 0;
};

// A registration storm: the store gets at most max_changes_per_delivery
// changes per call, and the RegisterThen callers of each call are answered
// when it returns, while later changes still wait (answering only once the
// queue drained would, with registrations still coming, answer nobody before
// their calls time out). A retry of a node whose change waits still replaces
// it after the queue moved up.
TEST_F(RegistryTest, RegisterThenAnswersEachBatchOnceStoredWhileLaterOnesWait) {
  RegistryOptions options = Options();
  options.max_changes_per_delivery = 2;
  Registry r(options);
  GatedObserver observer;
  r.SetObserver(&observer);
  std::vector<absl::Status> answers(5, absl::UnknownError("no answer"));
  std::vector<absl::Notification> answered(5);
  auto register_then = [&](int i, const std::string& bench_address) {
    monta::v1::RegisterRequest request = Req(absl::StrCat("n", i), "i");
    request.set_bench_address(bench_address);
    r.RegisterThen(request, start_, [&, i](absl::Status status) {
      answers[i] = status;
      if (!answered[i].HasBeenNotified()) answered[i].Notify();
    });
  };
  register_then(0, "");
  observer.WaitForCall(1);  // n0 in the store's hands
  for (int i = 1; i < 5; ++i) register_then(i, "");
  EXPECT_EQ(r.PendingChanges(), 5);
  observer.Release(1);
  observer.WaitForCall(2);  // n1, n2: the bound
  EXPECT_TRUE(answered[0].HasBeenNotified());
  EXPECT_TRUE(answers[0].ok()) << answers[0];
  for (int i = 1; i < 5; ++i) EXPECT_FALSE(answered[i].HasBeenNotified()) << i;
  register_then(4, "10.0.0.4:7");  // n4's retry replaces its queued change
  EXPECT_EQ(r.PendingChanges(), 4);
  observer.Release(2);
  observer.WaitForCall(3);
  EXPECT_TRUE(answered[1].HasBeenNotified());
  EXPECT_TRUE(answered[2].HasBeenNotified());
  EXPECT_FALSE(answered[3].HasBeenNotified());
  EXPECT_FALSE(answered[4].HasBeenNotified());
  observer.Release(3);
  for (int i = 3; i < 5; ++i) {
    answered[i].WaitForNotification();
    EXPECT_TRUE(answers[i].ok()) << answers[i];
  }
  EXPECT_EQ(observer.batches, (std::vector<size_t>{1, 2, 2}));
  EXPECT_EQ(observer.nodes, (std::vector<std::string>{"n0@", "n1@", "n2@",
                                                      "n3@", "n4@10.0.0.4:7"}));
  EXPECT_EQ(r.PendingChanges(), 0);
}

// Admission by the store's pace: once the oldest change not yet persisted
// has waited past max_pending_wait, a registration that would queue one more
// is refused at once (well under max_pending_changes), and let in again once
// the store caught up. A heartbeat queues nothing and is never refused.
TEST_F(RegistryTest, RegistrationsAreRefusedWhileTheStoreIsBehindTheirWait) {
  RegistryOptions options = Options();
  options.max_pending_wait = absl::Seconds(2);
  Registry r(options);
  GatedObserver observer;
  r.SetObserver(&observer);
  absl::Status b_status = absl::UnknownError("no answer");
  absl::Notification b_answered;
  r.RegisterThen(Req("a", "ia"), start_, [](absl::Status) {});
  observer.WaitForCall(1);  // a's change, queued at 0 s, in the store's hands
  r.RegisterThen(Req("b", "ib"), At(absl::Seconds(2)), [&](absl::Status s) {
    b_status = s;
    b_answered.Notify();
  });
  absl::Status c_status;
  r.RegisterThen(Req("c", "ic"), At(absl::Seconds(3)),
                 [&](absl::Status s) { c_status = s; });
  EXPECT_EQ(c_status.code(), absl::StatusCode::kResourceExhausted) << c_status;
  EXPECT_NE(c_status.message().find("behind"), std::string::npos) << c_status;
  EXPECT_EQ(r.Get("c", At(absl::Seconds(3))).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(r.Heartbeat(Beat("a", "ia"), At(absl::Seconds(3))).ok());
  EXPECT_EQ(r.PendingChanges(), 2);
  observer.Release(2);  // a's batch, then b's
  b_answered.WaitForNotification();
  EXPECT_TRUE(b_status.ok()) << b_status;
  observer.Release(3);
  EXPECT_TRUE(r.Register(Req("c", "ic"), At(absl::Seconds(3))).ok());
  EXPECT_EQ(observer.nodes, (std::vector<std::string>{"a@", "b@", "c@"}));
}

// Curves are under the same bound as registrations: while
// max_pending_changes changes wait for the store, AddCurve and AddCurves
// (a task's curves, together) are refused RESOURCE_EXHAUSTED naming the
// caller's call and the flag, and add nothing; once the store caught up they
// go in. Admitted, a curve that fails on its own does not stop the others.
TEST_F(RegistryTest, CurvesAreRefusedWhileTheStoreIsBehindAndAddNothing) {
  RegistryOptions options = Options();
  options.max_pending_changes = 2;
  Registry r(options);
  ASSERT_TRUE(r.Register(Req("a", "ia"), start_).ok());  // no store yet
  ASSERT_TRUE(r.Register(Req("b", "ib"), start_).ok());
  GatedObserver observer;
  r.SetObserver(&observer);
  absl::Notification d_answered;
  r.RegisterThen(Req("c", "ic"), start_, [](absl::Status) {});
  observer.WaitForCall(1);  // c's change in the store's hands
  r.RegisterThen(Req("d", "id"), start_,
                 [&](absl::Status) { d_answered.Notify(); });
  ASSERT_EQ(r.PendingChanges(), 2);
  const absl::Status one = r.AddCurve(PairCurve("t1"));
  EXPECT_EQ(one.code(), absl::StatusCode::kResourceExhausted) << one;
  EXPECT_NE(one.message().find("AddCurve refused"), std::string::npos) << one;
  std::vector<absl::Status> errors;
  const absl::Status task = r.AddCurves({PairCurve("t2"), PairCurve("t2", 8)},
                                        "ReportBenchmark", &errors);
  EXPECT_EQ(task.code(), absl::StatusCode::kResourceExhausted) << task;
  EXPECT_NE(task.message().find("ReportBenchmark refused"), std::string::npos)
      << task;
  EXPECT_NE(task.message().find("--max_pending_registry_changes"),
            std::string::npos)
      << task;
  EXPECT_TRUE(errors.empty());
  // A task whose curves were all excluded stores nothing: not refused.
  EXPECT_TRUE(r.AddCurves({}, "ReportBenchmark", &errors).ok());
  EXPECT_EQ(r.Get("a", start_)->curves_size(), 0);
  EXPECT_EQ(r.PendingChanges(), 2);
  observer.Release(3);  // c's batch, d's, then the curves'
  d_answered.WaitForNotification();
  monta::v1::BandwidthCurve stranger = PairCurve("t2", 16);
  stranger.add_nodes("nobody");
  ASSERT_TRUE(r.AddCurves({PairCurve("t2"), stranger, PairCurve("t2", 8)},
                          "ReportBenchmark", &errors)
                  .ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), absl::StatusCode::kNotFound) << errors[0];
  EXPECT_EQ(r.Get("a", start_)->curves_size(), 2);
  EXPECT_EQ(r.PendingChanges(), 0);
}

// Clear (the registry reloaded from the store) drops the changes still queued
// unstored: a RegisterThen caller waiting for its change is answered
// UNAVAILABLE ("not stored ... register again"), never OK, the node is not in
// memory, and its change never reaches the store. The interleaving is pinned
// by clearing from the first caller's answer: the delivery thread has let go
// of the store then, and the second change waits for the next batch.
TEST_F(RegistryTest, ClearAnswersTheRegistrationsItDroppedUnavailable) {
  Registry r(Options());
  GatedObserver observer;
  r.SetObserver(&observer);
  absl::Status b_status = absl::UnknownError("no answer");
  absl::Notification b_answered;
  bool b_answered_by_clear = false;
  absl::Notification a_answered;
  r.RegisterThen(Req("a", "ia"), start_, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    r.Clear();
    b_answered_by_clear = b_answered.HasBeenNotified();
    a_answered.Notify();
  });
  observer.WaitForCall(1);  // a's change in the store's hands
  r.RegisterThen(Req("b", "ib"), start_, [&](absl::Status s) {
    b_status = s;
    b_answered.Notify();
  });
  EXPECT_EQ(r.PendingChanges(), 2);
  observer.Release(1);
  a_answered.WaitForNotification();
  EXPECT_TRUE(b_answered_by_clear);
  EXPECT_EQ(b_status.code(), absl::StatusCode::kUnavailable) << b_status;
  EXPECT_NE(b_status.message().find("not stored"), std::string::npos)
      << b_status;
  EXPECT_NE(b_status.message().find("register again"), std::string::npos)
      << b_status;
  EXPECT_TRUE(r.List(start_, /*include_gone=*/true).empty());
  EXPECT_EQ(r.Get("b", start_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.PendingChanges(), 0);
  // b's change was dropped, not delayed: the store's next call has c only.
  absl::Notification c_answered;
  r.RegisterThen(Req("c", "ic"), start_, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    c_answered.Notify();
  });
  observer.Release(2);
  c_answered.WaitForNotification();
  EXPECT_EQ(observer.nodes, (std::vector<std::string>{"a@", "c@"}));
}

// Forget puts back the store's older curve only if no newer curve of the
// measurement came while the store was deleting.
TEST_F(RegistryTest, ForgetPutsNoOlderCurveOverOneThatCameMeanwhile) {
  Registry r(Options());
  BlockingObserver observer(Change::Kind::kCurvesForgotten);
  r.SetObserver(&observer);
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("b", "i2"), start_).ok());
  ASSERT_TRUE(r.AddCurve(PairCurve("honest")).ok());
  ASSERT_TRUE(r.AddCurve(PairCurve("forged")).ok());
  observer.older = {r.Get("a", start_)->curves(0)};
  observer.older[0].set_task_id("honest");
  observer.older[0].set_sequence(1);
  absl::StatusOr<monta::v1::ForgetCurvesReply> reply;
  std::thread forget([&] { reply = r.Forget({"forged", ""}); });
  observer.entered.WaitForNotification();
  // A new measurement lands in memory; its write waits behind Forget's.
  std::thread fresh([&] { EXPECT_TRUE(r.AddCurve(PairCurve("fresh")).ok()); });
  while (r.Get("a", start_)->curves_size() == 0)
    absl::SleepFor(absl::Milliseconds(1));
  observer.release.Notify();
  forget.join();
  fresh.join();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->forgotten_size(), 1);
  EXPECT_EQ(reply->restored_size(), 0);
  ASSERT_EQ(r.Get("b", start_)->curves_size(), 1);
  EXPECT_EQ(r.Get("b", start_)->curves(0).task_id(), "fresh");
  EXPECT_EQ(observer.kinds.back(), Change::Kind::kCurve);
}

TEST_F(RegistryTest, LoopbackAddressesAndNicRates) {
  for (const char* a : {"127.0.0.1", "127.1.2.3:7000", "::1", "[::1]:80",
                        "localhost", "localhost:9"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"10.213.1.1", "", "node-a", "fe80::1", "128.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
  monta::v1::NodeTopology t;
  t.add_nics()->set_rate_bytes_per_second(50e9);
  auto* down = t.add_nics();
  down->set_rate_bytes_per_second(50e9);
  down->set_state("DOWN");
  auto* active = t.add_nics();
  active->set_rate_bytes_per_second(25e9);
  active->set_state("ACTIVE");
  EXPECT_DOUBLE_EQ(NicLineRate(t), 75e9);
}

TEST_F(RegistryTest, OversizedTopologyIsRefusedAtRegisterAndHeartbeat) {
  RegistryOptions options = Options();
  options.topology_limits.max_string_bytes = 64;
  Registry r(options);
  auto req = Req("a", "i1");
  req.mutable_topology()->add_nics()->set_name("mlx5_0");
  req.mutable_topology()->mutable_nics(0)->set_state(std::string(65, 'A'));
  EXPECT_EQ(r.Register(req, start_).code(),
            absl::StatusCode::kResourceExhausted);
  req.mutable_topology()->mutable_nics(0)->set_state("ACTIVE");
  ASSERT_TRUE(r.Register(req, start_).ok());
  monta::v1::HeartbeatRequest hb;
  hb.set_node_name("a");
  hb.set_instance_id("i1");
  *hb.mutable_topology() = req.topology();
  hb.mutable_topology()->mutable_nics(0)->set_state(std::string(1 << 20, 'A'));
  const absl::Status s = r.Heartbeat(hb, start_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("topology.nics[0].state"), std::string::npos);
  EXPECT_EQ(r.Get("a", start_)->topology().nics(0).state(), "ACTIVE");
}

// NTP or an operator steps the wall clock by +-10 minutes: leases run on the
// monotonic clock, so no node changes state.
TEST_F(RegistryTest, WallClockStepsChangeNoNodesState) {
  RegistryOptions options = Options();
  options.gone_after = absl::Seconds(60);
  Registry r(options);
  ASSERT_TRUE(r.Register(Req("live", "i1"), start_).ok());
  ASSERT_TRUE(r.Register(Req("dead", "i2"), start_).ok());
  for (const absl::Duration step : {absl::Minutes(10), -absl::Minutes(10)}) {
    SCOPED_TRACE(absl::FormatDuration(step));
    // 5 s later on the monotonic clock, 10 min off on the wall clock.
    const Instant stepped{t0_ + absl::Seconds(5) + step,
                          MonoAfter(m0_, absl::Seconds(5))};
    ASSERT_TRUE(r.Heartbeat(Beat("live", "i1"), stepped).ok());
    EXPECT_EQ(r.Get("live", stepped)->state(), NODE_STATE_ALIVE);
    EXPECT_DOUBLE_EQ(r.Get("dead", stepped)->lease_age_seconds(), 5.0);
    // The lease of "live" holds its name against another instance.
    EXPECT_EQ(r.Register(Req("live", "other"), stepped).code(),
              absl::StatusCode::kAlreadyExists);
    EXPECT_TRUE(r.RemoveGone(stepped).empty());
    EXPECT_TRUE(r.StaleNodes(stepped).empty());
  }
  // "dead" never heartbeats: stale after its lease whatever the wall clock
  // says (stepped back 10 min it would look 9 min younger on the wall clock).
  const Instant later{t0_ - absl::Minutes(10),
                      MonoAfter(m0_, absl::Seconds(11))};
  EXPECT_EQ(r.Get("dead", later)->state(), NODE_STATE_STALE);
  EXPECT_EQ(r.StaleNodes(later), std::vector<std::string>{"dead"});
  EXPECT_FALSE(r.IsAlive("dead", "i2", later));
}

TEST_F(RegistryTest, NodesQuietForGoneAfterAreRemovedWithTheirCurves) {
  RegistryOptions options = Options();
  options.gone_after = absl::Seconds(60);
  Registry r(options);
  RecordingObserver observer;
  observer.registry = &r;
  r.SetObserver(&observer);
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(r.Register(Req(name, name), start_).ok());
  }
  monta::v1::BandwidthCurve pair;
  pair.add_nodes("a");
  pair.add_nodes("b");
  pair.add_points()->set_message_bytes(1024);
  ASSERT_TRUE(r.AddCurve(pair).ok());
  monta::v1::BandwidthCurve single;
  single.add_nodes("a");
  single.add_points()->set_message_bytes(1024);
  ASSERT_TRUE(r.AddCurve(single).ok());
  ASSERT_TRUE(r.Deregister("c", "c", At(absl::Seconds(10))).ok());
  ASSERT_TRUE(r.Heartbeat(Beat("a", "a"), At(absl::Seconds(30))).ok());
  // b (stale since its lease ran out) is quiet 59 s, c gone 49 s: both kept.
  EXPECT_TRUE(r.RemoveGone(At(absl::Seconds(59))).empty());
  EXPECT_EQ(r.List(At(absl::Seconds(59)), true).size(), 3u);
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(60))), std::vector<std::string>{"b"});
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(70))), std::vector<std::string>{"c"});
  EXPECT_EQ(observer.removed, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(r.Get("b", At(absl::Seconds(70))).status().code(),
            absl::StatusCode::kNotFound);
  // a keeps its own curve; the pair's copy named b and went with it.
  auto a = r.Get("a", At(absl::Seconds(70)));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->curves_size(), 1);
  EXPECT_EQ(a->curves(0).nodes_size(), 1);
  // a is stale now; quiet since its heartbeat at 30 s, it goes at 90 s.
  EXPECT_TRUE(r.RemoveGone(At(absl::Seconds(89))).empty());
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(90))), std::vector<std::string>{"a"});
}

TEST_F(RegistryTest, RestoredNodeIsStaleAndGoneAfterRestartPlusGoneAfter) {
  RegistryOptions options = Options();
  options.gone_after = absl::Seconds(60);
  Registry r(options);
  monta::v1::NodeInfo stored;
  stored.set_name("a");
  stored.set_instance_id("i1");
  r.Restore(stored, At(absl::Seconds(100)));
  EXPECT_EQ(r.Get("a", At(absl::Seconds(100)))->state(), NODE_STATE_STALE);
  EXPECT_TRUE(r.RemoveGone(At(absl::Seconds(159))).empty());
  // Its agent may come back (and take its lease) until then.
  EXPECT_EQ(r.RemoveGone(At(absl::Seconds(160))),
            std::vector<std::string>{"a"});
}

TEST_F(RegistryTest, EventsPerNodeAreARingOfTheNewest) {
  int changes = 0;
  TopologyDiffer differ = [&changes](const monta::v1::NodeTopology&,
                                     const monta::v1::NodeTopology&) {
    monta::v1::TopologyEvent e;
    e.set_message(absl::StrCat("change ", ++changes));
    return std::vector<monta::v1::TopologyEvent>{e};
  };
  RegistryOptions options = Options();
  options.max_events_per_node = 3;
  Registry r(options, differ);
  ASSERT_TRUE(r.Register(Req("a", "i1"), start_).ok());
  for (int i = 0; i < 5; ++i) {
    auto hb = Beat("a", "i1");
    hb.mutable_topology()->set_hostname("a");
    ASSERT_TRUE(r.Heartbeat(hb, start_).ok());
  }
  auto info = r.Get("a", start_);
  ASSERT_EQ(info->events_size(), 3);
  EXPECT_EQ(info->events(0).message(), "change 3");
  EXPECT_EQ(info->events(2).message(), "change 5");
}

TEST_F(RegistryTest, ListNodesPagesByNameWithTokens) {
  RegistryOptions options = Options();
  options.max_nodes_per_page = 3;
  Registry r(options);
  for (const char* name : {"e", "a", "d", "b", "c"}) {
    ASSERT_TRUE(r.Register(Req(name, name), start_).ok());
  }
  ASSERT_TRUE(r.Deregister("c", "c", start_).ok());
  monta::v1::ListNodesRequest request;
  request.set_page_size(2);
  std::vector<std::string> seen;
  int pages = 0;
  do {
    auto page = r.ListNodes(request, start_);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->nodes_size(), 2);
    for (const auto& node : page->nodes()) seen.push_back(node.name());
    request.set_page_token(page->next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 10);
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "d", "e"}));
  EXPECT_EQ(pages, 2);
  // 0 and anything above the maximum mean the maximum.
  request.clear_page_token();
  request.set_include_gone(true);
  for (int size : {0, 1000}) {
    request.set_page_size(size);
    auto page = r.ListNodes(request, start_);
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->nodes_size(), 3);
    EXPECT_EQ(page->nodes(2).name(), "c");
    EXPECT_FALSE(page->next_page_token().empty());
  }
  request.set_page_size(-1);
  auto bad = r.ListNodes(request, start_);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("page_size"), std::string::npos);
  request.set_page_size(0);
  request.set_page_token("not a token");
  bad = r.ListNodes(request, start_);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("page_token"), std::string::npos);
}

}  // namespace
}  // namespace monta::registry
