// The `fl sim` configuration: a TOML file and named presets, read with toml++ through
// common/internal/toml_keys.h, with the command line's flags applied on top.
//
// Tables: [run] (sites, rounds, sampling, seed, where the run is written), [data] (Fashion-MNIST,
// a CSV file or FedProx's Synthetic), [partition] (how the rows are split among the sites),
// [model], [sites] (the transport and the simulated sites' speeds), and, as for `fl server`,
// [fit], [strategy], [privacy] and [secure_aggregation] (server/daemon/shared_keys.h). Every key
// is optional; an absent key keeps the value already in the struct, so the order is: defaults,
// then a preset, then a file, then flags. SimConfigReference() lists every key with its default
// and meaning; deploy/sim.example.toml is a copy of it.
//
// Errors name the file (or "preset NAME"), the line and the full key, e.g.
//   sim.toml:4: unknown key 'partition.betaa'
//   sim.toml:2: key 'run.sites' must be >= 0, got -5
//
// Thread-safe: the functions keep no state.
#ifndef FL_CLI_SIM_CONFIG_H_
#define FL_CLI_SIM_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/client_config.h"
#include "common/internal/toml_keys.h"
#include "fl/simulation/simulation.h"

namespace fl::cli {

struct SimConfig {
  simulation::SimulationOptions sim;
  // How a CSV is read ([data] label_column, delimiter, drop_columns, feature_columns,
  // missing_values, impute_value, as `fl client` reads a site's file); FinishSimConfig turns it
  // into sim.csv. Its other fields are not used.
  ClientDataConfig csv;
  std::string export_path;  // the final global model as safetensors; empty: not written
  bool report = true;       // report.html, .csv and .json next to the SQLite file
};

// The presets' names, in the order `fl sim --help` lists them.
std::vector<std::string> SimPresetNames();
// What a preset is for, in one line ("" for an unknown name).
std::string SimPresetDoc(const std::string& name);

// Applies the preset `name` (a TOML text of the same keys as a file) over `config`.
// INVALID_ARGUMENT listing the presets for an unknown name.
absl::Status ApplySimPreset(const std::string& name, SimConfig& config);

// Reads the TOML file at `path` and writes each key it sets into `config`. NOT_FOUND naming the
// path when the file does not exist, INVALID_ARGUMENT (file:line and the key) for a syntax error,
// an unknown table or key, a wrong type or a value out of range.
absl::Status ApplySimConfig(const std::string& path, SimConfig& config);

// Sets config.sim.csv from config.csv (keeping sim.csv.key_column): INVALID_ARGUMENT naming the
// key and its flag for a delimiter or missing_values that cannot be used.
absl::Status FinishSimConfig(SimConfig& config);

// `config` as a TOML file that ApplySimConfig reads back to the same values, every key with a
// one-line comment (`fl sim --print-effective-config`).
std::string SimConfigToToml(const SimConfig& config);

// Every key with its default value and meaning (`fl sim --print-config-reference`).
std::string SimConfigReference();

// Every key of the file, in reference order; those with a flag are `fl sim`'s flags too
// (cli/key_flags.h).
const std::vector<toml_keys::KeySpec<SimConfig>>& SimConfigKeys();

}  // namespace fl::cli

#endif  // FL_CLI_SIM_CONFIG_H_
