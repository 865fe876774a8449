// Protobuf <-> JSON in protobuf's JSON mapping with the proto field names
// (snake_case), as montactl and the webhook print and read it.
#ifndef MONTA_COMMON_PROTO_JSON_H_
#define MONTA_COMMON_PROTO_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace monta {

// Pretty-printed JSON; fields with default values are included so consumers see
// every field.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

// Parses JSON into `message`; unknown fields are an error naming the field.
absl::Status FromJson(absl::string_view json,
                      google::protobuf::Message* message);

}  // namespace monta

#endif  // MONTA_COMMON_PROTO_JSON_H_
