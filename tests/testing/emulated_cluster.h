// scripts/emulated-cluster.sh driven from a test (as root): a cluster of
// network namespaces named uniquely per run, running this build's planner,
// agents and montactl (symlinked into a bin directory of the test), with its
// logs in the test's scratch directory.
#ifndef MONTA_TESTS_TESTING_EMULATED_CLUSTER_H_
#define MONTA_TESTS_TESTING_EMULATED_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"

namespace monta::testing {

class EmulatedCluster {
 public:
  // `prefix`: the start of the cluster's name (two letters), made unique with
  // the process id and the time; `subdir` names its run directory.
  EmulatedCluster(const std::string& prefix, const std::string& subdir);

  // scripts/emulated-cluster.sh COMMAND --name=... --run_dir=... ARGS...
  CommandResult Script(const std::string& command,
                       const std::vector<std::string>& args,
                       absl::Duration timeout);

  // `up ARGS... --bin_dir=...`. When this machine cannot make the network
  // (the script's exit status 3) `skip_reason` is its last line of stderr.
  CommandResult Up(const std::vector<std::string>& args, absl::Duration timeout,
                   std::string* skip_reason);

  // montactl ARGS in the hub namespace; a failure is a test failure that
  // shows `logs` (files of the run directory).
  CommandResult Ctl(const std::vector<std::string>& args,
                    const std::vector<std::string>& logs,
                    absl::Duration timeout = absl::Seconds(20));
  // The same with --output=json, parsed (discarded when it does not parse).
  nlohmann::json CtlJson(const std::vector<std::string>& args,
                         const std::vector<std::string>& logs,
                         absl::Duration timeout = absl::Seconds(20));

  // `down`, then expects no namespace of the cluster and no process of its
  // binaries left (test failures otherwise).
  void ExpectDown();

  // The named files of the run directory, one after the other.
  std::string Logs(const std::vector<std::string>& logs) const;

  const std::string& name() const { return name_; }
  const std::string& run_dir() const { return run_dir_; }

 private:
  std::string script_, name_, run_dir_, bin_dir_;
};

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_EMULATED_CLUSTER_H_
