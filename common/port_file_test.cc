#include "common/port_file.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace monta {
namespace {

std::string TestDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PortFileTest, WritesOneJsonObjectAndNoTemporaryIsLeft) {
  const std::string path = TestDir() + "/ports.json";
  ASSERT_TRUE(WritePortFile(path, {{"grpc", 7400}, {"metrics", 0}}).ok());
  EXPECT_EQ(Slurp(path), "{\"grpc\": 7400, \"metrics\": 0}\n");
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  // A second write replaces the first whole.
  ASSERT_TRUE(WritePortFile(path, {{"metrics", 9}}).ok());
  EXPECT_EQ(Slurp(path), "{\"metrics\": 9}\n");
}

TEST(PortFileTest, FailsNamingTheFileWhenItsDirectoryIsMissing) {
  const std::string path = TestDir() + "/no/such/dir/ports.json";
  absl::Status status = WritePortFile(path, {{"grpc", 1}});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
}

}  // namespace
}  // namespace monta
