// absl::Status at the gRPC edge.
#ifndef MONTA_SERVER_API_GRPC_STATUS_H_
#define MONTA_SERVER_API_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace monta::api {

// Same code (the numbering is shared) and message.
inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace monta::api

#endif  // MONTA_SERVER_API_GRPC_STATUS_H_
