#include "server/store/store_contract.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "server/store/test_mutations.h"

namespace monta::store {

void StoreContractTest::SetUp() {
  absl::StatusOr<std::unique_ptr<Store>> store = GetParam().make();
  ASSERT_TRUE(store.ok()) << store.status();
  store_ = *std::move(store);
}

namespace {

// Long enough for any host: a watch that does not deliver within it fails.
constexpr absl::Duration kPatience = absl::Seconds(30);

using test_mutations::Curve;
using test_mutations::CurveAdded;
using test_mutations::Node;
using test_mutations::NodeRemoved;

std::vector<std::string> Names(const Snapshot& s) {
  std::vector<std::string> out;
  for (const auto& n : s.nodes) out.push_back(n.name());
  return out;
}

std::vector<std::string> Tasks(const Snapshot& s) {
  std::vector<std::string> out;
  for (const auto& c : s.curves) out.push_back(c.task_id());
  return out;
}

// Commits `mutations` under `fence`, expecting success; the revision.
int64_t MustCommit(Store& store, const Fence& fence,
                   const std::vector<Mutation>& mutations) {
  absl::StatusOr<Committed> committed = store.Commit(fence, mutations);
  EXPECT_TRUE(committed.ok()) << committed.status();
  return committed.ok() ? committed->revision : -1;
}

TEST_P(StoreContractTest, EachCommitIsOneNewRevisionThatListSees) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  auto empty = store_->List();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->nodes.empty());
  EXPECT_TRUE(empty->curves.empty());
  const int64_t r1 = MustCommit(*store_, *fence, {Node("b"), Node("a")});
  EXPECT_GT(r1, empty->revision);
  Mutation with_curves = Node("a");
  *with_curves.node.add_curves() = Curve("kept-apart", 9);
  const int64_t r2 =
      MustCommit(*store_, *fence, {with_curves, CurveAdded(Curve("t1", 1))});
  EXPECT_GT(r2, r1);
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->revision, r2);
  // The newest commit's revision, what a follower compares its own with.
  absl::StatusOr<int64_t> newest = store_->NewestRevision();
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, r2);
  EXPECT_EQ(Names(*listed), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(listed->nodes[0].instance_id(), "i-a");
  // A node is stored without its curves: they are stored on their own.
  EXPECT_EQ(listed->nodes[0].curves_size(), 0);
  EXPECT_EQ(Tasks(*listed), std::vector<std::string>{"t1"});
  EXPECT_EQ(listed->max_curve_sequence, 1u);
  // At its own revision it lists the same; a revision not reached yet is
  // refused.
  auto again = store_->List(r2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Names(*again), Names(*listed));
  EXPECT_EQ(store_->List(r2 + 1000).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_P(StoreContractTest, TheNewestCurveOfAMeasurementIsCurrent) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  MustCommit(*store_, *fence, {Node("a"), Node("b"), Node("c")});
  MustCommit(*store_, *fence, {CurveAdded(Curve("old", 1))});
  MustCommit(*store_, *fence, {CurveAdded(Curve("c-alone", 2, {"c"}))});
  MustCommit(*store_, *fence, {CurveAdded(Curve("new", 3))});
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  // By sequence: the pair's newest and c's own.
  EXPECT_EQ(Tasks(*listed), (std::vector<std::string>{"c-alone", "new"}));
  EXPECT_EQ(listed->curves[1].sequence(), 3u);
  EXPECT_EQ(listed->max_curve_sequence, 3u);
}

TEST_P(StoreContractTest, AStaleFenceLandsNothing) {
  auto first = store_->Lead();
  ASSERT_TRUE(first.ok()) << first.status();
  MustCommit(*store_, *first, {Node("a")});
  auto second = store_->Lead();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->epoch, first->epoch);
  const int64_t before = store_->List()->revision;
  for (const Fence& stale : {*first, Fence{}}) {
    auto refused = store_->Commit(stale, {Node("b"), NodeRemoved("a")});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
        << refused.status();
  }
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->revision, before);
  EXPECT_EQ(Names(*listed), std::vector<std::string>{"a"});
  MustCommit(*store_, *second, {Node("b")});
  EXPECT_EQ(Names(*store_->List()), (std::vector<std::string>{"a", "b"}));
}

TEST_P(StoreContractTest, AMalformedMutationIsRefusedAndNothingLands) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  const int64_t before = store_->List()->revision;
  Mutation nameless = Node("");
  Mutation unnumbered = CurveAdded(Curve("t", 0));
  Mutation both;
  both.kind = Mutation::Kind::kCurvesForgotten;
  both.forget = {"task", "node"};
  for (const Mutation& bad : {nameless, unnumbered, both}) {
    auto refused = store_->Commit(*fence, {Node("a"), bad});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << refused.status();
    EXPECT_NE(refused.status().message().find("mutations[1]"),
              std::string::npos)
        << refused.status();
  }
  EXPECT_EQ(store_->Commit(*fence, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->revision, before);
  EXPECT_TRUE(listed->nodes.empty());
}

TEST_P(StoreContractTest, ARemovedNodeTakesEveryCurveNamingIt) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  MustCommit(*store_, *fence,
             {Node("a"), Node("b"), Node("c"), CurveAdded(Curve("pair", 1)),
              CurveAdded(Curve("c-alone", 2, {"c"}))});
  MustCommit(*store_, *fence, {NodeRemoved("b")});
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(Names(*listed), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Tasks(*listed), std::vector<std::string>{"c-alone"});
}

TEST_P(StoreContractTest, ForgettingATaskAnswersTheNewestCurveLeft) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  MustCommit(*store_, *fence,
             {Node("a"), Node("b"), CurveAdded(Curve("honest", 1)),
              CurveAdded(Curve("forged", 2))});
  Mutation forget;
  forget.kind = Mutation::Kind::kCurvesForgotten;
  forget.forget.task_id = "forged";
  forget.measurements = {registry::CurveKey(Curve("forged", 2))};
  auto committed = store_->Commit(*fence, {forget});
  ASSERT_TRUE(committed.ok()) << committed.status();
  ASSERT_EQ(committed->restored.size(), 1u);
  EXPECT_EQ(committed->restored[0].task_id(), "honest");
  EXPECT_EQ(committed->restored[0].sequence(), 1u);
  EXPECT_EQ(committed->restored[0].points_size(), 1);
  EXPECT_EQ(Tasks(*store_->List()), std::vector<std::string>{"honest"});
}

// Every commit after the watch's revision, in order, once; a watch may start
// ahead of the store and waits.
TEST_P(StoreContractTest, AWatchSeesEveryCommitAfterItsRevisionInOrder) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  const int64_t r0 = MustCommit(*store_, *fence, {Node("a")});
  auto watch = store_->Watch(r0);
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto ahead = store_->Watch(r0 + 2);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  std::vector<int64_t> committed;
  committed.push_back(MustCommit(*store_, *fence, {Node("b")}));
  committed.push_back(
      MustCommit(*store_, *fence, {Node("c"), CurveAdded(Curve("t", 1))}));
  committed.push_back(MustCommit(*store_, *fence, {NodeRemoved("c")}));
  std::vector<Event> seen;
  while (seen.size() < committed.size()) {
    auto batch = (*watch)->Next(kPatience);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (Event& e : *batch) seen.push_back(std::move(e));
  }
  ASSERT_EQ(seen.size(), 3u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].revision, committed[i]);
  }
  ASSERT_EQ(seen[1].mutations.size(), 2u);
  EXPECT_EQ(seen[1].mutations[0].node.name(), "c");
  EXPECT_EQ(seen[1].mutations[1].curve.task_id(), "t");
  EXPECT_EQ(seen[2].mutations[0].kind, Mutation::Kind::kNodeRemoved);
  // Nothing more: nothing is repeated.
  EXPECT_EQ((*watch)->Next(absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The watch from r0 + 2 sees only what came after it.
  auto later = (*ahead)->Next(kPatience);
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_FALSE(later->empty());
  EXPECT_GT(later->front().revision, r0 + 2);
  EXPECT_EQ(later->back().revision, committed[2]);
}

// A watch from a revision the store no longer holds is told to list again;
// the state and its revision stay.
TEST_P(StoreContractTest, AWatchBehindTheHistoryIsToldToListAgain) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  const int64_t r1 = MustCommit(*store_, *fence, {Node("a")});
  const int64_t r2 = MustCommit(*store_, *fence, {Node("b")});
  ASSERT_TRUE(GetParam().drop_history(store_).ok());
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->revision, r2);
  EXPECT_EQ(Names(*listed), (std::vector<std::string>{"a", "b"}));
  auto behind = store_->Watch(r1 - 1);
  ASSERT_TRUE(behind.ok()) << behind.status();
  EXPECT_EQ((*behind)->Next(kPatience).status().code(),
            absl::StatusCode::kOutOfRange);
  // From the snapshot's revision on, the watch goes on.
  auto fresh = store_->Watch(listed->revision);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto writer = store_->Lead();
  ASSERT_TRUE(writer.ok()) << writer.status();
  const int64_t r3 = MustCommit(*store_, *writer, {Node("c")});
  EXPECT_GT(r3, r2);
  auto batch = (*fresh)->Next(kPatience);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ(batch->front().revision, r3);
}

// The planner's wiring: the registry writes through RegistryWriter, and a
// registry loaded from the store (LoadInto) has the same nodes and curves,
// its curve numbers above the stored ones.
TEST_P(StoreContractTest, ARegistryWrittenThroughTheSeamLoadsBack) {
  auto fence = store_->Lead();
  ASSERT_TRUE(fence.ok()) << fence.status();
  const Instant now = Instant::Now();
  {
    registry::Registry registry{registry::RegistryOptions{}};
    RegistryWriter writer(store_.get(), *fence);
    registry.SetObserver(&writer);
    for (const char* name : {"a", "b"}) {
      monta::v1::RegisterRequest r;
      r.set_node_name(name);
      r.set_instance_id(std::string("i-") + name);
      ASSERT_TRUE(registry.Register(r, now).ok());
    }
    ASSERT_TRUE(registry.AddCurve(Curve("honest", 0)).ok());
    ASSERT_TRUE(registry.AddCurve(Curve("forged", 0)).ok());
    auto forgot = registry.Forget({"forged", ""});
    ASSERT_TRUE(forgot.ok()) << forgot.status();
    ASSERT_EQ(forgot->restored_size(), 1);
    EXPECT_EQ(forgot->restored(0).task_id(), "honest");
  }
  registry::Registry loaded{registry::RegistryOptions{}};
  ASSERT_TRUE(LoadInto(*store_, loaded).ok());
  auto a = loaded.Get("a", now);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->instance_id(), "i-a");
  ASSERT_EQ(a->curves_size(), 1);
  EXPECT_EQ(a->curves(0).task_id(), "honest");
  // Later curves number above every stored one.
  RegistryWriter writer(store_.get(), *fence);
  loaded.SetObserver(&writer);
  ASSERT_TRUE(loaded.AddCurve(Curve("next", 0)).ok());
  EXPECT_GT(loaded.Get("b", now)->curves(0).sequence(), 1u);
  EXPECT_EQ(Tasks(*store_->List()), std::vector<std::string>{"next"});
}

}  // namespace
}  // namespace monta::store
