#include "common/flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace monta {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  NormalizeFlagDashes(static_cast<int>(argv.size()), argv.data());
  return args;
}

TEST(FlagsTest, DashesInFlagNamesBecomeUnderscores) {
  EXPECT_EQ(Normalize({"montactl", "--node-names=a-1,b-2", "--gpus-per-node",
                       "2", "plan"}),
            (std::vector<std::string>{"montactl", "--node_names=a-1,b-2",
                                      "--gpus_per_node", "2", "plan"}));
}

TEST(FlagsTest, ValuesPositionalsAndSeparatorAreUntouched) {
  EXPECT_EQ(Normalize({"x", "-v", "node-a", "--", "--not-a-flag", "---odd"}),
            (std::vector<std::string>{"x", "-v", "node-a", "--", "--not-a-flag",
                                      "---odd"}));
}

TEST(FlagsTest, HelpListsTheFlagsOfTheMainFile) {
  EXPECT_TRUE(IsMainFileFlag("server/main.cc", "server/main.cc"));
  EXPECT_TRUE(IsMainFileFlag("./server/main.cc", "server/main.cc"));
  EXPECT_TRUE(IsMainFileFlag("/src/monta/server/main.cc", "server/main.cc"));
  EXPECT_FALSE(IsMainFileFlag("agent/main.cc", "server/main.cc"));
  EXPECT_FALSE(IsMainFileFlag("xserver/main.cc", "server/main.cc"));
  EXPECT_FALSE(IsMainFileFlag("absl/flags/parse.cc", "server/main.cc"));
}

}  // namespace
}  // namespace monta
