#include "server/fabric/node_labels.h"

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/echo.h"
#include "nlohmann/json.hpp"
#include "server/registry/registry.h"

namespace monta::fabric {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxLabelPrefixBytes = 253;

absl::Status BadItem(size_t item, absl::string_view field,
                     absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("items[", item, "]", field, ": ", what));
}

// Keeps what ParseNodeList reads (kind, items[].metadata.name and .labels)
// and drops the rest of each node object while parsing: a NodeList carries
// each node's status and image list, megabytes that are never needed.
bool KeepNeeded(int depth, json::parse_event_t event, json& parsed) {
  if (event != json::parse_event_t::key) return true;
  const std::string& key = parsed.get_ref<const std::string&>();
  switch (depth) {
    case 1:  // the list
      return key == "kind" || key == "items";
    case 3:  // a node object
      return key == "metadata";
    case 4:  // its metadata
      return key == "name" || key == "labels";
    default:  // label keys (depth 5)
      return true;
  }
}

absl::StatusOr<std::map<std::string, std::string>> Labels(const json& metadata,
                                                          size_t item) {
  std::map<std::string, std::string> labels;
  const auto it = metadata.find("labels");
  if (it == metadata.end() || it->is_null()) return labels;
  if (!it->is_object()) {
    return BadItem(item, ".metadata.labels", "expected an object");
  }
  for (const auto& [key, value] : it->items()) {
    if (!value.is_string()) {
      return BadItem(
          item, ".metadata.labels",
          absl::StrCat("expected string values, ", EchoInput(key), " is not"));
    }
    labels[key] = value.get<std::string>();
  }
  return labels;
}

}  // namespace

LabelKeys DefaultLabelKeys() {
  LabelKeys keys;
  keys.rack = {"network.topology.nvidia.com/leaf",
               "cloud.provider.com/topology-rack",
               "cloud.google.com/gce-topology-subblock"};
  keys.block = {
      "network.topology.nvidia.com/spine", "cloud.provider.com/topology-block",
      "cloud.google.com/gce-topology-block", "topology.kubernetes.io/zone"};
  return keys;
}

absl::StatusOr<std::vector<std::string>> ParseLabelKeys(
    absl::string_view flag, absl::string_view text) {
  std::vector<std::string> keys;
  for (absl::string_view key : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    key = absl::StripAsciiWhitespace(key);
    absl::string_view name = key;
    bool prefix_ok = true;
    if (const size_t slash = key.rfind('/'); slash != absl::string_view::npos) {
      const absl::string_view prefix = key.substr(0, slash);
      name = key.substr(slash + 1);
      // A DNS subdomain, as node names are.
      prefix_ok = prefix.size() <= kMaxLabelPrefixBytes &&
                  registry::ValidateNodeName(prefix).ok();
    }
    if (!prefix_ok || !ValidateLevelName(name).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag,
          ": expected label keys [prefix/]name (prefix a DNS subdomain, "
          "name 1..63 of [A-Za-z0-9._-]), got ",
          EchoInput(key)));
    }
    keys.emplace_back(key);
  }
  return keys;
}

LabelPlace PlaceFromLabels(const std::map<std::string, std::string>& labels,
                           const LabelKeys& keys) {
  LabelPlace place;
  const auto first = [&labels](const std::vector<std::string>& candidates,
                               std::string& value, std::string& key) {
    for (const std::string& k : candidates) {
      auto it = labels.find(k);
      if (it == labels.end() || !ValidateLevelName(it->second).ok()) continue;
      value = it->second;
      key = k;
      return;
    }
  };
  first(keys.rack, place.rack, place.rack_key);
  first(keys.block, place.block, place.block_key);
  return place;
}

absl::StatusOr<NodeLabels> ParseNodeList(absl::string_view text,
                                         const LabelKeys& keys,
                                         const FabricLimits& limits) {
  if (text.size() > limits.max_node_labels_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        text.size(), " bytes, at most ", limits.max_node_labels_bytes,
        " (--fabric_node_labels_max_bytes)"));
  }
  json root = json::parse(text.begin(), text.end(), KeepNeeded,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(
        "not JSON (expected the output of kubectl get nodes -o json)");
  }
  const auto kind = root.is_object() ? root.find("kind") : root.end();
  if (kind == root.end() || !kind->is_string() ||
      (*kind != "List" && *kind != "NodeList")) {
    return absl::InvalidArgumentError(
        "kind: expected \"List\" or \"NodeList\" (kubectl get nodes -o json)");
  }
  const auto items = root.find("items");
  if (items == root.end() || !items->is_array()) {
    return absl::InvalidArgumentError("items: expected a list of nodes");
  }
  if (items->size() > static_cast<size_t>(limits.max_nodes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("items: ", items->size(), " nodes, at most ",
                     limits.max_nodes, " (--fabric_max_nodes)"));
  }
  NodeLabels out;
  std::set<std::string> racks;
  for (size_t i = 0; i < items->size(); ++i) {
    const json& item = (*items)[i];
    const auto metadata = item.is_object() ? item.find("metadata") : item.end();
    if (metadata == item.end() || !metadata->is_object()) {
      return BadItem(i, ".metadata", "expected an object");
    }
    const auto name = metadata->find("name");
    if (name == metadata->end() || !name->is_string() ||
        !registry::ValidateNodeName(name->get<std::string>()).ok()) {
      return BadItem(i, ".metadata.name", "expected a node name");
    }
    absl::StatusOr<std::map<std::string, std::string>> labels =
        Labels(*metadata, i);
    if (!labels.ok()) return labels.status();
    LabelPlace place = PlaceFromLabels(*labels, keys);
    if (place.rack.empty()) continue;
    racks.insert(place.rack);
    if (!out.nodes.emplace(name->get<std::string>(), std::move(place)).second) {
      return BadItem(
          i, ".metadata.name",
          absl::StrCat("node ", name->get<std::string>(), " is listed twice"));
    }
  }
  out.racks = static_cast<int>(racks.size());
  return out;
}

}  // namespace monta::fabric
