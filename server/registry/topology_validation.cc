#include "server/registry/topology_validation.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace monta::registry {
namespace {

// Generous bounds: the largest GPU nodes today have 8 (HGX) to 72 (NVL72 trays
// are 4 per node) GPUs and up to 16 NICs.
constexpr int kMaxGpus = 64;
constexpr int kMaxNics = 64;
constexpr int kMaxNumaNodes = 64;
constexpr int kMaxLabels = 64;
constexpr size_t kMaxLabelKey = 317;  // Kubernetes: 253 prefix + '/' + 63 name
constexpr size_t kMaxLabelValue = 63;
constexpr size_t kMaxText = 256;
constexpr size_t kMaxStatus = 4096;
// 10 Tb/s per port: far above any NIC.
constexpr double kMaxNicBytesPerSecond = 10000e9 / 8;

absl::Status Bad(const std::string& field, const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", expected));
}

// A repeated field over its limit: "FIELD: at most MAX NOUN, got COUNT".
absl::Status CheckCount(int count, int max, const std::string& field,
                        const char* noun) {
  if (count <= max) return absl::OkStatus();
  return Bad(field, absl::StrCat("at most ", max, " ", noun, ", got ", count));
}

absl::Status ValidateTexts(const monta::v1::NodeTopology& t,
                           const std::string& p) {
  if (t.hostname().size() > kMaxText)
    return Bad(p + ".hostname", "at most 256 characters");
  if (t.kubernetes_node_name().size() > kMaxText) {
    return Bad(p + ".kubernetes_node_name", "at most 256 characters");
  }
  if (t.profile_name().size() > kMaxText) {
    return Bad(p + ".profile_name", "at most 256 characters");
  }
  for (const std::string* s :
       {&t.cuda_status(), &t.nvml_status(), &t.nic_status()}) {
    if (s->size() > kMaxStatus)
      return Bad(p + ".*_status", "at most 4096 characters");
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const monta::v1::NodeTopology& t,
                            const std::string& p) {
  if (absl::Status s =
          CheckCount(t.labels_size(), kMaxLabels, p + ".labels", "labels");
      !s.ok()) {
    return s;
  }
  for (const auto& [key, value] : t.labels()) {
    if (key.empty() || key.size() > kMaxLabelKey ||
        value.size() > kMaxLabelValue) {
      return Bad(absl::StrCat(p, ".labels[\"", key.substr(0, 64), "\"]"),
                 "a Kubernetes label: key 1..317 characters, value at most 63");
    }
  }
  return absl::OkStatus();
}

// The GPUs; `indices` receives their (unique) indices.
absl::Status ValidateGpus(const monta::v1::NodeTopology& t,
                          const std::string& p, std::set<int>* indices) {
  if (absl::Status s = CheckCount(t.gpus_size(), kMaxGpus, p + ".gpus", "GPUs");
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < t.gpus_size(); ++i) {
    const auto& gpu = t.gpus(i);
    const std::string f = absl::StrCat(p, ".gpus[", i, "]");
    if (gpu.index() < 0 || gpu.index() >= kMaxGpus) {
      return Bad(f + ".index",
                 absl::StrCat("in 0..", kMaxGpus - 1, ", got ", gpu.index()));
    }
    if (!indices->insert(gpu.index()).second) {
      return Bad(f + ".index",
                 absl::StrCat("unique, but ", gpu.index(), " appears twice"));
    }
    if (gpu.name().size() > kMaxText || gpu.uuid().size() > kMaxText ||
        gpu.pci_bus_id().size() > kMaxText ||
        gpu.nearest_nic().size() > kMaxText) {
      return Bad(f, "names and ids of at most 256 characters");
    }
    if (gpu.sm_count() < 0) return Bad(f + ".sm_count", "at least 0");
  }
  return absl::OkStatus();
}

// GPU pairs, each once, between GPUs in `indices`.
absl::Status ValidateGpuLinks(const monta::v1::NodeTopology& t,
                              const std::string& p,
                              const std::set<int>& indices) {
  const int max_links = kMaxGpus * (kMaxGpus - 1) / 2;
  if (t.gpu_links_size() > max_links) {
    return Bad(p + ".gpu_links", absl::StrCat("at most ", max_links, " pairs"));
  }
  std::set<std::pair<int, int>> pairs;
  for (int i = 0; i < t.gpu_links_size(); ++i) {
    const auto& link = t.gpu_links(i);
    const std::string f = absl::StrCat(p, ".gpu_links[", i, "]");
    if (indices.count(link.gpu_a()) == 0 || indices.count(link.gpu_b()) == 0) {
      return Bad(f, absl::StrCat("GPUs that exist in gpus, got ", link.gpu_a(),
                                 " and ", link.gpu_b()));
    }
    if (link.gpu_a() >= link.gpu_b()) {
      return Bad(f, absl::StrCat("gpu_a < gpu_b, got ", link.gpu_a(), " and ",
                                 link.gpu_b()));
    }
    if (!pairs.insert({link.gpu_a(), link.gpu_b()}).second) {
      return Bad(f, "each GPU pair once");
    }
    if (link.nvlink_count() < 0 || link.nvlink_count() > 64 ||
        link.nvlink_inactive_count() < 0 || link.nvlink_inactive_count() > 64) {
      return Bad(f, "NVLink counts in 0..64");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNics(const monta::v1::NodeTopology& t,
                          const std::string& p) {
  if (absl::Status s =
          CheckCount(t.nics_size(), kMaxNics, p + ".nics", "NIC ports");
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < t.nics_size(); ++i) {
    const auto& nic = t.nics(i);
    const std::string f = absl::StrCat(p, ".nics[", i, "]");
    if (nic.name().empty() || nic.name().size() > kMaxText) {
      return Bad(f + ".name", "1..256 characters");
    }
    if (!(nic.rate_bytes_per_second() >= 0 &&
          nic.rate_bytes_per_second() <= kMaxNicBytesPerSecond)) {
      return Bad(f + ".rate_bytes_per_second",
                 absl::StrCat("in 0..", kMaxNicBytesPerSecond,
                              " (10 Tb/s), got ", nic.rate_bytes_per_second()));
    }
    if (nic.port() < 0 || nic.port() > 255)
      return Bad(f + ".port", "in 0..255");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTopology(const monta::v1::NodeTopology& t,
                              const char* prefix) {
  const std::string p = prefix;
  if (absl::Status s = ValidateTexts(t, p); !s.ok()) return s;
  if (absl::Status s = ValidateLabels(t, p); !s.ok()) return s;
  std::set<int> gpu_indices;
  if (absl::Status s = ValidateGpus(t, p, &gpu_indices); !s.ok()) return s;
  if (absl::Status s = ValidateGpuLinks(t, p, gpu_indices); !s.ok()) return s;
  if (absl::Status s = ValidateNics(t, p); !s.ok()) return s;
  if (t.numa_nodes_size() > kMaxNumaNodes) {
    return Bad(p + ".numa_nodes", absl::StrCat("at most ", kMaxNumaNodes));
  }
  if (t.cpu_sockets() < 0 || t.cpu_logical_count() < 0) {
    return Bad(p + ".cpu_sockets/cpu_logical_count", "at least 0");
  }
  return absl::OkStatus();
}

}  // namespace monta::registry
