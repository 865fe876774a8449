// `--help` of every binary: a usage line, an example, and the binary's own
// flags (Abseil lists only flags of a file named after the binary unless told
// otherwise, and then answers "No flags matched").
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace monta {
namespace {

struct Binary {
  std::string runfile;
  std::string own_flag;  // defined in the binary's main file
};

class HelpTest : public ::testing::TestWithParam<Binary> {};

TEST_P(HelpTest, ListsUsageExampleAndOwnFlags) {
  const Binary& binary = GetParam();
  const monta::testing::CommandResult result =
      monta::testing::Run({monta::testing::Runfile(binary.runfile), "--help"});
  const std::string all = result.out + result.err;
  EXPECT_NE(all.find("Usage: "), std::string::npos) << all;
  EXPECT_NE(all.find("Example"), std::string::npos) << all;
  EXPECT_NE(all.find("--" + binary.own_flag + " ("), std::string::npos) << all;
  EXPECT_EQ(all.find("No flags matched"), std::string::npos) << all;
}

INSTANTIATE_TEST_SUITE_P(
    Binaries, HelpTest,
    ::testing::Values(Binary{"server/monta-planner", "listen"},
                      Binary{"agent/monta-agent", "sysfs_root"},
                      Binary{"client/montactl", "planner"},
                      Binary{"perf/monta-a2a-bench", "backend"}),
    [](const ::testing::TestParamInfo<Binary>& info) {
      std::string name =
          info.param.runfile.substr(info.param.runfile.find('/') + 1);
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace monta
