// montactl topology --fabric: the fabric tree (blocks, racks, nodes) as text,
// with each uplink's declared rate and its measured one (a column of its own,
// "-" until the level is measured), a rack's own level (a pair of its nodes)
// and why an uplink is not measured in the note, who placed each node, and
// the nodes whose agents claim another place.
#ifndef MONTA_CLIENT_FABRIC_RENDER_H_
#define MONTA_CLIENT_FABRIC_RENDER_H_

#include <string>

#include "proto/monta/v1/fabric.pb.h"
#include "proto/monta/v1/planner.pb.h"

namespace monta::client {

// The tree, then the sources and the notes.
std::string FabricText(const monta::v1::FabricReply& reply);

// One line for a node's position, e.g. "rack r0, block b0 (fabric map, line
// 10)"; what its agent claims follows when it disagrees.
std::string FabricPositionText(const monta::v1::FabricPosition& position);

// montactl bench --fabric: the level tasks a round created (or, `dry_run`,
// would create), one a line with level, concurrency and racks, then the
// notes (the levels not measured and why) and the count.
std::string LevelTasksText(const monta::v1::RunBenchmarkReply& reply,
                           bool dry_run);

// 400e9 bits/s as "400 Gb/s", 1e8 as "100 Mb/s", from bytes per second.
std::string BitRate(double bytes_per_second);

}  // namespace monta::client

#endif  // MONTA_CLIENT_FABRIC_RENDER_H_
