// The one place where proto enums meet the lowercase names people see:
// annotations, environment variables (MONTA_STRATEGY=tp_dedup_pipelined),
// metric labels, montactl tables and topology-change messages.
//
// The short name of an enum value is its proto name without the enum's prefix,
// in lower case: STRATEGY_KIND_TP_DEDUP_PIPELINED -> "tp_dedup_pipelined",
// TOPOLOGY_CHANGE_NIC_RATE_CHANGED -> "nic_rate_changed". The prefix is the
// name of the enum's 0 value less "UNSPECIFIED" (the contract's rule,
// proto/README.md), so a new enum value gets its name without code here.
#ifndef MONTA_COMMON_PROTO_NAMES_H_
#define MONTA_COMMON_PROTO_NAMES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/generated_enum_reflection.h"
#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta {
namespace proto_names_internal {

std::string ShortName(const google::protobuf::EnumDescriptor* type, int value);
std::optional<int> FromShortName(const google::protobuf::EnumDescriptor* type,
                                 absl::string_view name);
std::optional<int> FromSpelling(const google::protobuf::EnumDescriptor* type,
                                absl::string_view text);

}  // namespace proto_names_internal

// "tp_dedup_pipelined" for STRATEGY_KIND_TP_DEDUP_PIPELINED; "unspecified" for
// 0; the number as text for a value this build does not know.
template <typename Enum>
std::string ShortName(Enum value) {
  return proto_names_internal::ShortName(
      google::protobuf::GetEnumDescriptor<Enum>(), static_cast<int>(value));
}

// The value whose ShortName is `name`; nullopt for an unknown name.
template <typename Enum>
std::optional<Enum> FromShortName(absl::string_view name) {
  std::optional<int> v = proto_names_internal::FromShortName(
      google::protobuf::GetEnumDescriptor<Enum>(), name);
  if (!v) return std::nullopt;
  return static_cast<Enum>(*v);
}

// The value whose ShortName is `text` once case, spaces, '_' and '-' are
// ignored, so that other spellings of the same words find it: "LinkUp",
// "Phy Test" and "link_up" all name NIC_PHYS_STATE_LINK_UP / _PHY_TEST. For
// text written by others (the kernel, operators); nullopt when none matches.
template <typename Enum>
std::optional<Enum> FromSpelling(absl::string_view text) {
  std::optional<int> v = proto_names_internal::FromSpelling(
      google::protobuf::GetEnumDescriptor<Enum>(), text);
  if (!v) return std::nullopt;
  return static_cast<Enum>(*v);
}

// The schedule a benchmark curve measured: "" for a plain collective
// (UNSPECIFIED), else the strategy's ShortName. Stored in SQLite and in
// registry::CurveKey, so it must stay stable.
std::string CurveStrategyName(monta::v1::StrategyKind kind);

// "alive", "stale", "gone" ("unknown" otherwise).
std::string NodeStateName(monta::v1::NodeState state);

}  // namespace monta

#endif  // MONTA_COMMON_PROTO_NAMES_H_
