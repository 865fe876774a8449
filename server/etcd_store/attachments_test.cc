// Attachments on one real etcd member: a replica's attachments land on its
// own lease in Txns within etcd's limits; a Publish with nothing changed
// writes nothing; another replica follows them (list, then watch); a revoked
// lease (a dead replica) takes its attachments, and the next Publish of a
// live replica whose lease was lost grants a new one and writes them again.
#include "server/etcd_store/attachments.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "tests/testing/etcd_suite.h"

namespace monta::etcd_store {
namespace {

// Node name -> instance ids attached (any replica), as the changes told to
// on_attached build it up.
using AttachedNodes = std::map<std::string, std::set<std::string>, std::less<>>;

class AttachmentsTest : public monta::testing::EtcdSuite<1> {
 protected:
  // `seen`: the set the changes told to on_attached build up; `told`: every
  // change, in order.
  std::unique_ptr<Attachments> Replica(
      const std::string& id, AttachedNodes* seen = nullptr,
      std::vector<AttachmentChange>* told = nullptr) {
    AttachmentsOptions options;
    options.prefix = prefix_ + "/";
    options.replica_id = id;
    options.lease_ttl = absl::Seconds(5);
    if (seen != nullptr) {
      options.on_attached =
          [seen, told](const std::vector<AttachmentChange>& changes) {
            for (const AttachmentChange& change : changes) {
              if (told != nullptr) told->push_back(change);
              if (change.attached) {
                EXPECT_TRUE((*seen)[change.node].insert(change.instance).second)
                    << change.node << " " << change.instance
                    << " told attached twice";
                continue;
              }
              EXPECT_EQ((*seen)[change.node].erase(change.instance), 1u)
                  << change.node << " " << change.instance
                  << " told detached while not attached";
              if ((*seen)[change.node].empty()) seen->erase(change.node);
            }
          };
    }
    auto started = Attachments::Start(client_.get(), std::move(options));
    EXPECT_TRUE(started.ok()) << started.status();
    return started.ok() ? *std::move(started) : nullptr;
  }
  // The attach keys etcd holds, with the lease each is on.
  std::map<std::string, int64_t> Keys() {
    etcd::RangeRequest range;
    range.key = AttachPrefix(prefix_ + "/");
    range.range_end = etcd::PrefixEnd(range.key);
    auto result = client_->Range(range);
    EXPECT_TRUE(result.ok()) << result.status();
    std::map<std::string, int64_t> keys;
    if (!result.ok()) return keys;
    for (const auto& kv : result->kvs) keys[kv.key] = kv.lease;
    return keys;
  }
  // Follow until `done` holds (the watch's events come within moments).
  void FollowUntil(Attachments& follower, const std::function<bool()>& done) {
    for (int i = 0; i < 100 && !done(); ++i) {
      ASSERT_TRUE(follower.Follow(absl::Milliseconds(100)).ok());
    }
    ASSERT_TRUE(done());
  }
};

TEST_F(AttachmentsTest, PublishesOnlyChangesInBatchesOnItsLease) {
  std::unique_ptr<Attachments> a = Replica("planner-a");
  ASSERT_NE(a, nullptr);
  OwnNodes own;
  for (int i = 0; i < 300; ++i) own[absl::StrCat("node-", i)] = "i1";
  ASSERT_TRUE(a->Publish(own).ok());
  // 300 puts: three Txns of at most 128 operations, not 300 writes.
  EXPECT_EQ(a->writes(), 3);
  EXPECT_EQ(a->puts(), 300);
  std::map<std::string, int64_t> keys = Keys();
  ASSERT_EQ(keys.size(), 300u);
  for (const auto& [key, lease] : keys) EXPECT_EQ(lease, a->lease()) << key;
  EXPECT_EQ(keys.count(AttachKey(prefix_ + "/", "node-7", "planner-a")), 1u);

  // Nothing changed (the steady state: heartbeats only): no write.
  ASSERT_TRUE(a->Publish(own).ok());
  EXPECT_EQ(a->writes(), 3);

  // One node stale here, one new agent instance, one new node: one Txn.
  own.erase("node-1");
  own["node-2"] = "i2";
  own["node-new"] = "i1";
  ASSERT_TRUE(a->Publish(own).ok());
  EXPECT_EQ(a->writes(), 4);
  EXPECT_EQ(a->puts(), 302);
  EXPECT_EQ(a->deletes(), 1);
  keys = Keys();
  EXPECT_EQ(keys.size(), 300u);
  EXPECT_EQ(keys.count(AttachKey(prefix_ + "/", "node-1", "planner-a")), 0u);
  auto value = client_->Get(AttachKey(prefix_ + "/", "node-2", "planner-a"));
  ASSERT_TRUE(value.ok()) << value.status();
  ASSERT_EQ(value->kvs.size(), 1u);
  EXPECT_EQ(value->kvs[0].value, "i2");
}

TEST_F(AttachmentsTest, AnotherReplicaFollowsAndADeadLeaseTakesItsNodes) {
  AttachedNodes seen;
  std::vector<AttachmentChange> told;
  std::unique_ptr<Attachments> a = Replica("planner-a");
  std::unique_ptr<Attachments> b = Replica("planner-b", &seen, &told);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->Publish({{"node-a", "ia"}, {"node-both", "ix"}}).ok());
  // The first Follow lists what is there.
  ASSERT_TRUE(b->Follow(absl::Milliseconds(10)).ok());
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen["node-a"], std::set<std::string>{"ia"});

  // b's own attachments come through its watch like anyone's; a node
  // attached at two replicas (moving) counts once.
  ASSERT_TRUE(b->Publish({{"node-b", "ib"}, {"node-both", "ix"}}).ok());
  FollowUntil(*b, [&] { return seen.count("node-b") == 1; });
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(b->attached_nodes(), 3u);
  EXPECT_EQ(seen["node-b"], std::set<std::string>{"ib"});
  EXPECT_EQ(seen["node-both"], std::set<std::string>{"ix"});
  // Told as changes: node-both's second attachment (at b) was no change.
  EXPECT_EQ(std::count(told.begin(), told.end(),
                       AttachmentChange{"node-both", "ix", true}),
            1);

  // a dies: its lease ends (revoked here rather than waiting out the TTL)
  // and its attachments go with it; node-both stays attached at b.
  ASSERT_TRUE(client_->RevokeLease(a->lease()).ok());
  told.clear();
  FollowUntil(*b, [&] { return seen.count("node-a") == 0; });
  EXPECT_EQ(seen.count("node-both"), 1u);
  EXPECT_EQ(seen.count("node-b"), 1u);
  // Only node-a's last attachment went: one change, not the whole set.
  EXPECT_EQ(told, (std::vector<AttachmentChange>{{"node-a", "ia", false}}));
  // A replica that starts following lists: told every attachment at once.
  AttachedNodes listed;
  std::unique_ptr<Attachments> c = Replica("planner-c", &listed);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Follow(absl::Milliseconds(10)).ok());
  EXPECT_EQ(listed, seen);

  // a lives on after all (etcd was cut off past its TTL): its next Publish,
  // once the keepalive noticed the loss, is on a new lease and writes every
  // attachment again.
  const int64_t old_lease = a->lease();
  for (int i = 0; i < 100 && a->lease() == old_lease; ++i) {
    ASSERT_TRUE(a->Publish({{"node-a", "ia"}}).ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_NE(a->lease(), old_lease);
  FollowUntil(*b, [&] { return seen.count("node-a") == 1; });
  EXPECT_EQ(Keys()[AttachKey(prefix_ + "/", "node-a", "planner-a")],
            a->lease());
}

// The leader defers: a node another replica attached (as the same
// instance) is not attached at the leader too, and is once that replica's
// attachment is gone.
TEST_F(AttachmentsTest, ADeferringReplicaLeavesNodesAttachedElsewhere) {
  std::unique_ptr<Attachments> home = Replica("planner-home");
  std::unique_ptr<Attachments> leader = Replica("planner-leader");
  ASSERT_NE(home, nullptr);
  ASSERT_NE(leader, nullptr);
  ASSERT_TRUE(home->Publish({{"node-a", "i1"}}).ok());
  FollowUntil(*leader, [&] { return leader->attached_nodes() == 1; });
  const OwnNodes heard{{"node-a", "i1"}, {"node-b", "i2"}};
  ASSERT_TRUE(leader->Publish(heard, /*defer=*/true).ok());
  std::map<std::string, int64_t> keys = Keys();
  EXPECT_EQ(keys.count(AttachKey(prefix_ + "/", "node-a", "planner-leader")),
            0u);
  EXPECT_EQ(keys.count(AttachKey(prefix_ + "/", "node-b", "planner-leader")),
            1u);
  // The home replica dies: the leader attaches what it still hears.
  FollowUntil(*leader, [&] { return leader->attached_nodes() == 2; });
  ASSERT_TRUE(client_->RevokeLease(home->lease()).ok());
  FollowUntil(*leader, [&] { return leader->attached_nodes() == 1; });
  ASSERT_TRUE(leader->Publish(heard, /*defer=*/true).ok());
  EXPECT_EQ(Keys().count(AttachKey(prefix_ + "/", "node-a", "planner-leader")),
            1u);
}

TEST_F(AttachmentsTest, RefusesABadReplicaId) {
  AttachmentsOptions options;
  options.prefix = prefix_ + "/";
  options.replica_id = "a/b";
  auto started = Attachments::Start(client_.get(), options);
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("replica_id"), std::string::npos);
}

}  // namespace
}  // namespace monta::etcd_store
