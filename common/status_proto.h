// absl::Status <-> monta.v1.Status, for results carried inside messages (a
// benchmark rank's outcome) rather than as the RPC's own status.
#ifndef MONTA_COMMON_STATUS_PROTO_H_
#define MONTA_COMMON_STATUS_PROTO_H_

#include "absl/status/status.h"
#include "proto/monta/v1/common.pb.h"

namespace monta {

// The code as its canonical number and the message; OK gives code 0, no text.
monta::v1::Status StatusToProto(const absl::Status& status);

// The inverse; an unset message (code 0) is OK. A code this build does not
// know becomes UNKNOWN, keeping the message.
absl::Status StatusFromProto(const monta::v1::Status& status);

}  // namespace monta

#endif  // MONTA_COMMON_STATUS_PROTO_H_
