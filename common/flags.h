// Command-line conveniences shared by the binaries.
#ifndef MONTA_COMMON_FLAGS_H_
#define MONTA_COMMON_FLAGS_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace monta {

// Lets users spell flags with dashes as in Kubernetes and most CLIs
// (`--node-names`, `--sysfs-root`) as well as Abseil's underscores: rewrites
// the name part of every `--flag` / `--flag=value` argument in place, before
// absl::ParseCommandLine. Values, positional arguments and `--` are left alone.
void NormalizeFlagDashes(int argc, char** argv);

// Whether `--help` / `--helpshort` list a flag defined in `flag_file`: those of
// the binary's main file `main_file` (its __FILE__). Abseil's default instead
// looks for a file named after the binary (`monta-planner.cc`), which no Monta
// binary has, and then answers "No flags matched".
bool IsMainFileFlag(absl::string_view flag_file, absl::string_view main_file);

// What every Monta binary does first: `usage` becomes the usage message
// (`--help` prints it, then the flags defined in `main_file`), dashes in flag
// names are normalized, and the command line is parsed (Abseil exits on
// `--help` and on unknown flags). Pass __FILE__ as `main_file`. Returns the
// positional arguments, argv[0] first.
std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage,
                              const char* main_file);

}  // namespace monta

#endif  // MONTA_COMMON_FLAGS_H_
