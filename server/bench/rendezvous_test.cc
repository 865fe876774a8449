#include "server/bench/rendezvous.h"

#include <string>

#include "gtest/gtest.h"

namespace monta::coordination {
namespace {

TEST(RendezvousStoreTest, KeysCountAgainstTheirSetterUntilDropped) {
  RendezvousStore store(RendezvousLimits{});
  ASSERT_TRUE(store.Set("t1", "join/0", "x", "node a").ok());
  ASSERT_TRUE(store.Set("t1", "nccl", "1234", "node a").ok());
  EXPECT_EQ(store.Get("t1", "nccl"), "1234");
  EXPECT_FALSE(store.Get("t1", "absent").has_value());
  EXPECT_FALSE(store.Get("t2", "nccl").has_value());
  EXPECT_EQ(store.bytes_of("node a"), 6u + 1u + 4u + 4u);
  // Another setter overwrites: the bytes move to it.
  ASSERT_TRUE(store.Set("t1", "nccl", "56", "node b").ok());
  EXPECT_EQ(store.bytes_of("node a"), 6u + 1u);
  EXPECT_EQ(store.bytes_of("node b"), 4u + 2u);
  EXPECT_EQ(store.bytes(), 6u + 1u + 4u + 2u);
  store.Drop("t1");
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.bytes_of("node a"), 0u);
  EXPECT_FALSE(store.Get("t1", "join/0").has_value());
}

TEST(RendezvousStoreTest, BoundsNameTheirFlagAndStoreNothing) {
  RendezvousLimits limits;
  limits.max_keys_per_task = 2;
  limits.max_value_bytes = 8;
  limits.max_bytes_per_task = 20;
  limits.max_bytes_per_node = 30;
  limits.max_bytes = 40;
  RendezvousStore store(limits);
  EXPECT_EQ(store.Set("t", "", "v", "n").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set("t", std::string(513, 'k'), "v", "n").code(),
            absl::StatusCode::kInvalidArgument);
  const auto exhausted = [](const absl::Status& s, const std::string& flag) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find(flag), std::string::npos) << s;
  };
  exhausted(store.Set("t", "k", std::string(9, 'v'), "n"),
            "--max_rendezvous_value_bytes");
  ASSERT_TRUE(store.Set("t", "a", "12345678", "n").ok());  // 9 bytes
  exhausted(store.Set("t", "bbbbbbbbbbbb", "1234567", "n"),
            "--max_rendezvous_bytes_per_task");           // 9 + 19
  ASSERT_TRUE(store.Set("t", "b", "1234567", "n").ok());  // 17 in t
  exhausted(store.Set("t", "c", "1", "n"), "--max_rendezvous_keys_per_task");
  ASSERT_TRUE(store.Set("t2", "x", "12345678", "n").ok());  // n: 26
  exhausted(store.Set("t2", "y", "1234567", "n"),
            "--max_rendezvous_bytes_per_node");            // n: 34
  ASSERT_TRUE(store.Set("t2", "y", "1234567", "m").ok());  // all: 34
  exhausted(store.Set("t3", "z", "12345678", "m"),
            "(--max_rendezvous_bytes)");  // all: 43
  EXPECT_EQ(store.bytes(), 34u);
  EXPECT_EQ(store.bytes_of("n"), 26u);
  EXPECT_EQ(store.bytes_of("m"), 8u);
}

}  // namespace
}  // namespace monta::coordination
