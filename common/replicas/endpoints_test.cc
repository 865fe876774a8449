#include "common/replicas/endpoints.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace monta::replicas {
namespace {

constexpr char kFollowerRefusal[] = "not the leader (leader: 10.0.0.3:7400)";

TEST(LeaderNamedTest, ReadsTheFollowersRefusal) {
  EXPECT_EQ(LeaderNamed(kFollowerRefusal), "10.0.0.3:7400");
  EXPECT_EQ(LeaderNamed("RunBenchmark: not the leader (leader: a:1) now"),
            "a:1");
  EXPECT_EQ(LeaderNamed("not the leader (leader: unknown)"), "");
  EXPECT_EQ(LeaderNamed("failed to connect to all addresses"), "");
  EXPECT_EQ(LeaderNamed("not the leader (leader: a:1"), "");
}

TEST(EndpointsTest, ParseRefusesAnEmptyOrMalformedList) {
  absl::StatusOr<Endpoints> none = Endpoints::Parse(" , ,", "--planner");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--planner"), std::string::npos);
  absl::StatusOr<Endpoints> spaced = Endpoints::Parse("a:1,b 2:3", "--planner");
  ASSERT_FALSE(spaced.ok());
  EXPECT_NE(spaced.status().message().find("space"), std::string::npos);
  absl::StatusOr<Endpoints> list = Endpoints::Parse(" a:1, b:2,,c:3 ", "x");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->all(), (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_EQ(list->current(), "a:1");
}

TEST(EndpointsTest, MovesToTheNamedLeaderWhenListedElseTheNext) {
  absl::StatusOr<Endpoints> e =
      Endpoints::Parse("10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400", "x");
  ASSERT_TRUE(e.ok());
  // Down: the next one. A follower naming a listed leader: straight there.
  EXPECT_EQ(e->MoveOn("failed to connect to all addresses"), "10.0.0.2:7400");
  EXPECT_EQ(e->MoveOn(kFollowerRefusal), "10.0.0.3:7400");
  // The leader itself down: the next one, wrapping around.
  EXPECT_EQ(e->MoveOn("Socket closed"), "10.0.0.1:7400");
  // A leader the list does not name is not dialled.
  EXPECT_EQ(e->MoveOn("not the leader (leader: 192.168.9.9:7400)"),
            "10.0.0.2:7400");
  // Naming the current replica (a stale view) does not stay there.
  EXPECT_EQ(e->MoveOn("not the leader (leader: 10.0.0.2:7400)"),
            "10.0.0.3:7400");
}

TEST(EndpointsTest, StartsWhereToldAndKnowsItsIndex) {
  // perf/swarm spreads agents: agent i starts at the (i % size)th replica.
  Endpoints e({"a:1", "b:2", "c:3"}, 4);
  EXPECT_EQ(e.current(), "b:2");
  EXPECT_EQ(e.index(), 1u);
  EXPECT_EQ(e.MoveOn("not the leader (leader: a:1)"), "a:1");
  EXPECT_EQ(e.index(), 0u);
  EXPECT_EQ(e.MoveOn("Socket closed"), "b:2");
  EXPECT_EQ(e.index(), 1u);
}

TEST(EndpointsTest, AttemptsCountDnsNamesAsSeveral) {
  EXPECT_EQ(Endpoints::Parse("a:1,b:2,c:3", "x")->attempts(), 4);
  EXPECT_EQ(Endpoints::Parse("a:1", "x")->attempts(), 2);
  EXPECT_EQ(Endpoints::Parse("dns:///planner:7400", "x")->attempts(),
            1 + kDnsAttempts);
  EXPECT_TRUE(IsDnsTarget("dns:///planner:7400"));
  EXPECT_FALSE(IsDnsTarget("planner:7400"));
}

// The calls a failover makes, against a list whose first replica is down and
// whose second is a follower naming the third.
TEST(CallWithFailoverTest, PastTheDeadAndTheFollowerToTheLeader) {
  absl::StatusOr<Endpoints> e =
      Endpoints::Parse("dead:1,follower:2,x:9,leader:3", "x");
  ASSERT_TRUE(e.ok());
  std::vector<std::string> called;
  std::vector<std::string> moves;
  const grpc::Status status = CallWithFailover(
      *e,
      [&](const std::string& endpoint) {
        called.push_back(endpoint);
        if (endpoint == "dead:1") {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed");
        }
        if (endpoint == "follower:2") {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "not the leader (leader: leader:3)");
        }
        return grpc::Status::OK;
      },
      [&](const std::string& from, const std::string& to, const grpc::Status&) {
        moves.push_back(from + "->" + to);
      });
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(called,
            (std::vector<std::string>{"dead:1", "follower:2", "leader:3"}));
  EXPECT_EQ(moves, (std::vector<std::string>{"dead:1->follower:2",
                                             "follower:2->leader:3"}));
  EXPECT_EQ(e->current(), "leader:3");  // the next call starts there
}

TEST(CallWithFailoverTest, StopsAtAnotherErrorAndAfterItsAttempts) {
  absl::StatusOr<Endpoints> e = Endpoints::Parse("a:1,b:2", "x");
  ASSERT_TRUE(e.ok());
  int calls = 0;
  grpc::Status status = CallWithFailover(*e, [&](const std::string&) {
    ++calls;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad job");
  });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(calls, 1);
  calls = 0;
  status = CallWithFailover(*e, [&](const std::string&) {
    ++calls;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
  });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(calls, e->attempts());
}

}  // namespace
}  // namespace monta::replicas
