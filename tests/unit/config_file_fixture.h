// A test fixture for configuration files: each test writes its files into a fresh directory of its
// own, named after the test and the process, and removed after the test.
#ifndef FL_TESTS_UNIT_CONFIG_FILE_FIXTURE_H_
#define FL_TESTS_UNIT_CONFIG_FILE_FIXTURE_H_

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "gtest/gtest.h"

namespace fl::testing {

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("fl_config_file_test_", ::getpid(),
                                                                 "_", info->test_suite_name(), "_",
                                                                 info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The path of `name` in the test's directory.
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes `contents` to Path(name) (a failure fails the test) and returns the path.
  std::string Write(const std::string& name, const std::string& contents) const {
    const std::string path = Path(name);
    EXPECT_TRUE(WriteFileAtomic(path, contents).ok()) << path;
    return path;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace fl::testing

#endif  // FL_TESTS_UNIT_CONFIG_FILE_FIXTURE_H_
