// What a NIC port's reported texts mean: the link layer, state and physical
// state that sysfs, a topology file or an older agent give as strings, read as
// monta.v1's NicLinkLayer, NicPortState and NicPhysState (topology.proto says
// what each value means and where its number comes from).
//
// The sets are open (InfiniBand and Ethernet today, whatever a driver reports
// next), so a text that names no value reads as *_UNKNOWN and the raw string
// stays in the Nic; "" reads as *_UNSPECIFIED (not known).
#ifndef MONTA_COMMON_NIC_STATE_H_
#define MONTA_COMMON_NIC_STATE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::nic_state {

// Texts as the kernel, operators and older agents write them. Spelling is
// loose (case, spaces, '_' and '-' are ignored: "InfiniBand", "LinkUp",
// "Phy Test", "active_defer"). Ethernet operstate words are read as the RoCE
// drivers report the port: state "up" -> ACTIVE, "down" -> DOWN; phys_state
// "up" -> LINK_UP, "down" -> DISABLED.
monta::v1::NicLinkLayer LinkLayerFromText(absl::string_view text);
monta::v1::NicPortState PortStateFromText(absl::string_view text);
monta::v1::NicPhysState PhysStateFromText(absl::string_view text);

// The number before the colon in sysfs ports/N/state ("4: ACTIVE") and
// ports/N/phys_state ("5: LinkUp"): the InfiniBand PortState and
// PortPhysicalState, which the enums' values are. Numbers they do not name
// (0 "NOP", 6+) are UNKNOWN.
monta::v1::NicPortState PortStateFromCode(int code);
monta::v1::NicPhysState PhysStateFromCode(int code);

// What the port's fields mean: the *_kind field when it is a value this build
// names (not UNSPECIFIED), else the reading of its raw text (a sender older
// than the enums, or newer with a value this build does not know).
monta::v1::NicLinkLayer LinkLayerOf(const monta::v1::Nic& nic);
monta::v1::NicPortState PortStateOf(const monta::v1::Nic& nic);
monta::v1::NicPhysState PhysStateOf(const monta::v1::Nic& nic);

// Sets every *_kind that is UNSPECIFIED from its raw text (a sender older
// than the enums), so readers of the message find them filled. A value this
// build does not know is kept for readers that do.
void FillKinds(monta::v1::Nic& nic);

// INVALID_ARGUMENT naming the field (under `field`, e.g.
// "topology.nics[0]") when a *_kind this build names and its raw text read as
// two different named values, e.g. state_kind DOWN with state "ACTIVE". Text
// that reads as UNKNOWN, and kinds UNSPECIFIED or unknown to this build, are
// not checked: a newer sender may know more spellings.
absl::Status CheckKindsAgree(const monta::v1::Nic& nic,
                             const std::string& field);

// For people (montactl, topology events): the value's short name ("active",
// "link_up", "infiniband"); for UNKNOWN the raw text as reported (or
// "unknown" when empty); "" when not known at all.
std::string LinkLayerText(const monta::v1::Nic& nic);
std::string PortStateText(const monta::v1::Nic& nic);
std::string PhysStateText(const monta::v1::Nic& nic);

// Whether the port counts as passing traffic: ACTIVE, or a state that is not
// known at all (nothing reported: such a port was always counted, so a node
// that cannot read its NIC states keeps its line rate). Any other state,
// UNKNOWN included, does not count.
bool CountsAsUp(const monta::v1::Nic& nic);

}  // namespace monta::nic_state

#endif  // MONTA_COMMON_NIC_STATE_H_
