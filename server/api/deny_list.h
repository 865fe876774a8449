// The planner's deny list (--deny_list_file): identities refused on every
// call at once, without replacing the CA, e.g. a compromised node's.
//
// One entry per line; blank lines and text after '#' are ignored:
//   node/node-b        a node, by the name its certificate carries
//                      (spiffe://monta/node/node-b)
//   node-b             the same, written plain
//   serial=3F2A9C01    a certificate, by its serial number in hex as
//                      `openssl x509 -noout -serial` prints it (any case,
//                      ':' separators and leading zeros allowed)
// At most kMaxDenyListBytes and kMaxDenyListEntries. The planner re-reads the
// file every --tls_refresh_seconds (as its certificates); a file that does not
// parse keeps the previous list (logged and counted), at start it stops the
// planner with one line naming the line that is wrong.
#ifndef MONTA_SERVER_API_DENY_LIST_H_
#define MONTA_SERVER_API_DENY_LIST_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace monta::api {

inline constexpr size_t kMaxDenyListBytes = 1 << 20;
inline constexpr size_t kMaxDenyListEntries = 10000;

struct DenyEntries {
  std::set<std::string> nodes;    // node names
  std::set<std::string> serials;  // NormalizeSerial form
  size_t size() const { return nodes.size() + serials.size(); }
  bool operator==(const DenyEntries& other) const {
    return nodes == other.nodes && serials == other.serials;
  }
};

// A certificate serial in one spelling: upper-case hex without separators or
// leading zeros ("0" for zero). "" when `hex` is not hex digits (and ':').
std::string NormalizeSerial(absl::string_view hex);

// The entries of a deny list's text; INVALID_ARGUMENT naming the line and
// what was expected.
absl::StatusOr<DenyEntries> ParseDenyList(absl::string_view text);

class DenyList {
 public:
  // Reads and parses `path`; errors start with "--deny_list_file <path>: ".
  static absl::StatusOr<std::unique_ptr<DenyList>> Load(std::string path);

  // Reads the file again. On success the new entries replace the old ones
  // and the result says whether they changed; on error the previous entries
  // stay.
  absl::StatusOr<bool> Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // The entry that denies a caller, "node/<name>" or "serial=<HEX>", or
  // nullopt. `node_name` is the caller's node name (empty when it is not a
  // node), `serial` its certificate's (NormalizeSerial; empty when unknown).
  std::optional<std::string> Match(absl::string_view node_name,
                                   absl::string_view serial) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether any entry is a serial (else callers' certificates need not be
  // read).
  bool has_serials() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& path() const { return path_; }

 private:
  DenyList(std::string path, DenyEntries entries);
  static absl::StatusOr<DenyEntries> Read(const std::string& path);

  const std::string path_;
  mutable absl::Mutex mu_;
  DenyEntries entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace monta::api

#endif  // MONTA_SERVER_API_DENY_LIST_H_
