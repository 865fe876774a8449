#include "common/proto_json.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace monta {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("JSON encoding failed: ", status.ToString()));
  }
  return out;
}

absl::Status FromJson(absl::string_view json,
                      google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json),
                                                            message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", message->GetDescriptor()->name(),
                     " JSON: ", std::string(status.message())));
  }
  return absl::OkStatus();
}

}  // namespace monta
