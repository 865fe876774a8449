// absl::Status at the gRPC edge: the conversion lives in common/ (the agent
// needs it too); the planner's services keep spelling it api::ToGrpc.
#ifndef MONTA_SERVER_API_GRPC_STATUS_H_
#define MONTA_SERVER_API_GRPC_STATUS_H_

#include "common/grpc_status.h"

namespace monta::api {

using ::monta::ToGrpc;

}  // namespace monta::api

#endif  // MONTA_SERVER_API_GRPC_STATUS_H_
