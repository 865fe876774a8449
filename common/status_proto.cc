#include "common/status_proto.h"

#include <string>

namespace monta {

monta::v1::Status StatusToProto(const absl::Status& status) {
  monta::v1::Status out;
  out.set_code(static_cast<int32_t>(status.code()));
  if (!status.ok()) out.set_message(std::string(status.message()));
  return out;
}

absl::Status StatusFromProto(const monta::v1::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  // absl's canonical codes are 1..16; anything else is from a newer peer.
  const bool known = status.code() > 0 && status.code() <= 16;
  const absl::StatusCode code =
      known ? static_cast<absl::StatusCode>(status.code())
            : absl::StatusCode::kUnknown;
  return absl::Status(code, status.message());
}

}  // namespace monta
