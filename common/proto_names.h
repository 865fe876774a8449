// Short human-readable names of proto enums, shared by the planner's messages
// and montactl's tables.
#ifndef MONTA_COMMON_PROTO_NAMES_H_
#define MONTA_COMMON_PROTO_NAMES_H_

#include <string>

#include "proto/monta/v1/planner.pb.h"

namespace monta {

// "alive", "stale", "gone" ("unknown" otherwise).
std::string NodeStateName(monta::v1::NodeState state);

}  // namespace monta

#endif  // MONTA_COMMON_PROTO_NAMES_H_
