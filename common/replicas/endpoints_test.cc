#include "common/replicas/endpoints.h"

#include <map>
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

TEST(HomeIndexTest, IsStableAndSpreadsNamesEvenly) {
  // FNV-1a: the same index in every process (an agent's home must not move
  // when it restarts).
  EXPECT_EQ(HomeIndex("node-a", 3), HomeIndex("node-a", 3));
  EXPECT_EQ(HomeIndex("", 3), 14695981039346656037ull % 3);
  EXPECT_EQ(HomeIndex("node-a", 0), 0u);
  EXPECT_EQ(HomeIndex("node-a", 1), 0u);
  std::map<size_t, int> per_replica;
  for (int i = 0; i < 3000; ++i) {
    ++per_replica[HomeIndex("node-" + std::to_string(i), 3)];
  }
  ASSERT_EQ(per_replica.size(), 3u);
  for (const auto& [replica, n] : per_replica) {
    EXPECT_GT(n, 900) << replica;
    EXPECT_LT(n, 1100) << replica;
  }
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

// Replicas that list "<name>-0", "<name>-1", ... two items a page; a page
// token is "<name>:<next index>" and a replica refuses another's token
// (INVALID_ARGUMENT, as a planner would not know it). `down` answers
// UNAVAILABLE from its `down_after`th call on.
struct PagedReplicas {
  int items = 5;
  std::map<std::string, int> down_after;  // endpoint -> calls it answers
  std::map<std::string, int> calls;
  std::vector<std::string> foreign_tokens;  // tokens sent to another replica
  std::vector<std::string> kept;
  int restarts = 0;

  grpc::Status Page(const std::string& endpoint, const std::string& token,
                    std::string* next, std::string* peer) {
    const int call = calls[endpoint]++;
    auto down = down_after.find(endpoint);
    if (down != down_after.end() && call >= down->second) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed");
    }
    *peer = "ipv4:" + endpoint;
    int from = 0;
    if (!token.empty()) {
      const size_t colon = token.rfind(':');
      if (token.substr(0, colon) != endpoint) {
        foreign_tokens.push_back(token);
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token");
      }
      from = std::stoi(token.substr(colon + 1));
    }
    for (int i = from; i < std::min(items, from + 2); ++i) {
      kept.push_back(endpoint + "-" + std::to_string(i));
    }
    if (from + 2 < items) *next = endpoint + ":" + std::to_string(from + 2);
    return grpc::Status::OK;
  }

  grpc::Status List(Endpoints& endpoints) {
    return ListAllPages(
        endpoints,
        [this](const std::string& endpoint, const std::string& token,
               std::string* next,
               std::string* peer) { return Page(endpoint, token, next, peer); },
        [this] {
          ++restarts;
          kept.clear();
        });
  }
};

TEST(ListAllPagesTest, ListsEveryPageOnOneReplica) {
  Endpoints e({"a:1", "b:2"});
  PagedReplicas r;
  ASSERT_TRUE(r.List(e).ok());
  EXPECT_EQ(r.kept, (std::vector<std::string>{"a:1-0", "a:1-1", "a:1-2",
                                              "a:1-3", "a:1-4"}));
  EXPECT_EQ(r.restarts, 0);
  EXPECT_EQ(r.calls["a:1"], 3);
}

TEST(ListAllPagesTest, StartsOverOnTheNextReplicaWithoutSendingItTheToken) {
  Endpoints e({"a:1", "b:2", "c:3"});
  PagedReplicas r;
  r.down_after["a:1"] = 1;  // answers the first page, then goes away
  ASSERT_TRUE(r.List(e).ok());
  EXPECT_TRUE(r.foreign_tokens.empty()) << r.foreign_tokens.front();
  // b's items only, from its first page: none of a's kept.
  EXPECT_EQ(r.kept, (std::vector<std::string>{"b:2-0", "b:2-1", "b:2-2",
                                              "b:2-3", "b:2-4"}));
  EXPECT_EQ(r.restarts, 1);
  EXPECT_EQ(e.current(), "b:2");
}

TEST(ListAllPagesTest, StartsOverWhenAnotherAddressBehindTheNameAnswers) {
  // One "dns:" name; the page calls reach two addresses behind it.
  Endpoints e({"dns:///planner:7400"});
  int call = 0;
  int restarts = 0;
  std::vector<std::string> kept;
  const grpc::Status status = ListAllPages(
      e,
      [&](const std::string&, const std::string& token, std::string* next,
          std::string* peer) {
        // Calls 0 and 1 (first page, then its token) on 10.0.0.1; the
        // second answered by 10.0.0.2; from then on 10.0.0.2 only.
        *peer = ++call == 1 ? "ipv4:10.0.0.1:7400" : "ipv4:10.0.0.2:7400";
        kept.push_back(*peer + (token.empty() ? " first" : " second"));
        if (token.empty()) *next = "t";
        return grpc::Status::OK;
      },
      [&] {
        ++restarts;
        kept.clear();
      });
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(kept, (std::vector<std::string>{"ipv4:10.0.0.2:7400 first",
                                            "ipv4:10.0.0.2:7400 second"}));
}

TEST(ListAllPagesTest, FailsClearlyWhenTheReplicaKeepsChanging) {
  Endpoints e({"a:1", "b:2"});
  PagedReplicas r;
  // Each replica answers one page per listing and then fails once.
  int calls = 0;
  const grpc::Status status = ListAllPages(
      e,
      [&](const std::string& endpoint, const std::string& token,
          std::string* next, std::string* peer) {
        if (++calls % 2 == 0) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed");
        }
        return r.Page(endpoint, token, next, peer);
      },
      [&] { ++r.restarts; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(status.error_message().find("page token is one replica's"),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(r.restarts, e.attempts());
  EXPECT_TRUE(r.foreign_tokens.empty());
}

TEST(ListAllPagesTest, AnErrorOtherThanUnavailableEndsTheListing) {
  Endpoints e({"a:1", "b:2"});
  const grpc::Status status = ListAllPages(
      e,
      [](const std::string&, const std::string&, std::string*, std::string*) {
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no");
      },
      [] {});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(e.current(), "a:1");
}

}  // namespace
}  // namespace monta::replicas
