// What PlanKnowledge (calibration.h) keeps in the store (issue 20 item 3;
// server/store/knowledge_store.h): one record per node set (its calibration,
// when it was fitted, and the verify runs kept for the next refit) and one per
// job on its nodes (the newest verify reply). Encoded in the protobuf wire
// format without a message of the contract's: the planner's private record,
// read only by planners. Unknown fields are skipped, so a field added later
// is read by older planners as absent; a record whose format major version
// is newer than this build's is refused (the rule of server/etcd_store's
// schema key: a minor bump when older planners can still read).
//
// Ids: "nodesets/<hex>" and "jobs/<hex>", the hex the first 128 bits of the
// SHA-256 of the node set's key (NodeSetKey) or of the job's (JobKey): bounded
// whatever the nodes' names, and each record names its key again, checked
// against its id when read.
#ifndef MONTA_SERVER_PLANNING_KNOWLEDGE_RECORD_H_
#define MONTA_SERVER_PLANNING_KNOWLEDGE_RECORD_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/planning/calibration.h"

namespace monta::planning {

// The format this build writes; a record of a newer major is refused.
inline constexpr int kKnowledgeFormatMajor = 1;
inline constexpr int kKnowledgeFormatMinor = 0;

std::string NodeSetRecordId(const std::string& node_set);
std::string JobRecordId(const std::string& job_key);

// Within `max_bytes`: the oldest runs are left out until it fits; nullopt
// when even the calibration alone does not.
std::optional<std::string> EncodeNodeSetRecord(const NodeSetRecord& record,
                                               size_t max_bytes);
// nullopt when over `max_bytes`.
std::optional<std::string> EncodeJobRecord(const JobRecord& record,
                                           size_t max_bytes);

// DATA_LOSS naming what is wrong: malformed, a newer format major, a value
// out of range (a scale not finite and > 0, gamma < 1, an overhead < 0, a
// measured time not finite and > 0, K < 1), or an id that is not its key's.
absl::StatusOr<NodeSetRecord> DecodeNodeSetRecord(const std::string& id,
                                                  const std::string& data);
absl::StatusOr<JobRecord> DecodeJobRecord(const std::string& id,
                                          const std::string& data);

// Whether `id` names a node set record or a job record.
bool IsNodeSetRecordId(const std::string& id);
bool IsJobRecordId(const std::string& id);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_KNOWLEDGE_RECORD_H_
