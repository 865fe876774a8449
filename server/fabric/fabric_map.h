// The operator's fabric map (--fabric_map_file): which rack, and which block,
// every node sits in, and what is declared of each uplink. The authority on a
// node's position (fabric.h). YAML, or JSON (a YAML document too):
//
//   version: 1                        # required
//   blocks:                           # optional: groups of racks under a spine
//   - name: block-a
//     uplink_bits_per_second: 3.2e12  # optional: the block's uplink capacity
//     oversubscription: 2             # optional: below / above, >= 1
//   racks:                            # required (may be empty)
//   - name: rack-a1
//     block: block-a                  # optional: a block named in `blocks`
//     uplink_bits_per_second: 800gbit # optional: the rack's (leaf) uplink
//     oversubscription: 4             # optional
//     nodes: [gpu-001, gpu-002]       # optional: node labels may fill the
//                                     # racks the map declares
//
// Capacities are per direction, in bits per second: a number ("400e9") or a
// number with tc's decimal units ("400gbit", "100mbit"; kbit, mbit, gbit,
// tbit). Block and rack names are Kubernetes label values (1..63 of
// [A-Za-z0-9._-], starting and ending with an alphanumeric), so that the
// names topograph or Kueue put in node labels can be used as they are. Node
// names are Kubernetes node names (registry::ValidateNodeName). A node may be
// in one rack only; names are unique. Every error names the line and the
// field ("line 12: racks[1].nodes[3]: ...").
#ifndef MONTA_SERVER_FABRIC_FABRIC_MAP_H_
#define MONTA_SERVER_FABRIC_FABRIC_MAP_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace monta::fabric {

// Bounds on what a fabric source may make the planner hold.
struct FabricLimits {
  // Nodes one source may name (--fabric_max_nodes).
  int max_nodes = 100000;
  int max_racks = 10000;
  int max_blocks = 1000;
  // Bytes of the map file.
  size_t max_map_bytes = size_t{16} << 20;
  // Bytes of the node labels file (--fabric_node_labels_max_bytes): a
  // `kubectl get nodes -o json` list carries each node's whole object.
  size_t max_node_labels_bytes = size_t{128} << 20;
};

// Longest block or rack name (a Kubernetes label value).
inline constexpr size_t kMaxLevelNameBytes = 63;

// Declared facts about one uplink, in the wire's units.
struct DeclaredLink {
  // Capacity per direction; 0 = not declared.
  double bytes_per_second = 0;
  // Capacity below the uplink over the uplink's (4 = 4:1); 0 = not declared.
  double oversubscription_ratio = 0;
  // Line of the declaring entry; 0 when nothing is declared.
  int line = 0;
};

struct MapBlock {
  std::string name;
  DeclaredLink uplink;
  int line = 0;
};

struct MapRack {
  std::string name;
  std::string block;  // empty: in no block
  DeclaredLink uplink;
  std::vector<std::string> nodes;
  int line = 0;
};

struct FabricMap {
  // Sorted by name.
  std::vector<MapBlock> blocks;
  std::vector<MapRack> racks;
  struct NodeEntry {
    size_t rack = 0;  // index into racks
    int line = 0;     // line of the node's entry
  };
  std::map<std::string, NodeEntry, std::less<>> nodes;

  const MapRack* FindRack(absl::string_view name) const;
  const MapBlock* FindBlock(absl::string_view name) const;
};

// Parses and validates a map. INVALID_ARGUMENT ("line L: FIELD: what was
// expected, got ...") or RESOURCE_EXHAUSTED (a bound of `limits`).
absl::StatusOr<FabricMap> ParseFabricMap(absl::string_view text,
                                         const FabricLimits& limits = {});

// A block or rack name: a Kubernetes label value, 1..63 characters of
// [A-Za-z0-9._-], starting and ending with an alphanumeric.
absl::Status ValidateLevelName(absl::string_view name);

// "400e9" or "400gbit" (tc's decimal units kbit, mbit, gbit, tbit, any
// case) in bits per second; > 0 and at most 1e15 (1 Pbit/s).
absl::StatusOr<double> ParseBitsPerSecond(absl::string_view text);

}  // namespace monta::fabric

#endif  // MONTA_SERVER_FABRIC_FABRIC_MAP_H_
