#include "server/fabric/fabric.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"

namespace monta::fabric {
namespace {

using google::protobuf::util::TimeUtil;
using monta::v1::FabricBlock;
using monta::v1::FabricNode;
using monta::v1::FabricPosition;
using monta::v1::FabricRack;
using monta::v1::FabricReply;
using monta::v1::FabricSource;

constexpr char kMapFlag[] = "--fabric_map_file";
constexpr char kLabelsFlag[] = "--fabric_node_labels_file";

std::string LineDetail(int line) { return absl::StrCat("line ", line); }

monta::v1::FabricLink LinkProto(const DeclaredLink& declared) {
  monta::v1::FabricLink link;
  link.set_declared_bytes_per_second(declared.bytes_per_second);
  link.set_declared_oversubscription_ratio(declared.oversubscription_ratio);
  if (declared.line > 0) link.set_declared_at(LineDetail(declared.line));
  return link;
}

std::map<std::string, std::string> LabelsOf(const monta::v1::NodeInfo& node) {
  return {node.topology().labels().begin(), node.topology().labels().end()};
}

const FabricMap::NodeEntry* FindNode(const FabricMap* map,
                                     absl::string_view node) {
  if (map == nullptr) return nullptr;
  auto it = map->nodes.find(node);
  return it != map->nodes.end() ? &it->second : nullptr;
}

// Where a node the map does not name sits by its node labels; the map's
// declaration of the rack, when it has one, decides the rack's block.
void PlaceByLabels(const FabricMap* map, const LabelPlace& place,
                   FabricPosition& p) {
  p.set_source(monta::v1::FABRIC_SOURCE_NODE_LABELS);
  p.set_rack(place.rack);
  p.set_source_detail(place.rack_key);
  const MapRack* declared =
      map != nullptr ? map->FindRack(place.rack) : nullptr;
  if (declared != nullptr) {
    p.set_block(declared->block);
  } else if (!place.block.empty()) {
    p.set_block(place.block);
    p.set_source_detail(absl::StrCat(place.rack_key, ", ", place.block_key));
  }
}

// Compares the agent's hint with where the source placed the node.
void JudgeHint(const LabelPlace& hint, FabricPosition& p) {
  const bool rack_differs = !hint.rack.empty() && hint.rack != p.rack();
  const bool block_differs =
      !hint.block.empty() && !p.block().empty() && hint.block != p.block();
  if (!rack_differs && !block_differs) return;
  p.set_hint_disagrees(true);
  const char* by = p.source() == monta::v1::FABRIC_SOURCE_MAP
                       ? "the fabric map places"
                       : "its node labels place";
  p.set_note(
      rack_differs
          ? absl::StrCat("its agent says rack ", hint.rack, " (", hint.rack_key,
                         "); ", by, " it in rack ", p.rack(),
                         ": an agent's labels are a hint and never move a node")
          : absl::StrCat("its agent says block ", hint.block, " (",
                         hint.block_key, "); ", by, " it in block ", p.block(),
                         ": an agent's labels are a hint and never move a "
                         "node"));
}

// The tree under construction: racks and blocks by name.
struct TreeBuilder {
  std::map<std::string, FabricRack> racks;
  std::map<std::string, FabricBlock> blocks;

  // The blocks and racks the map declares, with their uplinks.
  void Declare(const FabricMap& map) {
    for (const MapBlock& declared : map.blocks) {
      FabricBlock& block = Block(declared.name);
      *block.mutable_uplink() = LinkProto(declared.uplink);
      block.set_source(monta::v1::FABRIC_SOURCE_MAP);
      block.set_source_detail(LineDetail(declared.line));
    }
    for (const MapRack& declared : map.racks) {
      FabricRack& rack = racks[declared.name];
      rack.set_name(declared.name);
      rack.set_block(declared.block);
      *rack.mutable_uplink() = LinkProto(declared.uplink);
      rack.set_source(monta::v1::FABRIC_SOURCE_MAP);
      rack.set_source_detail(LineDetail(declared.line));
      Block(declared.block);
    }
  }

  FabricBlock& Block(const std::string& name) {
    FabricBlock& b = blocks[name];
    b.set_name(name);
    return b;
  }

  void Add(const std::string& name, monta::v1::NodeState state,
           FabricPosition position) {
    auto [it, added] = racks.try_emplace(position.rack());
    FabricRack& rack = it->second;
    if (added) {  // a rack only node labels name
      rack.set_name(position.rack());
      rack.set_block(position.block());
      rack.set_source(monta::v1::FABRIC_SOURCE_NODE_LABELS);
      rack.set_source_detail(position.source_detail());
      FabricBlock& block = Block(position.block());
      if (block.source() == monta::v1::FABRIC_SOURCE_UNSPECIFIED &&
          !position.block().empty()) {
        block.set_source(monta::v1::FABRIC_SOURCE_NODE_LABELS);
      }
    }
    FabricNode* node = rack.add_nodes();
    node->set_name(name);
    node->set_state(state);
    *node->mutable_position() = std::move(position);
  }

  // Blocks by name, the unnamed one (racks in no block) last.
  void Finish(FabricReply& reply) {
    for (auto& [name, rack] : racks) {
      std::sort(rack.mutable_nodes()->begin(), rack.mutable_nodes()->end(),
                [](const FabricNode& a, const FabricNode& b) {
                  return a.name() < b.name();
                });
      *Block(rack.block()).add_racks() = std::move(rack);
    }
    for (auto& [name, block] : blocks) {
      if (!name.empty()) *reply.add_blocks() = std::move(block);
    }
    if (auto it = blocks.find(""); it != blocks.end()) {
      *reply.add_blocks() = std::move(it->second);
    }
  }
};

}  // namespace

Fabric::Fabric(FabricOptions options) : options_(std::move(options)) {
  map_state_.source = monta::v1::FABRIC_SOURCE_MAP;
  map_state_.flag = kMapFlag;
  labels_state_.source = monta::v1::FABRIC_SOURCE_NODE_LABELS;
  labels_state_.flag = kLabelsFlag;
}

absl::StatusOr<std::unique_ptr<Fabric>> Fabric::Open(FabricOptions options,
                                                     absl::Time now) {
  std::unique_ptr<Fabric> fabric(new Fabric(std::move(options)));
  const FabricOptions& o = fabric->options_;
  if (!o.map_file.empty()) {
    fabric->map_file_ =
        std::make_unique<SourceFile>(o.map_file, o.limits.max_map_bytes);
    std::optional<Reload> read =
        fabric->Apply(*fabric->map_file_, monta::v1::FABRIC_SOURCE_MAP, now);
    if (read && !read->status.ok()) return read->status;
  }
  if (!o.node_labels_file.empty()) {
    fabric->labels_file_ = std::make_unique<SourceFile>(
        o.node_labels_file, o.limits.max_node_labels_bytes);
    std::optional<Reload> read = fabric->Apply(
        *fabric->labels_file_, monta::v1::FABRIC_SOURCE_NODE_LABELS, now);
    // Its sidecar may not have written it yet: read when it appears.
    if (read && !read->status.ok() &&
        read->status.code() != absl::StatusCode::kNotFound) {
      return read->status;
    }
  }
  return fabric;
}

Fabric::SourceState& Fabric::StateOf(FabricSource source) {
  return source == monta::v1::FABRIC_SOURCE_MAP ? map_state_ : labels_state_;
}

std::vector<Fabric::Reload> Fabric::Refresh(absl::Time now) {
  std::vector<Reload> out;
  if (map_file_ != nullptr) {
    if (auto r = Apply(*map_file_, monta::v1::FABRIC_SOURCE_MAP, now)) {
      out.push_back(*std::move(r));
    }
  }
  if (labels_file_ != nullptr) {
    if (auto r =
            Apply(*labels_file_, monta::v1::FABRIC_SOURCE_NODE_LABELS, now)) {
      out.push_back(*std::move(r));
    }
  }
  return out;
}

std::optional<Fabric::Reload> Fabric::Apply(SourceFile& file,
                                            FabricSource source,
                                            absl::Time now) {
  SourceFile::Read read = file.ReadIfChanged();
  if (read.kind == SourceFile::Read::Kind::kUnchanged) return std::nullopt;
  Reload out;
  out.source = source;
  out.flag = source == monta::v1::FABRIC_SOURCE_MAP ? kMapFlag : kLabelsFlag;
  if (read.kind == SourceFile::Read::Kind::kFailed) {
    out.status = absl::Status(
        read.error.code(), absl::StrCat(out.flag, " ", read.error.message()));
  } else {
    const size_t hash = std::hash<std::string>{}(read.content);
    bool same = false;
    {
      absl::MutexLock lock(&mu_);
      const SourceState& state = StateOf(source);
      same = state.loaded_at.has_value() && state.content_hash == hash;
    }
    if (!same) {
      const absl::Status installed = Install(source, read.content, hash, now);
      out.changed = installed.ok();
      if (!installed.ok()) {
        out.status = absl::Status(installed.code(),
                                  absl::StrCat(out.flag, " ", file.path(), ": ",
                                               installed.message()));
      }
    }
  }
  absl::MutexLock lock(&mu_);
  SourceState& state = StateOf(source);
  state.error = std::string(out.status.message());
  ++(out.status.ok() ? state.loads_ok : state.loads_error);
  out.nodes = state.nodes;
  return out;
}

absl::Status Fabric::Install(FabricSource source, const std::string& content,
                             size_t content_hash, absl::Time now) {
  std::shared_ptr<const FabricMap> map;
  std::shared_ptr<const NodeLabels> labels;
  int nodes = 0;
  int racks = 0;
  if (source == monta::v1::FABRIC_SOURCE_MAP) {
    absl::StatusOr<FabricMap> parsed = ParseFabricMap(content, options_.limits);
    if (!parsed.ok()) return parsed.status();
    nodes = static_cast<int>(parsed->nodes.size());
    racks = static_cast<int>(parsed->racks.size());
    map = std::make_shared<const FabricMap>(*std::move(parsed));
  } else {
    absl::StatusOr<NodeLabels> parsed =
        ParseNodeList(content, options_.label_keys, options_.limits);
    if (!parsed.ok()) return parsed.status();
    nodes = static_cast<int>(parsed->nodes.size());
    racks = parsed->racks;
    labels = std::make_shared<const NodeLabels>(*std::move(parsed));
  }
  absl::MutexLock lock(&mu_);
  if (map != nullptr) view_.map = std::move(map);
  if (labels != nullptr) view_.labels = std::move(labels);
  SourceState& state = StateOf(source);
  state.loaded_at = now;
  state.content_hash = content_hash;
  state.nodes = nodes;
  state.racks = racks;
  return absl::OkStatus();
}

Fabric::View Fabric::Current() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

FabricPosition Fabric::Position(
    absl::string_view node,
    const std::map<std::string, std::string>& agent_labels) const {
  return PositionIn(Current(), node, agent_labels);
}

FabricPosition Fabric::PositionOf(const monta::v1::NodeInfo& node) const {
  return Position(node.name(), LabelsOf(node));
}

FabricPosition Fabric::PositionIn(
    const View& view, absl::string_view node,
    const std::map<std::string, std::string>& agent_labels) const {
  FabricPosition p;
  const LabelPlace hint = PlaceFromLabels(agent_labels, options_.label_keys);
  p.set_hint_block(hint.block);
  p.set_hint_rack(hint.rack);
  const FabricMap* map = view.map.get();
  if (const FabricMap::NodeEntry* entry = FindNode(map, node)) {
    const MapRack& rack = map->racks[entry->rack];
    p.set_source(monta::v1::FABRIC_SOURCE_MAP);
    p.set_rack(rack.name);
    p.set_block(rack.block);
    p.set_source_detail(LineDetail(entry->line));
  } else if (view.labels != nullptr &&
             view.labels->nodes.find(node) != view.labels->nodes.end()) {
    PlaceByLabels(map, view.labels->nodes.find(node)->second, p);
  } else {
    p.set_source(monta::v1::FABRIC_SOURCE_NONE);
    p.set_note(has_sources()
                   ? "outside the fabric map and node labels: priced by pair "
                     "measurements"
                   : "no fabric map or node labels configured "
                     "(--fabric_map_file, --fabric_node_labels_file): priced "
                     "by pair measurements");
    if (!hint.rack.empty()) {
      p.set_note(absl::StrCat(p.note(), "; its agent says rack ", hint.rack,
                              " (", hint.rack_key,
                              "), a hint that places nothing"));
    }
    return p;
  }
  JudgeHint(hint, p);
  return p;
}

FabricReply Fabric::Tree(
    const std::vector<monta::v1::NodeInfo>& registered) const {
  const View view = Current();
  FabricReply reply;
  TreeBuilder tree;
  const FabricMap* map = view.map.get();
  std::map<absl::string_view, const monta::v1::NodeInfo*> by_name;
  for (const auto& node : registered) by_name[node.name()] = &node;
  if (map != nullptr) {
    tree.Declare(*map);
    for (const auto& [name, entry] : map->nodes) {
      auto it = by_name.find(name);
      const bool known = it != by_name.end();
      tree.Add(name,
               known ? it->second->state() : monta::v1::NODE_STATE_UNSPECIFIED,
               PositionIn(view, name,
                          known ? LabelsOf(*it->second)
                                : std::map<std::string, std::string>()));
    }
  }
  int unplaced = 0;
  for (const auto& node : registered) {
    if (FindNode(map, node.name()) != nullptr) continue;
    FabricPosition position = PositionIn(view, node.name(), LabelsOf(node));
    if (position.source() != monta::v1::FABRIC_SOURCE_NONE) {
      tree.Add(node.name(), node.state(), std::move(position));
      continue;
    }
    FabricNode* out = reply.add_unplaced();
    out->set_name(node.name());
    out->set_state(node.state());
    *out->mutable_position() = std::move(position);
    ++unplaced;
  }
  tree.Finish(reply);
  AttachMeasurements(registered, reply);
  AddSourcesAndNotes(unplaced, reply);
  return reply;
}

void Fabric::AddSourcesAndNotes(int unplaced, FabricReply& reply) const {
  for (auto& status : Sources()) {
    if (!status.error().empty()) {
      reply.add_notes(absl::StrCat(
          status.error(), status.has_loaded_at()
                              ? "; the content read before stays in use"
                              : "; nothing read from it yet"));
    }
    *reply.add_sources() = std::move(status);
  }
  if (!has_sources()) {
    reply.add_notes(
        "no fabric map or node labels configured (--fabric_map_file, "
        "--fabric_node_labels_file): every node keeps pair measurements");
  } else if (unplaced > 0) {
    reply.add_notes(absl::StrCat(unplaced,
                                 " registered node(s) outside the fabric keep "
                                 "pair measurements"));
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& note : round_notes_) {
    reply.add_notes(
        absl::StrCat("level round of ",
                     absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", *round_at_,
                                      absl::UTCTimeZone()),
                     ": ", note));
  }
}

monta::v1::FabricSpan Fabric::SpanOf(
    const std::vector<std::string>& nodes) const {
  monta::v1::FabricSpan span;
  span.set_concurrent_nodes(static_cast<int>(nodes.size()));
  if (nodes.size() == 1) {
    span.set_level(monta::v1::FABRIC_SPAN_LEVEL_NODE);
    return span;
  }
  if (!has_sources() || nodes.empty()) return span;
  const View view = Current();
  // (rack, block) -> nodes: the racks by name.
  std::map<std::pair<std::string, std::string>, int> racks;
  for (const std::string& node : nodes) {
    const FabricPosition p = PositionIn(view, node, {});
    if (p.source() == monta::v1::FABRIC_SOURCE_NONE) return span;
    ++racks[{p.rack(), p.block()}];
  }
  if (racks.size() > 2) return span;
  for (const auto& [where, count] : racks) {
    monta::v1::FabricSpanRack* side = span.add_racks();
    side->set_rack(where.first);
    side->set_block(where.second);
    side->set_nodes(count);
  }
  span.set_level(racks.size() == 1 ? monta::v1::FABRIC_SPAN_LEVEL_RACK
                 : span.racks(0).block() == span.racks(1).block()
                     ? monta::v1::FABRIC_SPAN_LEVEL_CROSS_RACK
                     : monta::v1::FABRIC_SPAN_LEVEL_CROSS_BLOCK);
  return span;
}

Fabric::Round Fabric::PlanRound(
    const std::vector<monta::v1::NodeInfo>& registered,
    const std::function<bool(const std::string&)>& idle, int sample_nodes,
    bool dry_run, absl::Time now) {
  const View view = Current();
  Round round;
  std::map<std::string, LevelRack> racks;
  for (const auto& node : registered) {
    if (node.state() != monta::v1::NODE_STATE_ALIVE) continue;
    const FabricPosition p = PositionIn(view, node.name(), {});
    const bool free = idle(node.name());
    if (p.source() == monta::v1::FABRIC_SOURCE_NONE) {
      if (free) round.outside.push_back(node.name());
      continue;
    }
    LevelRack& rack = racks[p.rack()];
    rack.name = p.rack();
    rack.block = p.block();
    ++rack.alive;
    if (free) rack.idle.push_back(node.name());
  }
  std::vector<LevelRack> list;
  for (auto& [name, rack] : racks) {
    std::sort(rack.idle.begin(), rack.idle.end());
    list.push_back(std::move(rack));
  }
  std::sort(round.outside.begin(), round.outside.end());
  LevelPlanOptions options;
  options.sample_nodes = sample_nodes;
  {
    absl::MutexLock lock(&mu_);
    options.round = rounds_;
  }
  round.plan = PlanLevels(std::move(list), options);
  if (!dry_run) {
    absl::MutexLock lock(&mu_);
    ++rounds_;
    round_at_ = now;
    round_notes_ = round.plan.notes;
  }
  return round;
}

std::vector<monta::v1::FabricSourceStatus> Fabric::Sources() const {
  std::vector<monta::v1::FabricSourceStatus> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [path, state] :
       {std::pair<const std::string&, const SourceState&>{options_.map_file,
                                                          map_state_},
        {options_.node_labels_file, labels_state_}}) {
    if (path.empty()) continue;
    monta::v1::FabricSourceStatus s;
    s.set_source(state.source);
    s.set_path(path);
    if (state.loaded_at) {
      *s.mutable_loaded_at() =
          TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(*state.loaded_at));
    }
    s.set_error(state.error);
    s.set_nodes(state.nodes);
    s.set_racks(state.racks);
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<std::string> Fabric::EvidenceNote(
    const std::vector<std::string>& nodes) const {
  if (!has_sources() || nodes.empty()) return std::nullopt;
  const View view = Current();
  // Racks in the order the job's nodes first name them; outside last.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  std::vector<std::string> outside;
  for (const std::string& node : nodes) {
    const FabricPosition p = PositionIn(view, node, {});
    if (p.source() == monta::v1::FABRIC_SOURCE_NONE) {
      outside.push_back(node);
      continue;
    }
    const std::string where =
        absl::StrCat("rack ", p.rack(), " (",
                     p.source() == monta::v1::FABRIC_SOURCE_MAP ? "fabric map"
                                                                : "node labels",
                     ")");
    auto it =
        std::find_if(groups.begin(), groups.end(),
                     [&where](const auto& g) { return g.first == where; });
    if (it == groups.end()) {
      groups.push_back({where, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(node);
  }
  std::vector<std::string> parts;
  for (const auto& [where, members] : groups) {
    parts.push_back(absl::StrCat(where, ": ", absl::StrJoin(members, ", ")));
  }
  if (!outside.empty()) {
    parts.push_back(
        absl::StrCat("outside the fabric: ", absl::StrJoin(outside, ", ")));
  }
  return absl::StrCat(
      "fabric: ", absl::StrJoin(parts, "; "),
      outside.empty()
          ? ". The uplinks are priced (docs/MODEL.md §12)"
          : ". With nodes outside the fabric the uplinks are not priced: "
            "the plan rests on node and pair measurements, as without a "
            "fabric");
}

std::vector<Fabric::LoadCount> Fabric::LoadCounts() const {
  std::vector<LoadCount> out;
  absl::MutexLock lock(&mu_);
  if (!options_.map_file.empty()) {
    out.push_back(
        {map_state_.source, map_state_.loads_ok, map_state_.loads_error});
  }
  if (!options_.node_labels_file.empty()) {
    out.push_back({labels_state_.source, labels_state_.loads_ok,
                   labels_state_.loads_error});
  }
  return out;
}

}  // namespace monta::fabric
