// What a fabric picture costs: the tasks one round of level measurements
// (server/fabric/levels.h) makes on a simulated cluster, through the
// planner's own code (a fabric map written and read as --fabric_map_file is,
// Fabric::PlanRound as the periodic schedule and `montactl bench --fabric
// --dry_run` call it), with every node alive and idle. Issue 19's bar: 512
// nodes in 16 racks cost <= 300 tasks beyond each node's own intra-node
// sweep, none spanning more than two racks.
//
//   bazel run //perf:fabric_level_plan -- --racks=16 --nodes_per_rack=32
//
// Prints the tasks by level, the most racks one task spans, and whether the
// bar holds (exit status 1 when it does not).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/proto_names.h"
#include "server/fabric/fabric.h"

ABSL_FLAG(int, racks, 16, "racks of the simulated cluster");
ABSL_FLAG(int, nodes_per_rack, 32, "nodes in each rack");
ABSL_FLAG(int, blocks, 0,
          "blocks the racks are split into (0: racks in no block)");
ABSL_FLAG(int, sample_nodes, 4,
          "the planner's --fabric_sample_nodes: nodes of each rack at once");
ABSL_FLAG(int, max_tasks, 300, "the bar: most tasks beyond intra-node sweeps");

namespace {

std::string RackName(int r) { return absl::StrCat("rack-", r); }
std::string NodeName(int r, int n) { return absl::StrCat("node-", r, "-", n); }

std::string MapYaml(int racks, int per_rack, int blocks) {
  std::string out = "version: 1\n";
  if (blocks > 0) {
    absl::StrAppend(&out, "blocks:\n");
    for (int b = 0; b < blocks; ++b) {
      absl::StrAppend(&out, "- name: block-", b, "\n");
    }
  }
  absl::StrAppend(&out, "racks:\n");
  for (int r = 0; r < racks; ++r) {
    absl::StrAppend(&out, "- name: ", RackName(r), "\n");
    if (blocks > 0) {
      absl::StrAppend(&out, "  block: block-", r * blocks / racks, "\n");
    }
    absl::StrAppend(&out, "  nodes: [");
    for (int n = 0; n < per_rack; ++n) {
      absl::StrAppend(&out, n > 0 ? ", " : "", NodeName(r, n));
    }
    absl::StrAppend(&out, "]\n");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  monta::ParseFlags(argc, argv,
                    "Counts the tasks of one round of fabric level "
                    "measurements on a simulated cluster.",
                    __FILE__);
  const int racks = absl::GetFlag(FLAGS_racks);
  const int per_rack = absl::GetFlag(FLAGS_nodes_per_rack);
  const int blocks = absl::GetFlag(FLAGS_blocks);
  if (racks < 1 || per_rack < 1 || blocks < 0 || blocks > racks) {
    std::cerr << "fabric_level_plan: --racks and --nodes_per_rack must be >= "
                 "1, --blocks in 0..racks\n";
    return 2;
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string path =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/fabric_level_plan-",
                   absl::ToUnixNanos(absl::Now()), ".yaml");
  std::ofstream(path) << MapYaml(racks, per_rack, blocks);
  monta::fabric::FabricOptions options;
  options.map_file = path;
  auto fabric = monta::fabric::Fabric::Open(options, absl::Now());
  std::remove(path.c_str());
  if (!fabric.ok()) {
    std::cerr << "fabric_level_plan: " << fabric.status() << "\n";
    return 1;
  }
  std::vector<monta::v1::NodeInfo> registered;
  for (int r = 0; r < racks; ++r) {
    for (int n = 0; n < per_rack; ++n) {
      monta::v1::NodeInfo node;
      node.set_name(NodeName(r, n));
      node.set_state(monta::v1::NODE_STATE_ALIVE);
      registered.push_back(node);
    }
  }
  const monta::fabric::Fabric::Round round = (*fabric)->PlanRound(
      registered, [](const std::string&) { return true; },
      absl::GetFlag(FLAGS_sample_nodes), /*dry_run=*/true, absl::Now());
  std::map<std::string, int> by_level;
  size_t widest = 0;
  for (const auto& task : round.plan.tasks) {
    std::set<std::string> spanned;
    for (const std::string& node : task.nodes) {
      spanned.insert((*fabric)->Position(node, {}).rack());
    }
    widest = std::max(widest, spanned.size());
    const std::string level = monta::ShortName(task.span.level());
    by_level[absl::StrCat(
        level,
        task.span.concurrent_nodes() > 2
            ? absl::StrCat(", ", task.span.concurrent_nodes(), " nodes at once")
            : " pair")]++;
  }
  const int nodes = racks * per_rack;
  std::cout << nodes << " nodes in " << racks << " racks"
            << (blocks > 0 ? absl::StrCat(" (", blocks, " blocks)") : "")
            << ", --fabric_sample_nodes=" << absl::GetFlag(FLAGS_sample_nodes)
            << ": one round of level measurements\n";
  for (const auto& [level, count] : by_level) {
    std::cout << "  " << count << " x " << level << "\n";
  }
  const size_t tasks = round.plan.tasks.size();
  std::cout << "  = " << tasks << " tasks beyond the " << nodes
            << " intra-node sweeps (all node pairs: "
            << static_cast<int64_t>(nodes) * (nodes - 1) / 2
            << "); the widest spans " << widest << " rack(s)\n";
  for (const auto& note : round.plan.notes)
    std::cout << "  note: " << note << "\n";
  const bool holds =
      tasks <= static_cast<size_t>(absl::GetFlag(FLAGS_max_tasks)) &&
      widest <= 2;
  std::cout << (holds ? "holds" : "FAILS")
            << ": <= " << absl::GetFlag(FLAGS_max_tasks)
            << " tasks, none spanning more than two racks\n";
  return holds ? 0 : 1;
}
