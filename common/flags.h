// Command-line conveniences shared by the binaries.
#ifndef MONTA_COMMON_FLAGS_H_
#define MONTA_COMMON_FLAGS_H_

namespace monta {

// Lets users spell flags with dashes as in Kubernetes and most CLIs
// (`--node-names`, `--sysfs-root`) as well as Abseil's underscores: rewrites
// the name part of every `--flag` / `--flag=value` argument in place, before
// absl::ParseCommandLine. Values, positional arguments and `--` are left alone.
void NormalizeFlagDashes(int argc, char** argv);

}  // namespace monta

#endif  // MONTA_COMMON_FLAGS_H_
