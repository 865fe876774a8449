#include "agent/topology/sysfs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/topology/gpu_source.h"
#include "common/nic_state.h"

namespace monta::topology {
namespace {

// sysfs links are a few levels deep; a longer chain means a loop.
constexpr int kMaxLinkHops = 40;

std::vector<std::string> SplitPath(absl::string_view path) {
  return absl::StrSplit(path, '/', absl::SkipEmpty());
}

bool IsPciAddress(absl::string_view name) {
  // dddd:bb:dd.f
  if (name.size() != 12 || name[4] != ':' || name[7] != ':' ||
      name[10] != '.') {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 4 || i == 7 || i == 10) continue;
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(name[i])))
      return false;
  }
  return true;
}

}  // namespace

SysfsTree::SysfsTree(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

absl::StatusOr<std::string> SysfsTree::Resolve(
    absl::string_view relative_path) const {
  std::vector<std::string> done;
  std::vector<std::string> parts = SplitPath(relative_path);
  std::deque<std::string> todo(parts.begin(), parts.end());
  int hops = 0;
  while (!todo.empty()) {
    std::string part = std::move(todo.front());
    todo.pop_front();
    if (part == ".") continue;
    if (part == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    const std::string here = absl::StrCat(root_, "/", absl::StrJoin(done, "/"),
                                          done.empty() ? "" : "/", part);
    struct stat st;
    if (lstat(here.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat(here, ": ", std::strerror(errno)));
    }
    if (!S_ISLNK(st.st_mode)) {
      done.push_back(std::move(part));
      continue;
    }
    if (++hops > kMaxLinkHops) {
      return absl::FailedPreconditionError(
          absl::StrCat(root_, "/", relative_path, ": too many symlinks"));
    }
    char target[4096];
    ssize_t len = readlink(here.c_str(), target, sizeof(target) - 1);
    if (len < 0) {
      return absl::NotFoundError(
          absl::StrCat(here, ": readlink: ", std::strerror(errno)));
    }
    absl::string_view link(target, static_cast<size_t>(len));
    if (absl::StartsWith(link, "/")) {
      // An absolute link inside the tree ("/sys/devices/..."): rebase it.
      done.clear();
      if (!root_.empty() && absl::StartsWith(link, root_ + "/")) {
        link.remove_prefix(root_.size());
      }
    }
    std::vector<std::string> link_parts = SplitPath(link);
    todo.insert(todo.begin(), link_parts.begin(), link_parts.end());
  }
  return absl::StrJoin(done, "/");
}

absl::StatusOr<std::string> SysfsTree::ReadFile(
    absl::string_view relative_path) const {
  const std::string path = absl::StrCat(root_, "/", relative_path);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(buffer.str()));
}

std::vector<std::string> SysfsTree::List(
    absl::string_view relative_path) const {
  std::vector<std::string> names;
  std::error_code ec;
  std::filesystem::directory_iterator it(
      absl::StrCat(root_, "/", relative_path), ec);
  if (ec) return names;
  for (const auto& entry : it) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<double> ParseIbRateGbps(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  const size_t space = rest.find(' ');
  double gbps = 0;
  if (space == absl::string_view::npos ||
      !absl::StartsWith(rest.substr(space + 1), "Gb/sec") ||
      !absl::SimpleAtod(rest.substr(0, space), &gbps) || gbps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate \"", text,
                     "\" is not like \"400 Gb/sec (4X NDR)\" with a "
                     "non-negative number"));
  }
  return gbps;
}

absl::StatusOr<IbState> ParseIbState(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  const size_t colon = rest.find(':');
  int code = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(rest.substr(0, colon), &code)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" is not like \"4: ACTIVE\" (number, colon, name)"));
  }
  absl::string_view name = absl::StripAsciiWhitespace(rest.substr(colon + 1));
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" has no name after the colon"));
  }
  return IbState{code, std::string(name)};
}

namespace {

// The PCI side of RDMA device `device` (its sysfs dir `base`): the address is
// the name of the directory the device link points to; soft-RoCE (rxe) and
// other virtual devices have none. Problems go to `errors`.
void ReadNicPciDevice(const SysfsTree& sysfs, const std::string& device,
                      const std::string& base, std::string* pci_address,
                      int* numa_node, std::vector<std::string>& errors) {
  absl::StatusOr<std::string> device_dir = sysfs.Resolve(base + "/device");
  if (!device_dir.ok()) {
    errors.push_back(
        absl::StrCat(device, ": no PCI device (", base, "/device missing)"));
    return;
  }
  std::string name = std::filesystem::path(*device_dir).filename();
  if (IsPciAddress(name)) {
    *pci_address = NormalizePciBusId(name);
  } else {
    errors.push_back(absl::StrCat(device, ": device link points to \"",
                                  *device_dir, "\", not a PCI address"));
  }
  absl::StatusOr<std::string> numa = sysfs.ReadFile(*device_dir + "/numa_node");
  if (numa.ok() && !absl::SimpleAtoi(*numa, numa_node)) *numa_node = -1;
}

// What a "4: ACTIVE" line means: its name's reading, or its code's when the
// name names no value (both come from one kernel table, so they agree; a
// driver's odd name must not hide a known code). Reading the name first keeps
// the raw text and the enum in agreement (the planner checks that).
template <typename Enum>
Enum IbKind(const IbState& line, Enum (*from_text)(absl::string_view),
            Enum (*from_code)(int), Enum unknown) {
  const Enum by_name = from_text(line.name);
  return by_name == unknown ? from_code(line.code) : by_name;
}

// Rate, state, phys_state and link layer of one port (sysfs dir `dir`) into
// `nic`; each unreadable one is a line in `errors` naming `where`.
void ReadNicPort(const SysfsTree& sysfs, const std::string& dir,
                 const std::string& where, monta::v1::Nic& nic,
                 std::vector<std::string>& errors) {
  absl::StatusOr<std::string> rate = sysfs.ReadFile(dir + "/rate");
  if (!rate.ok()) {
    errors.push_back(absl::StrCat(where, ": ", rate.status().message()));
  } else {
    absl::StatusOr<double> gbps = ParseIbRateGbps(*rate);
    if (gbps.ok()) {
      nic.set_rate_bytes_per_second(*gbps * 1e9 / 8);
    } else {
      errors.push_back(absl::StrCat(where, ": ", gbps.status().message()));
    }
  }
  for (const char* field : {"state", "phys_state"}) {
    absl::StatusOr<std::string> text =
        sysfs.ReadFile(absl::StrCat(dir, "/", field));
    absl::StatusOr<IbState> value =
        text.ok() ? ParseIbState(*text) : text.status();
    if (!value.ok()) {
      errors.push_back(
          absl::StrCat(where, ": ", field, ": ", value.status().message()));
      continue;
    }
    if (std::string(field) == "state") {
      nic.set_state(value->name);
      nic.set_state_kind(IbKind(*value, &nic_state::PortStateFromText,
                                &nic_state::PortStateFromCode,
                                monta::v1::NIC_PORT_STATE_UNKNOWN));
    } else {
      nic.set_phys_state(value->name);
      nic.set_phys_state_kind(IbKind(*value, &nic_state::PhysStateFromText,
                                     &nic_state::PhysStateFromCode,
                                     monta::v1::NIC_PHYS_STATE_UNKNOWN));
    }
  }
  absl::StatusOr<std::string> link_layer = sysfs.ReadFile(dir + "/link_layer");
  if (link_layer.ok()) {
    nic.set_link_layer(*link_layer);
    nic.set_link_layer_kind(nic_state::LinkLayerFromText(*link_layer));
  } else {
    errors.push_back(absl::StrCat(where, ": ", link_layer.status().message()));
  }
}

}  // namespace

NicScan ScanNics(const SysfsTree& sysfs) {
  NicScan scan;
  std::error_code ec;
  scan.class_dir_present = std::filesystem::is_directory(
      absl::StrCat(sysfs.root(), "/class/infiniband"), ec);
  for (const std::string& device : sysfs.List("class/infiniband")) {
    const std::string base = absl::StrCat("class/infiniband/", device);
    std::vector<std::string> ports = sysfs.List(base + "/ports");
    if (ports.empty()) {
      scan.errors.push_back(
          absl::StrCat(device, ": no ports under ", base, "/ports"));
      continue;
    }
    std::string pci_address;
    int numa_node = -1;
    ReadNicPciDevice(sysfs, device, base, &pci_address, &numa_node,
                     scan.errors);
    for (const std::string& port_name : ports) {
      const std::string where = absl::StrCat(device, " port ", port_name);
      int port = 0;
      if (!absl::SimpleAtoi(port_name, &port)) {
        scan.errors.push_back(
            absl::StrCat(where, ": port directory is not a number"));
        continue;
      }
      monta::v1::Nic nic;
      nic.set_name(device);
      nic.set_port(port);
      nic.set_pci_address(pci_address);
      nic.set_numa_node(numa_node);
      nic.set_provenance(monta::v1::PROVENANCE_DISCOVERED);
      ReadNicPort(sysfs, absl::StrCat(base, "/ports/", port_name), where, nic,
                  scan.errors);
      scan.nics.push_back(std::move(nic));
    }
  }
  std::sort(scan.nics.begin(), scan.nics.end(),
            [](const monta::v1::Nic& a, const monta::v1::Nic& b) {
              return std::make_pair(a.name(), a.port()) <
                     std::make_pair(b.name(), b.port());
            });
  return scan;
}

absl::StatusOr<PciLocation> LocatePciDevice(const SysfsTree& sysfs,
                                            const std::string& pci_address) {
  const std::string address = NormalizePciBusId(pci_address);
  absl::StatusOr<std::string> path =
      sysfs.Resolve(absl::StrCat("bus/pci/devices/", address));
  if (!path.ok()) return path.status();
  std::vector<std::string> parts = SplitPath(*path);
  // devices/pci0000:15/0000:15:01.0/.../0000:18:00.0
  auto host = std::find_if(
      parts.begin(), parts.end(),
      [](const std::string& p) { return absl::StartsWith(p, "pci"); });
  if (host == parts.end() || parts.back() != address) {
    return absl::FailedPreconditionError(
        absl::StrCat("PCI device ", address, " resolves to ", *path,
                     ", which is not under devices/pciDDDD:BB/"));
  }
  PciLocation location;
  location.pci_address = address;
  location.host_bridge = *host;
  location.chain.assign(host + 1, parts.end());
  absl::StatusOr<std::string> numa = sysfs.ReadFile(*path + "/numa_node");
  if (numa.ok() && !absl::SimpleAtoi(*numa, &location.numa_node)) {
    location.numa_node = -1;
  }
  return location;
}

monta::v1::PathType ClassifyPciPath(const PciLocation& a,
                                    const PciLocation& b) {
  if (a.pci_address == b.pci_address) return monta::v1::PATH_TYPE_SELF;
  if (a.host_bridge != b.host_bridge) {
    return (a.numa_node >= 0 && a.numa_node == b.numa_node)
               ? monta::v1::PATH_TYPE_NODE
               : monta::v1::PATH_TYPE_SYS;
  }
  size_t shared = 0;
  while (shared < a.chain.size() && shared < b.chain.size() &&
         a.chain[shared] == b.chain[shared]) {
    ++shared;
  }
  if (shared == 0) return monta::v1::PATH_TYPE_PHB;
  // Hops from each device up to the deepest shared bridge.
  const size_t hops_a = a.chain.size() - shared;
  const size_t hops_b = b.chain.size() - shared;
  return std::max(hops_a, hops_b) <= 2 ? monta::v1::PATH_TYPE_PIX
                                       : monta::v1::PATH_TYPE_PXB;
}

absl::StatusOr<int> CountCpuList(absl::string_view cpu_list) {
  // 64 bits: ranges near INT_MAX (a corrupt or hostile file) must not overflow.
  int64_t count = 0;
  for (absl::string_view range : absl::StrSplit(
           absl::StripAsciiWhitespace(cpu_list), ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
    int first = 0;
    int last = 0;
    if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &first) ||
        !absl::SimpleAtoi(ends.back(), &last) || first < 0 || last < first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu list \"", cpu_list, "\" is not like \"0-55,112-167\""));
    }
    count += int64_t{last} - first + 1;
    if (count > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu list \"", cpu_list, "\" counts more than ",
                       std::numeric_limits<int>::max(), " CPUs"));
    }
  }
  return static_cast<int>(count);
}

CpuScan ScanCpus(const SysfsTree& sysfs) {
  CpuScan scan;
  for (const std::string& entry : sysfs.List("devices/system/node")) {
    int id = 0;
    if (!absl::StartsWith(entry, "node") ||
        !absl::SimpleAtoi(absl::string_view(entry).substr(4), &id)) {
      continue;
    }
    const std::string dir = absl::StrCat("devices/system/node/", entry);
    monta::v1::NumaNode node;
    node.set_id(id);
    absl::StatusOr<std::string> cpus = sysfs.ReadFile(dir + "/cpulist");
    if (cpus.ok()) {
      node.set_cpu_list(*cpus);
    } else {
      scan.errors.push_back(std::string(cpus.status().message()));
    }
    // "Node 0 MemTotal:       1056545156 kB"
    absl::StatusOr<std::string> meminfo = sysfs.ReadFile(dir + "/meminfo");
    if (meminfo.ok()) {
      for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
        if (!absl::StrContains(line, "MemTotal:")) continue;
        std::vector<absl::string_view> words =
            absl::StrSplit(line, ' ', absl::SkipWhitespace());
        uint64_t kib = 0;
        if (words.size() >= 2 &&
            absl::SimpleAtoi(words[words.size() - 2], &kib)) {
          node.set_memory_bytes(kib * 1024);
        }
      }
    }
    scan.numa_nodes.push_back(std::move(node));
  }
  std::sort(scan.numa_nodes.begin(), scan.numa_nodes.end(),
            [](const monta::v1::NumaNode& a, const monta::v1::NumaNode& b) {
              return a.id() < b.id();
            });

  absl::StatusOr<std::string> online =
      sysfs.ReadFile("devices/system/cpu/online");
  if (online.ok()) {
    absl::StatusOr<int> count = CountCpuList(*online);
    if (count.ok()) {
      scan.logical_cpus = *count;
    } else {
      scan.errors.push_back(std::string(count.status().message()));
    }
  }
  std::set<int> packages;
  int cpu_dirs = 0;
  for (const std::string& entry : sysfs.List("devices/system/cpu")) {
    int id = 0;
    if (!absl::StartsWith(entry, "cpu") ||
        !absl::SimpleAtoi(absl::string_view(entry).substr(3), &id)) {
      continue;
    }
    ++cpu_dirs;
    absl::StatusOr<std::string> package = sysfs.ReadFile(absl::StrCat(
        "devices/system/cpu/", entry, "/topology/physical_package_id"));
    int package_id = 0;
    if (package.ok() && absl::SimpleAtoi(*package, &package_id)) {
      packages.insert(package_id);
    }
  }
  if (scan.logical_cpus == 0) scan.logical_cpus = cpu_dirs;
  scan.sockets = static_cast<int>(packages.size());
  if (scan.sockets == 0 && scan.logical_cpus > 0) {
    scan.errors.push_back(
        "no devices/system/cpu/cpu*/topology/physical_package_id readable");
  }
  return scan;
}

}  // namespace monta::topology
