#include "client/table.h"

#include "gtest/gtest.h"

namespace monta::client {
namespace {

TEST(TableTest, AlignsColumnsAndTrimsTrailingSpace) {
  Table t({"NAME", "STATE"});
  t.AddRow({"node-a", "alive"});
  t.AddRow({"b"});
  EXPECT_EQ(t.Render(), "NAME    STATE\nnode-a  alive\nb\n");
}

TEST(TableTest, ShortDurationsAndBytes) {
  EXPECT_EQ(ShortDuration(3.25), "3.2s");
  EXPECT_EQ(ShortDuration(250), "4m10s");
  EXPECT_EQ(ShortDuration(7500), "2h05m");
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(64 << 20), "64 MiB");
}

}  // namespace
}  // namespace monta::client
