// GPU identity, NVLink state and PCIe proximity as NVML reports them, behind an
// interface so tests can replay recorded answers instead of libnvidia-ml.
#ifndef MONTA_AGENT_TOPOLOGY_NVML_SOURCE_H_
#define MONTA_AGENT_TOPOLOGY_NVML_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/monta/v1/topology.pb.h"

namespace monta::topology {

// nvmlGpuTopologyLevel_t values (NVML API reference, "Topology" enums).
enum NvmlTopologyLevel : int {
  kNvmlTopologyInternal = 0,
  kNvmlTopologySingle = 10,
  kNvmlTopologyMultiple = 20,
  kNvmlTopologyHostbridge = 30,
  kNvmlTopologyNode = 40,
  kNvmlTopologySystem = 50,
};

// Maps a common-ancestor level to the `nvidia-smi topo -m` class: SINGLE ->
// PIX, MULTIPLE -> PXB, HOSTBRIDGE -> PHB, NODE -> NODE, SYSTEM -> SYS,
// INTERNAL (same board) -> PIX. Unknown values map to PATH_TYPE_UNSPECIFIED.
monta::v1::PathType PathTypeFromNvmlLevel(int level);

struct NvmlGpuRecord {
  int index = 0;           // NVML index (PCI order; may differ from CUDA's)
  std::string uuid;        // "GPU-..."
  std::string pci_bus_id;  // normalised "dddd:bb:dd.f"
  // Used when CUDA is absent (e.g. an agent image without libcudart on a GPU
  // node: the container runtime mounts libnvidia-ml but not the toolkit), or
  // when the CUDA driver could not give a GPU's name or memory.
  std::string name;           // nvmlDeviceGetName; empty if unavailable
  uint64_t memory_bytes = 0;  // nvmlDeviceGetMemoryInfo total; 0 if unknown
};

// One unordered pair of NVML indices (gpu_a < gpu_b).
struct NvmlPairRecord {
  int gpu_a = 0;
  int gpu_b = 0;
  int nvlink_active = 0;    // links usable between the pair
  int nvlink_inactive = 0;  // links present but down/sleeping
  int common_ancestor_level = kNvmlTopologySystem;  // NvmlTopologyLevel
};

struct NvmlSnapshot {
  std::vector<NvmlGpuRecord> gpus;
  std::vector<NvmlPairRecord> pairs;  // every unordered pair, once
  std::string origin;  // "libnvidia-ml.so.1" or a recording's path
};

class NvmlSource {
 public:
  virtual ~NvmlSource() = default;
  // An error means "NVML absent or unusable"; its message goes verbatim into
  // NodeTopology.nvml_status.
  virtual absl::StatusOr<NvmlSnapshot> Read() = 0;
};

// The real source: dlopen()s libnvidia-ml.so.1 at Read() time.
std::unique_ptr<NvmlSource> MakeNvmlLibrarySource();

// One NVLink of one GPU as nvmlDeviceGetNvLinkState /
// nvmlDeviceGetNvLinkRemotePciInfo_v2 report it.
struct NvLinkObservation {
  int gpu = 0;   // NVML index of the local GPU
  int link = 0;  // 0..NVML_NVLINK_MAX_LINKS-1
  bool active = false;
  // Normalised PCI bus id of the far end; empty when NVML could not say.
  std::string remote_pci_bus_id;
};

// Turns per-link observations into per-pair counts (adds to `pairs`, which must
// already hold every pair). A link whose far end is another GPU counts for that
// pair. Any other far end (an NVSwitch, or unknown for a down link) is a switch
// link: on NVSwitch systems (HGX H100, HGX A800) every GPU reaches every other
// through the switches, so a pair gets min(active switch links of a, of b)
// active links - which is what `nvidia-smi topo -m` prints as NV18 - and the
// rest of the larger side's switch links as inactive.
void AggregateNvLinks(const std::vector<NvmlGpuRecord>& gpus,
                      const std::vector<NvLinkObservation>& links,
                      std::vector<NvmlPairRecord>& pairs);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_NVML_SOURCE_H_
