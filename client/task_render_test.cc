#include "client/task_render.h"

#include "gtest/gtest.h"

namespace monta::client {
namespace {

TEST(TaskRenderTest, AFollowersAnswerShowsAttemptEpochAndTimes) {
  monta::v1::GetBenchmarkTaskReply reply;
  auto* s = reply.mutable_status();
  s->set_task_id("bench-1-2");
  s->set_state(monta::v1::TASK_STATE_PENDING);
  s->set_reason("leader changed: handed out again under leader epoch 7");
  s->add_nodes("a");
  s->add_nodes("b");
  s->mutable_created_at()->set_seconds(1796216724);  // 2026-12-02 13:05:24
  auto* task = reply.mutable_task();
  task->add_nodes("a");
  task->add_nodes("b");
  task->set_ranks_per_node(2);
  task->set_leader_epoch(7);
  task->mutable_deadline()->set_seconds(1796216784);
  reply.set_attempt(2);
  reply.set_max_attempts(3);
  reply.set_from_store(true);
  EXPECT_EQ(TaskText(reply),
            "task bench-1-2 on a,b: TASK_STATE_PENDING (leader changed: "
            "handed out again under leader epoch 7)\n"
            "  attempt:  2 of 3, leader epoch 7\n"
            "  ranks:    2 per node, 4 in all\n"
            "  created:  2026-12-02 13:05:24 UTC\n"
            "  started:  -\n"
            "  finished: -\n"
            "  deadline: 2026-12-02 13:06:24 UTC\n"
            "  from:     a follower's read of the store (as the leader last "
            "wrote it)\n");
}

TEST(TaskRenderTest, ExcludedCurvesFollowTheStatusLine) {
  monta::v1::BenchmarkTaskStatus s;
  s.set_task_id("bench-1-3");
  s.set_state(monta::v1::TASK_STATE_SUCCEEDED);
  s.add_nodes("a");
  auto* e = s.add_excluded();
  e->mutable_curve()->set_collective(monta::v1::COLLECTIVE_ALLGATHER);
  e->mutable_curve()->add_nodes("a");
  e->set_reason(monta::v1::EXCLUSION_REASON_DATA_CHECK);
  e->set_detail("rank 1: 8 wrong bytes");
  EXPECT_EQ(TaskStatusText(s),
            "task bench-1-3 on a: TASK_STATE_SUCCEEDED\n"
            "  excluded: allgather on a (data_check): rank 1: 8 wrong bytes\n");
}

}  // namespace
}  // namespace monta::client
