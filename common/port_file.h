// The ports a process bound, written for whoever started it (tests, scripts).
#ifndef MONTA_COMMON_PORT_FILE_H_
#define MONTA_COMMON_PORT_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace monta {

// Writes `ports` as one JSON object ({"grpc": 7400, "metrics": 7401}) to
// `path`: first to `path`.tmp, then renamed over `path`, so that a reader
// polling for the file never sees half of it. Names are written as given (they
// are identifiers, not user input). Fails, naming the file, when either step
// does.
absl::Status WritePortFile(
    const std::string& path,
    const std::vector<std::pair<std::string, int>>& ports);

}  // namespace monta

#endif  // MONTA_COMMON_PORT_FILE_H_
