#include "common/topology_diff.h"

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "common/nic_state.h"

namespace monta::topology_diff {
namespace {

using monta::v1::Gpu;
using monta::v1::GpuLink;
using monta::v1::Nic;
using monta::v1::NodeTopology;
namespace v1 = monta::v1;

// Concatenates with ostream formatting, so 400.0 prints as "400" and 2.5 as
// "2.5".
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
  const std::string state = nic_state::PortStateText(nic);
  const std::string phys = nic_state::PhysStateText(nic);
  return StrCat(state.empty() ? "?" : state, "/", phys.empty() ? "?" : phys);
}

// What the port's state and physical state mean: the enums, plus the raw text
// where they do not name a value (UNKNOWN, or nothing known).
struct StateKey {
  v1::NicPortState state;
  std::string state_text;
  v1::NicPhysState phys;
  std::string phys_text;

  explicit StateKey(const Nic& nic)
      : state(nic_state::PortStateOf(nic)), phys(nic_state::PhysStateOf(nic)) {
    if (state == v1::NIC_PORT_STATE_UNKNOWN ||
        state == v1::NIC_PORT_STATE_UNSPECIFIED) {
      state_text = nic.state();
    }
    if (phys == v1::NIC_PHYS_STATE_UNKNOWN ||
        phys == v1::NIC_PHYS_STATE_UNSPECIFIED) {
      phys_text = nic.phys_state();
    }
  }
  bool operator!=(const StateKey& o) const {
    return state != o.state || state_text != o.state_text || phys != o.phys ||
           phys_text != o.phys_text;
  }
};

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
      changes->push_back({v1::TOPOLOGY_CHANGE_GPU_REMOVED, subject,
                          StrCat(Describe(*old_gpu->second), " removed")});
    }
    if (has) {
      changes->push_back({v1::TOPOLOGY_CHANGE_GPU_ADDED, subject,
                          StrCat(Describe(*new_gpu->second), " added")});
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
      changes->push_back({v1::TOPOLOGY_CHANGE_NIC_REMOVED, subject,
                          StrCat(NicLabel(*old_nic->second), " removed")});
      continue;
    }
    const Nic& now = *new_nic->second;
    if (old_nic == nics_before.end()) {
      changes->push_back({v1::TOPOLOGY_CHANGE_NIC_ADDED, subject,
                          StrCat(NicLabel(now), " added: ", Gbps(now), " Gb/s ",
                                 StateText(now))});
      continue;
    }
    const Nic& was = *old_nic->second;
    if (was.rate_bytes_per_second() != now.rate_bytes_per_second()) {
      changes->push_back({v1::TOPOLOGY_CHANGE_NIC_RATE_CHANGED, subject,
                          StrCat(NicLabel(now), ": rate ", Gbps(was), " -> ",
                                 Gbps(now), " Gb/s")});
    }
    if (StateKey(was) != StateKey(now)) {
      changes->push_back({v1::TOPOLOGY_CHANGE_NIC_STATE_CHANGED, subject,
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
    changes->push_back({now.nvlink_count() < was_count
                            ? v1::TOPOLOGY_CHANGE_NVLINK_DOWN
                            : v1::TOPOLOGY_CHANGE_NVLINK_UP,
                        subject, std::move(message)});
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
        {v1::TOPOLOGY_CHANGE_NVLINK_DOWN,
         StrCat("gpu", key.first, "-gpu", key.second),
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

std::vector<v1::TopologyEvent> DiffTopologyEvents(const NodeTopology& before,
                                                  const NodeTopology& after) {
  std::vector<v1::TopologyEvent> events;
  for (TopologyChange& change : DiffTopology(before, after)) {
    v1::TopologyEvent event;
    event.set_change(change.kind);
    event.set_message(std::move(change.message));
    events.push_back(std::move(event));
  }
  return events;
}

}  // namespace monta::topology_diff
