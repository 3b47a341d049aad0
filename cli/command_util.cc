#include "cli/command_util.h"

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "fl/server/store.h"

namespace fl::cli {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

std::string FlagValueBeforeParsing(int argc, char** argv, std::string_view subcommand,
                                   std::string_view flag) {
  if (argc < 2 || std::string_view(argv[1]) != subcommand) return "";
  const std::string with_equals = std::string(flag) + "=";
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == flag && i + 1 < argc) return argv[i + 1];
    if (arg.starts_with(with_equals)) return std::string(arg.substr(with_equals.size()));
  }
  return "";
}

absl::StatusOr<std::string> DataDirOf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no such file or directory: ", path,
                                            "; give a server's data directory or the "
                                            "federation.db file in it"));
  }
  return server::DataDirectoryOf(path);
}

}  // namespace fl::cli
