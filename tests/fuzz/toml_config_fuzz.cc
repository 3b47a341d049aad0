// Fuzz target for the TOML configurations: `fl server`'s file (ApplyServerConfig) and the run
// files the control API takes from operators (ApplyRunConfig, server/daemon/config.h), `fl
// client`'s file (ApplyClientConfig, cli/client_config.h) and `fl sim`'s (ApplySimConfig,
// cli/sim_config.h), all through common/internal/toml_keys.h.
//
// Input: the file's text, given to each of the four over its defaults (the file readers take a
// path: the text is written to a temporary file). Any text gives INVALID_ARGUMENT, saying why,
// or a configuration; a configuration read from a file prints (…ConfigToToml, what
// --print-effective-config shows) as a file that reads back over the defaults to the same
// configuration, printed the same.
//
// Compiled into the executable with the sanitizers: server/daemon/config.cc,
// cli/client_config.cc, cli/sim_config.cc (and so the key tables' templates of toml_keys.h).
// toml++ itself is Debian's shared library, uninstrumented.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cli/client_config.h"
#include "cli/sim_config.h"
#include "server/daemon/config.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

// Reads `text` over `Config{}` with `apply`; when it reads, prints it and reads that back.
template <typename Config, typename Apply, typename Print>
void CheckFile(const TempFile& file, std::string_view text, Apply apply, Print print,
               const char* refused, const char* round_trip) {
  Config config;
  const absl::Status s = apply(file.Write(text), config);
  if (!s.ok()) {
    // NOT_FOUND and read errors cannot happen: the file is there.
    CheckRefusal(s, absl::StatusCode::kInvalidArgument, refused);
    return;
  }
  const std::string printed = print(config);
  Config again;
  const absl::Status back = apply(file.Write(printed), again);
  if (!back.ok())
    std::fprintf(stderr, "%s\n--- printed:\n%s\n", back.ToString().c_str(), printed.c_str());
  Check(back.ok(), round_trip);
  Check(print(again) == printed, round_trip);
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fl::fuzz::CheckFile;
  static const fl::fuzz::TempFile file("config.toml");
  const std::string text(reinterpret_cast<const char*>(data), size);

  fl::server::ServerConfig run;
  const absl::Status submitted = fl::server::ApplyRunConfig(text, "run file", run);
  if (!submitted.ok()) {
    fl::fuzz::CheckRefusal(submitted, absl::StatusCode::kInvalidArgument, "a run file is refused");
  } else {
    fl::fuzz::Check(fl::server::CheckServerConfig(run).ok(), "a run file's config is checked");
  }

  CheckFile<fl::server::ServerConfig>(
      file, text,
      [](const std::string& path, fl::server::ServerConfig& c) {
        return fl::server::ApplyServerConfig(path, c);
      },
      [](const fl::server::ServerConfig& c) { return fl::server::ServerConfigToToml(c); },
      "a server file is refused", "a server file's effective config reads back the same");
  CheckFile<fl::cli::ClientConfig>(
      file, text,
      [](const std::string& path, fl::cli::ClientConfig& c) {
        return fl::cli::ApplyClientConfig(path, c);
      },
      [](const fl::cli::ClientConfig& c) { return fl::cli::ClientConfigToToml(c); },
      "a client file is refused", "a client file's effective config reads back the same");
  CheckFile<fl::cli::SimConfig>(
      file, text,
      [](const std::string& path, fl::cli::SimConfig& c) {
        return fl::cli::ApplySimConfig(path, c);
      },
      [](const fl::cli::SimConfig& c) { return fl::cli::SimConfigToToml(c); },
      "a sim file is refused", "a sim file's effective config reads back the same");
  return 0;
}
