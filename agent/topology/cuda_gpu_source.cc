// GpuSource backed by the CUDA runtime and driver, loaded with dlopen at run
// time.
//
// The entry points are declared in cuda_api.h from the public CUDA API
// references; nothing is included from the CUDA toolkit, so the agent builds
// and runs on machines without it. The runtime counts devices and answers
// cudaDeviceGetAttribute (SMs), PCI bus ids and peer access; the name and the
// memory size, which no device attribute gives, come from the driver API
// (cuDeviceGetName, cuDeviceTotalMem), never from a struct's byte layout.
#include <dlfcn.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/topology/cuda_api.h"
#include "agent/topology/gpu_source.h"

namespace monta::topology {
namespace {

namespace api = cuda_api;

// dlopen()s the first of `candidates` that loads; `tried` collects why the
// others did not (dlerror() names the library).
void* OpenFirst(std::initializer_list<const char*> candidates,
                std::string* loaded, std::string* tried) {
  for (const char* candidate : candidates) {
    void* lib = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      *loaded = candidate;
      return lib;
    }
    const char* err = dlerror();
    absl::StrAppend(tried, tried->empty() ? "" : "; ",
                    err != nullptr ? std::string(err)
                                   : absl::StrCat(candidate, ": not found"));
  }
  return nullptr;
}

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

// The runtime entry points Read() uses, from the first libcudart that loads.
struct CudaRuntime {
  std::string lib_name;
  api::GetDeviceCountFn get_count = nullptr;
  api::DeviceGetAttributeFn get_attr = nullptr;
  api::DeviceGetPciBusIdFn get_bus_id = nullptr;
  api::DeviceCanAccessPeerFn can_peer = nullptr;
  api::GetErrorStringFn error_string = nullptr;  // optional

  // "<code> <cudaGetErrorString>" for an error message.
  std::string Describe(api::cudaError_t rc) const {
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
  CudaRuntime rt;
  void* lib = OpenFirst({"libcudart.so.13", "libcudart.so.12", "libcudart.so"},
                        &rt.lib_name, &tried);
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("CUDA runtime not loadable (", tried, ")"));
  }
  rt.get_count = Symbol<api::GetDeviceCountFn>(lib, api::kGetDeviceCount);
  rt.get_attr =
      Symbol<api::DeviceGetAttributeFn>(lib, api::kDeviceGetAttribute);
  rt.get_bus_id =
      Symbol<api::DeviceGetPciBusIdFn>(lib, api::kDeviceGetPciBusId);
  rt.can_peer =
      Symbol<api::DeviceCanAccessPeerFn>(lib, api::kDeviceCanAccessPeer);
  rt.error_string = Symbol<api::GetErrorStringFn>(lib, api::kGetErrorString);
  if (rt.get_count == nullptr || rt.get_attr == nullptr ||
      rt.get_bus_id == nullptr || rt.can_peer == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        rt.lib_name, " lacks a required symbol (", api::kGetDeviceCount, ", ",
        api::kDeviceGetAttribute, ", ", api::kDeviceGetPciBusId, ", ",
        api::kDeviceCanAccessPeer, ")"));
  }
  return rt;
}

// The driver entry points for names and memory, from libcuda.so.1 (which the
// runtime itself loads, so it is there whenever the runtime found a device).
// Never dlclose()d, like the runtime.
struct CudaDriver {
  std::string lib_name;
  api::CuDeviceGetFn get_device = nullptr;
  api::CuDeviceGetByPciBusIdFn get_by_bus_id = nullptr;
  api::CuDeviceGetNameFn get_name = nullptr;
  api::CuDeviceTotalMemFn total_mem = nullptr;
  api::CuGetErrorStringFn error_string = nullptr;  // optional

  std::string Describe(api::CUresult rc) const {
    std::string text = absl::StrCat(rc);
    const char* name = nullptr;
    if (error_string != nullptr && error_string(rc, &name) == api::kCuSuccess &&
        name != nullptr) {
      absl::StrAppend(&text, " ", name);
    }
    return text;
  }
};

absl::StatusOr<CudaDriver> LoadCudaDriver() {
  std::string tried;
  CudaDriver driver;
  void* lib = OpenFirst({"libcuda.so.1"}, &driver.lib_name, &tried);
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("CUDA driver not loadable (", tried, ")"));
  }
  auto init = Symbol<api::CuInitFn>(lib, api::kCuInit);
  driver.get_device = Symbol<api::CuDeviceGetFn>(lib, api::kCuDeviceGet);
  driver.get_by_bus_id =
      Symbol<api::CuDeviceGetByPciBusIdFn>(lib, api::kCuDeviceGetByPciBusId);
  driver.get_name = Symbol<api::CuDeviceGetNameFn>(lib, api::kCuDeviceGetName);
  driver.total_mem =
      Symbol<api::CuDeviceTotalMemFn>(lib, api::kCuDeviceTotalMem);
  driver.error_string =
      Symbol<api::CuGetErrorStringFn>(lib, api::kCuGetErrorString);
  if (init == nullptr || driver.get_device == nullptr ||
      driver.get_by_bus_id == nullptr || driver.get_name == nullptr ||
      driver.total_mem == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        driver.lib_name, " lacks a required symbol (", api::kCuInit, ", ",
        api::kCuDeviceGet, ", ", api::kCuDeviceGetByPciBusId, ", ",
        api::kCuDeviceGetName, ", ", api::kCuDeviceTotalMem, ")"));
  }
  // Already initialised by the runtime; a second cuInit is a no-op.
  if (const api::CUresult rc = init(0); rc != api::kCuSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cuInit: ", driver.Describe(rc)));
  }
  return driver;
}

// Device `i`'s SM count and PCI bus id from the runtime.
CudaGpuRecord ReadRuntimeFacts(const CudaRuntime& rt, int i) {
  CudaGpuRecord gpu;
  gpu.index = i;
  int sms = 0;
  if (rt.get_attr(&sms, api::kCudaDevAttrMultiProcessorCount, i) ==
      api::kCudaSuccess) {
    gpu.sm_count = sms;
  }
  char bus_id[64] = {0};
  if (rt.get_bus_id(bus_id, sizeof(bus_id), i) == api::kCudaSuccess) {
    gpu.pci_bus_id = NormalizePciBusId(bus_id);
  }
  return gpu;
}

// Name and memory of `gpu` from the driver. The device is found by the PCI bus
// id the runtime gave (no assumption that both number devices alike), else by
// ordinal. An error names the call and the device.
absl::Status ReadDriverFacts(const CudaDriver& driver, CudaGpuRecord& gpu) {
  api::CUdevice device = 0;
  const api::CUresult found =
      gpu.pci_bus_id.empty()
          ? driver.get_device(&device, gpu.index)
          : driver.get_by_bus_id(&device, gpu.pci_bus_id.c_str());
  if (found != api::kCuSuccess) {
    return absl::InternalError(absl::StrCat(
        gpu.pci_bus_id.empty() ? "cuDeviceGet(" : "cuDeviceGetByPCIBusId(",
        gpu.pci_bus_id.empty() ? absl::StrCat(gpu.index) : gpu.pci_bus_id,
        "): ", driver.Describe(found)));
  }
  char name[api::kNameBytes] = {0};
  if (const api::CUresult rc = driver.get_name(name, sizeof(name) - 1, device);
      rc != api::kCuSuccess) {
    return absl::InternalError(absl::StrCat("cuDeviceGetName(GPU ", gpu.index,
                                            "): ", driver.Describe(rc)));
  }
  gpu.name.assign(name, strnlen(name, sizeof(name)));
  size_t bytes = 0;
  if (const api::CUresult rc = driver.total_mem(&bytes, device);
      rc != api::kCuSuccess) {
    return absl::InternalError(absl::StrCat("cuDeviceTotalMem(GPU ", gpu.index,
                                            "): ", driver.Describe(rc)));
  }
  gpu.memory_bytes = bytes;
  return absl::OkStatus();
}

// Name and memory of every GPU from the driver; stops at the first failure.
absl::Status ReadNamesAndMemory(std::vector<CudaGpuRecord>& gpus) {
  absl::StatusOr<CudaDriver> driver = LoadCudaDriver();
  if (!driver.ok()) return driver.status();
  for (CudaGpuRecord& gpu : gpus) {
    if (absl::Status s = ReadDriverFacts(*driver, gpu); !s.ok()) return s;
  }
  return absl::OkStatus();
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
      if (rt.can_peer(&ok, i, j) == api::kCudaSuccess) {
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
    const api::cudaError_t rc = rt->get_count(&count);
    if (rc != api::kCudaSuccess) {
      return absl::UnavailableError(absl::StrCat(
          "no CUDA device (cudaGetDeviceCount: ", rt->Describe(rc), ")"));
    }
    CudaSnapshot snapshot;
    snapshot.origin = rt->lib_name;
    for (int i = 0; i < count; ++i) {
      snapshot.gpus.push_back(ReadRuntimeFacts(*rt, i));
    }
    snapshot.peer_access = ReadPeerAccess(*rt, count);
    // Without names and memory the GPUs are still real (discovery takes both
    // from NVML when it can); the origin, shown in cuda_status, says why.
    if (count > 0) {
      const absl::Status named = ReadNamesAndMemory(snapshot.gpus);
      snapshot.origin =
          named.ok()
              ? absl::StrCat(rt->lib_name, " and libcuda.so.1")
              : absl::StrCat(rt->lib_name,
                             " (GPU names and memory unread: ", named.message(),
                             ")");
    }
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
