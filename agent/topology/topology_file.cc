#include "agent/topology/topology_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
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
#include "common/nic_state.h"

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
    return Scalar(
        map, field, key, "expected a string",
        [](const std::string& text, std::string* value) {
          *value = text;
          return true;
        },
        out);
  }

  template <typename Int>
  bool Integer(const YAML::Node& map, const std::string& field, const char* key,
               Int min_value, Int* out) {
    Int parsed = 0;
    if (!Scalar(
            map, field, key, "expected an integer",
            [](const std::string& text, Int* value) {
              return absl::SimpleAtoi(text, value);
            },
            &parsed)) {
      return false;
    }
    if (parsed < min_value) {
      Fail(Join(field, key),
           absl::StrCat("must be >= ", min_value, ", got ", map[key].Scalar()));
      return false;
    }
    *out = parsed;
    return true;
  }

  bool Double(const YAML::Node& map, const std::string& field, const char* key,
              double* out) {
    return Scalar(
        map, field, key, "expected a number",
        [](const std::string& text, double* value) {
          return absl::SimpleAtod(text, value);
        },
        out);
  }

  bool Bool(const YAML::Node& map, const std::string& field, const char* key,
            bool* out) {
    return Scalar(
        map, field, key, "expected true or false",
        [](const std::string& text, bool* value) {
          if (text != "true" && text != "false") return false;
          *value = text == "true";
          return true;
        },
        out);
  }

  // Calls read_entry(entry, "key[i]", i) on each entry of the list under
  // `key`, stopping at the first that returns false. An absent key is an empty
  // list; anything but a list fails with `expectation`.
  template <typename ReadEntry>
  bool List(const YAML::Node& root, const char* key, const char* expectation,
            ReadEntry read_entry) {
    const YAML::Node list = root[key];
    if (!list) return true;
    if (!list.IsSequence()) {
      Fail(key, expectation);
      return false;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (!read_entry(list[i], absl::StrCat(key, "[", i, "]"),
                      static_cast<int>(i))) {
        return false;
      }
    }
    return true;
  }

  // List() of messages: each entry read_entry(node, field, position, entry)
  // reads is appended to `out`.
  template <typename Message, typename ReadEntry>
  bool ListOf(const YAML::Node& root, const char* key, const char* expectation,
              google::protobuf::RepeatedPtrField<Message>* out,
              ReadEntry read_entry) {
    return List(
        root, key, expectation,
        [&](const YAML::Node& node, const std::string& field, int position) {
          Message entry;
          if (!read_entry(node, field, position, entry)) return false;
          *out->Add() = std::move(entry);
          return true;
        });
  }

 private:
  // map[key] as a T: false when absent; when not a scalar or parse(text, &v)
  // refuses it, Fail(expectation) and false. `out` changes only on success.
  template <typename T, typename Parse>
  bool Scalar(const YAML::Node& map, const std::string& field, const char* key,
              const char* expectation, Parse parse, T* out) {
    const YAML::Node value = map[key];
    if (!value) return false;
    T parsed{};
    if (!value.IsScalar() || !parse(value.Scalar(), &parsed)) {
      Fail(Join(field, key), expectation);
      return false;
    }
    *out = std::move(parsed);
    return true;
  }

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

// What the gpus section declared, for the sections that refer to GPUs.
struct DeclaredGpus {
  std::map<int, int> position;             // index -> position in gpus[]
  std::map<int, std::string> nearest_nic;  // index -> its nearest_nic
};
// GPU pairs by (lower index, higher index).
using LinkMap = std::map<std::pair<int, int>, GpuLink>;
// NICs by (name, port) -> position in nics[].
using NicPositions = std::map<std::pair<std::string, int>, int>;

// At most 64 characters of `text` for an error message.
std::string Shown(const std::string& text) {
  return text.size() <= 64 ? text : absl::StrCat(text.substr(0, 64), "...");
}

// One of link_layer, state, phys_state when present: the text as written into
// `text` and what it means into `kind` (common/nic_state.h; spelling is loose,
// "LinkUp" or "link_up"). Declared facts form a closed set: text that names no
// value is an error listing the spellings, never a silent UNKNOWN. False once
// an error is recorded.
template <typename Enum>
bool ReadNicState(const YAML::Node& node, const std::string& field,
                  const char* key, Enum (*from_text)(absl::string_view),
                  Enum unknown, const char* expected, Reader& r,
                  std::string* text, Enum* kind) {
  std::string value;
  if (!r.String(node, field, key, &value)) return r.status().ok();
  const Enum read = from_text(value);
  if (static_cast<int>(read) == 0 || read == unknown) {
    r.Fail(Reader::Join(field, key),
           absl::StrCat("expected ", expected, ", got \"", Shown(value), "\""));
    return false;
  }
  *text = std::move(value);
  *kind = read;
  return true;
}

// link_layer, state and phys_state of a declared NIC port.
bool ReadNicStates(const YAML::Node& node, const std::string& field, Reader& r,
                   Nic& nic) {
  std::string link_layer;
  std::string state;
  std::string phys_state;
  monta::v1::NicLinkLayer link_layer_kind =
      monta::v1::NIC_LINK_LAYER_UNSPECIFIED;
  monta::v1::NicPortState state_kind = monta::v1::NIC_PORT_STATE_UNSPECIFIED;
  monta::v1::NicPhysState phys_state_kind =
      monta::v1::NIC_PHYS_STATE_UNSPECIFIED;
  if (!ReadNicState(node, field, "link_layer", &nic_state::LinkLayerFromText,
                    monta::v1::NIC_LINK_LAYER_UNKNOWN, "InfiniBand or Ethernet",
                    r, &link_layer, &link_layer_kind) ||
      !ReadNicState(node, field, "state", &nic_state::PortStateFromText,
                    monta::v1::NIC_PORT_STATE_UNKNOWN,
                    "an InfiniBand port state (DOWN, INIT, ARMED, ACTIVE, "
                    "ACTIVE_DEFER) or an Ethernet operstate (up, down)",
                    r, &state, &state_kind) ||
      !ReadNicState(node, field, "phys_state", &nic_state::PhysStateFromText,
                    monta::v1::NIC_PHYS_STATE_UNKNOWN,
                    "an InfiniBand physical state (Sleep, Polling, Disabled, "
                    "PortConfigurationTraining, LinkUp, LinkErrorRecovery, "
                    "Phy Test) or an Ethernet operstate (up, down)",
                    r, &phys_state, &phys_state_kind)) {
    return false;
  }
  nic.set_link_layer(link_layer);
  nic.set_link_layer_kind(link_layer_kind);
  nic.set_state(state);
  nic.set_state_kind(state_kind);
  nic.set_phys_state(phys_state);
  nic.set_phys_state_kind(phys_state_kind);
  return true;
}

// Every Read* step below returns false once it recorded an error in `r`;
// ReadDocument stops at the first such step, so the error a user sees is the
// first problem in the file.

bool ReadLabels(const YAML::Node& root, Reader& r, NodeTopology& topo) {
  const YAML::Node labels = root["labels"];
  if (!labels) return true;
  if (!labels.IsMap()) {
    r.Fail("labels", "expected a mapping of label key to value");
    return false;
  }
  for (const auto& entry : labels) {
    if (!entry.second.IsScalar() || entry.first.Scalar().empty()) {
      r.Fail(absl::StrCat("labels.", entry.first.Scalar()),
             "expected a non-empty key with a string value");
      return false;
    }
    (*topo.mutable_labels())[entry.first.Scalar()] = entry.second.Scalar();
  }
  return true;
}

// A topo -m path token where a GPU-to-GPU path is expected (anything but X).
std::optional<PathToken> ParsePairPath(Reader& r, const std::string& field,
                                       const std::string& text) {
  absl::StatusOr<PathToken> token = ParsePathToken(text);
  if (!token.ok() || token->path == monta::v1::PATH_TYPE_SELF) {
    r.Fail(field,
           absl::StrCat("expected NV<n>, PIX, PXB, PHB, NODE or SYS, got \"",
                        text, "\""));
    return std::nullopt;
  }
  return *token;
}

// gpus[i].nearest_nic_path: a PCI path class (a NIC is never over NVLink).
bool ReadNearestNicPath(const YAML::Node& node, const std::string& field,
                        Reader& r, Gpu& gpu) {
  std::string text;
  if (!r.String(node, field, "nearest_nic_path", &text)) return true;
  absl::StatusOr<PathToken> token = ParsePathToken(text);
  if (!token.ok() || token->path == monta::v1::PATH_TYPE_NVLINK ||
      token->path == monta::v1::PATH_TYPE_SELF) {
    r.Fail(field + ".nearest_nic_path",
           absl::StrCat("expected PIX, PXB, PHB, NODE or SYS, got \"", text,
                        "\""));
    return false;
  }
  gpu.set_nearest_nic_path(token->path);
  return true;
}

// One entry of gpus[] (at `position`); its index must be new.
bool ReadGpu(const YAML::Node& node, const std::string& field, int position,
             Reader& r, DeclaredGpus& declared, Gpu& gpu) {
  if (!r.CheckMap(node, field, kGpuKeys)) return false;
  int index = 0;
  if (!r.Integer(node, field, "index", 0, &index)) {
    if (r.status().ok()) r.Fail(field + ".index", "required");
    return false;
  }
  auto [it, inserted] = declared.position.emplace(index, position);
  if (!inserted) {
    r.Fail(field + ".index", absl::StrCat("duplicate GPU index ", index,
                                          " (also gpus[", it->second, "])"));
    return false;
  }
  gpu.set_index(index);
  std::string text;
  if (r.String(node, field, "name", &text)) gpu.set_name(text);
  if (r.String(node, field, "uuid", &text)) gpu.set_uuid(text);
  if (r.String(node, field, "pci_bus_id", &text)) {
    if (!CheckPciAddress(r, field + ".pci_bus_id", text)) return false;
    gpu.set_pci_bus_id(NormalizePciBusId(text));
  }
  uint64_t memory_bytes = 0;
  if (r.Integer<uint64_t>(node, field, "memory_bytes", 0, &memory_bytes)) {
    gpu.set_memory_bytes(memory_bytes);
  }
  int value = 0;
  if (r.Integer(node, field, "sm_count", 0, &value)) gpu.set_sm_count(value);
  gpu.set_numa_node(-1);
  if (r.Integer(node, field, "numa_node", -1, &value)) gpu.set_numa_node(value);
  if (r.String(node, field, "nearest_nic", &text)) {
    gpu.set_nearest_nic(text);
    declared.nearest_nic[index] = text;
  }
  if (!ReadNearestNicPath(node, field, r, gpu)) return false;
  if (!r.status().ok()) return false;
  gpu.set_provenance(monta::v1::PROVENANCE_DECLARED);
  return true;
}

bool ReadGpus(const YAML::Node& root, Reader& r, NodeTopology& topo,
              DeclaredGpus& declared) {
  return r.ListOf(root, "gpus", "expected a list of GPUs", topo.mutable_gpus(),
                  [&](const YAML::Node& node, const std::string& field,
                      int position, Gpu& gpu) {
                    return ReadGpu(node, field, position, r, declared, gpu);
                  });
}

// links[i].gpus: two different declared GPUs, a pair not listed before.
bool ReadLinkPair(const YAML::Node& node, const std::string& field, Reader& r,
                  const DeclaredGpus& declared, const LinkMap& links,
                  std::pair<int, int>* key) {
  const YAML::Node pair = node["gpus"];
  int ends[2] = {0, 0};
  if (!pair || !pair.IsSequence() || pair.size() != 2 ||
      !absl::SimpleAtoi(pair[0].IsScalar() ? pair[0].Scalar() : "x",
                        &ends[0]) ||
      !absl::SimpleAtoi(pair[1].IsScalar() ? pair[1].Scalar() : "x",
                        &ends[1])) {
    r.Fail(field + ".gpus", "expected two GPU indices, e.g. [0, 1]");
    return false;
  }
  for (int end : ends) {
    if (declared.position.count(end) == 0) {
      r.Fail(field + ".gpus",
             absl::StrCat("GPU ", end, " is not declared under gpus"));
      return false;
    }
  }
  if (ends[0] == ends[1]) {
    r.Fail(field + ".gpus", "a link needs two different GPUs");
    return false;
  }
  *key = {std::min(ends[0], ends[1]), std::max(ends[0], ends[1])};
  if (links.count(*key) != 0) {
    r.Fail(field + ".gpus", absl::StrCat("pair ", key->first, "-", key->second,
                                         " listed twice"));
    return false;
  }
  return true;
}

// One entry of links[]; added to `links` when valid.
bool ReadLink(const YAML::Node& node, const std::string& field, Reader& r,
              const DeclaredGpus& declared, LinkMap& links) {
  if (!r.CheckMap(node, field, kLinkKeys)) return false;
  std::pair<int, int> key;
  if (!ReadLinkPair(node, field, r, declared, links, &key)) return false;
  GpuLink link;
  link.set_gpu_a(key.first);
  link.set_gpu_b(key.second);
  std::string text;
  if (!r.String(node, field, "path", &text)) {
    if (r.status().ok()) r.Fail(field + ".path", "required (e.g. NV18, PIX)");
    return false;
  }
  const std::optional<PathToken> token =
      ParsePairPath(r, field + ".path", text);
  if (!token.has_value()) return false;
  link.set_path(token->path);
  link.set_nvlink_count(token->nvlink_count);
  int count = 0;
  if (r.Integer(node, field, "nvlink_count", 0, &count) &&
      count != token->nvlink_count) {
    r.Fail(field + ".nvlink_count",
           absl::StrCat(count, " disagrees with path ", text));
    return false;
  }
  if (r.Integer(node, field, "nvlink_inactive_count", 0, &count)) {
    link.set_nvlink_inactive_count(count);
  }
  bool peer = false;
  if (r.Bool(node, field, "peer_access", &peer)) link.set_peer_access(peer);
  if (!r.status().ok()) return false;
  link.set_provenance(monta::v1::PROVENANCE_DECLARED);
  links[key] = std::move(link);
  return true;
}

bool ReadLinks(const YAML::Node& root, Reader& r, const DeclaredGpus& declared,
               LinkMap& links) {
  return r.List(
      root, "links", "expected a list of GPU pairs",
      [&](const YAML::Node& node, const std::string& field, int /*position*/) {
        return ReadLink(node, field, r, declared, links);
      });
}

// all_gpu_pairs: the path of every pair of declared GPUs that links[] does
// not list.
bool ReadAllGpuPairs(const YAML::Node& root, Reader& r,
                     const DeclaredGpus& declared, LinkMap& links) {
  std::string text;
  if (!r.String(root, "", "all_gpu_pairs", &text)) return r.status().ok();
  const std::optional<PathToken> token =
      ParsePairPath(r, "all_gpu_pairs", text);
  if (!token.has_value()) return false;
  const std::map<int, int>& gpus = declared.position;
  for (auto a = gpus.begin(); a != gpus.end(); ++a) {
    for (auto b = std::next(a); b != gpus.end(); ++b) {
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
  return true;
}

// One entry of nics[] (at `position`); its (name, port) must be new.
bool ReadNic(const YAML::Node& node, const std::string& field, int position,
             Reader& r, NicPositions& nics, Nic& nic) {
  if (!r.CheckMap(node, field, kNicKeys)) return false;
  std::string text;
  if (!r.String(node, field, "name", &text) || text.empty()) {
    if (r.status().ok()) r.Fail(field + ".name", "required (e.g. mlx5_0)");
    return false;
  }
  nic.set_name(text);
  int port = 1;  // single-port HCAs are the common case
  r.Integer(node, field, "port", 1, &port);
  nic.set_port(port);
  auto [it, inserted] =
      nics.emplace(std::make_pair(nic.name(), port), position);
  if (!inserted) {
    r.Fail(field, absl::StrCat("duplicate NIC ", nic.name(), " port ", port,
                               " (also nics[", it->second, "])"));
    return false;
  }
  double rate_gbps = 0;
  if (r.Double(node, field, "rate_gbps", &rate_gbps) && rate_gbps < 0) {
    r.Fail(field + ".rate_gbps",
           absl::StrCat("must be >= 0 Gb/s, got ", rate_gbps));
    return false;
  }
  nic.set_rate_bytes_per_second(rate_gbps * 1e9 / 8);
  if (!ReadNicStates(node, field, r, nic)) return false;
  if (r.String(node, field, "pci_address", &text)) {
    if (!CheckPciAddress(r, field + ".pci_address", text)) return false;
    nic.set_pci_address(NormalizePciBusId(text));
  }
  int numa = -1;
  r.Integer(node, field, "numa_node", -1, &numa);
  nic.set_numa_node(numa);
  if (!r.status().ok()) return false;
  nic.set_provenance(monta::v1::PROVENANCE_DECLARED);
  return true;
}

bool ReadNics(const YAML::Node& root, Reader& r, NodeTopology& topo,
              NicPositions& positions) {
  return r.ListOf(root, "nics", "expected a list of NIC ports",
                  topo.mutable_nics(),
                  [&](const YAML::Node& node, const std::string& field,
                      int position, Nic& nic) {
                    return ReadNic(node, field, position, r, positions, nic);
                  });
}

// Every gpus[].nearest_nic names a NIC of nics[] (any port).
bool CheckNearestNics(const DeclaredGpus& declared, const NicPositions& nics,
                      Reader& r) {
  for (const auto& [index, nic_name] : declared.nearest_nic) {
    bool found = false;
    for (const auto& entry : nics) found |= entry.first.first == nic_name;
    if (!found) {
      r.Fail(
          absl::StrCat("gpus[", declared.position.at(index), "].nearest_nic"),
          absl::StrCat("NIC \"", nic_name, "\" is not declared under nics"));
      return false;
    }
  }
  return true;
}

void ReadDocument(const YAML::Node& root, Reader& r, NodeTopology& topo) {
  if (!r.CheckMap(root, "", kTopKeys)) return;
  std::string text;
  if (r.String(root, "", "profile_name", &text)) topo.set_profile_name(text);
  if (!ReadLabels(root, r, topo)) return;
  DeclaredGpus gpus;
  if (!ReadGpus(root, r, topo, gpus)) return;
  LinkMap links;
  if (!ReadLinks(root, r, gpus, links)) return;
  if (!ReadAllGpuPairs(root, r, gpus, links)) return;
  if (!r.status().ok()) return;
  for (auto& entry : links) *topo.add_gpu_links() = std::move(entry.second);
  NicPositions nics;
  if (!ReadNics(root, r, topo, nics)) return;
  CheckNearestNics(gpus, nics, r);
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
