// The declared topology file (agent/topology/topology_file): operator-written
// YAML the agent reads at start; any text must parse or give INVALID_ARGUMENT.
// A declared NIC's link layer and states are closed sets: each one given is a
// named value that agrees with its text (what the planner checks at Register).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "agent/topology/topology_file.h"
#include "common/nic_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<monta::v1::NodeTopology> topology =
      monta::topology::ParseTopologyYaml(text, "fuzz.yaml");
  if (!topology.ok() &&
      (topology.status().code() != absl::StatusCode::kInvalidArgument ||
       !absl::StartsWith(topology.status().message(), "fuzz.yaml: "))) {
    std::abort();
  }
  if (topology.ok()) {
    for (const monta::v1::Nic& nic : topology->nics()) {
      if (!monta::nic_state::CheckKindsAgree(nic, "nic").ok() ||
          nic.state_kind() == monta::v1::NIC_PORT_STATE_UNKNOWN ||
          nic.phys_state_kind() == monta::v1::NIC_PHYS_STATE_UNKNOWN ||
          nic.link_layer_kind() == monta::v1::NIC_LINK_LAYER_UNKNOWN ||
          (nic.state().empty() !=
           (nic.state_kind() == monta::v1::NIC_PORT_STATE_UNSPECIFIED))) {
        std::abort();
      }
    }
  }
  // Path tokens are parsed on their own too (ParsePathToken is public).
  (void)monta::topology::ParsePathToken(text);
  return 0;
}
