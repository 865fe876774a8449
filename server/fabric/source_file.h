// A file a fabric source reads, re-read when stat says it changed (a
// ConfigMap volume swaps a symlink, an editor renames over it, a sidecar
// writes and renames), as the planner's TLS files and deny list are.
#ifndef MONTA_SERVER_FABRIC_SOURCE_FILE_H_
#define MONTA_SERVER_FABRIC_SOURCE_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace monta::fabric {

class SourceFile {
 public:
  SourceFile(std::string path, size_t max_bytes);

  struct Read {
    enum class Kind {
      kUnchanged,  // stat says the same file as at the last Read
      kChanged,    // new content (maybe the same bytes as before)
      kFailed,     // missing, unreadable or too large: see error
    };
    Kind kind = Kind::kUnchanged;
    std::string content;
    absl::Status error;
  };

  // The first call reads the file; later ones read it again only when its
  // device, inode, size or modification time changed. Errors name the path.
  // Not thread-safe: one reader at a time.
  Read ReadIfChanged();

  const std::string& path() const { return path_; }

 private:
  struct Stamp {
    int error = 0;  // errno of stat, 0 when it succeeded
    bool regular = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp& o) const {
      return error == o.error && regular == o.regular && dev == o.dev &&
             ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
    }
  };
  Stamp StatNow() const;

  const std::string path_;
  const size_t max_bytes_;
  bool read_once_ = false;
  Stamp last_;
};

}  // namespace monta::fabric

#endif  // MONTA_SERVER_FABRIC_SOURCE_FILE_H_
