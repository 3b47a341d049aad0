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

void AddSecAggFlags(CLI::App* cmd, server::SecureAggregationOptions& sa) {
  auto on = [&sa](const auto&) { sa.enabled = true; };
  cmd->add_flag("--secagg", sa.enabled,
                "Secure aggregation (SecAgg+): the server sees only the sum of the changes");
  cmd->add_option("--secagg-neighbors", sa.num_neighbors, "SecAgg: k (0: default for n)")
      ->capture_default_str()
      ->each(on);
  cmd->add_option("--secagg-threshold", sa.threshold, "SecAgg: t, in (k/2, k] (0: k/2 + 1)")
      ->capture_default_str()
      ->each(on);
  cmd->add_option("--secagg-clip-range", sa.clip_range,
                  "SecAgg: each coordinate of a change is clipped to [-c, c]")
      ->capture_default_str()
      ->each(on);
  cmd->add_option("--secagg-bits", sa.quantization_bits,
                  "SecAgg: quantization bits (0: the most that fit)")
      ->capture_default_str()
      ->each(on);
  cmd->add_option("--secagg-modulus-bits", sa.modulus_bits, "SecAgg: 32 or 64")
      ->capture_default_str()
      ->each(on);
  cmd->add_option(
      "--secagg-stage-timeout",
      [&sa](const CLI::results_t& r) {
        double s = 0;
        if (r.size() != 1 || !CLI::detail::lexical_cast(r[0], s) || !(s > 0)) {
          return false;
        }
        sa.stage_timeout = absl::Seconds(s);
        sa.enabled = true;
        return true;
      },
      "SecAgg: seconds for the key, sharing and unmasking stages");
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
