// topology_dump: runs DiscoverTopology on this node with the agent's discovery
// flags and prints the NodeTopology as text proto. For operators checking what
// the agent would report, and for recording fixtures from a real machine.
//
//   topology_dump --sysfs_root=/sys --topology_file=node.yaml
//       --label=network.topology.nvidia.com/leaf=leaf-07
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "agent/topology/discovery.h"
#include "google/protobuf/text_format.h"

ABSL_FLAG(std::string, sysfs_root, "/sys", "root of the sysfs tree to read");
ABSL_FLAG(std::string, topology_file, "",
          "declared topology (YAML) for facts discovery cannot find");
ABSL_FLAG(std::string, labels_file, "",
          "key=value lines (downward API format); topology keys are kept");
ABSL_FLAG(std::vector<std::string>, label, {},
          "topology labels as key=value, comma separated");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  monta::topology::DiscoveryOptions options;
  options.sysfs_root = absl::GetFlag(FLAGS_sysfs_root);
  options.topology_file = absl::GetFlag(FLAGS_topology_file);
  options.labels_file = absl::GetFlag(FLAGS_labels_file);
  if (const char* node_name = std::getenv("NODE_NAME")) {
    options.kubernetes_node_name = node_name;
  }
  for (const std::string& label : absl::GetFlag(FLAGS_label)) {
    std::vector<std::string> parts =
        absl::StrSplit(label, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[0].empty()) {
      std::cerr << "--label: expected key=value, got \"" << label << "\"\n";
      return 2;
    }
    options.labels[parts[0]] = parts[1];
  }
  absl::StatusOr<monta::v1::NodeTopology> topology =
      monta::topology::DiscoverTopology(options);
  if (!topology.ok()) {
    std::cerr << topology.status() << "\n";
    return 1;
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(*topology, &text);
  std::cout << text;
  return 0;
}
