#include "common/flags.h"

#include <cctype>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace monta {
namespace {

absl::string_view WithoutDotSlash(absl::string_view file) {
  absl::ConsumePrefix(&file, "./");
  return file;
}

}  // namespace

void NormalizeFlagDashes(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (arg[0] != '-' || arg[1] != '-') continue;
    if (arg[2] == '\0') break;  // "--": the rest is positional
    if (!std::isalpha(static_cast<unsigned char>(arg[2]))) continue;
    for (char* c = arg + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
}

bool IsMainFileFlag(absl::string_view flag_file, absl::string_view main_file) {
  // Compilers spell __FILE__ relative to where they ran ("server/main.cc",
  // sometimes "./server/main.cc"); Abseil may have normalized it.
  flag_file = WithoutDotSlash(flag_file);
  main_file = WithoutDotSlash(main_file);
  return !main_file.empty() &&
         (flag_file == main_file ||
          absl::EndsWith(flag_file, absl::StrCat("/", main_file)) ||
          absl::EndsWith(main_file, absl::StrCat("/", flag_file)));
}

std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage,
                              const char* main_file) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  const std::string main(main_file);
  config.contains_help_flags = [main](absl::string_view file) {
    // The shared transport-security and HTTP flags belong to every binary
    // linking them.
    return IsMainFileFlag(file, main) ||
           IsMainFileFlag(file, "common/grpc_security_flags.cc") ||
           IsMainFileFlag(file, "common/http/http_flags.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  NormalizeFlagDashes(argc, argv);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace monta
