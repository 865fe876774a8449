// The fabric sources the planner reads (server/fabric): the operator's fabric
// map (YAML or JSON) and a `kubectl get nodes -o json` NodeList. Any text must
// parse or be refused with INVALID_ARGUMENT or RESOURCE_EXHAUSTED, never a
// crash; what parses keeps the map's invariants (each node in one rack that
// exists, racks and blocks sorted and unique, every rack's block declared,
// capacities finite and positive or undeclared).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/fabric/fabric_map.h"
#include "server/fabric/node_labels.h"

namespace {

bool Refused(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ||
         status.code() == absl::StatusCode::kResourceExhausted;
}

bool LinkOk(const monta::fabric::DeclaredLink& link) {
  return std::isfinite(link.bytes_per_second) && link.bytes_per_second >= 0 &&
         (link.oversubscription_ratio == 0 || link.oversubscription_ratio >= 1);
}

void CheckMap(const monta::fabric::FabricMap& map) {
  for (size_t i = 0; i < map.blocks.size(); ++i) {
    if ((i > 0 && !(map.blocks[i - 1].name < map.blocks[i].name)) ||
        !LinkOk(map.blocks[i].uplink) ||
        !monta::fabric::ValidateLevelName(map.blocks[i].name).ok()) {
      std::abort();
    }
  }
  size_t listed = 0;
  for (size_t i = 0; i < map.racks.size(); ++i) {
    const monta::fabric::MapRack& rack = map.racks[i];
    if ((i > 0 && !(map.racks[i - 1].name < rack.name)) ||
        !LinkOk(rack.uplink) ||
        (!rack.block.empty() && map.FindBlock(rack.block) == nullptr)) {
      std::abort();
    }
    listed += rack.nodes.size();
    for (const std::string& node : rack.nodes) {
      auto it = map.nodes.find(node);
      if (it == map.nodes.end() || it->second.rack != i) std::abort();
    }
  }
  if (listed != map.nodes.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  monta::fabric::FabricLimits limits;
  limits.max_nodes = 1000;
  limits.max_racks = 100;
  limits.max_blocks = 20;
  absl::StatusOr<monta::fabric::FabricMap> map =
      monta::fabric::ParseFabricMap(text, limits);
  if (map.ok()) {
    CheckMap(*map);
  } else if (!Refused(map.status())) {
    std::abort();
  }
  absl::StatusOr<monta::fabric::NodeLabels> labels =
      monta::fabric::ParseNodeList(text, monta::fabric::DefaultLabelKeys(),
                                   limits);
  if (labels.ok()) {
    for (const auto& [node, place] : labels->nodes) {
      if (!monta::fabric::ValidateLevelName(place.rack).ok()) std::abort();
    }
  } else if (!Refused(labels.status())) {
    std::abort();
  }
  return 0;
}
