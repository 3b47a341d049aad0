#include "fl/common/logging.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fl {
namespace {

TEST(LoggingTest, TextLinesQuoteValuesWithSpaces) {
  SetLogFormat(LogFormat::kText);
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kInfo, "round_committed", {{"round", "3"}, {"reason", "all \"good\" now"}});
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(" info round_committed round=3 reason=\"all \\\"good\\\" now\"\n"),
            std::string::npos)
      << out;
}

// A client's text with a carriage return and an ANSI escape stays on one line, inert.
TEST(LoggingTest, ControlCharactersInValuesAreEscaped) {
  SetLogFormat(LogFormat::kText);
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kInfo, "client_joined", {{"name", "evil\r\x1b[31mred\x7f"}});
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(" name=\"evil\\r\\x1b[31mred\\x7f\"\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(out.find('\n'), out.size() - 1);
}

// Sequences a terminal acts on past ASCII (C1's CSI, a right-to-left override) are escaped in
// text lines; JSON lines are ASCII, DEL included.
TEST(LoggingTest, TerminalSequencesPastAsciiAreEscapedInBothFormats) {
  SetLogFormat(LogFormat::kText);
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kInfo, "client_joined",
           {{"name",
             "a\xc2\x9b"
             "31mb\xe2\x80\xae"
             "c caf\xc3\xa9"}});
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(" name=\"a\\xc2\\x9b31mb\\xe2\\x80\\xaec caf\xc3\xa9\"\n"), std::string::npos)
      << out;
  SetLogFormat(LogFormat::kJson);
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kInfo, "client_joined", {{"name", "x\x7fy\xe2\x80\xae"}});
  out = ::testing::internal::GetCapturedStderr();
  SetLogFormat(LogFormat::kText);
  for (char c : out) EXPECT_LT(static_cast<unsigned char>(c), 0x7f) << out;
  EXPECT_NE(out.find("x\\u007fy\\u202e"), std::string::npos) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["name"], "x\x7fy\xe2\x80\xae");
}

// A sink takes each line (without its newline) instead of stderr; an empty one gives stderr back.
TEST(LoggingTest, ASinkTakesTheLinesUntilItIsRemoved) {
  SetLogFormat(LogFormat::kText);
  std::vector<std::pair<LogLevel, std::string>> seen;
  SetLogSink([&](LogLevel level, std::string_view line) { seen.emplace_back(level, line); });
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kWarn, "client_retry", {{"attempt", "2"}});
  SetLogSink({});
  LogEvent(LogLevel::kInfo, "after", {});
  std::string out = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, LogLevel::kWarn);
  EXPECT_TRUE(seen[0].second.ends_with(" warn client_retry attempt=2")) << seen[0].second;
  EXPECT_EQ(out.find("client_retry"), std::string::npos) << out;
  EXPECT_NE(out.find(" info after\n"), std::string::npos) << out;
}

TEST(LoggingTest, JsonLinesParseAndKeepEveryField) {
  SetLogFormat(LogFormat::kJson);
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kWarn, "update_refused",
           {{"client", "ab12"}, {"reason", "bad \"sha\"\nline two\t\x01"}});
  std::string out = ::testing::internal::GetCapturedStderr();
  SetLogFormat(LogFormat::kText);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one event, one line";
  nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["event"], "update_refused");
  EXPECT_EQ(j["client"], "ab12");
  EXPECT_EQ(j["reason"], "bad \"sha\"\nline two\t\x01");
  EXPECT_TRUE(j.contains("ts"));
}

TEST(LoggingTest, LevelFiltersEvents) {
  SetLogLevel(LogLevel::kWarn);
  ::testing::internal::CaptureStderr();
  LogEvent(LogLevel::kInfo, "hidden");
  std::string out = ::testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kInfo);
  EXPECT_TRUE(out.empty()) << out;
}

}  // namespace
}  // namespace fl
