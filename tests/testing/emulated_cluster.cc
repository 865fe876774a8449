#include "tests/testing/emulated_cluster.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace monta::testing {

EmulatedCluster::EmulatedCluster(const std::string& prefix,
                                 const std::string& subdir)
    : script_(Runfile("scripts/emulated-cluster.sh")),
      // Unique per run: parallel runs (and other suites' clusters) never meet.
      name_(absl::StrCat(prefix, getpid(), "-",
                         absl::ToUnixMicros(absl::Now()) % 1000000)),
      run_dir_(TempDir() + "/" + subdir),
      bin_dir_(TempDir() + "/bin-" + subdir) {
  std::filesystem::create_directories(bin_dir_);
  for (const char* bin :
       {"server/monta-planner", "agent/monta-agent", "client/montactl"}) {
    const std::filesystem::path from = Runfile(bin);
    std::filesystem::create_symlink(from,
                                    bin_dir_ + "/" + from.filename().string());
  }
}

CommandResult EmulatedCluster::Script(const std::string& command,
                                      const std::vector<std::string>& args,
                                      absl::Duration timeout) {
  std::vector<std::string> argv = {script_, command, "--name=" + name_,
                                   "--run_dir=" + run_dir_};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, timeout);
}

CommandResult EmulatedCluster::Up(const std::vector<std::string>& args,
                                  absl::Duration timeout,
                                  std::string* skip_reason) {
  std::vector<std::string> up = args;
  up.push_back("--bin_dir=" + bin_dir_);
  CommandResult result = Script("up", up, timeout);
  if (result.exit_code == 3) {
    const std::vector<std::string> lines =
        absl::StrSplit(result.err, '\n', absl::SkipEmpty());
    *skip_reason = lines.empty() ? "cannot make namespaces" : lines.back();
  }
  return result;
}

CommandResult EmulatedCluster::Ctl(const std::vector<std::string>& args,
                                   const std::vector<std::string>& logs,
                                   absl::Duration timeout) {
  std::vector<std::string> argv = {"--"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = Script("ctl", argv, timeout);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << Logs(logs);
  return r;
}

nlohmann::json EmulatedCluster::CtlJson(const std::vector<std::string>& args,
                                        const std::vector<std::string>& logs,
                                        absl::Duration timeout) {
  std::vector<std::string> json_args = {"--output=json"};
  json_args.insert(json_args.end(), args.begin(), args.end());
  return nlohmann::json::parse(Ctl(json_args, logs, timeout).out, nullptr,
                               /*allow_exceptions=*/false);
}

void EmulatedCluster::ExpectDown() {
  const CommandResult down = Script("down", {}, absl::Seconds(30));
  EXPECT_EQ(down.exit_code, 0) << down.out << down.err;
  const CommandResult left = Run({"ip", "netns", "list"});
  EXPECT_FALSE(absl::StrContains(left.out, name_ + "-")) << left.out;
  // The cluster's processes run the binaries copied into the run directory.
  const CommandResult running = Run({"pgrep", "-f", run_dir_ + "/monta-"});
  EXPECT_NE(running.exit_code, 0) << "still running: " << running.out;
}

std::string EmulatedCluster::Logs(const std::vector<std::string>& logs) const {
  std::string out;
  for (const std::string& log : logs) {
    absl::StrAppend(&out, "\n--- ", log, "\n", ReadFile(run_dir_ + "/" + log));
  }
  return out;
}

}  // namespace monta::testing
