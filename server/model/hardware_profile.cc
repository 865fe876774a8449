#include "server/model/hardware_profile.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace monta::model {
namespace {

// Sources, quoted once so every profile cites the same text. Most are listed
// in docs/REFERENCES.md; the memory bandwidths come from NVIDIA's
// datasheets because the copy stage is bounded by HBM, not by a fabric.
constexpr char kSrcA800NvLink[] =
    "A800 NVLink 400 GB/s bidirectional = 200 GB/s per direction: "
    "https://tweakers.net/nieuws/203182/ ; https://aiwiki.ai/wiki/nvidia_a800";
constexpr char kSrcA100NvLink[] =
    "A100 NVLink 600 GB/s bidirectional = 300 GB/s per direction: "
    "https://aiwiki.ai/wiki/nvidia_a800 (A100 comparison)";
constexpr char kSrcH800NvLink[] =
    "H800 NVLink 400 GB/s bidirectional = 200 GB/s per direction: "
    "github.com/deepseek-ai/DeepSeek-V3/issues/28 ; deepseek-ai/DeepEP#16";
constexpr char kSrcH100NvLink[] =
    "NVLink4, 18 links, 900 GB/s bidirectional = 450 GB/s per direction: "
    "github.com/NVIDIA/nccl-tests/issues/212 ; mlcommons/"
    "inference_results_v4.1 H200-SXM-141GBx8 system description";
constexpr char kSrcHdr[] =
    "InfiniBand HDR 200 Gb/s per NIC (25 GB/s per direction, MoNTA arXiv "
    "2411.00662); 4 NICs per A800 node per the MoNTA setting, docs/MODEL.md §7";
constexpr char kSrcHdr8[] =
    "8 x 200 Gb/s HDR, one NIC per GPU (docs/MODEL.md §7 variant; NVIDIA DGX "
    "A100 datasheet: 8 single-port ConnectX-6 200 Gb/s)";
constexpr char kSrcNdr[] =
    "ConnectX-7 NDR 400 Gb/s = 50 GB/s per direction, one per GPU: "
    "docs.nvidia.com/networking/display/connectx7vpiocp3 ; "
    "deepseek-ai/DeepEP docs/legacy.md (H800 + CX7 400 Gb/s)";
constexpr char kSrcNvLinkEff[] =
    "NCCL reaches ~370 of 450 GB/s busbw on non-allreduce collectives (~0.82 "
    "of NVLink line rate): github.com/NVIDIA/nccl-tests/issues/212";
constexpr char kSrcNicEff[] =
    "NIC efficiency 0.95-0.98; CX-7 NDR reaches 48-49 of 50 GB/s: "
    "github.com/NVIDIA/nccl-tests/issues/267";
constexpr char kSrcA100Hbm[] =
    "A100/A800 80GB SXM HBM2e 2,039 GB/s: NVIDIA A100 datasheet "
    "(nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)";
constexpr char kSrcH100Hbm[] =
    "H100/H800 SXM HBM3 3.35 TB/s: https://www.nvidia.com/en-us/data-center/"
    "h100/";
constexpr char kSrcH200Hbm[] =
    "H200 SXM HBM3e 4.8 TB/s: https://www.nvidia.com/en-us/data-center/h200/";
constexpr char kSrcCopyEff[] =
    "assumption: a device copy kernel reaches ~80% of memory bandwidth; "
    "replace with a measured copy curve";
constexpr char kSrcA2aLatency[] =
    "NCCL AllToAll small-message latency 11.8-13.1 us on 8 GPUs: "
    "NVIDIA/nccl contrib/custom_algos/alltoall/README.md";
constexpr char kSrcA2aPerPeer[] =
    "same source: 28-35 us on 32 GPUs vs 11.8-13.1 us on 8, ~0.8 us per "
    "extra peer (NVIDIA/nccl contrib/custom_algos/alltoall/README.md)";
constexpr char kSrcAgLatency[] =
    "assumption: of the order of the NCCL AllToAll launch latency "
    "(NVIDIA/nccl contrib/custom_algos/alltoall/README.md)";
constexpr char kSrcCopyLatency[] =
    "assumption: kernel launch and scheduling of a small copy; MoNTA (arXiv "
    "2411.00662) notes small device copies suffer from kernel scheduling";
constexpr char kSrcGpusPerNode[] = "HGX baseboard: 8 GPUs per node";

using Field = double HardwareProfile::*;

// Sets one constant and records it with its unit and source.
void Set(HardwareProfile& p, Field field, const char* name, double value,
         const char* unit, const char* source) {
  p.*field = value;
  p.constants.push_back({name, value, unit, source});
}

void SetCount(HardwareProfile& p, int HardwareProfile::*field, const char* name,
              int value, const char* source) {
  p.*field = value;
  p.constants.push_back({name, static_cast<double>(value), "count", source});
}

void SetGbps(HardwareProfile& p, double gbps, const char* source) {
  // Datasheets give Gb/s; the contract carries bytes per second only.
  p.nic_bytes_per_second = gbps * 1e9 / 8;
  p.constants.push_back({"nic_bytes_per_second", p.nic_bytes_per_second,
                         "bytes_per_second", source});
}

// Constants shared by the NVIDIA HGX profiles; fabric rates differ per class.
HardwareProfile Hgx(const char* name, const char* description,
                    double nvlink_bytes_per_second, const char* nvlink_source,
                    int nics, double nic_gbps, const char* nic_source,
                    double memory_bytes_per_second, const char* memory_source) {
  HardwareProfile p;
  p.name = name;
  p.version = "1";
  p.description = description;
  SetCount(p, &HardwareProfile::gpus_per_node, "gpus_per_node", 8,
           kSrcGpusPerNode);
  SetCount(p, &HardwareProfile::nics_per_node, "nics_per_node", nics,
           nic_source);
  SetGbps(p, nic_gbps, nic_source);
  Set(p, &HardwareProfile::nvlink_bytes_per_second, "nvlink_bytes_per_second",
      nvlink_bytes_per_second, "bytes_per_second", nvlink_source);
  Set(p, &HardwareProfile::nvlink_efficiency, "nvlink_efficiency", 0.82,
      "ratio", kSrcNvLinkEff);
  Set(p, &HardwareProfile::nic_efficiency, "nic_efficiency", 0.95, "ratio",
      kSrcNicEff);
  Set(p, &HardwareProfile::memory_bytes_per_second, "memory_bytes_per_second",
      memory_bytes_per_second, "bytes_per_second", memory_source);
  Set(p, &HardwareProfile::copy_efficiency, "copy_efficiency", 0.8, "ratio",
      kSrcCopyEff);
  Set(p, &HardwareProfile::alltoall_latency_seconds, "alltoall_latency_seconds",
      12e-6, "seconds", kSrcA2aLatency);
  Set(p, &HardwareProfile::alltoall_per_peer_latency_seconds,
      "alltoall_per_peer_latency_seconds", 0.8e-6, "seconds", kSrcA2aPerPeer);
  // kSrcA2aPerPeer compares 8- and 32-GPU runs.
  p.alltoall_per_peer_latency_source_min_ranks = 8;
  p.alltoall_per_peer_latency_source_max_ranks = 32;
  Set(p, &HardwareProfile::allgather_latency_seconds,
      "allgather_latency_seconds", 10e-6, "seconds", kSrcAgLatency);
  Set(p, &HardwareProfile::copy_latency_seconds, "copy_latency_seconds", 5e-6,
      "seconds", kSrcCopyLatency);
  return p;
}

// Development clusters: CPU ranks running Gloo over TCP. Every number here is
// an order-of-magnitude assumption; measured Gloo curves replace them.
HardwareProfile CpuGloo() {
  constexpr char kDev[] =
      "assumption: development cluster, Gloo over TCP; measure to replace";
  HardwareProfile p;
  p.name = "cpu-gloo";
  p.version = "1";
  p.description =
      "CPU ranks with Gloo over TCP (loopback inside a node, 10 GbE between "
      "nodes); for development clusters, not for production answers";
  SetCount(p, &HardwareProfile::gpus_per_node, "gpus_per_node", 2,
           "planner.proto RunBenchmarkRequest: 2 CPU ranks per node without "
           "GPUs");
  SetCount(p, &HardwareProfile::nics_per_node, "nics_per_node", 1, kDev);
  SetGbps(p, 10, "assumption: 10 GbE (IEEE 802.3ae) development network");
  Set(p, &HardwareProfile::nvlink_bytes_per_second, "nvlink_bytes_per_second",
      4e9, "bytes_per_second",
      "assumption: TCP loopback between processes, a few GB/s");
  Set(p, &HardwareProfile::nvlink_efficiency, "nvlink_efficiency", 0.5, "ratio",
      kDev);
  Set(p, &HardwareProfile::nic_efficiency, "nic_efficiency", 0.9, "ratio",
      kDev);
  Set(p, &HardwareProfile::memory_bytes_per_second, "memory_bytes_per_second",
      20e9, "bytes_per_second", "assumption: one DDR4/DDR5 socket, memcpy");
  Set(p, &HardwareProfile::copy_efficiency, "copy_efficiency", 0.8, "ratio",
      kDev);
  Set(p, &HardwareProfile::alltoall_latency_seconds, "alltoall_latency_seconds",
      50e-6, "seconds", kDev);
  Set(p, &HardwareProfile::alltoall_per_peer_latency_seconds,
      "alltoall_per_peer_latency_seconds", 10e-6, "seconds", kDev);
  Set(p, &HardwareProfile::allgather_latency_seconds,
      "allgather_latency_seconds", 50e-6, "seconds", kDev);
  Set(p, &HardwareProfile::copy_latency_seconds, "copy_latency_seconds", 1e-6,
      "seconds", kDev);
  return p;
}

std::vector<HardwareProfile> MakeProfiles() {
  std::vector<HardwareProfile> v;
  v.push_back(Hgx("a800-hgx",
                  "8 x A800 SXM, NVLink 200 GB/s per direction, 4 x 200 Gb/s "
                  "HDR (12.5 GB/s per GPU, 16:1): the MoNTA paper's cluster",
                  200e9, kSrcA800NvLink, 4, 200, kSrcHdr, 2039e9, kSrcA100Hbm));
  v.push_back(Hgx("a800-hgx-8nic",
                  "8 x A800 SXM, NVLink 200 GB/s per direction, 8 x 200 Gb/s "
                  "HDR (25 GB/s per GPU, 8:1)",
                  200e9, kSrcA800NvLink, 8, 200, kSrcHdr8, 2039e9,
                  kSrcA100Hbm));
  v.push_back(Hgx("a100-hgx",
                  "8 x A100 SXM, NVLink 300 GB/s per direction, 8 x 200 Gb/s "
                  "HDR (DGX A100)",
                  300e9, kSrcA100NvLink, 8, 200, kSrcHdr8, 2039e9,
                  kSrcA100Hbm));
  v.push_back(Hgx("h800-hgx",
                  "8 x H800 SXM, NVLink 200 GB/s per direction, 8 x 400 Gb/s "
                  "NDR",
                  200e9, kSrcH800NvLink, 8, 400, kSrcNdr, 3350e9, kSrcH100Hbm));
  v.push_back(Hgx("h100-hgx",
                  "8 x H100 SXM, NVLink 450 GB/s per direction, 8 x 400 Gb/s "
                  "NDR",
                  450e9, kSrcH100NvLink, 8, 400, kSrcNdr, 3350e9, kSrcH100Hbm));
  v.push_back(Hgx("h200-hgx",
                  "8 x H200 SXM, NVLink 450 GB/s per direction, 8 x 400 Gb/s "
                  "NDR",
                  450e9, kSrcH100NvLink, 8, 400, kSrcNdr, 4800e9, kSrcH200Hbm));
  v.push_back(CpuGloo());
  return v;
}

}  // namespace

double HardwareProfile::IntraNodeLinkBytesPerSecond() const {
  return nvlink_bytes_per_second * nvlink_efficiency;
}

double HardwareProfile::InterNodeLinkBytesPerSecond() const {
  // With PXN every GPU can use every NIC of its node, so a rank's network
  // share is the node's NIC capacity split over its GPUs.
  if (gpus_per_node <= 0) return 0;
  return nics_per_node * nic_bytes_per_second * nic_efficiency / gpus_per_node;
}

double HardwareProfile::CopyBytesPerSecond() const {
  return memory_bytes_per_second / 2 * copy_efficiency;
}

const std::vector<HardwareProfile>& BuiltinProfiles() {
  static const std::vector<HardwareProfile>* const profiles =
      new std::vector<HardwareProfile>(MakeProfiles());
  return *profiles;
}

absl::StatusOr<const HardwareProfile*> LookupProfile(absl::string_view name) {
  for (const HardwareProfile& p : BuiltinProfiles()) {
    if (p.name == name) return &p;
  }
  std::vector<std::string> names;
  for (const HardwareProfile& p : BuiltinProfiles()) names.push_back(p.name);
  return absl::NotFoundError(absl::StrCat("unknown hardware profile; known: ",
                                          absl::StrJoin(names, ", ")));
}

absl::StatusOr<HardwareProfile> FindProfile(absl::string_view name) {
  absl::StatusOr<const HardwareProfile*> p = LookupProfile(name);
  if (!p.ok()) return p.status();
  return **p;
}

absl::StatusOr<std::string> ProfileNameForGpu(absl::string_view gpu_name) {
  if (gpu_name.empty()) return std::string("cpu-gloo");
  const std::string upper = absl::AsciiStrToUpper(gpu_name);
  // Order matters only where one name contains another; none of these do.
  static constexpr std::pair<const char*, const char*> kMap[] = {
      {"A800", "a800-hgx"}, {"A100", "a100-hgx"}, {"H800", "h800-hgx"},
      {"H100", "h100-hgx"}, {"H200", "h200-hgx"},
  };
  for (const auto& [key, profile] : kMap) {
    if (absl::StrContains(upper, key)) return std::string(profile);
  }
  return absl::NotFoundError(absl::StrCat(
      "no built-in hardware profile for GPU \"", gpu_name,
      "\"; set the node's topology profile_name or measure its curves"));
}

absl::StatusOr<const HardwareProfile*> ProfileForNode(
    absl::string_view declared, int gpu_count, absl::string_view gpu_name) {
  if (!declared.empty()) return LookupProfile(declared);
  if (gpu_count > 0 && gpu_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reports ", gpu_count,
                     " GPUs without a name; declare its profile_name"));
  }
  absl::StatusOr<std::string> inferred =
      ProfileNameForGpu(gpu_count > 0 ? gpu_name : "");
  if (!inferred.ok()) return inferred.status();
  return LookupProfile(*inferred);
}

}  // namespace monta::model
