// Text views of a node's topology for people: the GPU/NIC matrix in the layout
// of `nvidia-smi topo -m`, and a table of NIC ports.
#ifndef MONTA_CLIENT_TOPOLOGY_RENDER_H_
#define MONTA_CLIENT_TOPOLOGY_RENDER_H_

#include <string>

#include "proto/monta/v1/topology.pb.h"

namespace monta::client {

// The matrix as `nvidia-smi topo -m` prints it (driver 535 and later): a
// tab-separated header "GPU0..GPUn NIC0..NICm CPU Affinity NUMA Affinity GPU
// NUMA ID", one row per GPU (cells X, NV#, PIX, PXB, PHB, NODE, SYS, then the
// GPU's NUMA node's CPU list, its NUMA node, and N/A for GPU NUMA ID as on any
// non-C2C system), one row per NIC device, the standard Legend and the NIC
// Legend ("NIC0: mlx5_0").
//
// NodeTopology stores only each GPU's nearest NIC, so other GPU-NIC and NIC-NIC
// cells are derived the way they come out on HGX systems: functions of one PCI
// device (ports of a multi-port HCA) share their path (PIX between each other),
// otherwise NODE when both sit on the same NUMA node, else SYS. Unknown paths
// print as N/A.
std::string RenderTopoMatrix(const monta::v1::NodeTopology& topology);

// One row per NIC port: NIC, PORT, LINK LAYER, RATE (Gb/s), STATE, PHYS STATE,
// PCI, NUMA, PROVENANCE. Link layer and states print as their enums' short
// names ("infiniband", "active", "link_up"), a state Monta cannot name as
// "unknown (TEXT)" with the text the node reported (common/nic_state.h);
// unknown values print as "-".
std::string RenderNicTable(const monta::v1::NodeTopology& topology);

}  // namespace monta::client

#endif  // MONTA_CLIENT_TOPOLOGY_RENDER_H_
