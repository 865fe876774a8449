#include "common/echo.h"

#include <string>

#include "gtest/gtest.h"

namespace monta {
namespace {

TEST(EchoInputTest, ShortInputIsQuotedWhole) {
  EXPECT_EQ(EchoInput("node-a"), "\"node-a\"");
  EXPECT_EQ(EchoInput(""), "\"\"");
  EXPECT_EQ(EchoInput(std::string(kMaxEchoBytes, 'n')),
            "\"" + std::string(kMaxEchoBytes, 'n') + "\"");
}

TEST(EchoInputTest, LongInputIsCutWithItsLength) {
  const std::string echoed = EchoInput(std::string(10240, 'x'));
  EXPECT_EQ(echoed,
            "\"" + std::string(kMaxEchoBytes, 'x') + "...\" (10240 bytes)");
  EXPECT_EQ(EchoInput(std::string(kMaxEchoBytes + 1, 'y')),
            "\"" + std::string(kMaxEchoBytes, 'y') + "...\" (" +
                std::to_string(kMaxEchoBytes + 1) + " bytes)");
}

TEST(EchoInputTest, ControlAndNonAsciiBytesAreEscaped) {
  EXPECT_EQ(EchoInput("a\nb\"c\x01\xff"), "\"a\\nb\\\"c\\x01\\xff\"");
  // Escaping happens after the cut: at most 4 characters per kept byte.
  const std::string echoed = EchoInput(std::string(1 << 20, '\x01'));
  EXPECT_LE(echoed.size(), 4 * kMaxEchoBytes + 32);
}

TEST(CutMessageTest, ShortMessagesStayLongOnesAreCut) {
  EXPECT_EQ(CutMessage("parse error at line 1"), "parse error at line 1");
  const std::string cut =
      CutMessage("last read: '" + std::string(100000, 'q') + "'");
  EXPECT_LE(cut.size(), 2 * kMaxEchoBytes + 32);
  EXPECT_TRUE(cut.rfind("last read: 'qqq", 0) == 0) << cut;
  EXPECT_NE(cut.find("(100013 bytes)"), std::string::npos) << cut;
  EXPECT_EQ(CutMessage("bad\nbyte \x01"), "bad\\x0abyte \\x01");
}

}  // namespace
}  // namespace monta
