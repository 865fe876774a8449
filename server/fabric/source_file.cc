#include "server/fabric/source_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace monta::fabric {

SourceFile::SourceFile(std::string path, size_t max_bytes)
    : path_(std::move(path)), max_bytes_(max_bytes) {}

SourceFile::Stamp SourceFile::StatNow() const {
  Stamp s;
  struct stat st;
  // Follows symlinks: a ConfigMap volume's file is one into ..data.
  if (::stat(path_.c_str(), &st) != 0) {
    s.error = errno;
    return s;
  }
  s.regular = S_ISREG(st.st_mode);
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

SourceFile::Read SourceFile::ReadIfChanged() {
  Read out;
  const Stamp now = StatNow();
  if (read_once_ && now == last_) return out;
  read_once_ = true;
  last_ = now;
  out.kind = Read::Kind::kFailed;
  if (now.error != 0) {
    out.error = absl::NotFoundError(absl::StrCat(
        path_, ": cannot be read (", std::strerror(now.error), ")"));
    return out;
  }
  if (!now.regular) {
    out.error = absl::FailedPreconditionError(
        absl::StrCat(path_, ": not a regular file"));
    return out;
  }
  std::ifstream in(path_, std::ios::binary);
  std::string text;
  // Reads in chunks (never more than one past the bound), so a small file
  // costs a small buffer and a large one is refused without being held.
  char chunk[1 << 16];
  while (in && text.size() <= max_bytes_) {
    in.read(chunk, sizeof(chunk));
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad() || (!in.eof() && text.size() <= max_bytes_)) {
    out.error =
        absl::FailedPreconditionError(absl::StrCat(path_, ": cannot be read"));
    return out;
  }
  if (text.size() > max_bytes_) {
    out.error = absl::ResourceExhaustedError(
        absl::StrCat(path_, ": more than ", max_bytes_, " bytes"));
    return out;
  }
  out.kind = Read::Kind::kChanged;
  out.content = std::move(text);
  return out;
}

}  // namespace monta::fabric
