// `fl sim`: a whole federation on this machine (fl/simulation/simulation.h), configured by a
// preset, a TOML file (cli/sim_config.h) and flags, in that order; it prints the setup steps, the
// partition, a line per round (with a progress bar on a terminal) and writes the run's report
// next to its SQLite file. Thread-compatible: one command per process.
#ifndef FL_CLI_SIM_COMMAND_H_
#define FL_CLI_SIM_COMMAND_H_

#include <string>

#include "CLI/CLI.hpp"
#include "cli/sim_config.h"

namespace fl::cli {

struct SimArgs {
  SimConfig config;
  std::string preset;       // applied before the file and the flags (read before parsing)
  std::string config_path;  // likewise
  bool print_config_reference = false;
  bool print_effective_config = false;
  bool plaintext = false;
  bool verbose = false;
  bool progress = true;         // a progress bar when stdout is a terminal
  bool dp_value_given = false;  // a --dp-* value flag: DP on, in the mode secure aggregation allows
  CLI::App* command = nullptr;
};

// Applies the preset and the configuration file that argv names (`fl sim --preset NAME --config
// FILE ...`) to `a.config`, so that the flags' defaults show their values; then adds `fl sim`
// and its flags to `app`. An error of the preset or the file is returned, for the caller to
// report before parsing.
absl::Status AddSimCommand(CLI::App& app, int argc, char** argv, SimArgs& a);

// Runs the parsed command; the process's exit code (0, or 1 with the error on stderr).
int RunSimCommand(SimArgs& a);

}  // namespace fl::cli

#endif  // FL_CLI_SIM_COMMAND_H_
