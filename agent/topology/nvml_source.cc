// NvmlSource backed by libnvidia-ml.so.1, loaded with dlopen at run time.
//
// The NVML types and entry points below are declared from the public NVML API
// reference (docs.nvidia.com/deploy/nvml-api); nvml.h is not required to build.
#include "agent/topology/nvml_source.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "agent/topology/gpu_source.h"

namespace monta::topology {

monta::v1::PathType PathTypeFromNvmlLevel(int level) {
  switch (level) {
    case kNvmlTopologyInternal:
    case kNvmlTopologySingle:
      return monta::v1::PATH_TYPE_PIX;
    case kNvmlTopologyMultiple:
      return monta::v1::PATH_TYPE_PXB;
    case kNvmlTopologyHostbridge:
      return monta::v1::PATH_TYPE_PHB;
    case kNvmlTopologyNode:
      return monta::v1::PATH_TYPE_NODE;
    case kNvmlTopologySystem:
      return monta::v1::PATH_TYPE_SYS;
    default:
      return monta::v1::PATH_TYPE_UNSPECIFIED;
  }
}

void AggregateNvLinks(const std::vector<NvmlGpuRecord>& gpus,
                      const std::vector<NvLinkObservation>& links,
                      std::vector<NvmlPairRecord>& pairs) {
  std::map<std::string, int> gpu_by_pci;
  for (const NvmlGpuRecord& gpu : gpus) gpu_by_pci[gpu.pci_bus_id] = gpu.index;
  std::map<std::pair<int, int>, NvmlPairRecord*> pair_by_key;
  for (NvmlPairRecord& pair : pairs) {
    pair_by_key[{pair.gpu_a, pair.gpu_b}] = &pair;
  }
  std::map<int, int> switch_active;
  std::map<int, int> switch_total;
  for (const NvLinkObservation& link : links) {
    auto peer = gpu_by_pci.find(link.remote_pci_bus_id);
    if (!link.remote_pci_bus_id.empty() && peer != gpu_by_pci.end() &&
        peer->second != link.gpu) {
      // Direct GPU-GPU links are seen from both ends; count each end's view
      // once by only counting from the lower index.
      if (link.gpu > peer->second) continue;
      auto it = pair_by_key.find({link.gpu, peer->second});
      if (it == pair_by_key.end()) continue;
      (link.active ? it->second->nvlink_active : it->second->nvlink_inactive)++;
      continue;
    }
    ++switch_total[link.gpu];
    if (link.active) ++switch_active[link.gpu];
  }
  for (NvmlPairRecord& pair : pairs) {
    const int total_a = switch_total[pair.gpu_a];
    const int total_b = switch_total[pair.gpu_b];
    if (total_a == 0 || total_b == 0) continue;
    const int active =
        std::min(switch_active[pair.gpu_a], switch_active[pair.gpu_b]);
    pair.nvlink_active += active;
    pair.nvlink_inactive += std::max(total_a, total_b) - active;
  }
}

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlNvLinkMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr int kNvmlDeviceUuidV2BufferSize = 96;
constexpr int kNvmlFeatureEnabled = 1;  // nvmlEnableState_t

// nvmlPciInfo_t (v3 layout, as used by nvmlDeviceGetPciInfo_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2).
struct NvmlPciInfo {
  char bus_id_legacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_sub_system_id;
  char bus_id[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};

// nvmlMemory_t: total, free, used bytes.
struct NvmlMemory {
  unsigned long long total;  // NOLINT(runtime/int): NVML's declared type
  unsigned long long free;   // NOLINT(runtime/int)
  unsigned long long used;   // NOLINT(runtime/int)
};
constexpr unsigned int kNvmlDeviceNameV2BufferSize = 96;

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetUuidFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetPciFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlPciInfo*);
using GetAncestorFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int*);
using GetLinkStateFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, int*);
using GetRemotePciFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                        NvmlPciInfo*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using GetNameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*);

std::string PciInfoBusId(const NvmlPciInfo& info) {
  std::string id(info.bus_id, strnlen(info.bus_id, sizeof(info.bus_id)));
  if (id.empty()) {
    id.assign(info.bus_id_legacy,
              strnlen(info.bus_id_legacy, sizeof(info.bus_id_legacy)));
  }
  return NormalizePciBusId(id);
}

// Every NVLink of every GPU that answers nvmlDeviceGetNvLinkState (a link
// that does not is not present on that GPU), with its remote PCI id when the
// optional get_remote_pci exists.
std::vector<NvLinkObservation> ReadNvLinks(
    const std::vector<nvmlDevice_t>& handles, GetLinkStateFn get_link_state,
    GetRemotePciFn get_remote_pci) {
  std::vector<NvLinkObservation> links;
  for (unsigned int i = 0; i < handles.size(); ++i) {
    for (int link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
      int state = 0;
      if (get_link_state(handles[i], link, &state) != kNvmlSuccess) {
        continue;  // link not present on this GPU
      }
      NvLinkObservation obs;
      obs.gpu = static_cast<int>(i);
      obs.link = link;
      obs.active = state == kNvmlFeatureEnabled;
      NvmlPciInfo remote;
      std::memset(&remote, 0, sizeof(remote));
      if (get_remote_pci != nullptr &&
          get_remote_pci(handles[i], link, &remote) == kNvmlSuccess) {
        obs.remote_pci_bus_id = PciInfoBusId(remote);
      }
      links.push_back(std::move(obs));
    }
  }
  return links;
}

class NvmlLibrarySource : public NvmlSource {
 public:
  absl::StatusOr<NvmlSnapshot> Read() override {
    // Kept loaded for the process lifetime; NVML is cheap to keep mapped and
    // repeated dlopen/dlclose cycles of driver libraries are a known crash
    // source.
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      // dlerror() already names the library.
      return absl::UnavailableError(absl::StrCat(
          "NVML not loadable (",
          err != nullptr ? err : "libnvidia-ml.so.1: not found", ")"));
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
    auto shutdown = reinterpret_cast<ShutdownFn>(sym("nvmlShutdown"));
    auto get_count = reinterpret_cast<GetCountFn>(sym("nvmlDeviceGetCount_v2"));
    auto get_handle =
        reinterpret_cast<GetHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
    auto get_uuid = reinterpret_cast<GetUuidFn>(sym("nvmlDeviceGetUUID"));
    auto get_pci = reinterpret_cast<GetPciFn>(sym("nvmlDeviceGetPciInfo_v3"));
    auto get_ancestor = reinterpret_cast<GetAncestorFn>(
        sym("nvmlDeviceGetTopologyCommonAncestor"));
    auto get_link_state =
        reinterpret_cast<GetLinkStateFn>(sym("nvmlDeviceGetNvLinkState"));
    auto get_remote_pci = reinterpret_cast<GetRemotePciFn>(
        sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    auto error_string = reinterpret_cast<ErrorStringFn>(sym("nvmlErrorString"));
    // Optional: used when CUDA is absent or cannot name a GPU.
    get_name_ = reinterpret_cast<GetNameFn>(sym("nvmlDeviceGetName"));
    get_memory_ = reinterpret_cast<GetMemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
    if (init == nullptr || shutdown == nullptr || get_count == nullptr ||
        get_handle == nullptr || get_uuid == nullptr || get_pci == nullptr ||
        get_ancestor == nullptr) {
      return absl::UnavailableError(
          "libnvidia-ml.so.1 lacks a required symbol (nvmlInit_v2, "
          "nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, "
          "nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3, "
          "nvmlDeviceGetTopologyCommonAncestor)");
    }
    auto describe = [&](nvmlReturn_t rc) {
      std::string text = absl::StrCat(rc);
      if (error_string != nullptr && error_string(rc) != nullptr) {
        absl::StrAppend(&text, " ", error_string(rc));
      }
      return text;
    };
    nvmlReturn_t rc = init();
    if (rc != kNvmlSuccess) {
      return absl::UnavailableError(
          absl::StrCat("nvmlInit_v2 failed: ", describe(rc)));
    }
    absl::StatusOr<NvmlSnapshot> result =
        ReadInitialized(get_count, get_handle, get_uuid, get_pci, get_ancestor,
                        get_link_state, get_remote_pci, describe);
    shutdown();
    return result;
  }

 private:
  template <typename Describe>
  absl::StatusOr<NvmlSnapshot> ReadInitialized(
      GetCountFn get_count, GetHandleFn get_handle, GetUuidFn get_uuid,
      GetPciFn get_pci, GetAncestorFn get_ancestor,
      GetLinkStateFn get_link_state, GetRemotePciFn get_remote_pci,
      const Describe& describe) {
    unsigned int count = 0;
    nvmlReturn_t rc = get_count(&count);
    if (rc != kNvmlSuccess) {
      return absl::UnavailableError(
          absl::StrCat("nvmlDeviceGetCount_v2 failed: ", describe(rc)));
    }
    NvmlSnapshot snapshot;
    snapshot.origin = "libnvidia-ml.so.1";
    std::vector<nvmlDevice_t> handles(count, nullptr);
    for (unsigned int i = 0; i < count; ++i) {
      rc = get_handle(i, &handles[i]);
      if (rc != kNvmlSuccess) {
        return absl::InternalError(absl::StrCat(
            "nvmlDeviceGetHandleByIndex_v2(", i, "): ", describe(rc)));
      }
      NvmlGpuRecord gpu;
      gpu.index = static_cast<int>(i);
      char uuid[kNvmlDeviceUuidV2BufferSize] = {0};
      if (get_uuid(handles[i], uuid, sizeof(uuid)) == kNvmlSuccess) {
        gpu.uuid = uuid;
      }
      NvmlPciInfo pci;
      std::memset(&pci, 0, sizeof(pci));
      if (get_pci(handles[i], &pci) == kNvmlSuccess) {
        gpu.pci_bus_id = PciInfoBusId(pci);
      }
      char name[kNvmlDeviceNameV2BufferSize] = {0};
      if (get_name_ != nullptr &&
          get_name_(handles[i], name, sizeof(name)) == kNvmlSuccess) {
        gpu.name = name;
      }
      NvmlMemory memory = {0, 0, 0};
      if (get_memory_ != nullptr &&
          get_memory_(handles[i], &memory) == kNvmlSuccess) {
        gpu.memory_bytes = memory.total;
      }
      snapshot.gpus.push_back(std::move(gpu));
    }
    for (unsigned int a = 0; a < count; ++a) {
      for (unsigned int b = a + 1; b < count; ++b) {
        NvmlPairRecord pair;
        pair.gpu_a = static_cast<int>(a);
        pair.gpu_b = static_cast<int>(b);
        int level = kNvmlTopologySystem;
        if (get_ancestor(handles[a], handles[b], &level) == kNvmlSuccess) {
          pair.common_ancestor_level = level;
        }
        snapshot.pairs.push_back(pair);
      }
    }
    // NVLink queries are optional: PCIe-only GPUs answer NOT_SUPPORTED.
    if (get_link_state != nullptr) {
      AggregateNvLinks(snapshot.gpus,
                       ReadNvLinks(handles, get_link_state, get_remote_pci),
                       snapshot.pairs);
    }
    return snapshot;
  }

  GetNameFn get_name_ = nullptr;  // optional symbols, set by Read()
  GetMemoryFn get_memory_ = nullptr;
};

}  // namespace

std::unique_ptr<NvmlSource> MakeNvmlLibrarySource() {
  return std::make_unique<NvmlLibrarySource>();
}

}  // namespace monta::topology
