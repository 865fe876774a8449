#include "common/topology_diff.h"

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace monta::topology_diff {
namespace {

using monta::v1::Gpu;
using monta::v1::GpuLink;
using monta::v1::Nic;
using monta::v1::NodeTopology;

// Concatenates with ostream formatting, so 400.0 prints as "400" and 2.5 as
// "2.5". Local so that this library depends on nothing but the proto.
template <typename... Parts>
std::string StrCat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
void StrAppend(std::string* text, const Parts&... parts) {
  text->append(StrCat(parts...));
}

std::string GpuKey(const Gpu& gpu) {
  return StrCat(gpu.index(), "/", gpu.uuid());
}

std::string Describe(const Gpu& gpu) {
  std::string text = StrCat("GPU", gpu.index());
  if (!gpu.name().empty()) StrAppend(&text, " (", gpu.name(), ")");
  if (!gpu.pci_bus_id().empty()) StrAppend(&text, " at ", gpu.pci_bus_id());
  if (!gpu.uuid().empty()) StrAppend(&text, " ", gpu.uuid());
  return text;
}

std::string NicLabel(const Nic& nic) {
  return StrCat(nic.name(), " port ", nic.port());
}

// People read NIC rates in Gb/s (ibstat, the topology file); the wire carries
// bytes per second.
double Gbps(const Nic& nic) { return nic.rate_bytes_per_second() * 8 / 1e9; }

std::string StateText(const Nic& nic) {
  return StrCat(nic.state().empty() ? "?" : nic.state(), "/",
                nic.phys_state().empty() ? "?" : nic.phys_state());
}

// GPUs that appeared, disappeared or changed identity (index/UUID). Returns
// the indices involved, so that link changes on them are not reported twice.
std::set<int> DiffGpus(const NodeTopology& before, const NodeTopology& after,
                       std::vector<TopologyChange>* changes) {
  std::map<int, const Gpu*> gpus_before;
  std::map<int, const Gpu*> gpus_after;
  for (const Gpu& gpu : before.gpus()) gpus_before[gpu.index()] = &gpu;
  for (const Gpu& gpu : after.gpus()) gpus_after[gpu.index()] = &gpu;
  std::set<int> changed_gpus;
  std::set<int> indices;
  for (const auto& entry : gpus_before) indices.insert(entry.first);
  for (const auto& entry : gpus_after) indices.insert(entry.first);
  for (int index : indices) {
    auto old_gpu = gpus_before.find(index);
    auto new_gpu = gpus_after.find(index);
    const bool had = old_gpu != gpus_before.end();
    const bool has = new_gpu != gpus_after.end();
    if (had && has && GpuKey(*old_gpu->second) == GpuKey(*new_gpu->second)) {
      continue;
    }
    changed_gpus.insert(index);
    const std::string subject = StrCat("gpu", index);
    if (had) {
      changes->push_back({"gpu_removed", subject,
                          StrCat(Describe(*old_gpu->second), " removed")});
    }
    if (has) {
      changes->push_back(
          {"gpu_added", subject, StrCat(Describe(*new_gpu->second), " added")});
    }
  }
  return changed_gpus;
}

// NIC ports added, removed, or with a changed rate or state.
void DiffNics(const NodeTopology& before, const NodeTopology& after,
              std::vector<TopologyChange>* changes) {
  using PortKey = std::pair<std::string, int>;
  std::map<PortKey, const Nic*> nics_before;
  std::map<PortKey, const Nic*> nics_after;
  for (const Nic& nic : before.nics())
    nics_before[{nic.name(), nic.port()}] = &nic;
  for (const Nic& nic : after.nics())
    nics_after[{nic.name(), nic.port()}] = &nic;
  std::set<PortKey> ports;
  for (const auto& entry : nics_before) ports.insert(entry.first);
  for (const auto& entry : nics_after) ports.insert(entry.first);
  for (const PortKey& port : ports) {
    auto old_nic = nics_before.find(port);
    auto new_nic = nics_after.find(port);
    const std::string subject = StrCat(port.first, ":", port.second);
    if (new_nic == nics_after.end()) {
      changes->push_back({"nic_removed", subject,
                          StrCat(NicLabel(*old_nic->second), " removed")});
      continue;
    }
    const Nic& now = *new_nic->second;
    if (old_nic == nics_before.end()) {
      changes->push_back({"nic_added", subject,
                          StrCat(NicLabel(now), " added: ", Gbps(now), " Gb/s ",
                                 StateText(now))});
      continue;
    }
    const Nic& was = *old_nic->second;
    if (was.rate_bytes_per_second() != now.rate_bytes_per_second()) {
      changes->push_back({"nic_rate_changed", subject,
                          StrCat(NicLabel(now), ": rate ", Gbps(was), " -> ",
                                 Gbps(now), " Gb/s")});
    }
    if (was.state() != now.state() || was.phys_state() != now.phys_state()) {
      changes->push_back({"nic_state_changed", subject,
                          StrCat(NicLabel(now), ": state ", StateText(was),
                                 " -> ", StateText(now))});
    }
  }
}

// Active NVLink counts per GPU pair, skipping pairs on a GPU in
// `changed_gpus` (its add/remove already says it).
void DiffNvlinks(const NodeTopology& before, const NodeTopology& after,
                 const std::set<int>& changed_gpus,
                 std::vector<TopologyChange>* changes) {
  using PairKey = std::pair<int, int>;
  std::map<PairKey, const GpuLink*> links_before;
  for (const GpuLink& link : before.gpu_links()) {
    links_before[{link.gpu_a(), link.gpu_b()}] = &link;
  }
  for (const GpuLink& now : after.gpu_links()) {
    if (changed_gpus.count(now.gpu_a()) != 0 ||
        changed_gpus.count(now.gpu_b()) != 0) {
      continue;
    }
    auto old_link = links_before.find({now.gpu_a(), now.gpu_b()});
    const int was_count =
        old_link == links_before.end() ? 0 : old_link->second->nvlink_count();
    if (was_count == now.nvlink_count()) continue;
    const std::string subject = StrCat("gpu", now.gpu_a(), "-gpu", now.gpu_b());
    std::string message =
        StrCat("GPU", now.gpu_a(), "-GPU", now.gpu_b(), ": active NVLinks ",
               was_count, " -> ", now.nvlink_count());
    if (now.nvlink_inactive_count() > 0) {
      StrAppend(&message, " (", now.nvlink_inactive_count(), " inactive)");
    }
    changes->push_back(
        {now.nvlink_count() < was_count ? "nvlink_down" : "nvlink_up", subject,
         std::move(message)});
  }
  // Pairs that lost their entry entirely while both GPUs stayed are NVLink
  // losses too (e.g. a declared link no longer reported).
  std::set<PairKey> pairs_after;
  for (const GpuLink& link : after.gpu_links()) {
    pairs_after.insert({link.gpu_a(), link.gpu_b()});
  }
  for (const auto& [key, was] : links_before) {
    if (pairs_after.count(key) != 0 || changed_gpus.count(key.first) != 0 ||
        changed_gpus.count(key.second) != 0 || was->nvlink_count() == 0) {
      continue;
    }
    changes->push_back(
        {"nvlink_down", StrCat("gpu", key.first, "-gpu", key.second),
         StrCat("GPU", key.first, "-GPU", key.second, ": active NVLinks ",
                was->nvlink_count(), " -> 0 (pair no longer reported)")});
  }
}

}  // namespace

std::vector<TopologyChange> DiffTopology(const NodeTopology& before,
                                         const NodeTopology& after) {
  std::vector<TopologyChange> changes;
  const std::set<int> changed_gpus = DiffGpus(before, after, &changes);
  DiffNics(before, after, &changes);
  DiffNvlinks(before, after, changed_gpus, &changes);
  return changes;
}

}  // namespace monta::topology_diff
