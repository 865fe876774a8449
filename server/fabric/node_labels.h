// Node labels as a source of fabric positions: which label keys name a node's
// rack and block, and the `kubectl get nodes -o json` NodeList a read-only
// sidecar keeps refreshing (--fabric_node_labels_file, deploy/README.md). The
// planner has no Kubernetes client; it reads this file.
//
// The same keys read what an agent says of itself (its reported topology
// labels), which is only ever a hint (fabric.h).
#ifndef MONTA_SERVER_FABRIC_NODE_LABELS_H_
#define MONTA_SERVER_FABRIC_NODE_LABELS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/fabric/fabric_map.h"

namespace monta::fabric {

// Label keys, most preferred first: the first key present on a node with a
// valid value names its rack (block).
struct LabelKeys {
  std::vector<std::string> rack;
  std::vector<std::string> block;
};

// NVIDIA topograph's leaf and spine (network.topology.nvidia.com/leaf,
// /spine), the rack and block levels of Kueue's Topology Aware Scheduling
// examples (cloud.provider.com/topology-rack, /topology-block) and GKE's
// (cloud.google.com/gce-topology-subblock, /gce-topology-block), and, for the
// block only, topology.kubernetes.io/zone.
LabelKeys DefaultLabelKeys();

// A comma-separated list of label keys (a flag's value): each
// [prefix/]name as Kubernetes has them (prefix a DNS subdomain of at most 253
// characters, name 1..63 of [A-Za-z0-9._-] alphanumeric at both ends);
// INVALID_ARGUMENT naming `flag` otherwise. Empty: no keys.
absl::StatusOr<std::vector<std::string>> ParseLabelKeys(absl::string_view flag,
                                                        absl::string_view text);

// What a node's labels say of its place; empty fields when no key names it.
struct LabelPlace {
  std::string rack;
  std::string rack_key;  // the key that named the rack
  std::string block;
  std::string block_key;
};

// Reads `labels` with `keys`. A value that is not a valid level name
// (ValidateLevelName) is skipped, as if the key were absent.
LabelPlace PlaceFromLabels(const std::map<std::string, std::string>& labels,
                           const LabelKeys& keys);

// The places a node list gives, by node name: only nodes whose labels name a
// rack (a block alone places no node).
struct NodeLabels {
  std::map<std::string, LabelPlace, std::less<>> nodes;
  // Distinct racks named.
  int racks = 0;
};

// Parses a `kubectl get nodes -o json` document ({"kind": "List" or
// "NodeList", "items": [{"metadata": {"name": ..., "labels": {...}}}]}),
// keeping only names and labels while it reads (the rest of each node object
// is skipped). INVALID_ARGUMENT naming the item and field, RESOURCE_EXHAUSTED
// over `limits` (max_node_labels_bytes, max_nodes).
absl::StatusOr<NodeLabels> ParseNodeList(absl::string_view text,
                                         const LabelKeys& keys,
                                         const FabricLimits& limits = {});

}  // namespace monta::fabric

#endif  // MONTA_SERVER_FABRIC_NODE_LABELS_H_
