#include "client/task_render.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/bandwidth/collective_proto.h"
#include "common/proto_names.h"

namespace monta::client {
namespace {

// "2026-12-02 13:05:24 UTC"; "-" when unset.
std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                          absl::FromUnixSeconds(t.seconds()),
                          absl::UTCTimeZone());
}

}  // namespace

std::string TaskStatusText(const monta::v1::BenchmarkTaskStatus& s) {
  std::string out =
      absl::StrCat("task ", s.task_id(), " on ", absl::StrJoin(s.nodes(), ","),
                   ": ", monta::v1::TaskState_Name(s.state()));
  if (!s.reason().empty()) absl::StrAppend(&out, " (", s.reason(), ")");
  absl::StrAppend(&out, "\n");
  for (const auto& e : s.excluded()) {
    absl::StrAppend(&out, "  excluded: ",
                    bandwidth::CollectiveProtoName(e.curve().collective()),
                    " on ", absl::StrJoin(e.curve().nodes(), ","), " (",
                    ShortName(e.reason()), "): ", e.detail(), "\n");
  }
  return out;
}

std::string TaskText(const monta::v1::GetBenchmarkTaskReply& reply) {
  const monta::v1::BenchmarkTaskStatus& s = reply.status();
  const monta::v1::BenchmarkTask& task = reply.task();
  std::string out = TaskStatusText(s);
  absl::StrAppend(&out, "  attempt:  ", reply.attempt(), " of ",
                  reply.max_attempts(), ", leader epoch ", task.leader_epoch(),
                  "\n");
  absl::StrAppend(&out, "  ranks:    ", task.ranks_per_node(), " per node, ",
                  task.nodes_size() * task.ranks_per_node(), " in all\n");
  absl::StrAppend(&out, "  created:  ", Time(s.created_at()), "\n");
  absl::StrAppend(&out, "  started:  ", Time(s.started_at()), "\n");
  absl::StrAppend(&out, "  finished: ", Time(s.finished_at()), "\n");
  absl::StrAppend(&out, "  deadline: ", Time(task.deadline()), "\n");
  absl::StrAppend(&out, "  from:     ",
                  reply.from_store()
                      ? "a follower's read of the store (as the leader last "
                        "wrote it)"
                      : "the leader",
                  "\n");
  return out;
}

}  // namespace monta::client
