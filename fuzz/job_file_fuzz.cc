// Job files (common/job_file): montactl reads them from the user and the
// admission webhook from a Pod's monta.io/moe annotation, so any text must give
// a StrategyRequest or an INVALID_ARGUMENT, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/job_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  // kAuto picks JSON for text starting with '{' and YAML otherwise; the other
  // parser reads it too (YAML is a superset of most JSON, and montactl's
  // --job file extension can force either).
  const bool looks_json =
      absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "{");
  for (monta::JobFileFormat format :
       {monta::JobFileFormat::kAuto, looks_json
                                         ? monta::JobFileFormat::kYaml
                                         : monta::JobFileFormat::kJson}) {
    absl::StatusOr<monta::v1::StrategyRequest> request =
        monta::ParseJobFile(text, format);
    // The contract: a parsed request or INVALID_ARGUMENT naming the problem.
    if (!request.ok() &&
        (request.status().code() != absl::StatusCode::kInvalidArgument ||
         request.status().message().empty())) {
      std::abort();
    }
  }
  return 0;
}
