// The frozen monta.v1 contract as text, and the check that it still holds.
// See proto/README.md for the rule this enforces.
//
// One line per fact, in file and declaration order:
//   field monta.v1.Candidate.kind = 1 enum monta.v1.StrategyKind optional
//   value monta.v1.StrategyKind.STRATEGY_KIND_FLAT = 1
//   reserved monta.v1.Candidate 2
//   reserved monta.v1.Candidate "name"
//   presence monta.v1.MoeJob.experts_tensor_parallel = 18   (proto3 optional)
//   rpc monta.v1.Planner.GetStrategy monta.v1.StrategyRequest ->
//   monta.v1.StrategyReply
#ifndef MONTA_PROTO_MONTA_V1_CONTRACT_SNAPSHOT_H_
#define MONTA_PROTO_MONTA_V1_CONTRACT_SNAPSHOT_H_

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"

namespace monta::contract {

// Every .proto file of monta.v1, from the generated descriptor pool (their
// libraries must be linked in). A name the pool lacks is left out.
std::vector<const google::protobuf::FileDescriptor*> ContractFiles(
    const std::vector<std::string>& proto_paths);

// The snapshot lines of `files`.
std::vector<std::string> SnapshotLines(
    const std::vector<const google::protobuf::FileDescriptor*>& files);

// One message per frozen line whose meaning changed: a field number now with
// another name, type or label; a field, enum value or rpc removed without its
// number and name reserved; a reservation dropped; a proto3 `optional`
// field's presence dropped. Empty when the contract
// only grew. `frozen` lines that are empty or start with '#' are ignored.
std::vector<std::string> CheckSnapshot(
    const std::vector<std::string>& frozen,
    const std::vector<const google::protobuf::FileDescriptor*>& files);

}  // namespace monta::contract

#endif  // MONTA_PROTO_MONTA_V1_CONTRACT_SNAPSHOT_H_
