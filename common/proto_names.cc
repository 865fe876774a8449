#include "common/proto_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace monta {
namespace proto_names_internal {
namespace {

// "STRATEGY_KIND_" for StrategyKind: its 0 value less "UNSPECIFIED".
absl::string_view Prefix(const google::protobuf::EnumDescriptor* type) {
  const google::protobuf::EnumValueDescriptor* zero =
      type->FindValueByNumber(0);
  if (zero == nullptr) return "";
  absl::string_view name = zero->name();
  if (!absl::ConsumeSuffix(&name, "UNSPECIFIED")) return "";
  return name;
}

// Lower case without ' ', '_' and '-': "Phy Test" and "PHY_TEST" -> "phytest".
std::string Squeezed(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == ' ' || c == '_' || c == '-') continue;
    out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::string ShortName(const google::protobuf::EnumDescriptor* type, int value) {
  const google::protobuf::EnumValueDescriptor* v =
      type->FindValueByNumber(value);
  if (v == nullptr) return absl::StrCat(value);
  absl::string_view name = v->name();
  absl::ConsumePrefix(&name, Prefix(type));
  return absl::AsciiStrToLower(name);
}

std::optional<int> FromShortName(const google::protobuf::EnumDescriptor* type,
                                 absl::string_view name) {
  const google::protobuf::EnumValueDescriptor* v = type->FindValueByName(
      absl::StrCat(Prefix(type), absl::AsciiStrToUpper(name)));
  if (v == nullptr) return std::nullopt;
  return v->number();
}

std::optional<int> FromSpelling(const google::protobuf::EnumDescriptor* type,
                                absl::string_view text) {
  const std::string wanted = Squeezed(text);
  if (wanted.empty()) return std::nullopt;
  for (int i = 0; i < type->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* v = type->value(i);
    if (Squeezed(ShortName(type, v->number())) == wanted) return v->number();
  }
  return std::nullopt;
}

}  // namespace proto_names_internal

std::string CurveStrategyName(monta::v1::StrategyKind kind) {
  if (kind == monta::v1::STRATEGY_KIND_UNSPECIFIED) return "";
  return ShortName(kind);
}

std::string NodeStateName(monta::v1::NodeState state) {
  switch (state) {
    case monta::v1::NODE_STATE_ALIVE:
    case monta::v1::NODE_STATE_STALE:
    case monta::v1::NODE_STATE_GONE:
      return ShortName(state);
    default:
      return "unknown";
  }
}

}  // namespace monta
