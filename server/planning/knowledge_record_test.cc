// The plan knowledge's stored records (knowledge_record.h) and PlanKnowledge
// written through, loaded from and following a store's records: round trips,
// the bounds, and bad records skipped, never trusted.
#include "server/planning/knowledge_record.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/paper_job.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;
using strategy::StrategyKind;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

v1::StrategyRequest OnNodes(const std::vector<std::string>& nodes) {
  v1::StrategyRequest r = monta::testing::PaperJobOnNodes(nodes);
  r.mutable_job()->set_name("job-x");
  return r;
}

std::vector<Observation> RunOn(const std::vector<std::string>& nodes,
                               double seconds) {
  const v1::StrategyRequest r = OnNodes(nodes);
  return {
      Observation{r, StrategyKind::kFlat, 1, seconds, MeasuredScope::kLayer},
      Observation{r, StrategyKind::kTpDedupPipelined, 4, seconds / 2,
                  MeasuredScope::kLayer}};
}

PlanCalibration Fitted(double network_scale, const std::string& task) {
  PlanCalibration c;
  c.model.network_scale = network_scale;
  c.model.local_scale = 0.5;
  c.model.latency_scale = 2;
  c.model.per_chunk_overhead_seconds = 1e-4;
  c.contention_factor = 1.3;
  c.evidence.set_network_scale_ratio(network_scale);
  c.evidence.set_local_scale_ratio(0.5);
  c.evidence.set_latency_scale_ratio(2);
  c.evidence.set_per_chunk_overhead_seconds(1e-4);
  c.evidence.set_contention_factor(1.3);
  c.evidence.set_task_id(task);
  return c;
}

NodeSetRecord ARecord() {
  NodeSetRecord r;
  r.node_set = "node-a,node-b";
  r.updated_at = kT0;
  r.runs.push_back(RunOn({"node-a", "node-b"}, 0.01));
  std::vector<Observation> mixed = RunOn({"node-b", "node-a"}, 0.02);
  mixed[1].request.mutable_job()->set_sequence_length(1024);
  r.runs.push_back(mixed);
  r.calibration = Fitted(1.5, "verify-1");
  r.fitted_at = kT0 - absl::Seconds(3);
  return r;
}

TEST(KnowledgeRecordTest, ANodeSetRecordRoundTrips) {
  const NodeSetRecord r = ARecord();
  const std::string id = NodeSetRecordId(r.node_set);
  EXPECT_TRUE(IsNodeSetRecordId(id));
  EXPECT_FALSE(IsJobRecordId(id));
  EXPECT_EQ(id.size(), std::string("nodesets/").size() + 32);
  std::optional<std::string> bytes = EncodeNodeSetRecord(r, 1 << 20);
  ASSERT_TRUE(bytes.has_value());
  absl::StatusOr<NodeSetRecord> back = DecodeNodeSetRecord(id, *bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->node_set, r.node_set);
  EXPECT_EQ(back->updated_at, kT0);
  EXPECT_EQ(back->fitted_at, r.fitted_at);
  ASSERT_TRUE(back->calibration.has_value());
  EXPECT_EQ(back->calibration->model.network_scale, 1.5);
  EXPECT_EQ(back->calibration->model.local_scale, 0.5);
  EXPECT_EQ(back->calibration->model.latency_scale, 2);
  EXPECT_EQ(back->calibration->model.per_chunk_overhead_seconds, 1e-4);
  EXPECT_EQ(back->calibration->contention_factor, 1.3);
  EXPECT_EQ(back->calibration->evidence.task_id(), "verify-1");
  ASSERT_EQ(back->runs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(back->runs[i].size(), r.runs[i].size());
    for (size_t j = 0; j < r.runs[i].size(); ++j) {
      const Observation& want = r.runs[i][j];
      const Observation& got = back->runs[i][j];
      EXPECT_EQ(got.kind, want.kind);
      EXPECT_EQ(got.chunks, want.chunks);
      EXPECT_EQ(got.measured_seconds, want.measured_seconds);
      EXPECT_EQ(got.scope, want.scope);
      EXPECT_EQ(got.request.SerializeAsString(),
                want.request.SerializeAsString());
    }
  }
}

TEST(KnowledgeRecordTest, AJobRecordRoundTripsUnderItsJobsId) {
  JobRecord r;
  r.request = OnNodes({"node-a", "node-b"});
  r.request.mutable_job()->clear_name();
  r.reply.mutable_task()->set_task_id("verify-7");
  r.reply.set_regret_ratio(0.02);
  r.at = kT0;
  const std::string id = JobRecordId(JobKey(r.request));
  EXPECT_TRUE(IsJobRecordId(id));
  std::optional<std::string> bytes = EncodeJobRecord(r, 1 << 20);
  ASSERT_TRUE(bytes.has_value());
  absl::StatusOr<JobRecord> back = DecodeJobRecord(id, *bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->reply.task().task_id(), "verify-7");
  EXPECT_EQ(back->at, kT0);
  EXPECT_EQ(JobKey(back->request), JobKey(r.request));
  // Too large for the bound: not encoded.
  EXPECT_FALSE(EncodeJobRecord(r, bytes->size() - 1).has_value());
}

TEST(KnowledgeRecordTest, TheOldestRunsAreLeftOutToFitTheBound) {
  NodeSetRecord r = ARecord();
  const std::string whole = *EncodeNodeSetRecord(r, 1 << 20);
  NodeSetRecord newest_only = r;
  newest_only.runs.pop_front();
  const std::string one = *EncodeNodeSetRecord(newest_only, 1 << 20);
  ASSERT_LT(one.size(), whole.size());
  std::optional<std::string> fitted = EncodeNodeSetRecord(r, one.size());
  ASSERT_TRUE(fitted.has_value());
  absl::StatusOr<NodeSetRecord> back =
      DecodeNodeSetRecord(NodeSetRecordId(r.node_set), *fitted);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->runs.size(), 1u);
  EXPECT_EQ(back->runs[0][0].measured_seconds, 0.02);  // the newer run
  EXPECT_TRUE(back->calibration.has_value());
  // Not even the calibration alone fits: nothing.
  EXPECT_FALSE(EncodeNodeSetRecord(r, 16).has_value());
}

// Each bad record is refused with DATA_LOSS naming what is wrong.
TEST(KnowledgeRecordTest, BadRecordsAreRefusedNamingTheProblem) {
  const NodeSetRecord good = ARecord();
  const std::string id = NodeSetRecordId(good.node_set);
  const std::string bytes = *EncodeNodeSetRecord(good, 1 << 20);
  auto refused = [](const absl::StatusOr<NodeSetRecord>& r,
                    const std::string& says) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status();
  };
  refused(DecodeNodeSetRecord(id, bytes.substr(0, bytes.size() - 1)), "");
  refused(DecodeNodeSetRecord(id, "\xff\xff\xff"), "");
  refused(DecodeNodeSetRecord(NodeSetRecordId("node-c"), bytes),
          "not its id's");
  NodeSetRecord bad_scale = good;
  bad_scale.calibration->evidence.set_network_scale_ratio(0);
  refused(DecodeNodeSetRecord(id, *EncodeNodeSetRecord(bad_scale, 1 << 20)),
          "scales finite and > 0");
  NodeSetRecord bad_gamma = good;
  bad_gamma.calibration->evidence.set_contention_factor(0.5);
  refused(DecodeNodeSetRecord(id, *EncodeNodeSetRecord(bad_gamma, 1 << 20)),
          "contention factor");
  NodeSetRecord bad_time = good;
  bad_time.runs[0][0].measured_seconds = -1;
  refused(DecodeNodeSetRecord(id, *EncodeNodeSetRecord(bad_time, 1 << 20)),
          "measured time");
  NodeSetRecord other_nodes = good;
  other_nodes.runs[0] = RunOn({"node-a", "node-c"}, 0.01);
  refused(DecodeNodeSetRecord(id, *EncodeNodeSetRecord(other_nodes, 1 << 20)),
          "another node set");
  NodeSetRecord undated = good;
  undated.updated_at = absl::UnixEpoch();
  refused(DecodeNodeSetRecord(id, *EncodeNodeSetRecord(undated, 1 << 20)),
          "update time");
  // A newer format major (field 14 = 2 appended: the last one read wins).
  refused(DecodeNodeSetRecord(id, bytes + std::string("\x70\x02", 2)), "newer");
  // A job record under a node set's id, and a job record of another job.
  JobRecord job;
  job.request = OnNodes({"node-a", "node-b"});
  job.at = kT0;
  const std::string job_bytes = *EncodeJobRecord(job, 1 << 20);
  EXPECT_EQ(DecodeJobRecord(JobRecordId("other"), job_bytes).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeNodeSetRecord(id, job_bytes).status().code(),
            absl::StatusCode::kDataLoss);
}

// What a writer set on a PlanKnowledge receives, change by change.
struct Recorder {
  std::vector<store::KnowledgeWrites> writes;
  PlanKnowledge::Writer writer() {
    return [this](const store::KnowledgeWrites& w) { writes.push_back(w); };
  }
  // The store the writes make: id -> record.
  std::vector<store::KnowledgeRecord> Stored() const {
    std::map<std::string, std::string> held;
    for (const auto& w : writes) {
      for (const auto& [id, value] : w) {
        if (value.has_value()) {
          held[id] = *value;
        } else {
          held.erase(id);
        }
      }
    }
    std::vector<store::KnowledgeRecord> out;
    for (const auto& [id, value] : held) out.push_back({id, value});
    return out;
  }
};

TEST(PlanKnowledgeTest, ChangesAreWrittenAndAnotherPlannerLoadsThemTheSame) {
  PlanKnowledge leader;
  Recorder recorder;
  leader.SetWriter(recorder.writer());
  const v1::StrategyRequest job = OnNodes({"node-b", "node-a"});
  const std::string set = NodeSetKey(job);
  EXPECT_EQ(leader.AddRun(RunOn({"node-a", "node-b"}, 0.01)).size(), 2u);
  leader.SetCalibration(set, Fitted(1.25, "verify-3"), kT0);
  v1::VerifyReply reply;
  reply.mutable_task()->set_task_id("verify-3");
  leader.SetVerified(job, reply, kT0);
  ASSERT_EQ(recorder.writes.size(), 3u);
  EXPECT_EQ(recorder.writes[1].count(NodeSetRecordId(set)), 1u);
  EXPECT_EQ(recorder.writes[2].count(JobRecordId(JobKey(job))), 1u);

  PlanKnowledge follower;
  const PlanKnowledge::Loaded loaded = follower.Replace(recorder.Stored());
  EXPECT_EQ(loaded.node_sets, 1);
  EXPECT_EQ(loaded.jobs, 1);
  EXPECT_EQ(loaded.malformed, 0);
  const absl::Time later = kT0 + absl::Seconds(30);
  std::optional<PlanCalibration> c = follower.Calibration(set, later);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->model.network_scale, 1.25);
  EXPECT_EQ(c->evidence.task_id(), "verify-3");
  EXPECT_EQ(c->evidence.age_seconds(), 30);
  EXPECT_EQ(c->evidence.SerializeAsString(),
            leader.Calibration(set, later)->evidence.SerializeAsString());
  // The job's verified reply answers under another job name too.
  v1::StrategyRequest renamed = job;
  renamed.mutable_job()->set_name("another-name");
  std::optional<PlanKnowledge::Verified> v =
      follower.FreshVerified(renamed, later);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->reply.task().task_id(), "verify-3");
  // The runs came along: a refit on the follower (a new leader) sees them.
  EXPECT_EQ(follower.AddRun(RunOn({"node-a", "node-b"}, 0.03)).size(), 4u);
}

TEST(PlanKnowledgeTest, TheBoundsDeleteWhatTheyDropFromTheStore) {
  PlanKnowledge::Options options;
  options.max_entries = 2;
  options.max_runs_per_node_set = 2;
  PlanKnowledge knowledge(options);
  Recorder recorder;
  knowledge.SetWriter(recorder.writer());
  for (int i = 0; i < 3; ++i) {
    knowledge.AddRun(RunOn({"node-a", "node-b"}, 0.01 * (i + 1)));
  }
  // Two runs kept, in memory and in the stored record.
  absl::StatusOr<NodeSetRecord> stored = DecodeNodeSetRecord(
      recorder.Stored().at(0).id, recorder.Stored().at(0).value);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->runs.size(), 2u);
  EXPECT_EQ(stored->runs[0][0].measured_seconds, 0.02);
  const std::string first = NodeSetKey(OnNodes({"node-a", "node-b"}));
  knowledge.AddRun(RunOn({"node-c", "node-d"}, 0.01));
  knowledge.AddRun(RunOn({"node-e", "node-f"}, 0.01));
  // The third node set drops the first: its record is deleted in the same
  // write.
  const store::KnowledgeWrites& last = recorder.writes.back();
  ASSERT_EQ(last.count(NodeSetRecordId(first)), 1u);
  EXPECT_FALSE(last.at(NodeSetRecordId(first)).has_value());
  EXPECT_EQ(knowledge.node_sets(), 2u);
  EXPECT_EQ(recorder.Stored().size(), 2u);
}

TEST(PlanKnowledgeTest, AFollowerAppliesChangesAndSkipsBadRecords) {
  PlanKnowledge leader;
  Recorder recorder;
  leader.SetWriter(recorder.writer());
  const std::string set = NodeSetKey(OnNodes({"node-a", "node-b"}));
  leader.SetCalibration(set, Fitted(2, "verify-9"), kT0);

  PlanKnowledge follower;
  std::vector<store::KnowledgeRecord> stored = recorder.Stored();
  stored.push_back({NodeSetRecordId("node-x"), "not a record"});
  stored.push_back({"elsewhere/1", "?"});
  const PlanKnowledge::Loaded loaded = follower.Replace(stored);
  EXPECT_EQ(loaded.node_sets, 1);
  EXPECT_EQ(loaded.malformed, 2);
  ASSERT_TRUE(follower.Calibration(set, kT0).has_value());

  // A newer calibration arrives as a put; a bad put changes nothing.
  leader.SetCalibration(set, Fitted(3, "verify-10"), kT0 + absl::Seconds(5));
  for (const auto& [id, value] : recorder.writes.back()) {
    EXPECT_TRUE(follower.Apply({id, value}));
  }
  EXPECT_EQ(follower.Calibration(set, kT0)->model.network_scale, 3);
  EXPECT_FALSE(follower.Apply({NodeSetRecordId(set), std::string("\x08")}));
  EXPECT_EQ(follower.Calibration(set, kT0)->model.network_scale, 3);
  // A delete forgets it.
  EXPECT_TRUE(follower.Apply({NodeSetRecordId(set), std::nullopt}));
  EXPECT_FALSE(follower.Calibration(set, kT0).has_value());
  EXPECT_EQ(follower.node_sets(), 0u);
  // Without a writer nothing is written.
  leader.SetWriter(nullptr);
  leader.SetCalibration(set, Fitted(4, "verify-11"), kT0);
  EXPECT_EQ(recorder.writes.size(), 2u);
}

}  // namespace
}  // namespace monta::planning
