// absl::Status <-> grpc::Status at the gRPC edge, for the planner and the
// agent. The two code numberings are the same, so the conversion keeps code and
// message.
#ifndef MONTA_COMMON_GRPC_STATUS_H_
#define MONTA_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace monta {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace monta

#endif  // MONTA_COMMON_GRPC_STATUS_H_
