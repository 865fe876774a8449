// GpuSource backed by the CUDA runtime, loaded with dlopen at run time.
//
// Only the handful of runtime entry points we need are declared here, from the
// public CUDA Runtime API reference; nothing is included from the CUDA toolkit
// so the agent builds and runs on machines without it.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/topology/gpu_source.h"

namespace monta::topology {
namespace {

using cudaError_t = int;
constexpr cudaError_t kCudaSuccess = 0;
// cudaDeviceAttr value of cudaDevAttrMultiProcessorCount.
constexpr int kCudaDevAttrMultiProcessorCount = 16;

// cudaDeviceProp starts with `char name[256]; cudaUUID_t uuid (16 bytes);
// char luid[8]; unsigned int luidDeviceNodeMask; size_t totalGlobalMem;` and
// that prefix has been stable since CUDA 10. We read only those fields from an
// oversized buffer so that a newer, larger struct can never overrun it.
constexpr size_t kPropNameOffset = 0;
constexpr size_t kPropNameBytes = 256;
constexpr size_t kPropTotalGlobalMemOffset = 288;
constexpr size_t kPropBufferBytes = 16384;

using GetDeviceCountFn = cudaError_t (*)(int*);
using GetDevicePropertiesFn = cudaError_t (*)(void*, int);
using DeviceGetAttributeFn = cudaError_t (*)(int*, int, int);
using DeviceGetPciBusIdFn = cudaError_t (*)(char*, int, int);
using DeviceCanAccessPeerFn = cudaError_t (*)(int*, int, int);
using GetErrorStringFn = const char* (*)(cudaError_t);

// The runtime entry points Read() uses, from the first libcudart that loads.
struct CudaRuntime {
  std::string lib_name;
  GetDeviceCountFn get_count = nullptr;
  GetDevicePropertiesFn get_props = nullptr;
  DeviceGetAttributeFn get_attr = nullptr;
  DeviceGetPciBusIdFn get_bus_id = nullptr;
  DeviceCanAccessPeerFn can_peer = nullptr;
  GetErrorStringFn error_string = nullptr;  // optional

  // "<code> <cudaGetErrorString>" for an error message.
  std::string Describe(cudaError_t rc) const {
    std::string text = absl::StrCat(rc);
    if (error_string != nullptr && error_string(rc) != nullptr) {
      absl::StrAppend(&text, " ", error_string(rc));
    }
    return text;
  }
};

// dlopen()s libcudart (newest soname first) and resolves the entry points.
// libcudart is deliberately never dlclose()d: the runtime registers atexit
// handlers that would run against unmapped code.
absl::StatusOr<CudaRuntime> LoadCudaRuntime() {
  std::string tried;
  void* lib = nullptr;
  CudaRuntime rt;
  for (const char* candidate :
       {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    lib = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      rt.lib_name = candidate;
      break;
    }
    const char* err = dlerror();
    // dlerror() already names the library.
    absl::StrAppend(&tried, tried.empty() ? "" : "; ",
                    err != nullptr ? std::string(err)
                                   : absl::StrCat(candidate, ": not found"));
  }
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("CUDA runtime not loadable (", tried, ")"));
  }
  rt.get_count =
      reinterpret_cast<GetDeviceCountFn>(dlsym(lib, "cudaGetDeviceCount"));
  // CUDA 12 exports the current struct layout as _v2; the prefix we read is
  // the same in both, so either symbol will do.
  rt.get_props = reinterpret_cast<GetDevicePropertiesFn>(
      dlsym(lib, "cudaGetDeviceProperties_v2"));
  if (rt.get_props == nullptr) {
    rt.get_props = reinterpret_cast<GetDevicePropertiesFn>(
        dlsym(lib, "cudaGetDeviceProperties"));
  }
  rt.get_attr = reinterpret_cast<DeviceGetAttributeFn>(
      dlsym(lib, "cudaDeviceGetAttribute"));
  rt.get_bus_id = reinterpret_cast<DeviceGetPciBusIdFn>(
      dlsym(lib, "cudaDeviceGetPCIBusId"));
  rt.can_peer = reinterpret_cast<DeviceCanAccessPeerFn>(
      dlsym(lib, "cudaDeviceCanAccessPeer"));
  rt.error_string =
      reinterpret_cast<GetErrorStringFn>(dlsym(lib, "cudaGetErrorString"));
  if (rt.get_count == nullptr || rt.get_props == nullptr ||
      rt.get_attr == nullptr || rt.get_bus_id == nullptr ||
      rt.can_peer == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(rt.lib_name,
                     " lacks a required symbol (cudaGetDeviceCount, "
                     "cudaGetDeviceProperties, cudaDeviceGetAttribute, "
                     "cudaDeviceGetPCIBusId, cudaDeviceCanAccessPeer)"));
  }
  return rt;
}

// Device `i`'s name and memory (from the stable prefix of cudaDeviceProp, read
// into the zeroed, oversized `props`), SM count and PCI bus id.
absl::StatusOr<CudaGpuRecord> ReadDevice(const CudaRuntime& rt, int i,
                                         std::vector<unsigned char>& props) {
  CudaGpuRecord gpu;
  gpu.index = i;
  std::fill(props.begin(), props.end(), 0);
  const cudaError_t rc = rt.get_props(props.data(), i);
  if (rc != kCudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cudaGetDeviceProperties(", i, "): ", rt.Describe(rc)));
  }
  const char* name =
      reinterpret_cast<const char*>(props.data() + kPropNameOffset);
  gpu.name.assign(name, strnlen(name, kPropNameBytes));
  size_t total_mem = 0;
  std::memcpy(&total_mem, props.data() + kPropTotalGlobalMemOffset,
              sizeof(total_mem));
  gpu.memory_bytes = total_mem;
  int sms = 0;
  if (rt.get_attr(&sms, kCudaDevAttrMultiProcessorCount, i) == kCudaSuccess) {
    gpu.sm_count = sms;
  }
  char bus_id[64] = {0};
  if (rt.get_bus_id(bus_id, sizeof(bus_id), i) == kCudaSuccess) {
    gpu.pci_bus_id = NormalizePciBusId(bus_id);
  }
  return gpu;
}

// peer_access[i][j]: cudaDeviceCanAccessPeer(i -> j); false where it fails.
std::vector<std::vector<bool>> ReadPeerAccess(const CudaRuntime& rt,
                                              int count) {
  std::vector<std::vector<bool>> peer_access(count,
                                             std::vector<bool>(count, false));
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      if (i == j) continue;
      int ok = 0;
      if (rt.can_peer(&ok, i, j) == kCudaSuccess) {
        peer_access[i][j] = ok != 0;
      }
    }
  }
  return peer_access;
}

class CudaRuntimeGpuSource : public GpuSource {
 public:
  absl::StatusOr<CudaSnapshot> Read() override {
    absl::StatusOr<CudaRuntime> rt = LoadCudaRuntime();
    if (!rt.ok()) return rt.status();
    // cudaGetDeviceCount leaves the count unwritten on failure (e.g. 35,
    // cudaErrorInsufficientDriver, on a machine without a GPU driver).
    int count = 0;
    const cudaError_t rc = rt->get_count(&count);
    if (rc != kCudaSuccess) {
      return absl::UnavailableError(absl::StrCat(
          "no CUDA device (cudaGetDeviceCount: ", rt->Describe(rc), ")"));
    }
    CudaSnapshot snapshot;
    snapshot.origin = rt->lib_name;
    std::vector<unsigned char> props(kPropBufferBytes);
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<CudaGpuRecord> gpu = ReadDevice(*rt, i, props);
      if (!gpu.ok()) return gpu.status();
      snapshot.gpus.push_back(*std::move(gpu));
    }
    snapshot.peer_access = ReadPeerAccess(*rt, count);
    return snapshot;
  }
};

}  // namespace

std::unique_ptr<GpuSource> MakeCudaRuntimeGpuSource() {
  return std::make_unique<CudaRuntimeGpuSource>();
}

std::string NormalizePciBusId(const std::string& bus_id) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(bus_id));
  std::vector<std::string> parts = absl::StrSplit(lower, ':');
  // domain:bus:device.function; NVML pads the domain to 8 hex digits.
  if (parts.size() == 3 && parts[0].size() >= 4 && parts[1].size() == 2 &&
      parts[2].size() == 4 && parts[2][2] == '.') {
    std::string domain = parts[0].substr(parts[0].size() - 4);
    return absl::StrCat(domain, ":", parts[1], ":", parts[2]);
  }
  if (parts.size() == 2 && parts[0].size() == 2 && parts[1].size() == 4) {
    return absl::StrCat("0000:", lower);
  }
  return lower;
}

}  // namespace monta::topology
