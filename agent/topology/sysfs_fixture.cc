#include "agent/topology/sysfs_fixture.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace monta::topology {

namespace fs = std::filesystem;

std::string RunfilePath(const std::string& workspace_path) {
  std::error_code ec;
  if (fs::exists(workspace_path, ec)) return workspace_path;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr) {
    return absl::StrCat(srcdir, "/", workspace != nullptr ? workspace : "monta",
                        "/", workspace_path);
  }
  return workspace_path;
}

absl::Status MaterializeSysfsFixture(const std::string& fixture_dir,
                                     const std::string& dest_dir) {
  std::error_code ec;
  if (!fs::is_directory(fixture_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(fixture_dir, ": not a directory"));
  }
  fs::create_directories(dest_dir, ec);
  // Bazel's runfiles tree is made of symlinks to the source files, so follow
  // them while walking.
  for (fs::recursive_directory_iterator
           it(fixture_dir, fs::directory_options::follow_directory_symlink, ec),
       end;
       it != end; it.increment(ec)) {
    if (ec) return absl::InternalError(ec.message());
    if (fs::is_directory(it->path(), ec)) continue;
    const std::string relative = absl::StrReplaceAll(
        it->path().lexically_relative(fixture_dir).string(), {{"%3A", ":"}});
    fs::path target = fs::path(dest_dir) / relative;
    fs::create_directories(target.parent_path(), ec);
    if (absl::EndsWith(relative, ".link")) {
      std::ifstream in(it->path());
      std::stringstream text;
      text << in.rdbuf();
      std::string link = target.string();
      link.resize(link.size() - 5);
      fs::create_symlink(std::string(absl::StripAsciiWhitespace(text.str())),
                         link, ec);
    } else {
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing,
                    ec);
    }
    if (ec) {
      return absl::InternalError(
          absl::StrCat(it->path().string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MaterializeTestdataSysfs(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  const std::string dest =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/sysfs_", ++counter, "_",
                   absl::StrReplaceAll(name, {{"/", "_"}}));
  std::error_code ec;
  fs::remove_all(dest, ec);
  absl::Status status = MaterializeSysfsFixture(
      RunfilePath(absl::StrCat("agent/topology/testdata/", name)), dest);
  if (!status.ok()) return status;
  return dest;
}

}  // namespace monta::topology
