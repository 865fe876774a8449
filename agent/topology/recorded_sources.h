// GpuSource and NvmlSource implementations that replay answers instead of
// calling the driver libraries: recorded YAML files (test fixtures, or a
// capture taken on a real node for offline debugging) and fixed in-memory
// snapshots.
//
// Recorded CUDA file (YAML):
//   origin: "recorded on ..."      # optional
//   error: "no CUDA device (...)"  # optional: Read() fails with this text
//   gpus:                          # CUDA ordinals 0, 1, 2, ... in order
//     - {index: 0, name: ..., memory_bytes: N, pci_bus_id: ..., sm_count: N}
//   peer_access: all               # or none, or a list of "i->j" that are true
//
// Recorded NVML file (YAML):
//   origin, error                  # as above
//   gpus:
//     - {index: 0, uuid: GPU-..., pci_bus_id: ..., name: ..., memory_bytes: N}
//   nvlinks:                       # nvmlDeviceGetNvLinkState + RemotePciInfo
//     - {gpu: 0, first_link: 0, count: 18, active: true,
//        remote_pci_bus_id: ...}
//   common_ancestor_default: 50    # nvmlGpuTopologyLevel_t of unlisted pairs
//   common_ancestor: [{gpus: [0, 1], level: 40}]
#ifndef MONTA_AGENT_TOPOLOGY_RECORDED_SOURCES_H_
#define MONTA_AGENT_TOPOLOGY_RECORDED_SOURCES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "agent/topology/gpu_source.h"
#include "agent/topology/nvml_source.h"

namespace monta::topology {

// Parses `path` now (errors name the file and field); Read() replays it.
absl::StatusOr<std::unique_ptr<GpuSource>> LoadRecordedGpuSource(
    const std::string& path);
absl::StatusOr<std::unique_ptr<NvmlSource>> LoadRecordedNvmlSource(
    const std::string& path);

// Sources whose Read() always returns `answer`.
std::unique_ptr<GpuSource> MakeFixedGpuSource(
    absl::StatusOr<CudaSnapshot> answer);
std::unique_ptr<NvmlSource> MakeFixedNvmlSource(
    absl::StatusOr<NvmlSnapshot> answer);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_RECORDED_SOURCES_H_
