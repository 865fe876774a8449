// Child processes for multi-process tests: start a binary from the test's
// runfiles, signal it, wait for it, and run a command capturing its output.
#ifndef MONTA_TESTS_TESTING_PROCESS_H_
#define MONTA_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace monta::testing {

// Path of a binary or data file of this workspace inside the test's runfiles,
// e.g. Runfile("server/monta-planner").
std::string Runfile(const std::string& workspace_path);

// A per-test scratch directory (TEST_TMPDIR under Bazel).
std::string TempDir();

class Process {
 public:
  // Starts argv[0] with the given arguments; stdout and stderr go to
  // `log_path`.
  static absl::StatusOr<Process> Start(const std::vector<std::string>& argv,
                                       const std::string& log_path);
  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  // Kills (SIGKILL) and reaps the process if still running.
  ~Process();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // Sends `sig`.
  void Signal(int sig) const;
  // Waits up to `timeout` for exit; returns the exit status (as waitpid's) or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  const std::string& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs a command to completion (bounded by `timeout`), capturing stdout and
// stderr.
CommandResult Run(const std::vector<std::string>& argv,
                  absl::Duration timeout = absl::Seconds(30));

// Reads a whole file; empty when missing.
std::string ReadFile(const std::string& path);

// A free loopback TCP port: bind port 0, read it back, close; 0 on failure.
// Another process may take it before the caller binds it: retry on that.
int FreeLoopbackPort();

// Polls `condition` every 50 ms until it is true or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout);

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_PROCESS_H_
