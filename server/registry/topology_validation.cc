#include "server/registry/topology_validation.h"

#include <initializer_list>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/nic_state.h"

namespace monta::registry {
namespace {

constexpr size_t kMaxLabelKey = 317;  // Kubernetes: 253 prefix + '/' + 63 name
constexpr size_t kMaxLabelValue = 63;
// 10 Tb/s per port: far above any NIC.
constexpr double kMaxNicBytesPerSecond = 10000e9 / 8;

absl::Status Bad(const std::string& field, const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", expected));
}

// Checks the sizes of one topology against its limits; the messages name the
// field and the planner flag an operator raises for a larger node.
class SizeChecker {
 public:
  SizeChecker(const TopologyLimits& limits, const std::string& prefix)
      : limits_(limits), prefix_(prefix) {}

  // A name, id or address.
  absl::Status String(const std::string& value,
                      const std::string& field) const {
    return Bytes(value, limits_.max_string_bytes, field,
                 "--max_topology_string_bytes");
  }
  // A free-text field (status, cpu_list).
  absl::Status Text(const std::string& value, const std::string& field) const {
    return Bytes(value, limits_.max_text_bytes, field,
                 "--max_topology_text_bytes");
  }
  // A repeated field: "FIELD: COUNT entries, at most MAX (FLAG)".
  absl::Status Count(int count, const std::string& field) const {
    if (count <= limits_.max_entries) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat(prefix_, field, ": ", count, " entries, at most ",
                     limits_.max_entries, " (--max_topology_entries)"));
  }

 private:
  absl::Status Bytes(const std::string& value, size_t max,
                     const std::string& field, const char* flag) const {
    if (value.size() <= max) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat(prefix_, field, ": ", value.size(), " bytes, at most ",
                     max, " (", flag, ")"));
  }

  const TopologyLimits& limits_;
  const std::string& prefix_;
};

// Returns the first error of `statuses`, or OK.
absl::Status FirstError(std::initializer_list<absl::Status> statuses) {
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateTexts(const monta::v1::NodeTopology& t,
                           const SizeChecker& size) {
  return FirstError({
      size.String(t.hostname(), ".hostname"),
      size.String(t.kubernetes_node_name(), ".kubernetes_node_name"),
      size.String(t.profile_name(), ".profile_name"),
      size.Text(t.cuda_status(), ".cuda_status"),
      size.Text(t.nvml_status(), ".nvml_status"),
      size.Text(t.nic_status(), ".nic_status"),
  });
}

absl::Status ValidateLabels(const monta::v1::NodeTopology& t,
                            const std::string& p, const SizeChecker& size) {
  if (absl::Status s = size.Count(t.labels_size(), ".labels"); !s.ok()) {
    return s;
  }
  for (const auto& [key, value] : t.labels()) {
    if (key.empty() || key.size() > kMaxLabelKey ||
        value.size() > kMaxLabelValue) {
      return Bad(absl::StrCat(p, ".labels[", EchoInput(key), "]"),
                 "a Kubernetes label: key 1..317 characters, value at most 63");
    }
  }
  return absl::OkStatus();
}

// The GPUs; `indices` receives their (unique) indices.
absl::Status ValidateGpus(const monta::v1::NodeTopology& t,
                          const std::string& p, const SizeChecker& size,
                          int max_gpus, std::set<int>* indices) {
  if (absl::Status s = size.Count(t.gpus_size(), ".gpus"); !s.ok()) return s;
  for (int i = 0; i < t.gpus_size(); ++i) {
    const auto& gpu = t.gpus(i);
    const std::string f = absl::StrCat(".gpus[", i, "]");
    if (gpu.index() < 0 || gpu.index() >= max_gpus) {
      return Bad(p + f + ".index",
                 absl::StrCat("in 0..", max_gpus - 1, ", got ", gpu.index()));
    }
    if (!indices->insert(gpu.index()).second) {
      return Bad(p + f + ".index",
                 absl::StrCat("unique, but ", gpu.index(), " appears twice"));
    }
    if (absl::Status s = FirstError({
            size.String(gpu.name(), f + ".name"),
            size.String(gpu.uuid(), f + ".uuid"),
            size.String(gpu.pci_bus_id(), f + ".pci_bus_id"),
            size.String(gpu.nearest_nic(), f + ".nearest_nic"),
        });
        !s.ok()) {
      return s;
    }
    if (gpu.sm_count() < 0) return Bad(p + f + ".sm_count", "at least 0");
  }
  return absl::OkStatus();
}

// GPU pairs, each once, between GPUs in `indices`.
absl::Status ValidateGpuLinks(const monta::v1::NodeTopology& t,
                              const std::string& p,
                              const std::set<int>& indices) {
  // Unique pairs of existing GPUs: at most n*(n-1)/2 for n GPUs.
  const size_t n = indices.size();
  const size_t max_links = n < 2 ? 0 : n * (n - 1) / 2;
  if (static_cast<size_t>(t.gpu_links_size()) > max_links) {
    return absl::ResourceExhaustedError(absl::StrCat(
        p, ".gpu_links: ", t.gpu_links_size(), " entries, at most ", max_links,
        " (one per pair of the ", n, " GPUs)"));
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
                          const std::string& p, const SizeChecker& size) {
  if (absl::Status s = size.Count(t.nics_size(), ".nics"); !s.ok()) return s;
  for (int i = 0; i < t.nics_size(); ++i) {
    const auto& nic = t.nics(i);
    const std::string f = absl::StrCat(".nics[", i, "]");
    if (nic.name().empty()) return Bad(p + f + ".name", "not empty");
    if (absl::Status s = FirstError({
            size.String(nic.name(), f + ".name"),
            size.String(nic.link_layer(), f + ".link_layer"),
            size.String(nic.state(), f + ".state"),
            size.String(nic.phys_state(), f + ".phys_state"),
            size.String(nic.pci_address(), f + ".pci_address"),
        });
        !s.ok()) {
      return s;
    }
    if (!(nic.rate_bytes_per_second() >= 0 &&
          nic.rate_bytes_per_second() <= kMaxNicBytesPerSecond)) {
      return Bad(p + f + ".rate_bytes_per_second",
                 absl::StrCat("in 0..", kMaxNicBytesPerSecond,
                              " (10 Tb/s), got ", nic.rate_bytes_per_second()));
    }
    if (nic.port() < 0 || nic.port() > 255) {
      return Bad(p + f + ".port", "in 0..255");
    }
    if (absl::Status s = nic_state::CheckKindsAgree(nic, p + f); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNumaNodes(const monta::v1::NodeTopology& t,
                               const SizeChecker& size) {
  if (absl::Status s = size.Count(t.numa_nodes_size(), ".numa_nodes");
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < t.numa_nodes_size(); ++i) {
    if (absl::Status s =
            size.Text(t.numa_nodes(i).cpu_list(),
                      absl::StrCat(".numa_nodes[", i, "].cpu_list"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTopology(const monta::v1::NodeTopology& t,
                              const TopologyLimits& limits,
                              const char* prefix) {
  const std::string p = prefix;
  const SizeChecker size(limits, p);
  if (absl::Status s = ValidateTexts(t, size); !s.ok()) return s;
  if (absl::Status s = ValidateLabels(t, p, size); !s.ok()) return s;
  std::set<int> gpu_indices;
  if (absl::Status s =
          ValidateGpus(t, p, size, limits.max_entries, &gpu_indices);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateGpuLinks(t, p, gpu_indices); !s.ok()) return s;
  if (absl::Status s = ValidateNics(t, p, size); !s.ok()) return s;
  if (absl::Status s = ValidateNumaNodes(t, size); !s.ok()) return s;
  if (t.cpu_sockets() < 0 || t.cpu_logical_count() < 0) {
    return Bad(p + ".cpu_sockets/cpu_logical_count", "at least 0");
  }
  return absl::OkStatus();
}

}  // namespace monta::registry
