// What the `fl` commands share: the error line and exit code of a failed command, flags read
// before parsing (a configuration file, a preset), and the data directory a path names. (The
// flags of configuration keys are cli/key_flags.h's.)
#ifndef FL_CLI_COMMAND_UTIL_H_
#define FL_CLI_COMMAND_UTIL_H_

#include <string>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::cli {

// Prints "error: <status>" to stderr; returns 1, the exit code of a failed command.
int Fail(const absl::Status& status);

// The value of `--flag VALUE` or `--flag=VALUE` when argv is `fl <subcommand> ...` (before any
// "--"), or "" when it is not given: for what must be applied before the other flags are parsed.
std::string FlagValueBeforeParsing(int argc, char** argv, std::string_view subcommand,
                                   std::string_view flag);

// The data directory that `path` names: the directory itself, or the directory of the
// federation.db file it names (what `fl sim` and `fl report` print). NOT_FOUND when nothing is
// there; FAILED_PRECONDITION for another file. Both say what to give instead.
absl::StatusOr<std::string> DataDirOf(const std::string& path);

}  // namespace fl::cli

#endif  // FL_CLI_COMMAND_UTIL_H_
