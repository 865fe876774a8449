#include "common/nic_state.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/proto_names.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace monta::nic_state {
namespace {

using monta::v1::Nic;
using monta::v1::NicLinkLayer;
using monta::v1::NicPhysState;
using monta::v1::NicPortState;

// A value this build names, other than *_UNSPECIFIED (0).
template <typename Enum>
bool Named(Enum value) {
  return static_cast<int>(value) != 0 &&
         google::protobuf::GetEnumDescriptor<Enum>()->FindValueByNumber(
             static_cast<int>(value)) != nullptr;
}

// "" -> UNSPECIFIED; a spelling of a value's short name -> that value; other
// text -> `unknown`.
template <typename Enum>
Enum FromText(absl::string_view text, Enum unknown) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return static_cast<Enum>(0);
  std::optional<Enum> value = FromSpelling<Enum>(text);
  if (!value || static_cast<int>(*value) == 0) return unknown;
  return *value;
}

template <typename Enum>
Enum FromCode(int code, Enum unknown) {
  const Enum value = static_cast<Enum>(code);
  return Named(value) && value != unknown ? value : unknown;
}

// Ethernet operstate: "up" or "down", any case.
bool IsOperstate(absl::string_view text, absl::string_view word) {
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(text), word);
}

template <typename Enum>
Enum Of(Enum kind, const std::string& text,
        Enum (*from_text)(absl::string_view)) {
  return Named(kind) ? kind : from_text(text);
}

template <typename Enum>
std::string ValueName(Enum value) {
  const google::protobuf::EnumValueDescriptor* v =
      google::protobuf::GetEnumDescriptor<Enum>()->FindValueByNumber(
          static_cast<int>(value));
  return v != nullptr ? v->name() : absl::StrCat(static_cast<int>(value));
}

// OK unless `kind` and the reading of `text` are two different named values.
template <typename Enum>
absl::Status Agree(Enum kind, const std::string& text,
                   Enum (*from_text)(absl::string_view), Enum unknown,
                   const std::string& kind_field, const char* text_name) {
  if (!Named(kind)) return absl::OkStatus();
  const Enum read = from_text(text);
  if (!Named(read) || read == unknown || read == kind) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(kind_field, ": ", ValueName(kind), " disagrees with ",
                   text_name, ", which reads as ", ValueName(read)));
}

template <typename Enum>
std::string Text(Enum value, const std::string& raw, Enum unknown) {
  if (static_cast<int>(value) == 0) return "";
  if (value != unknown) return ShortName(value);
  return raw.empty() ? "unknown" : absl::StrCat("unknown (", raw, ")");
}

}  // namespace

NicLinkLayer LinkLayerFromText(absl::string_view text) {
  return FromText(text, monta::v1::NIC_LINK_LAYER_UNKNOWN);
}

NicPortState PortStateFromText(absl::string_view text) {
  if (IsOperstate(text, "up")) return monta::v1::NIC_PORT_STATE_ACTIVE;
  return FromText(text, monta::v1::NIC_PORT_STATE_UNKNOWN);
}

NicPhysState PhysStateFromText(absl::string_view text) {
  if (IsOperstate(text, "up")) return monta::v1::NIC_PHYS_STATE_LINK_UP;
  if (IsOperstate(text, "down")) return monta::v1::NIC_PHYS_STATE_DISABLED;
  return FromText(text, monta::v1::NIC_PHYS_STATE_UNKNOWN);
}

NicPortState PortStateFromCode(int code) {
  return FromCode(code, monta::v1::NIC_PORT_STATE_UNKNOWN);
}

NicPhysState PhysStateFromCode(int code) {
  return FromCode(code, monta::v1::NIC_PHYS_STATE_UNKNOWN);
}

NicLinkLayer LinkLayerOf(const Nic& nic) {
  return Of(nic.link_layer_kind(), nic.link_layer(), &LinkLayerFromText);
}

NicPortState PortStateOf(const Nic& nic) {
  return Of(nic.state_kind(), nic.state(), &PortStateFromText);
}

NicPhysState PhysStateOf(const Nic& nic) {
  return Of(nic.phys_state_kind(), nic.phys_state(), &PhysStateFromText);
}

void FillKinds(Nic& nic) {
  if (nic.link_layer_kind() == monta::v1::NIC_LINK_LAYER_UNSPECIFIED) {
    nic.set_link_layer_kind(LinkLayerFromText(nic.link_layer()));
  }
  if (nic.state_kind() == monta::v1::NIC_PORT_STATE_UNSPECIFIED) {
    nic.set_state_kind(PortStateFromText(nic.state()));
  }
  if (nic.phys_state_kind() == monta::v1::NIC_PHYS_STATE_UNSPECIFIED) {
    nic.set_phys_state_kind(PhysStateFromText(nic.phys_state()));
  }
}

absl::Status CheckKindsAgree(const Nic& nic, const std::string& field) {
  if (absl::Status s =
          Agree(nic.link_layer_kind(), nic.link_layer(), &LinkLayerFromText,
                monta::v1::NIC_LINK_LAYER_UNKNOWN, field + ".link_layer_kind",
                "link_layer");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Agree(nic.state_kind(), nic.state(), &PortStateFromText,
                             monta::v1::NIC_PORT_STATE_UNKNOWN,
                             field + ".state_kind", "state");
      !s.ok()) {
    return s;
  }
  return Agree(nic.phys_state_kind(), nic.phys_state(), &PhysStateFromText,
               monta::v1::NIC_PHYS_STATE_UNKNOWN, field + ".phys_state_kind",
               "phys_state");
}

std::string LinkLayerText(const Nic& nic) {
  return Text(LinkLayerOf(nic), nic.link_layer(),
              monta::v1::NIC_LINK_LAYER_UNKNOWN);
}

std::string PortStateText(const Nic& nic) {
  return Text(PortStateOf(nic), nic.state(), monta::v1::NIC_PORT_STATE_UNKNOWN);
}

std::string PhysStateText(const Nic& nic) {
  return Text(PhysStateOf(nic), nic.phys_state(),
              monta::v1::NIC_PHYS_STATE_UNKNOWN);
}

bool CountsAsUp(const Nic& nic) {
  const NicPortState state = PortStateOf(nic);
  return state == monta::v1::NIC_PORT_STATE_ACTIVE ||
         state == monta::v1::NIC_PORT_STATE_UNSPECIFIED;
}

}  // namespace monta::nic_state
