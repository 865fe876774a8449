// GPU facts as the CUDA runtime reports them, behind an interface so that tests
// can replay recorded answers instead of calling into libcudart.
#ifndef MONTA_AGENT_TOPOLOGY_GPU_SOURCE_H_
#define MONTA_AGENT_TOPOLOGY_GPU_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace monta::topology {

// One CUDA device as the runtime (cudaDeviceGetAttribute,
// cudaDeviceGetPCIBusId) and the driver (cuDeviceGetName, cuDeviceTotalMem)
// report it.
struct CudaGpuRecord {
  int index = 0;              // CUDA ordinal
  std::string name;           // e.g. "NVIDIA H100 80GB HBM3"; "" if unread
  uint64_t memory_bytes = 0;  // cuDeviceTotalMem; 0 if unread
  std::string pci_bus_id;     // normalised "dddd:bb:dd.f", lower case
  int sm_count = 0;           // cudaDevAttrMultiProcessorCount
};

// Everything one GpuSource::Read() call learns.
struct CudaSnapshot {
  std::vector<CudaGpuRecord> gpus;
  // peer_access[i][j]: cudaDeviceCanAccessPeer(i -> j). Square, gpus.size()
  // wide.
  std::vector<std::vector<bool>> peer_access;
  // Where the answers came from, e.g. "libcudart.so.13" or a recording's path.
  std::string origin;
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // Returns the node's CUDA devices. An error means "CUDA absent or unusable";
  // its message is shown to operators verbatim in NodeTopology.cuda_status, so
  // it must say what was tried (e.g. "no CUDA device (cudaGetDeviceCount:
  // 35)").
  virtual absl::StatusOr<CudaSnapshot> Read() = 0;
};

// The real source: dlopen()s libcudart.so.13, .12, then libcudart.so at Read()
// time, and libcuda.so.1 for names and memory once a device is found, so the
// agent binary has no link-time CUDA dependency. When the driver cannot say
// (library or symbol missing, a call failing) the GPUs come without name and
// memory and `origin` says why; no struct layout is ever guessed.
std::unique_ptr<GpuSource> MakeCudaRuntimeGpuSource();

// Normalises a PCI bus id from CUDA ("0000:18:00.0"), NVML ("00000000:18:00.0")
// or sysfs to "dddd:bb:dd.f" lower case. Returns the input lower-cased when it
// does not look like a PCI bus id.
std::string NormalizePciBusId(const std::string& bus_id);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_GPU_SOURCE_H_
