// The etcd fixture's operations options and calls, on a real one-member etcd:
// automatic compaction (the history before it is gone), a small quota that
// raises the NOSPACE alarm Alarms() reports, Defragment, CountKeys, and a bad
// compaction mode refused before anything starts.
#include "tests/testing/etcd_cluster.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/etcd/client.h"
#include "tests/testing/process.h"

namespace monta::testing {
namespace {

std::unique_ptr<etcd::Client> NewClient(const EtcdCluster& cluster) {
  etcd::ClientOptions options;
  options.endpoints = cluster.endpoints();
  options.security.insecure = true;
  auto client = etcd::Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

TEST(EtcdClusterFixtureTest, PeriodicCompactionDropsTheOldHistory) {
  EtcdCluster::Options options;
  options.auto_compaction_mode = "periodic";
  options.auto_compaction_retention = "1s";
  auto cluster = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = NewClient(**cluster);
  ASSERT_NE(client, nullptr);
  auto first = client->Put("/compaction/k", "v0");
  ASSERT_TRUE(first.ok()) << first.status();
  // Writes go on (periodic compaction keeps the revision of one period ago)
  // until a Range at the first revision answers OUT_OF_RANGE.
  etcd::RangeRequest old;
  old.key = "/compaction/k";
  old.revision = first->revision;
  int writes = 0;
  const bool compacted = WaitFor(
      [&] {
        EXPECT_TRUE(
            client->Put("/compaction/k", absl::StrCat("v", ++writes)).ok());
        return client->Range(old).status().code() ==
               absl::StatusCode::kOutOfRange;
      },
      absl::Seconds(30));
  EXPECT_TRUE(compacted) << "revision " << first->revision
                         << " still readable after " << writes << " writes";
}

TEST(EtcdClusterFixtureTest, AFullQuotaRaisesNospaceAndDefragmentRuns) {
  EtcdCluster::Options options;
  options.quota_backend_bytes = 1 << 20;
  auto cluster = EtcdCluster::Start(std::move(options));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = NewClient(**cluster);
  ASSERT_NE(client, nullptr);
  auto alarms = (*cluster)->Alarms();
  ASSERT_TRUE(alarms.ok()) << alarms.status();
  EXPECT_TRUE(alarms->empty()) << alarms->front();
  auto none = (*cluster)->CountKeys("/quota/");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0);

  // 100 KiB values until etcd refuses one (the quota is 1 MiB). etcd checks
  // the quota against its database's size as of its last backend commit
  // (every 100 ms): puts faster than that all pass, so they are paced.
  const std::string value(100 << 10, 'x');
  int stored = 0;
  absl::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {
    auto put = client->Put(absl::StrCat("/quota/", i), value);
    if (put.ok()) {
      ++stored;
      absl::SleepFor(absl::Milliseconds(150));
    } else {
      refused = put.status();
    }
  }
  ASSERT_FALSE(refused.ok()) << stored << " puts of 100 KiB all stored";
  EXPECT_TRUE(absl::StrContains(refused.message(), "space exceeded"))
      << refused;
  alarms = (*cluster)->Alarms();
  ASSERT_TRUE(alarms.ok()) << alarms.status();
  ASSERT_EQ(alarms->size(), 1u);
  EXPECT_TRUE(absl::StrContains(alarms->front(), "alarm:NOSPACE"))
      << alarms->front();
  auto counted = (*cluster)->CountKeys("/quota/");
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(*counted, stored);
  EXPECT_TRUE((*cluster)->Defragment(0).ok());
}

TEST(EtcdClusterFixtureTest, AnUnknownCompactionModeIsRefused) {
  EtcdCluster::Options options;
  options.auto_compaction_mode = "hourly";
  options.auto_compaction_retention = "1h";
  auto cluster = EtcdCluster::Start(std::move(options));
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(cluster.status().message(), "auto_compaction_mode"))
      << cluster.status();
}

}  // namespace
}  // namespace monta::testing
