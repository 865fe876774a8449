// Job files: a StrategyRequest written by hand in YAML or JSON.
//
//   job:        # monta.v1.MoeJob, required
//     hidden_size: 8192
//     ...
//   placement:  # monta.v1.Placement, optional
//     profile: a800-hgx
//     nodes: 2
//   options:    # monta.v1.StrategyOptions, optional
//     allowed: [flat, tp_dedup_pipelined]
//
// Keys are the proto field names (snake_case). Unknown keys, wrong types and
// out-of-range integers are errors naming the key's path ("job.hiden_size:
// unknown key"). Enum values may be written in full (STRATEGY_KIND_FLAT) or
// short (flat).

#ifndef MONTA_COMMON_JOB_FILE_H_
#define MONTA_COMMON_JOB_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/monta/v1/strategy.pb.h"

namespace monta {

enum class JobFileFormat { kAuto, kYaml, kJson };

// Parses `text`. kAuto reads JSON when the text starts with '{', else YAML.
// INVALID_ARGUMENT with the offending path (and line for syntax errors).
absl::StatusOr<monta::v1::StrategyRequest> ParseJobFile(
    absl::string_view text, JobFileFormat format = JobFileFormat::kAuto);

// Reads and parses the file at `path`; the extension (.json, .yaml, .yml)
// picks the format. NOT_FOUND when the file cannot be read.
absl::StatusOr<monta::v1::StrategyRequest> LoadJobFile(const std::string& path);

}  // namespace monta

#endif  // MONTA_COMMON_JOB_FILE_H_
