#include "server/planning/fabric_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace monta::planning {
namespace {

namespace v1 = ::monta::v1;

// The capacity of a link the tree describes: its measurement, else its
// declaration; 0 when neither (an oversubscription is resolved later).
// `declared_bytes_per_second`: the declaration alone, measured or not.
JobFabricView::Source SourceOf(const v1::FabricLink& link, int nodes_below,
                               double* bytes_per_second,
                               double* declared_bytes_per_second) {
  JobFabricView::Source s;
  s.nodes_below = nodes_below;
  s.declared_oversubscription_ratio = link.declared_oversubscription_ratio();
  *declared_bytes_per_second = link.declared_bytes_per_second();
  *bytes_per_second = 0;
  if (link.has_measured() && link.measured().bytes_per_second() > 0) {
    *bytes_per_second = link.measured().bytes_per_second();
    s.task_id = link.measured().task_id();
    return s;
  }
  s.declared = link.declared_bytes_per_second() > 0 ||
               link.declared_oversubscription_ratio() > 0;
  *bytes_per_second = link.declared_bytes_per_second();
  return s;
}

}  // namespace

std::optional<JobFabricView> JobFabricFromTree(
    const v1::FabricReply& tree, const std::vector<std::string>& nodes) {
  struct Where {
    const v1::FabricBlock* block;
    const v1::FabricRack* rack;
  };
  std::map<std::string, Where> where;
  for (const v1::FabricBlock& b : tree.blocks()) {
    for (const v1::FabricRack& r : b.racks()) {
      for (const v1::FabricNode& n : r.nodes()) where[n.name()] = {&b, &r};
    }
  }
  JobFabricView view;
  view.nodes = nodes;
  std::map<const v1::FabricRack*, int> rack_index;
  std::map<const v1::FabricBlock*, int> block_index;
  for (const std::string& name : nodes) {
    auto it = where.find(name);
    if (it == where.end()) {
      view.outside.push_back(name);
      view.fabric.node_rack.push_back(-1);
      continue;
    }
    const auto [block, rack] = it->second;
    view.rack_of[name] = rack->name();
    int b = -1;
    if (!block->name().empty()) {
      auto [bi, added] =
          block_index.emplace(block, static_cast<int>(block_index.size()));
      if (added) {
        int below = 0;
        for (const v1::FabricRack& r : block->racks()) below += r.nodes_size();
        model::JobFabric::Block mb{block->name(), 0};
        view.block_sources.push_back(
            SourceOf(block->uplink(), below, &mb.uplink_bytes_per_second,
                     &mb.uplink_declared_bytes_per_second));
        view.fabric.blocks.push_back(std::move(mb));
      }
      b = bi->second;
    }
    auto [ri, added] =
        rack_index.emplace(rack, static_cast<int>(rack_index.size()));
    if (added) {
      model::JobFabric::Rack mr{rack->name(), b, 0};
      view.rack_sources.push_back(SourceOf(
          rack->uplink(), rack->nodes_size(), &mr.uplink_bytes_per_second,
          &mr.uplink_declared_bytes_per_second));
      view.fabric.racks.push_back(std::move(mr));
    }
    view.fabric.node_rack.push_back(ri->second);
  }
  if (view.rack_of.empty()) return std::nullopt;
  return view;
}

void ResolveCapacities(double node_link_bytes_per_second, JobFabricView& view) {
  // Unknown capacity with a declared oversubscription: the nodes' links below
  // the uplink over the ratio (for a block, its racks' own oversubscription
  // is not known for racks outside the job, so its nodes' links).
  auto resolve = [&](const JobFabricView::Source& s, double& cap,
                     double& declared) {
    if (declared <= 0 && s.declared_oversubscription_ratio > 0) {
      declared = s.nodes_below * node_link_bytes_per_second /
                 s.declared_oversubscription_ratio;
    }
    // Neither measured nor declared in bytes: the declared oversubscription's
    // capacity (0 when none is declared either).
    if (cap <= 0) cap = declared;
  };
  for (size_t r = 0; r < view.fabric.racks.size(); ++r) {
    model::JobFabric::Rack& rack = view.fabric.racks[r];
    resolve(view.rack_sources[r], rack.uplink_bytes_per_second,
            rack.uplink_declared_bytes_per_second);
  }
  for (size_t b = 0; b < view.fabric.blocks.size(); ++b) {
    model::JobFabric::Block& block = view.fabric.blocks[b];
    resolve(view.block_sources[b], block.uplink_bytes_per_second,
            block.uplink_declared_bytes_per_second);
  }
}

v1::FabricLevelLoad UplinkProto(const JobFabricView& view,
                                const model::UplinkLoad& load,
                                double dispatch_bytes) {
  const bool rack = load.level == model::UplinkLevel::kRack;
  const JobFabricView::Source& s =
      rack ? view.rack_sources[load.index] : view.block_sources[load.index];
  v1::FabricLevelLoad out;
  out.set_level(rack ? v1::FABRIC_LEVEL_RACK_UPLINK : v1::FABRIC_LEVEL_SPINE);
  out.set_name(rack ? view.fabric.racks[load.index].name
                    : view.fabric.blocks[load.index].name);
  out.set_bytes_per_second(load.bytes_per_second);
  out.set_task_id(s.task_id);
  out.set_declared(s.declared);
  out.set_bytes_per_rank_byte(load.bytes_per_rank_byte);
  out.set_dispatch_seconds(load.seconds_per_rank_byte() * dispatch_bytes);
  return out;
}

std::string AdviceNote(const JobFabricView& view,
                       const model::OrderAdvice& advice, int ranks_per_ep_block,
                       int ranks_per_node) {
  const int span_nodes = std::max(1, ranks_per_ep_block / ranks_per_node);
  const std::string groups =
      absl::StrCat("EP groups (", ranks_per_ep_block, " consecutive ranks, ",
                   span_nodes, span_nodes == 1 ? " node" : " nodes", ")");
  if (!advice.changed) {
    return absl::StrCat(
        "the given order is as fast as any the layout allows: ", groups,
        " cross ",
        advice.given.uplinks.empty() ? "no uplink" : "the uplinks they must");
  }
  std::vector<std::string> racks;
  std::string current;
  std::vector<std::string> members;
  auto flush = [&] {
    if (!members.empty()) {
      racks.push_back(
          absl::StrCat(current, ": ", absl::StrJoin(members, ", ")));
    }
    members.clear();
  };
  for (int i : advice.order) {
    const std::string& name = view.nodes[i];
    const std::string& rack = view.rack_of.at(name);
    if (rack != current) {
      flush();
      current = rack;
    }
    members.push_back(name);
  }
  flush();
  return absl::StrCat("nodes grouped by rack (", absl::StrJoin(racks, "; "),
                      ") so that ", groups,
                      advice.advised.uplinks.empty()
                          ? " stay inside a rack"
                          : " cross as few uplinks as the racks allow",
                      " and data parallelism crosses racks");
}

}  // namespace monta::planning
