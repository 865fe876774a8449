#include "agent/topology/topology_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/topology/gpu_source.h"

namespace monta::topology {
namespace {

using monta::v1::Gpu;
using monta::v1::GpuLink;
using monta::v1::Nic;
using monta::v1::NodeTopology;

// Reads one YAML document into a NodeTopology, remembering the first error. All
// yaml-cpp exceptions stay inside this class; callers see a Status.
class Reader {
 public:
  explicit Reader(absl::string_view source) : source_(source) {}

  // Records the first error only: later ones are usually consequences of it.
  void Fail(const std::string& field, const std::string& expectation) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat(source_, ": ", field, ": ", expectation));
    }
  }
  const absl::Status& status() const { return status_; }

  // Fails when `node` is not a map or has keys outside `allowed`.
  bool CheckMap(const YAML::Node& node, const std::string& field,
                const std::set<std::string>& allowed) {
    if (!node.IsMap()) {
      Fail(field.empty() ? "document" : field, "expected a mapping");
      return false;
    }
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      if (allowed.count(key) == 0) {
        Fail(Join(field, key), absl::StrCat("unknown key; expected one of: ",
                                            absl::StrJoin(allowed, ", ")));
        return false;
      }
    }
    return true;
  }

  static std::string Join(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : absl::StrCat(parent, ".", key);
  }

  bool String(const YAML::Node& map, const std::string& field, const char* key,
              std::string* out) {
    const YAML::Node value = map[key];
    if (!value) return false;
    if (!value.IsScalar()) {
      Fail(Join(field, key), "expected a string");
      return false;
    }
    *out = value.Scalar();
    return true;
  }

  template <typename Int>
  bool Integer(const YAML::Node& map, const std::string& field, const char* key,
               Int min_value, Int* out) {
    const YAML::Node value = map[key];
    if (!value) return false;
    Int parsed = 0;
    if (!value.IsScalar() || !absl::SimpleAtoi(value.Scalar(), &parsed)) {
      Fail(Join(field, key), "expected an integer");
      return false;
    }
    if (parsed < min_value) {
      Fail(Join(field, key),
           absl::StrCat("must be >= ", min_value, ", got ", value.Scalar()));
      return false;
    }
    *out = parsed;
    return true;
  }

  bool Double(const YAML::Node& map, const std::string& field, const char* key,
              double* out) {
    const YAML::Node value = map[key];
    if (!value) return false;
    double parsed = 0;
    if (!value.IsScalar() || !absl::SimpleAtod(value.Scalar(), &parsed)) {
      Fail(Join(field, key), "expected a number");
      return false;
    }
    *out = parsed;
    return true;
  }

  bool Bool(const YAML::Node& map, const std::string& field, const char* key,
            bool* out) {
    const YAML::Node value = map[key];
    if (!value) return false;
    const std::string text = value.IsScalar() ? value.Scalar() : "";
    if (text == "true") {
      *out = true;
    } else if (text == "false") {
      *out = false;
    } else {
      Fail(Join(field, key), "expected true or false");
      return false;
    }
    return true;
  }

 private:
  std::string source_;
  absl::Status status_;
};

// Declared PCI ids must look like what sysfs, CUDA and NVML print, or they
// will never match a discovered device.
bool CheckPciAddress(Reader& r, const std::string& field,
                     const std::string& text) {
  const std::string id = NormalizePciBusId(text);
  bool ok = id.size() == 12 && id[4] == ':' && id[7] == ':' && id[10] == '.';
  for (size_t i = 0; ok && i < id.size(); ++i) {
    if (i != 4 && i != 7 && i != 10) {
      ok = absl::ascii_isxdigit(static_cast<unsigned char>(id[i]));
    }
  }
  if (!ok) {
    r.Fail(field, absl::StrCat("expected domain:bus:device.function like "
                               "\"0000:18:00.0\", got \"",
                               text, "\""));
  }
  return ok;
}

const std::set<std::string> kTopKeys = {"profile_name",  "labels", "gpus",
                                        "all_gpu_pairs", "links",  "nics"};
const std::set<std::string> kGpuKeys = {
    "index",    "name",      "uuid",        "pci_bus_id",      "memory_bytes",
    "sm_count", "numa_node", "nearest_nic", "nearest_nic_path"};
const std::set<std::string> kLinkKeys = {
    "gpus", "path", "nvlink_count", "nvlink_inactive_count", "peer_access"};
const std::set<std::string> kNicKeys = {"name",        "port",     "link_layer",
                                        "rate_gbps",   "state",    "phys_state",
                                        "pci_address", "numa_node"};

void ReadDocument(const YAML::Node& root, Reader& r, NodeTopology& topo) {
  if (!r.CheckMap(root, "", kTopKeys)) return;
  std::string text;
  if (r.String(root, "", "profile_name", &text)) topo.set_profile_name(text);

  if (const YAML::Node labels = root["labels"]) {
    if (!labels.IsMap()) {
      r.Fail("labels", "expected a mapping of label key to value");
      return;
    }
    for (const auto& entry : labels) {
      if (!entry.second.IsScalar() || entry.first.Scalar().empty()) {
        r.Fail(absl::StrCat("labels.", entry.first.Scalar()),
               "expected a non-empty key with a string value");
        return;
      }
      (*topo.mutable_labels())[entry.first.Scalar()] = entry.second.Scalar();
    }
  }

  std::map<int, int> gpu_position;  // index -> position in gpus[]
  std::map<int, std::string> gpu_nearest_nic;
  if (const YAML::Node gpus = root["gpus"]) {
    if (!gpus.IsSequence()) {
      r.Fail("gpus", "expected a list of GPUs");
      return;
    }
    for (size_t i = 0; i < gpus.size(); ++i) {
      const std::string field = absl::StrCat("gpus[", i, "]");
      const YAML::Node node = gpus[i];
      if (!r.CheckMap(node, field, kGpuKeys)) return;
      Gpu gpu;
      int index = 0;
      if (!r.Integer(node, field, "index", 0, &index)) {
        if (r.status().ok()) r.Fail(field + ".index", "required");
        return;
      }
      auto [it, inserted] = gpu_position.emplace(index, static_cast<int>(i));
      if (!inserted) {
        r.Fail(field + ".index",
               absl::StrCat("duplicate GPU index ", index, " (also gpus[",
                            it->second, "])"));
        return;
      }
      gpu.set_index(index);
      if (r.String(node, field, "name", &text)) gpu.set_name(text);
      if (r.String(node, field, "uuid", &text)) gpu.set_uuid(text);
      if (r.String(node, field, "pci_bus_id", &text)) {
        if (!CheckPciAddress(r, field + ".pci_bus_id", text)) return;
        gpu.set_pci_bus_id(NormalizePciBusId(text));
      }
      uint64_t memory_bytes = 0;
      if (r.Integer<uint64_t>(node, field, "memory_bytes", 0, &memory_bytes)) {
        gpu.set_memory_bytes(memory_bytes);
      }
      int value = 0;
      if (r.Integer(node, field, "sm_count", 0, &value))
        gpu.set_sm_count(value);
      gpu.set_numa_node(-1);
      if (r.Integer(node, field, "numa_node", -1, &value)) {
        gpu.set_numa_node(value);
      }
      if (r.String(node, field, "nearest_nic", &text)) {
        gpu.set_nearest_nic(text);
        gpu_nearest_nic[index] = text;
      }
      if (r.String(node, field, "nearest_nic_path", &text)) {
        absl::StatusOr<PathToken> token = ParsePathToken(text);
        if (!token.ok() || token->path == monta::v1::PATH_TYPE_NVLINK ||
            token->path == monta::v1::PATH_TYPE_SELF) {
          r.Fail(field + ".nearest_nic_path",
                 absl::StrCat("expected PIX, PXB, PHB, NODE or SYS, got \"",
                              text, "\""));
          return;
        }
        gpu.set_nearest_nic_path(token->path);
      }
      if (!r.status().ok()) return;
      gpu.set_provenance(monta::v1::PROVENANCE_DECLARED);
      *topo.add_gpus() = std::move(gpu);
    }
  }

  std::map<std::pair<int, int>, GpuLink> links;
  if (const YAML::Node list = root["links"]) {
    if (!list.IsSequence()) {
      r.Fail("links", "expected a list of GPU pairs");
      return;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = absl::StrCat("links[", i, "]");
      const YAML::Node node = list[i];
      if (!r.CheckMap(node, field, kLinkKeys)) return;
      const YAML::Node pair = node["gpus"];
      int ends[2] = {0, 0};
      if (!pair || !pair.IsSequence() || pair.size() != 2 ||
          !absl::SimpleAtoi(pair[0].IsScalar() ? pair[0].Scalar() : "x",
                            &ends[0]) ||
          !absl::SimpleAtoi(pair[1].IsScalar() ? pair[1].Scalar() : "x",
                            &ends[1])) {
        r.Fail(field + ".gpus", "expected two GPU indices, e.g. [0, 1]");
        return;
      }
      for (int end : ends) {
        if (gpu_position.count(end) == 0) {
          r.Fail(field + ".gpus",
                 absl::StrCat("GPU ", end, " is not declared under gpus"));
          return;
        }
      }
      if (ends[0] == ends[1]) {
        r.Fail(field + ".gpus", "a link needs two different GPUs");
        return;
      }
      const std::pair<int, int> key(std::min(ends[0], ends[1]),
                                    std::max(ends[0], ends[1]));
      if (links.count(key) != 0) {
        r.Fail(field + ".gpus", absl::StrCat("pair ", key.first, "-",
                                             key.second, " listed twice"));
        return;
      }
      GpuLink link;
      link.set_gpu_a(key.first);
      link.set_gpu_b(key.second);
      if (!r.String(node, field, "path", &text)) {
        if (r.status().ok())
          r.Fail(field + ".path", "required (e.g. NV18, PIX)");
        return;
      }
      absl::StatusOr<PathToken> token = ParsePathToken(text);
      if (!token.ok() || token->path == monta::v1::PATH_TYPE_SELF) {
        r.Fail(
            field + ".path",
            absl::StrCat("expected NV<n>, PIX, PXB, PHB, NODE or SYS, got \"",
                         text, "\""));
        return;
      }
      link.set_path(token->path);
      link.set_nvlink_count(token->nvlink_count);
      int count = 0;
      if (r.Integer(node, field, "nvlink_count", 0, &count) &&
          count != token->nvlink_count) {
        r.Fail(field + ".nvlink_count",
               absl::StrCat(count, " disagrees with path ", text));
        return;
      }
      if (r.Integer(node, field, "nvlink_inactive_count", 0, &count)) {
        link.set_nvlink_inactive_count(count);
      }
      bool peer = false;
      if (r.Bool(node, field, "peer_access", &peer)) link.set_peer_access(peer);
      if (!r.status().ok()) return;
      link.set_provenance(monta::v1::PROVENANCE_DECLARED);
      links[key] = std::move(link);
    }
  }
  if (r.String(root, "", "all_gpu_pairs", &text)) {
    absl::StatusOr<PathToken> token = ParsePathToken(text);
    if (!token.ok() || token->path == monta::v1::PATH_TYPE_SELF) {
      r.Fail("all_gpu_pairs",
             absl::StrCat("expected NV<n>, PIX, PXB, PHB, NODE or SYS, got \"",
                          text, "\""));
      return;
    }
    for (auto a = gpu_position.begin(); a != gpu_position.end(); ++a) {
      for (auto b = std::next(a); b != gpu_position.end(); ++b) {
        const std::pair<int, int> key(a->first, b->first);
        if (links.count(key) != 0) continue;
        GpuLink link;
        link.set_gpu_a(key.first);
        link.set_gpu_b(key.second);
        link.set_path(token->path);
        link.set_nvlink_count(token->nvlink_count);
        link.set_peer_access(token->path == monta::v1::PATH_TYPE_NVLINK);
        link.set_provenance(monta::v1::PROVENANCE_DECLARED);
        links[key] = std::move(link);
      }
    }
  }
  if (!r.status().ok()) return;
  for (auto& entry : links) *topo.add_gpu_links() = std::move(entry.second);

  std::map<std::pair<std::string, int>, int> nic_position;
  if (const YAML::Node nics = root["nics"]) {
    if (!nics.IsSequence()) {
      r.Fail("nics", "expected a list of NIC ports");
      return;
    }
    for (size_t i = 0; i < nics.size(); ++i) {
      const std::string field = absl::StrCat("nics[", i, "]");
      const YAML::Node node = nics[i];
      if (!r.CheckMap(node, field, kNicKeys)) return;
      Nic nic;
      if (!r.String(node, field, "name", &text) || text.empty()) {
        if (r.status().ok()) r.Fail(field + ".name", "required (e.g. mlx5_0)");
        return;
      }
      nic.set_name(text);
      int port = 1;  // single-port HCAs are the common case
      r.Integer(node, field, "port", 1, &port);
      nic.set_port(port);
      auto [it, inserted] =
          nic_position.emplace(std::make_pair(nic.name(), port), i);
      if (!inserted) {
        r.Fail(field, absl::StrCat("duplicate NIC ", nic.name(), " port ", port,
                                   " (also nics[", it->second, "])"));
        return;
      }
      double rate_gbps = 0;
      if (r.Double(node, field, "rate_gbps", &rate_gbps) && rate_gbps < 0) {
        r.Fail(field + ".rate_gbps",
               absl::StrCat("must be >= 0 Gb/s, got ", rate_gbps));
        return;
      }
      nic.set_rate_gbps(rate_gbps);
      if (r.String(node, field, "link_layer", &text)) {
        if (text != "InfiniBand" && text != "Ethernet") {
          r.Fail(field + ".link_layer",
                 absl::StrCat("expected InfiniBand or Ethernet, got \"", text,
                              "\""));
          return;
        }
        nic.set_link_layer(text);
      }
      if (r.String(node, field, "state", &text)) nic.set_state(text);
      if (r.String(node, field, "phys_state", &text)) nic.set_phys_state(text);
      if (r.String(node, field, "pci_address", &text)) {
        if (!CheckPciAddress(r, field + ".pci_address", text)) return;
        nic.set_pci_address(NormalizePciBusId(text));
      }
      int numa = -1;
      r.Integer(node, field, "numa_node", -1, &numa);
      nic.set_numa_node(numa);
      if (!r.status().ok()) return;
      nic.set_provenance(monta::v1::PROVENANCE_DECLARED);
      *topo.add_nics() = std::move(nic);
    }
  }
  for (const auto& [index, nic_name] : gpu_nearest_nic) {
    bool found = false;
    for (const auto& entry : nic_position)
      found |= entry.first.first == nic_name;
    if (!found) {
      r.Fail(absl::StrCat("gpus[", gpu_position[index], "].nearest_nic"),
             absl::StrCat("NIC \"", nic_name, "\" is not declared under nics"));
      return;
    }
  }
}

}  // namespace

absl::StatusOr<PathToken> ParsePathToken(absl::string_view token) {
  static const std::map<std::string, monta::v1::PathType, std::less<>> kNames =
      {{"X", monta::v1::PATH_TYPE_SELF},    {"PIX", monta::v1::PATH_TYPE_PIX},
       {"PXB", monta::v1::PATH_TYPE_PXB},   {"PHB", monta::v1::PATH_TYPE_PHB},
       {"NODE", monta::v1::PATH_TYPE_NODE}, {"SYS", monta::v1::PATH_TYPE_SYS}};
  PathToken result;
  auto it = kNames.find(token);
  if (it != kNames.end()) {
    result.path = it->second;
    return result;
  }
  int count = 0;
  if (absl::StartsWith(token, "NV") &&
      absl::SimpleAtoi(token.substr(2), &count) && count > 0) {
    result.path = monta::v1::PATH_TYPE_NVLINK;
    result.nvlink_count = count;
    return result;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", token,
      "\" is not a topo -m path (X, NV<n>, PIX, PXB, PHB, NODE, SYS)"));
}

absl::StatusOr<NodeTopology> ParseTopologyYaml(absl::string_view yaml_text,
                                               absl::string_view source_name) {
  NodeTopology topo;
  Reader reader(source_name);
  try {
    YAML::Node root = YAML::Load(std::string(yaml_text));
    if (root.IsNull()) return topo;  // an empty file declares nothing
    ReadDocument(root, reader, topo);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ": line ", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  if (!reader.status().ok()) return reader.status();
  return topo;
}

absl::StatusOr<NodeTopology> LoadTopologyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("topology file ", path, ": cannot read"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseTopologyYaml(buffer.str(), path);
}

}  // namespace monta::topology
