#include "perf/tcp_store.h"

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace monta::perf {
namespace {

TEST(TcpStoreTest, SetThenGetAcrossClients) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  TcpStore a(address), b(address);
  const std::string value("bytes\0with nul", 14);
  ASSERT_TRUE(a.Set("scope/key", value).ok());
  absl::StatusOr<std::string> got = b.Get("scope/key", absl::Now());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  ASSERT_TRUE(a.Set("scope/key", "replaced").ok());
  EXPECT_EQ(*b.Get("scope/key", absl::Now()), "replaced");
}

TEST(TcpStoreTest, GetWaitsForALaterSet) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  TcpStore getter(address);
  std::thread setter([&] {
    TcpStore s(address);
    // Set once the getter has seen the key missing at least once: the getter
    // publishes that it is waiting.
    ASSERT_TRUE(s.Get("waiting", absl::Now() + absl::Seconds(30)).ok());
    ASSERT_TRUE(s.Set("late", "v").ok());
  });
  EXPECT_EQ(getter.Get("late", absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(getter.Set("waiting", "1").ok());
  absl::StatusOr<std::string> got =
      getter.Get("late", absl::Now() + absl::Seconds(30));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST(TcpStoreTest, UnreachableServerAndBadAddressesAreErrors) {
  // A port nobody listens on: bind one, learn it, close the server.
  int port = 0;
  {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
        TcpStoreServer::Start("127.0.0.1:0");
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }
  TcpStore gone(absl::StrCat("127.0.0.1:", port));
  EXPECT_EQ(gone.Get("k", absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(TcpStore("no-port").Get("k", absl::Now()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(TcpStoreServer::Start("localhost:1").ok());
}

}  // namespace
}  // namespace monta::perf
