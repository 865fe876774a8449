// The sysfs readers (agent/topology/sysfs): the agent trusts the kernel's tree
// less than it seems (containers mount odd trees, virtual NICs leave files
// out), so any tree must give NICs, NUMA nodes and PCI paths plus error lines,
// never a crash, and symlinks must resolve inside the root.
//
// The input is a small tree, one entry per line:
//   F <path> <contents>   a file; "\n" and "\\" in the contents are escapes
//   L <path> <target>     a symbolic link (kept inside the tree: SafeTarget)
//   D <path>              a directory
// Paths are relative, at most 12 components, none empty, "." or "..", and
// never below a link made before; parents are created as needed; other lines
// are ignored. The tree is written
// to a fresh temporary directory per input (under $TEST_TMPDIR,
// $MONTA_FUZZ_TMPDIR, /dev/shm or $TMPDIR, the first that is set or exists),
// then scanned the way discovery
// does, and every file's contents also go through the pure parsers. Every NIC
// read carries link layer and state enums that agree with its raw texts (the
// planner refuses a Register where they do not).
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "agent/topology/sysfs.h"
#include "common/nic_state.h"

namespace {

namespace fs = std::filesystem;
using monta::topology::SysfsTree;

constexpr int kMaxEntries = 64;
constexpr size_t kMaxComponents = 12;

void Check(bool condition) {
  if (!condition) std::abort();
}

// Where the trees are written: the test's own directory under `bazel test`,
// else memory (/dev/shm) when there is one, since a disk-backed /tmp makes
// the thousands of file operations per second the slowest part of the run.
std::string TempParent() {
  for (const char* name : {"TEST_TMPDIR", "MONTA_FUZZ_TMPDIR"}) {
    const char* dir = std::getenv(name);
    if (dir != nullptr && *dir != '\0') return dir;
  }
  std::error_code ec;
  if (access("/dev/shm", W_OK) == 0 && fs::is_directory("/dev/shm", ec)) {
    return "/dev/shm";
  }
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

const fs::path& Root() {
  static const fs::path* const root = [] {
    std::string pattern = TempParent() + "/monta-sysfs-fuzz-XXXXXX";
    Check(mkdtemp(pattern.data()) != nullptr);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(Root(), ec);
    });
    return new fs::path(pattern);
  }();
  return *root;
}

bool SafePath(absl::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  if (parts.size() > kMaxComponents) return false;
  for (absl::string_view part : parts) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// True when `path` or one of its parents is a link made earlier: writing
// there would follow the link, possibly out of the tree.
bool UnderLink(absl::string_view path, const std::set<std::string>& links) {
  for (size_t end = path.find('/');; end = path.find('/', end + 1)) {
    if (links.count(std::string(path.substr(0, end))) > 0) return true;
    if (end == absl::string_view::npos) return false;
  }
}

// The target of a link at `path`, kept inside the tree when the kernel follows
// it (reading a file through links): a relative target may climb (leading
// "..") at most to the root and then only descends; an absolute one becomes
// the same path under the root, which SysfsTree::Resolve rebases like
// "/sys/...". Every link obeying this, no chain of them leaves the tree, so a
// fuzzed tree can never make the scan read /dev/zero or a file of the host.
std::optional<std::string> SafeTarget(absl::string_view path,
                                      absl::string_view target) {
  const std::vector<absl::string_view> parts =
      absl::StrSplit(target, '/', absl::SkipEmpty());
  size_t ups = 0;
  bool descending = false;
  for (absl::string_view part : parts) {
    if (part == "..") {
      if (descending) return std::nullopt;
      ++ups;
    } else if (part == ".") {
      return std::nullopt;
    } else {
      descending = true;
    }
  }
  if (absl::StartsWith(target, "/")) {
    if (ups > 0) return std::nullopt;
    return absl::StrCat(Root().string(), "/", absl::StrJoin(parts, "/"));
  }
  const size_t depth = std::count(path.begin(), path.end(), '/');
  if (ups > depth) return std::nullopt;
  return std::string(target);
}

std::string Unescape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      out += text[i + 1] == 'n' ? '\n' : text[i + 1];
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

// Writes the tree; returns the contents of every file written.
std::vector<std::string> Materialize(absl::string_view input) {
  std::error_code ec;
  fs::remove_all(Root(), ec);
  fs::create_directories(Root(), ec);
  std::vector<std::string> contents;
  // Directories made so far: create_directories stats every component, and
  // deep sysfs paths share most of them.
  std::set<fs::path> made;
  std::set<std::string> links;  // relative paths of the links made
  auto make_parent = [&](const fs::path& where) {
    if (made.insert(where.parent_path()).second) {
      fs::create_directories(where.parent_path(), ec);
    }
  };
  int entries = 0;
  for (absl::string_view line : absl::StrSplit(input, '\n')) {
    if (++entries > kMaxEntries) break;
    if (line.size() < 3 || line[1] != ' ') continue;
    const char kind = line[0];
    line.remove_prefix(2);
    const size_t space = line.find(' ');
    const absl::string_view path = line.substr(0, space);
    const absl::string_view rest =
        space == absl::string_view::npos ? "" : line.substr(space + 1);
    if (!SafePath(path) || UnderLink(path, links)) continue;
    const fs::path where = Root() / std::string(path);
    make_parent(where);
    if (kind == 'F') {
      contents.push_back(Unescape(rest));
      std::ofstream(where, std::ios::binary) << contents.back();
    } else if (kind == 'L') {
      const std::optional<std::string> target = SafeTarget(path, rest);
      if (!target.has_value()) continue;
      fs::create_symlink(*target, where, ec);
      if (!ec) links.insert(std::string(path));
    } else if (kind == 'D') {
      fs::create_directories(where, ec);
    }
  }
  return contents;
}

// A resolved path is relative to the root and lexically inside it.
void CheckResolved(const std::string& resolved) {
  if (resolved.empty()) return;
  Check(resolved.front() != '/');
  for (absl::string_view part : absl::StrSplit(resolved, '/')) {
    Check(!part.empty() && part != "." && part != "..");
  }
}

void Scan(const SysfsTree& tree) {
  const monta::topology::NicScan nics = monta::topology::ScanNics(tree);
  for (const std::string& error : nics.errors) Check(!error.empty());
  for (const monta::v1::Nic& nic : nics.nics) {
    Check(monta::nic_state::CheckKindsAgree(nic, "nic").ok());
    Check(nic.state().empty() ==
          (nic.state_kind() == monta::v1::NIC_PORT_STATE_UNSPECIFIED));
  }
  (void)monta::topology::ScanCpus(tree);
  std::vector<monta::topology::PciLocation> devices;
  for (const std::string& name : tree.List("bus/pci/devices")) {
    absl::StatusOr<std::string> resolved =
        tree.Resolve("bus/pci/devices/" + name);
    if (resolved.ok()) CheckResolved(*resolved);
    absl::StatusOr<monta::topology::PciLocation> location =
        monta::topology::LocatePciDevice(tree, name);
    if (location.ok()) devices.push_back(*std::move(location));
  }
  for (const auto& a : devices) {
    for (const auto& b : devices) {
      Check(monta::topology::ClassifyPciPath(a, b) ==
            monta::topology::ClassifyPciPath(b, a));
    }
  }
  for (const std::string& device : tree.List("class/infiniband")) {
    absl::StatusOr<std::string> resolved =
        tree.Resolve("class/infiniband/" + device + "/device");
    if (resolved.ok()) CheckResolved(*resolved);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  for (const std::string& text : Materialize(input)) {
    (void)monta::topology::ParseIbRateGbps(text);
    (void)monta::topology::ParseIbState(text);
    (void)monta::topology::CountCpuList(text);
  }
  Scan(SysfsTree(Root().string()));
  return 0;
}
