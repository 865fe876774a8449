// Fails when a number of the frozen contract (contract_snapshot.txt) changes
// meaning. Arguments: the snapshot, then every .proto file of monta.v1 (the
// BUILD passes them), so a new file cannot escape the check.
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/monta/v1/agent.pb.h"
#include "proto/monta/v1/contract_snapshot.h"
#include "proto/monta/v1/planner.pb.h"

namespace monta::contract {
namespace {

std::string g_snapshot_path;
std::vector<std::string> g_proto_paths;

constexpr char kHowToUpdate[] =
    "If you only added fields, values or methods, refresh the snapshot with\n"
    "  bazel run //proto/monta/v1:update_contract_snapshot\n"
    "A changed or removed number is never fine: see proto/README.md.";

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ContractTest, EveryProtoFileIsLinkedIn) {
  ASSERT_FALSE(g_proto_paths.empty());
  const auto files = ContractFiles(g_proto_paths);
  EXPECT_EQ(files.size(), g_proto_paths.size())
      << "a monta.v1 .proto file is not linked into contract_test; add its "
         "library to the test's deps";
}

TEST(ContractTest, FrozenNumbersKeepTheirMeaning) {
  const std::vector<std::string> frozen = ReadLines(g_snapshot_path);
  ASSERT_FALSE(frozen.empty()) << "cannot read " << g_snapshot_path;
  for (const std::string& problem :
       CheckSnapshot(frozen, ContractFiles(g_proto_paths))) {
    ADD_FAILURE() << problem;
  }
}

TEST(ContractTest, SnapshotIsCurrent) {
  // Additions are allowed but must be frozen too, or a later change to them
  // would go unnoticed.
  std::vector<std::string> frozen = ReadLines(g_snapshot_path);
  std::set<std::string> known(frozen.begin(), frozen.end());
  for (const std::string& line : SnapshotLines(ContractFiles(g_proto_paths))) {
    EXPECT_TRUE(known.count(line)) << "not in the snapshot: " << line << "\n"
                                   << kHowToUpdate;
  }
}

}  // namespace
}  // namespace monta::contract

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // Reference one message of each file that no other file imports, so the
  // linker keeps its descriptors.
  (void)monta::v1::StrategyReply::descriptor();
  (void)monta::v1::ReportBenchmarkRequest::descriptor();
  (void)monta::v1::NodeInfo::descriptor();
  if (argc >= 2) monta::contract::g_snapshot_path = argv[1];
  for (int i = 2; i < argc; ++i)
    monta::contract::g_proto_paths.push_back(argv[i]);
  return RUN_ALL_TESTS();
}
