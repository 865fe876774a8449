// perf/ha_writes' decision check on one real etcd member: the decision
// records a replica's RecordWriter landed hold the job names DecisionLedger
// gave, read back with the records' own decoder; an acknowledged decision
// without a record counts as lost (as a decision answered by a replica
// SIGKILLed before its writer sent it), a call never answered OK does not
// count, and a record that does not decode is an error naming its key.
#include "perf/ha_writes.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/etcd_store/record_writer.h"
#include "server/etcd_store/records.h"
#include "server/store/record_done.h"
#include "tests/testing/etcd_suite.h"

namespace monta::perf {
namespace {

class HaWritesTest : public monta::testing::EtcdSuite<1> {
 protected:
  static monta::v1::StrategyRequest Job() {
    monta::v1::StrategyRequest job;
    job.mutable_job()->set_name("paper");
    job.mutable_job()->set_hidden_size(8192);
    return job;
  }
};

TEST_F(HaWritesTest, AnAcknowledgedDecisionWithoutARecordIsLost) {
  const std::string prefix = prefix_ + "/";
  DecisionLedger ledger("ha-bench-1");
  std::vector<monta::v1::StrategyRequest> recorded_calls;
  for (int i = 0; i < 5; ++i) recorded_calls.push_back(ledger.Next(Job()));
  {
    etcd_store::RecordWriterOptions options;
    options.prefix = prefix;
    options.origin = "replica-0";
    etcd_store::RecordWriter writer(client_.get(), options);
    for (const monta::v1::StrategyRequest& request : recorded_calls) {
      // Answered only once stored, as the planner does (group commit).
      store::RecordWait stored;
      writer.RecordDecision(request, {}, stored.done());
      ASSERT_TRUE(stored.Wait().ok());
      ledger.Acknowledge(request);
    }
  }
  // Answered OK, never recorded: the replica died before its writer sent it.
  const monta::v1::StrategyRequest unrecorded = ledger.Next(Job());
  ledger.Acknowledge(unrecorded);
  // Not answered OK: not acknowledged, not looked for.
  ledger.Next(Job());

  absl::StatusOr<std::set<std::string>> recorded =
      RecordedDecisionJobs(cluster_->endpoints(), prefix);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  std::set<std::string> want;
  for (const auto& request : recorded_calls) {
    EXPECT_EQ(request.job().hidden_size(), 8192);  // the job, renamed only
    want.insert(request.job().name());
  }
  EXPECT_EQ(want.size(), 5u);  // a name each
  EXPECT_EQ(*recorded, want);
  const std::vector<std::string> acknowledged = ledger.Acknowledged();
  EXPECT_EQ(acknowledged.size(), 6u);
  EXPECT_EQ(CountMissing(acknowledged, *recorded), 1);
  EXPECT_EQ(recorded->count(unrecorded.job().name()), 0u);
  EXPECT_EQ(CountMissing(acknowledged, {}), 6);
}

TEST_F(HaWritesTest, ARecordThatDoesNotDecodeNamesItsKey) {
  const std::string prefix = prefix_ + "/";
  const std::string key =
      etcd_store::RecordTablePrefix(prefix, "decisions") + "junk";
  ASSERT_TRUE(client_->Put(key, "not a record").ok());
  absl::StatusOr<std::set<std::string>> recorded =
      RecordedDecisionJobs(cluster_->endpoints(), prefix);
  ASSERT_FALSE(recorded.ok());
  EXPECT_EQ(recorded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(recorded.status().message(), key))
      << recorded.status();
}

}  // namespace
}  // namespace monta::perf
