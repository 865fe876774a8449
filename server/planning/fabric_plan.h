// The fabric tree in a plan on named nodes (docs/MODEL.md §12): where the
// job's nodes sit (from the planner's FabricReply), each uplink's capacity
// and where it came from (the level's measurement when item 2's
// FabricLink.measured is set, else the fabric map's declaration), the
// slowest uplink per candidate, and the rank order to start the job with.

#ifndef MONTA_SERVER_PLANNING_FABRIC_PLAN_H_
#define MONTA_SERVER_PLANNING_FABRIC_PLAN_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/monta/v1/planner.pb.h"
#include "proto/monta/v1/strategy.pb.h"
#include "server/model/fabric_price.h"

namespace monta::planning {

// The job's nodes in the tree.
struct JobFabricView {
  model::JobFabric fabric;         // capacities filled by ResolveCapacities
  std::vector<std::string> nodes;  // the job's order
  // Per rack / block of `fabric`: the measuring task (empty: declared or
  // unknown), whether the capacity is the map's declaration, and what
  // ResolveCapacities needs for a declared oversubscription.
  struct Source {
    std::string task_id;
    bool declared = false;
    int nodes_below = 0;  // nodes under the uplink in the whole tree
    // The map's declared oversubscription, kept when a measurement prices
    // the uplink: it gives the declared capacity (docs/MODEL.md §12).
    double declared_oversubscription_ratio = 0;
  };
  std::vector<Source> rack_sources;
  std::vector<Source> block_sources;
  // Job nodes no fabric source places: with any, the tree is not priced.
  std::vector<std::string> outside;
  // Rack name per placed job node.
  std::map<std::string, std::string> rack_of;
};

// Where `nodes` sit in `tree`; nullopt when none of them is placed.
std::optional<JobFabricView> JobFabricFromTree(
    const monta::v1::FabricReply& tree, const std::vector<std::string>& nodes);

// Fills each uplink's capacity: measured, else declared, else (a declared
// oversubscription) the capacity below it over the ratio, the nodes' links
// at `node_link_bytes_per_second` each; 0 when nothing is known. Also each
// uplink's declared capacity (the map's rate, else the one a declared
// oversubscription gives; 0 when neither), what a pipeline's steady state
// moves through it.
void ResolveCapacities(double node_link_bytes_per_second, JobFabricView& view);

// An uplink of the model's price as the wire says it; `seconds_per_byte`
// scales bytes_per_rank_byte into dispatch_seconds with `dispatch_bytes`.
monta::v1::FabricLevelLoad UplinkProto(const JobFabricView& view,
                                       const model::UplinkLoad& load,
                                       double dispatch_bytes);

// The rack-major note of an advice, e.g. "EP groups (4 consecutive ranks, 2
// nodes) inside racks: r0: a, b; r1: c, d; data parallel across racks".
std::string AdviceNote(const JobFabricView& view,
                       const model::OrderAdvice& advice, int ranks_per_ep_block,
                       int ranks_per_node);

}  // namespace monta::planning

#endif  // MONTA_SERVER_PLANNING_FABRIC_PLAN_H_
