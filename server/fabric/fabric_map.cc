#include "server/fabric/fabric_map.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/echo.h"
#include "server/registry/registry.h"
#include "yaml-cpp/yaml.h"

namespace monta::fabric {
namespace {

constexpr double kMaxBitsPerSecond = 1e15;
constexpr double kMaxOversubscription = 1000;

int Line(const YAML::Node& node) { return node.Mark().line + 1; }

absl::Status Bad(const YAML::Node& at, absl::string_view field,
                 absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", Line(at), ": ", field, ": ", what));
}

absl::StatusOr<std::string> Scalar(const YAML::Node& node,
                                   absl::string_view field,
                                   absl::string_view expected) {
  if (!node.IsScalar()) {
    return Bad(node, field, absl::StrCat("expected ", expected));
  }
  return node.Scalar();
}

// Every key of a mapping is one of `allowed`, once.
absl::Status CheckKeys(const YAML::Node& node, absl::string_view field,
                       std::initializer_list<absl::string_view> allowed) {
  if (!node.IsMap()) {
    return Bad(node, field,
               absl::StrCat("expected a mapping with keys ",
                            absl::StrJoin(allowed, ", ")));
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Bad(kv.first, field,
                 absl::StrCat("unknown key ", EchoInput(key), " (expected ",
                              absl::StrJoin(allowed, ", "), ")"));
    }
    if (!seen.insert(key).second) {
      return Bad(kv.first, field, absl::StrCat("duplicate key ", key));
    }
  }
  return absl::OkStatus();
}

class Walker {
 public:
  explicit Walker(const FabricLimits& limits) : limits_(limits) {}

  absl::Status Root(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      return absl::InvalidArgumentError(
          "empty: expected version: 1 and racks (see deploy/README.md)");
    }
    if (absl::Status s = CheckKeys(root, "map", {"version", "blocks", "racks"});
        !s.ok()) {
      return s;
    }
    const YAML::Node version = root["version"];
    if (!version.IsDefined()) return Bad(root, "version", "required (1)");
    if (!version.IsScalar() || version.Scalar() != "1") {
      return Bad(version, "version", "expected 1");
    }
    if (const YAML::Node blocks = root["blocks"]; blocks.IsDefined()) {
      if (absl::Status s = Blocks(blocks); !s.ok()) return s;
    }
    const YAML::Node racks = root["racks"];
    if (!racks.IsDefined()) {
      return Bad(root, "racks", "required (a list, may be empty)");
    }
    return Racks(racks);
  }

  FabricMap Take() && { return std::move(out_); }

 private:
  absl::Status Blocks(const YAML::Node& seq) {
    if (!seq.IsSequence()) return Bad(seq, "blocks", "expected a list");
    if (seq.size() > static_cast<size_t>(limits_.max_blocks)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("line ", Line(seq), ": blocks: ", seq.size(),
                       " blocks, at most ", limits_.max_blocks));
    }
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string field = absl::StrCat("blocks[", i, "]");
      const YAML::Node node = seq[i];
      if (absl::Status s =
              CheckKeys(node, field,
                        {"name", "uplink_bits_per_second", "oversubscription"});
          !s.ok()) {
        return s;
      }
      MapBlock block;
      block.line = Line(node);
      absl::StatusOr<std::string> name = Name(node, field);
      if (!name.ok()) return name.status();
      block.name = *std::move(name);
      absl::StatusOr<DeclaredLink> link = Link(node, field);
      if (!link.ok()) return link.status();
      block.uplink = *link;
      out_.blocks.push_back(std::move(block));
    }
    return Unique(out_.blocks, "blocks");
  }

  absl::Status Racks(const YAML::Node& seq) {
    if (!seq.IsSequence() && !seq.IsNull()) {
      return Bad(seq, "racks", "expected a list");
    }
    if (seq.size() > static_cast<size_t>(limits_.max_racks)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("line ", Line(seq), ": racks: ", seq.size(),
                       " racks, at most ", limits_.max_racks));
    }
    for (size_t i = 0; i < seq.size(); ++i) {
      if (absl::Status s = Rack(seq[i], absl::StrCat("racks[", i, "]"));
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = Unique(out_.racks, "racks"); !s.ok()) return s;
    return IndexNodes();
  }

  absl::Status Rack(const YAML::Node& node, const std::string& field) {
    if (absl::Status s = CheckKeys(node, field,
                                   {"name", "block", "uplink_bits_per_second",
                                    "oversubscription", "nodes"});
        !s.ok()) {
      return s;
    }
    MapRack rack;
    rack.line = Line(node);
    absl::StatusOr<std::string> name = Name(node, field);
    if (!name.ok()) return name.status();
    rack.name = *std::move(name);
    if (const YAML::Node block = node["block"]; block.IsDefined()) {
      absl::StatusOr<std::string> text =
          Scalar(block, absl::StrCat(field, ".block"), "a block name");
      if (!text.ok()) return text.status();
      if (out_.FindBlock(*text) == nullptr) {
        return Bad(block, absl::StrCat(field, ".block"),
                   absl::StrCat(EchoInput(*text),
                                " is not a block of `blocks` (declare it "
                                "there, with its uplink if known)"));
      }
      rack.block = *std::move(text);
    }
    absl::StatusOr<DeclaredLink> link = Link(node, field);
    if (!link.ok()) return link.status();
    rack.uplink = *link;
    if (const YAML::Node nodes = node["nodes"]; nodes.IsDefined()) {
      if (absl::Status s = Nodes(nodes, absl::StrCat(field, ".nodes"), rack);
          !s.ok()) {
        return s;
      }
    }
    out_.racks.push_back(std::move(rack));
    return absl::OkStatus();
  }

  absl::Status Nodes(const YAML::Node& seq, const std::string& field,
                     MapRack& rack) {
    if (!seq.IsSequence()) return Bad(seq, field, "expected a list of nodes");
    for (size_t j = 0; j < seq.size(); ++j) {
      const std::string entry = absl::StrCat(field, "[", j, "]");
      if (++node_count_ > limits_.max_nodes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("line ", Line(seq[j]), ": ", entry, ": more than ",
                         limits_.max_nodes, " nodes (--fabric_max_nodes)"));
      }
      absl::StatusOr<std::string> node = Scalar(seq[j], entry, "a node name");
      if (!node.ok()) return node.status();
      if (absl::Status valid = registry::ValidateNodeName(*node); !valid.ok()) {
        return Bad(seq[j], entry,
                   absl::StrCat("expected a node name (1..253 of [a-z0-9.-], "
                                "alphanumeric at both ends), got ",
                                EchoInput(*node)));
      }
      rack.nodes.push_back(*std::move(node));
      node_lines_[rack.nodes.back()].push_back(Line(seq[j]));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Name(const YAML::Node& node,
                                   const std::string& field) {
    const YAML::Node name = node["name"];
    if (!name.IsDefined()) return Bad(node, field + ".name", "required");
    absl::StatusOr<std::string> text = Scalar(name, field + ".name", "a name");
    if (!text.ok()) return text.status();
    if (absl::Status valid = ValidateLevelName(*text); !valid.ok()) {
      return Bad(name, field + ".name", valid.message());
    }
    return text;
  }

  static absl::StatusOr<DeclaredLink> Link(const YAML::Node& node,
                                           const std::string& field) {
    DeclaredLink link;
    if (const YAML::Node rate = node["uplink_bits_per_second"];
        rate.IsDefined()) {
      const std::string sub = field + ".uplink_bits_per_second";
      absl::StatusOr<std::string> text =
          Scalar(rate, sub, "bits per second, e.g. 400e9 or 400gbit");
      if (!text.ok()) return text.status();
      absl::StatusOr<double> bits = ParseBitsPerSecond(*text);
      if (!bits.ok()) return Bad(rate, sub, bits.status().message());
      link.bytes_per_second = *bits / 8;
      link.line = Line(node);
    }
    if (const YAML::Node ratio = node["oversubscription"]; ratio.IsDefined()) {
      const std::string sub = field + ".oversubscription";
      absl::StatusOr<std::string> text = Scalar(ratio, sub, "a ratio");
      if (!text.ok()) return text.status();
      double value = 0;
      if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value) ||
          value < 1 || value > kMaxOversubscription) {
        return Bad(ratio, sub,
                   absl::StrCat("expected a ratio in 1..", kMaxOversubscription,
                                " (4 = 4:1, 1 = non-blocking), got ",
                                EchoInput(*text)));
      }
      link.oversubscription_ratio = value;
      link.line = Line(node);
    }
    return link;
  }

  // Sorts by name; a name declared twice is an error naming both lines.
  template <typename Level>
  static absl::Status Unique(std::vector<Level>& levels,
                             absl::string_view field) {
    std::stable_sort(
        levels.begin(), levels.end(),
        [](const Level& a, const Level& b) { return a.name < b.name; });
    for (size_t i = 1; i < levels.size(); ++i) {
      if (levels[i].name == levels[i - 1].name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", levels[i].line, ": ", field, ": ",
            EchoInput(levels[i].name), " is declared twice (also line ",
            levels[i - 1].line, ")"));
      }
    }
    return absl::OkStatus();
  }

  // Fills out_.nodes; a node in two entries is an error naming both lines.
  absl::Status IndexNodes() {
    for (const auto& [node, lines] : node_lines_) {
      if (lines.size() > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", lines[1], ": node ", node, " is listed twice (also line ",
            lines[0], "): a node sits in one rack"));
      }
    }
    for (size_t r = 0; r < out_.racks.size(); ++r) {
      for (const std::string& node : out_.racks[r].nodes) {
        out_.nodes[node] = {r, node_lines_[node].front()};
      }
    }
    return absl::OkStatus();
  }

  const FabricLimits& limits_;
  FabricMap out_;
  int node_count_ = 0;
  std::map<std::string, std::vector<int>> node_lines_;
};

bool IsAlnum(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c));
}

}  // namespace

const MapRack* FabricMap::FindRack(absl::string_view name) const {
  auto it = std::lower_bound(
      racks.begin(), racks.end(), name,
      [](const MapRack& r, absl::string_view n) { return r.name < n; });
  return it != racks.end() && it->name == name ? &*it : nullptr;
}

const MapBlock* FabricMap::FindBlock(absl::string_view name) const {
  // Racks look blocks up while the map is read, after the blocks are sorted.
  auto it = std::lower_bound(
      blocks.begin(), blocks.end(), name,
      [](const MapBlock& b, absl::string_view n) { return b.name < n; });
  return it != blocks.end() && it->name == name ? &*it : nullptr;
}

absl::Status ValidateLevelName(absl::string_view name) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return IsAlnum(c) || c == '-' || c == '_' || c == '.';
  });
  if (name.empty() || name.size() > kMaxLevelNameBytes || !chars_ok ||
      !IsAlnum(name.front()) || !IsAlnum(name.back())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a name of 1..", kMaxLevelNameBytes,
        " characters of [A-Za-z0-9._-], alphanumeric at both ends (a "
        "Kubernetes label value), got ",
        EchoInput(name)));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ParseBitsPerSecond(absl::string_view text) {
  absl::string_view number = absl::StripAsciiWhitespace(text);
  double unit = 1;
  const std::string lower = absl::AsciiStrToLower(number);
  for (const auto& [suffix, scale] :
       {std::pair<absl::string_view, double>{"kbit", 1e3},
        {"mbit", 1e6},
        {"gbit", 1e9},
        {"tbit", 1e12}}) {
    if (absl::EndsWith(lower, suffix)) {
      number.remove_suffix(suffix.size());
      unit = scale;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value) ||
      value <= 0 || value * unit > kMaxBitsPerSecond) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected bits per second in (0, 1e15], a number or one with a unit "
        "(kbit, mbit, gbit, tbit), got ",
        EchoInput(text)));
  }
  return value * unit;
}

absl::StatusOr<FabricMap> ParseFabricMap(absl::string_view text,
                                         const FabricLimits& limits) {
  if (text.size() > limits.max_map_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(text.size(), " bytes, at most ", limits.max_map_bytes));
  }
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    Walker walker(limits);
    if (absl::Status s = walker.Root(root); !s.ok()) return s;
    return std::move(walker).Take();
  } catch (const YAML::Exception& e) {
    // Parse errors (and yaml-cpp's nesting guard) carry where they are.
    return absl::InvalidArgumentError(
        absl::StrCat("line ", e.mark.line + 1,
                     ": invalid YAML or JSON: ", CutMessage(e.msg)));
  }
}

}  // namespace monta::fabric
