// The declared topology file (agent/topology/topology_file): operator-written
// YAML the agent reads at start; any text must parse or give INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "agent/topology/topology_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<monta::v1::NodeTopology> topology =
      monta::topology::ParseTopologyYaml(text, "fuzz.yaml");
  if (!topology.ok() &&
      (topology.status().code() != absl::StatusCode::kInvalidArgument ||
       !absl::StartsWith(topology.status().message(), "fuzz.yaml: "))) {
    std::abort();
  }
  // Path tokens are parsed on their own too (ParsePathToken is public).
  (void)monta::topology::ParsePathToken(text);
  return 0;
}
