#include "agent/comm/rendezvous_store.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace monta::comm {
namespace {

TEST(InMemoryStoreTest, GetWaitsForALaterSet) {
  InMemoryStore store;
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store.Set("k", std::string("v\0w", 3)).ok());
  });
  absl::StatusOr<std::string> v =
      store.Get("k", absl::Now() + absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("v\0w", 3));
}

TEST(InMemoryStoreTest, MissingKeyIsDeadlineExceeded) {
  InMemoryStore store;
  absl::StatusOr<std::string> v = store.Get("nope", absl::Now());
  EXPECT_TRUE(absl::IsDeadlineExceeded(v.status())) << v.status();
}

TEST(FileStoreTest, RoundTripsBinaryValuesUnderScopedKeys) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  FileStore store(tmp != nullptr ? tmp : "/tmp");
  ASSERT_TRUE(store.Set("task/a/b", std::string("\x01\x00\xff", 3)).ok());
  absl::StatusOr<std::string> v = store.Get("task/a/b", absl::Now());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\x01\x00\xff", 3));
  EXPECT_TRUE(
      absl::IsDeadlineExceeded(store.Get("task/a/c", absl::Now()).status()));
}

TEST(PrefixStoreTest, ScopesKeys) {
  auto base = std::make_shared<InMemoryStore>();
  PrefixStore prefixed("p", base);
  ASSERT_TRUE(prefixed.Set("k", "v").ok());
  EXPECT_EQ(*base->Get("p/k", absl::Now()), "v");
}

TEST(JoinAllTest, NamesEveryMissingRank) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("s/joined/1", "1").ok());
  absl::Status s =
      JoinAll(store, "s", 0, 4, absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank(s) 2,3 of 4")) << s;
}

TEST(ExchangeSplitColorsTest, RanksByKeyThenOldRank) {
  InMemoryStore store;
  // Members 0..3 with colors 0,1,0,1 and keys 5,0,5,0.
  ASSERT_TRUE(store.Set("s/member/1", "1,0").ok());
  ASSERT_TRUE(store.Set("s/member/2", "0,5").ok());
  ASSERT_TRUE(store.Set("s/member/3", "1,0").ok());
  absl::StatusOr<SplitPlacement> p =
      ExchangeSplitColors(store, "s", 0, 4, 0, 5, absl::Now());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 0);  // ties on key go to the lower old rank
  EXPECT_EQ(p->size, 2);
}

TEST(ExchangeSplitColorsTest, NamesMissingMembers) {
  InMemoryStore store;
  absl::StatusOr<SplitPlacement> p = ExchangeSplitColors(
      store, "s", 0, 3, 0, 0, absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(p.status())) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), "rank(s) 1,2 of 3"))
      << p.status();
}

}  // namespace
}  // namespace monta::comm
