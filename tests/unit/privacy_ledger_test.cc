// A site's privacy ledger: what it records survives a reopen to every digit, a partial last line
// (a crash before the sync, so an input never sent) is ignored, and a ledger that cannot be read
// is refused rather than read as empty.
#include "client_sdk/src/privacy_ledger.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace fl::client::internal {
namespace {

using fl::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(PrivacyLedgerTest, RecordsSurviveAReopenToEveryDigit) {
  TempDir dir;
  const std::string path = dir.path() + "/ledger";
  {
    absl::StatusOr<PrivacyLedger> ledger = PrivacyLedger::Open(path);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    EXPECT_TRUE(ledger->noise_multipliers().empty());
    ASSERT_TRUE(ledger->Record(0.49999999999999994, "run 1 round 1 task a").ok());
    // A server-chosen task id with a tab and a newline cannot break the line format.
    ASSERT_TRUE(ledger->Record(1.25, "run 1 round 2 task b\tc\nd").ok());
  }
  absl::StatusOr<PrivacyLedger> again = PrivacyLedger::Open(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(again->noise_multipliers(), ElementsAre(0.49999999999999994, 1.25));
  EXPECT_THAT(ReadAll(path), HasSubstr("task b c d\n"));
}

TEST(PrivacyLedgerTest, APartialLastLineIsAnInputNeverSent) {
  TempDir dir;
  const std::string path = dir.path() + "/ledger";
  {
    std::ofstream out(path);
    out << "0.5\t1\trun 1 round 1\n0.7";  // the process died before the second line was synced
  }
  {
    absl::StatusOr<PrivacyLedger> ledger = PrivacyLedger::Open(path);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    EXPECT_THAT(ledger->noise_multipliers(), ElementsAre(0.5));
    // The partial line is gone, so the next input starts a line of its own.
    ASSERT_TRUE(ledger->Record(0.25, "run 1 round 2").ok());
  }
  absl::StatusOr<PrivacyLedger> again = PrivacyLedger::Open(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(again->noise_multipliers(), ElementsAre(0.5, 0.25));
}

TEST(PrivacyLedgerTest, OneProcessAtATimeAndAnUnreadableLedgerIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/ledger";
  absl::StatusOr<PrivacyLedger> first = PrivacyLedger::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  // flock locks belong to the open file description: a second open is refused, as another
  // process's would be.
  absl::StatusOr<PrivacyLedger> second = PrivacyLedger::Open(path);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another process"));
  if (::geteuid() != 0) {  // root reads whatever the mode says
    const std::string locked = dir.path() + "/unreadable";
    { std::ofstream(locked) << "0.5\t1\trun 1\n"; }
    std::filesystem::permissions(locked, std::filesystem::perms::owner_write);
    EXPECT_FALSE(PrivacyLedger::Open(locked).ok());
  }
}

TEST(PrivacyLedgerTest, AMalformedLineIsRefusedNamingIt) {
  TempDir dir;
  const std::string path = dir.path() + "/ledger";
  {
    std::ofstream out(path);
    out << "0.5\t1\trun 1\n\nnot-a-number\t2\trun 2\n";
  }
  absl::StatusOr<PrivacyLedger> ledger = PrivacyLedger::Open(path);
  EXPECT_EQ(ledger.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ledger.status().message()), HasSubstr("line 3"));
  EXPECT_THAT(std::string(ledger.status().message()), HasSubstr("not read as empty"));
  {
    std::ofstream out(path);
    out << "-1\t1\trun 1\n";
  }
  EXPECT_FALSE(PrivacyLedger::Open(path).ok());
}

TEST(PrivacyLedgerTest, APathThatCannotBeWrittenIsRefusedWithTheSystemsReason) {
  TempDir dir;
  absl::StatusOr<PrivacyLedger> ledger = PrivacyLedger::Open(dir.path());  // a directory
  EXPECT_FALSE(ledger.ok());
  EXPECT_THAT(std::string(ledger.status().message()), HasSubstr(dir.path()));
  EXPECT_FALSE(PrivacyLedger::Open("").ok());
}

}  // namespace
}  // namespace fl::client::internal
