// The plan knowledge on one real etcd member (issue 20 item 3): a leader's
// PlanKnowledge writes through EtcdStore under its fence, a follower's
// PlanKnowledge follows P knowledge/ (store::KnowledgeFollower: list, then
// watch) and answers with the same calibration and verified reply; the
// bound's deletes reach it, a bad record is skipped and counted, a deposed
// writer lands nothing, a paused follower applies nothing until it lists
// again, and a compacted history means list again.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "server/etcd_store/etcd_store.h"
#include "server/planning/calibration.h"
#include "server/planning/knowledge_record.h"
#include "server/store/knowledge_store.h"
#include "tests/testing/etcd_suite.h"
#include "tests/testing/paper_job.h"

namespace monta::etcd_store {
namespace {

namespace v1 = ::monta::v1;
using planning::PlanCalibration;
using planning::PlanKnowledge;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

v1::StrategyRequest OnNodes(const std::vector<std::string>& nodes) {
  return monta::testing::PaperJobOnNodes(nodes);
}

std::vector<planning::Observation> RunOn(
    const std::vector<std::string>& nodes) {
  return {planning::Observation{OnNodes(nodes), strategy::StrategyKind::kFlat,
                                1, 0.01, planning::MeasuredScope::kLayer}};
}

PlanCalibration Fitted(double network_scale, const std::string& task) {
  PlanCalibration c;
  c.model.network_scale = network_scale;
  c.evidence.set_network_scale_ratio(network_scale);
  c.evidence.set_local_scale_ratio(1);
  c.evidence.set_latency_scale_ratio(1);
  c.evidence.set_contention_factor(1);
  c.evidence.set_task_id(task);
  return c;
}

class KnowledgeTest : public monta::testing::EtcdSuite<1> {
 protected:
  void SetUp() override {
    EtcdSuite<1>::SetUp();
    EtcdStoreOptions options;
    options.prefix = prefix_ + "/";
    auto leader = EtcdStore::Open(client_.get(), options);
    ASSERT_TRUE(leader.ok()) << leader.status();
    leader_store_ = *std::move(leader);
    follower_client_ = NewClient();
    auto follower = EtcdStore::Open(follower_client_.get(), options);
    ASSERT_TRUE(follower.ok()) << follower.status();
    follower_store_ = *std::move(follower);
    auto fence = leader_store_->Lead();
    ASSERT_TRUE(fence.ok()) << fence.status();
    fence_ = *fence;
    store::KnowledgeFollower::Sink sink;
    sink.replace = [this](const std::vector<store::KnowledgeRecord>& r) {
      malformed_ += follower_.Replace(r).malformed;
    };
    sink.apply = [this](const store::KnowledgeChange& change) {
      if (!follower_.Apply(change)) ++malformed_;
    };
    following_ = std::make_unique<store::KnowledgeFollower>(
        follower_store_.get(), std::move(sink));
  }

  // The leader's knowledge writing through its store under fence_; the
  // statuses of its writes.
  void WriteThrough(PlanKnowledge& leader) {
    leader.SetWriter([this](const store::KnowledgeWrites& writes) {
      written_.push_back(leader_store_->WriteKnowledge(fence_, writes));
    });
  }
  // Steps the follower until `done` (at most 10 s of watch waits).
  bool StepUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 100; ++i) {
      if (done()) return true;
      absl::Status s = following_->Step(absl::Milliseconds(100));
      EXPECT_TRUE(s.ok()) << s;
    }
    return done();
  }

  std::unique_ptr<EtcdStore> leader_store_;
  std::unique_ptr<etcd::Client> follower_client_;
  std::unique_ptr<EtcdStore> follower_store_;
  store::Fence fence_;
  PlanKnowledge follower_;
  int malformed_ = 0;
  std::unique_ptr<store::KnowledgeFollower> following_;
  std::vector<absl::Status> written_;
};

TEST_F(KnowledgeTest, AFollowerAnswersWithTheLeadersCalibrationAndVerify) {
  PlanKnowledge::Options options;
  options.max_entries = 1;
  PlanKnowledge leader(options);
  WriteThrough(leader);
  ASSERT_TRUE(following_->Step(absl::ZeroDuration()).ok());
  EXPECT_TRUE(following_->in_sync());
  EXPECT_EQ(following_->lists(), 1);

  const v1::StrategyRequest job = OnNodes({"node-a", "node-b"});
  const std::string set = planning::NodeSetKey(job);
  leader.AddRun(RunOn({"node-a", "node-b"}));
  leader.SetCalibration(set, Fitted(1.5, "verify-1"), kT0);
  v1::VerifyReply reply;
  reply.mutable_task()->set_task_id("verify-1");
  leader.SetVerified(job, reply, kT0);
  for (const absl::Status& s : written_) EXPECT_TRUE(s.ok()) << s;
  ASSERT_TRUE(StepUntil([&] {
    return follower_.Calibration(set, kT0).has_value() &&
           follower_.FreshVerified(job, kT0).has_value();
  }));
  EXPECT_EQ(follower_.Calibration(set, kT0)->evidence.SerializeAsString(),
            leader.Calibration(set, kT0)->evidence.SerializeAsString());
  EXPECT_EQ(follower_.Calibration(set, kT0)->model.network_scale, 1.5);
  EXPECT_EQ(follower_.FreshVerified(job, kT0)->reply.task().task_id(),
            "verify-1");
  // One node set record and one job record under P knowledge/.
  auto listed = follower_store_->ListKnowledge();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->records.size(), 2u);
  EXPECT_EQ(listed->records[0].id,
            planning::JobRecordId(planning::JobKey(job)));
  EXPECT_EQ(listed->records[1].id, planning::NodeSetRecordId(set));

  // A bad record is skipped and counted; the calibration stays.
  ASSERT_TRUE(client_
                  ->Put(absl::StrCat(prefix_, "/knowledge/",
                                     planning::NodeSetRecordId(set)),
                        "garbage")
                  .ok());
  ASSERT_TRUE(StepUntil([&] { return malformed_ == 1; }));
  EXPECT_EQ(follower_.Calibration(set, kT0)->model.network_scale, 1.5);

  // A second node set drops the first (max_entries 1): its record is
  // deleted, and the follower forgets it.
  leader.SetCalibration(planning::NodeSetKey(OnNodes({"node-c", "node-d"})),
                        Fitted(2, "verify-2"), kT0);
  ASSERT_TRUE(StepUntil([&] {
    return !follower_.Calibration(set, kT0).has_value() &&
           follower_.node_sets() == 1;
  }));
  EXPECT_EQ(following_->lists(), 1);  // all by the watch

  // Another writer leads: this one's writes land nothing.
  auto other = leader_store_->Lead();
  ASSERT_TRUE(other.ok()) << other.status();
  leader.SetCalibration(set, Fitted(3, "verify-3"), kT0);
  ASSERT_FALSE(written_.empty());
  EXPECT_TRUE(IsFenced(written_.back())) << written_.back();
  ASSERT_TRUE(following_->Step(absl::Milliseconds(300)).ok());
  EXPECT_FALSE(follower_.Calibration(set, kT0).has_value());
}

TEST_F(KnowledgeTest, APausedFollowerAppliesNothingUntilItListsAgain) {
  PlanKnowledge leader;
  WriteThrough(leader);
  ASSERT_TRUE(following_->Step(absl::ZeroDuration()).ok());
  following_->Pause();
  EXPECT_FALSE(following_->in_sync());
  const std::string set = planning::NodeSetKey(OnNodes({"node-a", "node-b"}));
  leader.SetCalibration(set, Fitted(1.25, "verify-4"), kT0);
  ASSERT_TRUE(following_->Step(absl::Milliseconds(300)).ok());
  EXPECT_FALSE(follower_.Calibration(set, kT0).has_value());
  following_->Resume();
  ASSERT_TRUE(following_->Step(absl::ZeroDuration()).ok());
  EXPECT_TRUE(following_->in_sync());
  EXPECT_EQ(following_->lists(), 2);
  ASSERT_TRUE(follower_.Calibration(set, kT0).has_value());
  EXPECT_EQ(follower_.Calibration(set, kT0)->model.network_scale, 1.25);

  // A watch from a compacted revision: list again.
  auto now = client_->Get("/");
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_TRUE(client_->Compact(now->revision, /*physical=*/true).ok());
  auto old = follower_store_->WatchKnowledge(1);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ((*old)->Next(absl::Seconds(5)).status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace monta::etcd_store
