// Test helper: turns a recorded sysfs tree from testdata/ into a real one.
//
// Recorded trees cannot hold ':' in names (Bazel labels forbid it) and symlinks
// do not survive Bazel data deps reliably, so testdata/ writes ':' as "%3A" and
// a symlink NAME as a file NAME.link containing the target. Materializing
// restores both, so the code under test reads a tree exactly like /sys.
#ifndef MONTA_AGENT_TOPOLOGY_SYSFS_FIXTURE_H_
#define MONTA_AGENT_TOPOLOGY_SYSFS_FIXTURE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace monta::topology {

// Absolute-or-cwd-relative path of a data file given its workspace path, e.g.
// "agent/topology/testdata/dgx_h100/cuda.yaml". `bazel test` runs in the
// runfiles root, so the workspace path itself usually works; TEST_SRCDIR is the
// fallback.
std::string RunfilePath(const std::string& workspace_path);

// Recreates `fixture_dir` (a recorded tree) as a real tree at `dest_dir`.
absl::Status MaterializeSysfsFixture(const std::string& fixture_dir,
                                     const std::string& dest_dir);

// Materializes agent/topology/testdata/<name> into a fresh directory under
// TEST_TMPDIR and returns that directory.
absl::StatusOr<std::string> MaterializeTestdataSysfs(const std::string& name);

}  // namespace monta::topology

#endif  // MONTA_AGENT_TOPOLOGY_SYSFS_FIXTURE_H_
