#include "common/port_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace monta {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("port file ", path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::Status WritePortFile(
    const std::string& path,
    const std::vector<std::pair<std::string, int>>& ports) {
  std::string json = "{";
  for (size_t i = 0; i < ports.size(); ++i) {
    absl::StrAppend(&json, i == 0 ? "" : ", ", "\"", ports[i].first,
                    "\": ", ports[i].second);
  }
  json += "}\n";
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "w");
  if (file == nullptr)
    return ErrnoError(absl::StrCat("cannot create ", tmp), path);
  const bool written =
      std::fwrite(json.data(), 1, json.size(), file) == json.size();
  // fclose flushes: its result is the write's too.
  if (std::fclose(file) != 0 || !written) {
    absl::Status error = ErrnoError(absl::StrCat("cannot write ", tmp), path);
    std::remove(tmp.c_str());
    return error;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status error = ErrnoError(absl::StrCat("cannot rename ", tmp), path);
    std::remove(tmp.c_str());
    return error;
  }
  return absl::OkStatus();
}

}  // namespace monta
