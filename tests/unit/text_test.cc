#include "fl/common/text.h"

#include <string>

#include "gtest/gtest.h"

namespace fl {
namespace {

TEST(CutUtf8Test, ShortTextIsKeptAndLongTextIsCutAtACharacterBoundary) {
  EXPECT_EQ(CutUtf8("decline", 7), "decline");
  EXPECT_EQ(CutUtf8("declined", 7), "decline... (truncated)");
  // "é" is two bytes (C3 A9): a cut at 2 would split it, so the cut falls before it.
  EXPECT_EQ(CutUtf8("a\xc3\xa9z", 2), "a... (truncated)");
  EXPECT_EQ(CutUtf8("a\xc3\xa9z", 3), "a\xc3\xa9... (truncated)");
  EXPECT_EQ(CutUtf8("", 0), "");
}

}  // namespace
}  // namespace fl
