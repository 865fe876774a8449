#include "server/api/deny_list.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace monta::api {
namespace {

TEST(DenyListTest, SerialsHaveOneSpelling) {
  EXPECT_EQ(NormalizeSerial("0A1b"), "A1B");
  EXPECT_EQ(NormalizeSerial("00:0a:1B"), "A1B");
  EXPECT_EQ(NormalizeSerial("00"), "0");
  EXPECT_EQ(NormalizeSerial("xyz"), "");
  EXPECT_EQ(NormalizeSerial(""), "");
}

TEST(DenyListTest, ParsesNodesSerialsAndComments) {
  absl::StatusOr<DenyEntries> entries = ParseDenyList(
      "# compromised, 2026-12-01\n"
      "node/node-b\n"
      "  node-c   # plain\n"
      "\n"
      "serial=0A:1B:2C\n");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(entries->nodes, (std::set<std::string>{"node-b", "node-c"}));
  EXPECT_EQ(entries->serials, (std::set<std::string>{"A1B2C"}));
  EXPECT_TRUE(ParseDenyList("").ok());
}

TEST(DenyListTest, BadLinesAreNamedAndNotEchoedWhole) {
  for (const auto& [text, want] :
       std::vector<std::pair<std::string, std::string>>{
           {"node-a\nNode_B\n", "line 2: expected node/<name>"},
           {"serial=xyz\n", "line 1: expected serial=<hex digits>"},
           {"node/\n", "line 1: expected node/<name>"},
           {"serial=\n", "line 1: expected serial="},
       }) {
    absl::StatusOr<DenyEntries> entries = ParseDenyList(text);
    ASSERT_FALSE(entries.ok()) << text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(entries.status().message().find(want), std::string::npos)
        << entries.status();
  }
  const absl::StatusOr<DenyEntries> long_line =
      ParseDenyList(std::string(10000, 'X'));
  ASSERT_FALSE(long_line.ok());
  EXPECT_LT(long_line.status().message().size(), 400u) << long_line.status();
  EXPECT_FALSE(ParseDenyList(std::string(kMaxDenyListBytes + 1, '#')).ok());
}

TEST(DenyListTest, ReloadKeepsThePreviousListOnABadFile) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/deny";
  std::ofstream(path) << "node-b\n";
  absl::StatusOr<std::unique_ptr<DenyList>> list = DenyList::Load(path);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)->Match("node-b", ""), "node/node-b");
  EXPECT_EQ((*list)->Match("node-a", ""), std::nullopt);
  EXPECT_FALSE((*list)->has_serials());

  std::ofstream(path) << "node-b\nserial=FF01\n";
  ASSERT_TRUE((*list)->Reload().ok());
  EXPECT_EQ((*list)->Match("", "FF01"), "serial=FF01");
  EXPECT_TRUE((*list)->has_serials());
  EXPECT_EQ(*(*list)->Reload(), false);  // unchanged

  std::ofstream(path) << "not a node name!\n";
  const absl::StatusOr<bool> bad = (*list)->Reload();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("--deny_list_file " + path + ": line 1"),
      std::string::npos)
      << bad.status();
  EXPECT_EQ((*list)->Match("node-b", ""), "node/node-b");  // kept
  EXPECT_EQ((*list)->size(), 2u);

  std::ofstream(path) << "";
  EXPECT_EQ(*(*list)->Reload(), true);
  EXPECT_EQ((*list)->Match("node-b", ""), std::nullopt);

  EXPECT_FALSE(DenyList::Load(path + "-missing").ok());
}

}  // namespace
}  // namespace monta::api
