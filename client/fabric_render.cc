#include "client/fabric_render.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/table.h"
#include "common/proto_names.h"

namespace monta::client {
namespace {

using monta::v1::FabricLink;
using monta::v1::FabricNode;
using monta::v1::FabricSource;

std::string SourceName(FabricSource source) {
  switch (source) {
    case monta::v1::FABRIC_SOURCE_MAP:
      return "fabric map";
    case monta::v1::FABRIC_SOURCE_NODE_LABELS:
      return "node labels";
    case monta::v1::FABRIC_SOURCE_NONE:
      return "none";
    default:
      return "";
  }
}

std::string From(FabricSource source, const std::string& detail) {
  const std::string name = SourceName(source);
  if (name.empty() || detail.empty()) return name;
  return absl::StrCat(name, ", ", detail);
}

std::string Declared(const FabricLink& link) {
  std::string out;
  if (link.declared_bytes_per_second() > 0) {
    out = BitRate(link.declared_bytes_per_second());
  }
  if (link.declared_oversubscription_ratio() > 0) {
    absl::StrAppend(
        &out, out.empty() ? "" : ", ",
        absl::StrFormat("%g:1", link.declared_oversubscription_ratio()));
  }
  return out.empty() ? "-" : out;
}

// The level's measurement (issue 19 item 2); "-" until there is one.
std::string Measured(const FabricLink& link) {
  if (!link.has_measured() || link.measured().bytes_per_second() <= 0) {
    return "-";
  }
  const auto& m = link.measured();
  return absl::StrCat(BitRate(m.bytes_per_second()), ", ", m.concurrent_nodes(),
                      " nodes at once");
}

// A rack's own level (a pair of its nodes) and, when its uplink is not
// measured, what stands instead.
std::string RackNote(const monta::v1::FabricRack& rack) {
  std::vector<std::string> parts;
  if (rack.has_inside() && rack.inside().bytes_per_second() > 0) {
    parts.push_back(absl::StrCat(
        "inside ", BitRate(rack.inside().bytes_per_second()), " (a pair)"));
  }
  if (!rack.uplink().has_measured() && !rack.uplink().note().empty()) {
    parts.push_back(rack.uplink().note());
  }
  return absl::StrJoin(parts, "; ");
}

std::string State(const FabricNode& node) {
  return node.state() == monta::v1::NODE_STATE_UNSPECIFIED
             ? "not registered"
             : NodeStateName(node.state());
}

// What the node's agent claims, when it is worth a look.
std::string HintNote(const monta::v1::FabricPosition& p) {
  if (p.hint_disagrees()) {
    return p.hint_rack().empty() || p.hint_rack() == p.rack()
               ? absl::StrCat("! its agent says block ", p.hint_block(),
                              " (not used)")
               : absl::StrCat("! its agent says rack ", p.hint_rack(),
                              " (not used)");
  }
  if (p.source() == monta::v1::FABRIC_SOURCE_NONE && !p.hint_rack().empty()) {
    return absl::StrCat("its agent says rack ", p.hint_rack(), " (not used)");
  }
  return "";
}

void AddNode(Table& table, const FabricNode& node, const std::string& indent) {
  table.AddRow({indent + node.name(), State(node), "", "",
                From(node.position().source(), node.position().source_detail()),
                HintNote(node.position())});
}

std::string Sources(const monta::v1::FabricReply& reply) {
  if (reply.sources().empty()) return "";
  std::string out = "\nSources:\n";
  for (const auto& s : reply.sources()) {
    absl::StrAppend(&out, "  ", SourceName(s.source()), " ", s.path(), ": ");
    if (s.has_loaded_at()) {
      absl::StrAppend(
          &out, s.nodes(), " nodes in ", s.racks(), " racks, read ",
          absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                           absl::FromUnixSeconds(s.loaded_at().seconds()),
                           absl::UTCTimeZone()));
    } else {
      absl::StrAppend(&out, "nothing read yet");
    }
    if (!s.error().empty()) absl::StrAppend(&out, "; now: ", s.error());
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace

std::string BitRate(double bytes_per_second) {
  const double bits = bytes_per_second * 8;
  if (bits >= 1e12) return absl::StrFormat("%g Tb/s", bits / 1e12);
  if (bits >= 1e9) return absl::StrFormat("%g Gb/s", bits / 1e9);
  if (bits >= 1e6) return absl::StrFormat("%g Mb/s", bits / 1e6);
  return absl::StrFormat("%g kb/s", bits / 1e3);
}

std::string FabricPositionText(const monta::v1::FabricPosition& p) {
  std::string out;
  if (p.source() == monta::v1::FABRIC_SOURCE_NONE ||
      p.source() == monta::v1::FABRIC_SOURCE_UNSPECIFIED) {
    out = p.note().empty() ? "outside the fabric" : p.note();
  } else {
    out = absl::StrCat("rack ", p.rack());
    if (!p.block().empty()) absl::StrAppend(&out, ", block ", p.block());
    absl::StrAppend(&out, " (", From(p.source(), p.source_detail()), ")");
    if (p.hint_disagrees()) absl::StrAppend(&out, "\n  ! ", p.note());
  }
  return out;
}

std::string FabricText(const monta::v1::FabricReply& reply) {
  Table table({"FABRIC", "STATE", "UPLINK DECLARED", "UPLINK MEASURED",
               "PLACED BY", "NOTE"});
  for (const auto& block : reply.blocks()) {
    std::string indent;
    if (!block.name().empty()) {
      table.AddRow(
          {"block " + block.name(), "", Declared(block.uplink()),
           Measured(block.uplink()),
           From(block.source(), block.source_detail()),
           block.uplink().has_measured() ? "" : block.uplink().note()});
      indent = "  ";
    } else if (reply.blocks_size() > 1) {  // beside named blocks
      table.AddRow({"(racks in no block)"});
      indent = "  ";
    }
    for (const auto& rack : block.racks()) {
      table.AddRow({indent + "rack " + rack.name(), "", Declared(rack.uplink()),
                    Measured(rack.uplink()),
                    From(rack.source(), rack.source_detail()), RackNote(rack)});
      for (const auto& node : rack.nodes()) AddNode(table, node, indent + "  ");
    }
  }
  if (!reply.unplaced().empty()) {
    table.AddRow({"(outside the fabric)", "", "", "", "",
                  "pair measurements, as before"});
    for (const auto& node : reply.unplaced()) AddNode(table, node, "  ");
  }
  std::string out = reply.blocks().empty() && reply.unplaced().empty()
                        ? std::string("(no racks and no registered nodes)\n")
                        : table.Render();
  absl::StrAppend(&out, Sources(reply));
  if (!reply.notes().empty()) {
    absl::StrAppend(&out, "\nNotes:\n");
    for (const auto& note : reply.notes()) {
      absl::StrAppend(&out, "  ", note, "\n");
    }
  }
  return out;
}

std::string LevelTasksText(const monta::v1::RunBenchmarkReply& reply,
                           bool dry_run) {
  Table table({"TASK", "LEVEL", "NODES AT ONCE", "RACKS", "NODES"});
  for (const auto& task : reply.fabric_tasks()) {
    std::vector<std::string> racks;
    for (const auto& side : task.fabric().racks()) {
      racks.push_back(absl::StrCat(side.rack(), " (", side.nodes(), ")"));
    }
    table.AddRow({dry_run ? "(dry run)" : task.task_id(),
                  ShortName(task.fabric().level()),
                  absl::StrCat(task.fabric().concurrent_nodes()),
                  absl::StrJoin(racks, ", "),
                  absl::StrJoin(task.nodes(), ",")});
  }
  std::string out =
      reply.fabric_tasks().empty() ? std::string() : table.Render();
  absl::StrAppend(&out, reply.fabric_tasks_size(),
                  dry_run ? " level task(s) a round would run now\n"
                          : " level task(s) scheduled\n");
  if (!reply.notes().empty()) {
    absl::StrAppend(&out, "\nNotes:\n");
    for (const auto& note : reply.notes()) {
      absl::StrAppend(&out, "  ", note, "\n");
    }
  }
  return out;
}

}  // namespace monta::client
