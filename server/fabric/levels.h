// Measuring the fabric per level (issue 19 item 2): which benchmark tasks a
// round measures, and what a level's measurement is.
//
// A round (PlanLevels) measures, of the racks with idle nodes:
//   - RACK: in every rack a pair of its idle nodes (the node links and the
//     leaf switch);
//   - CROSS_RACK / CROSS_BLOCK: for every rack and the next one (racks in
//     order of block and name, a ring: R racks give R neighbour pairs, 2
//     racks one) a pair across the two, and a task of up to `sample_nodes`
//     idle nodes of each at once, so that a shared uplink shows.
// So a round is at most 3 tasks per rack, whatever the number of nodes, and no
// task spans more than two racks. Every task that crosses a rack's uplink
// includes the first node of that rack's sample, so on one rack's uplink the
// level tasks never run at the same time (an agent runs its tasks one after
// the other). The sample rotates with the round, so over rounds every idle
// node of a large rack takes part.
//
// A level's rate (SideBytesPerSecond): an AllToAll of M bytes per rank over N
// ranks, a ranks on one side (a rack, or one node), moves M * a * (N - a) / N
// bytes across that side's boundary in each direction; over the measured time
// at the largest size that is the share of the uplink (or node link) the task
// actually carried.
#ifndef MONTA_SERVER_FABRIC_LEVELS_H_
#define MONTA_SERVER_FABRIC_LEVELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/monta/v1/benchmark.pb.h"
#include "proto/monta/v1/fabric.pb.h"
#include "proto/monta/v1/planner.pb.h"

namespace monta::fabric {

// Nodes of one rack a round may use.
struct LevelRack {
  std::string block;  // empty: in no block
  std::string name;
  // Alive nodes of the rack that are idle now, by name.
  std::vector<std::string> idle;
  // Alive nodes of the rack, idle or not.
  int alive = 0;
};

struct LevelPlanOptions {
  // Most nodes of one rack in a task across two racks (--fabric_sample_nodes).
  int sample_nodes = 4;
  // The round's number: the sample of each rack starts at
  // round * sample_nodes (mod its idle nodes).
  uint64_t round = 0;
};

// One task of a round: its nodes in rank order (one rack's, then the other's)
// and where they sit.
struct LevelTask {
  std::vector<std::string> nodes;
  monta::v1::FabricSpan span;
};

struct LevelPlan {
  std::vector<LevelTask> tasks;
  // For people: the levels not measured this round and why.
  std::vector<std::string> notes;
};

// The round's tasks over `racks` (any order; each rack named once).
LevelPlan PlanLevels(std::vector<LevelRack> racks,
                     const LevelPlanOptions& options);

// Bytes per second the boundary of a side of `side_ranks` of the curve's
// nranks carried in each direction, at the curve's largest message size:
// message_bytes * a * (N - a) / N / time_seconds. 0 when the curve has no
// points or a is not in 1..N-1.
double SideBytesPerSecond(const monta::v1::BandwidthCurve& curve,
                          int side_ranks);

// Of a curve with a FabricSpan: the rate across the uplink of `rack` (one of
// its span's racks, at CROSS_RACK or CROSS_BLOCK), or between one node and
// the rest (at RACK, `rack` being the span's rack). 0 when the curve does not
// measure that.
double LevelBytesPerSecond(const monta::v1::BandwidthCurve& curve,
                           absl::string_view rack);

// Fills the tree's measured slots from the level curves of `registered`
// (their AllToAll sweeps with a FabricSpan; a curve of several nodes is on each
// of them and counted once):
//   - a rack's `inside`: its newest RACK curve;
//   - a rack's uplink: of each other rack it was measured with (CROSS_RACK or
//     CROSS_BLOCK), the newest curve of more than 2 nodes at once, else the
//     newest pair; of those the fastest (the partner's uplink may have bounded
//     the others);
//   - a block's uplink: the same over CROSS_BLOCK curves with a rack of the
//     block, per other block.
// Each uplink's note says which measurement it is, or that none is and what
// stands instead (the declared capacity).
void AttachMeasurements(const std::vector<monta::v1::NodeInfo>& registered,
                        monta::v1::FabricReply& reply);

}  // namespace monta::fabric

#endif  // MONTA_SERVER_FABRIC_LEVELS_H_
