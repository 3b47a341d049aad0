// The `fl client` configuration file: TOML, read with toml++ through common/internal/toml_keys.h.
//
// Tables: [server] (where and as whom to connect), [data] (the site's training and test data),
// [model] (the built-in architecture this site trains), [training] (how it trains locally),
// [limits] (what this site agrees to do, whatever the server asks; see fl::client::SiteLimits)
// and [client] (heartbeats, reconnection). Every key is optional; an absent key keeps the value
// already in the struct, so a caller applies the file over defaults and may then apply
// command-line flags over the file. ClientConfigReference() lists every key with its default and
// meaning; deploy/client.example.toml is a copy of it.
//
// Errors name the file, the line and the full key, e.g.
//   site.toml:7: unknown key 'data.pathh'
//   site.toml:3: key 'model.classes' must be an integer, got a string
//   site.toml:5: key 'model.kind' must be one of softmax, logistic, mlp, simple_cnn, got "cnn"
//
// Thread-safe: the functions keep no state.
#ifndef FL_CLI_CLIENT_CONFIG_H_
#define FL_CLI_CLIENT_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/internal/toml_keys.h"
#include "fl/client/builtin_models.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"

namespace fl::cli {

// Where the site's data is. Training data is required: a CSV file (`path`) or a pair of IDX files
// (`images`, `labels`), as `format` says. Test data is optional: the same format's test files, or
// else `test_fraction` of the training rows held out (shuffled with `split_seed`); with neither,
// the site trains on everything and declines evaluation tasks.
struct ClientDataConfig {
  std::string format = "csv";  // "csv" or "idx"
  std::string path;            // training CSV with a header row
  std::string label_column = "label";
  // How the CSV files are read (fl::client::CsvOptions; CsvOptionsFromConfig converts).
  std::string delimiter = ",";               // one character; see ParseDelimiter
  std::vector<std::string> drop_columns;     // never features (ids, dates, free text)
  std::vector<std::string> feature_columns;  // not empty: exactly these, in order, are features
  std::string missing_values = "refuse";     // "refuse", "drop_row" or "impute"
  float impute_value = 0;                    // "impute": what a missing feature value becomes
  std::string images;                        // IDX training images (optionally .gz)
  std::string labels;                        // IDX training labels
  std::string test_path;                     // test CSV, same columns
  std::string test_images;
  std::string test_labels;
  double test_fraction = 0;  // in [0, 1)
  uint64_t split_seed = 0;
  // Train on IID shard `shard` of `num_shards` of the training rows (num_shards 0: all rows).
  int32_t shard = 0;
  int32_t num_shards = 0;
};

// The built-in model this site trains; must be the server's model (same tensors).
struct ClientModelConfig {
  std::string kind = "softmax";  // "softmax" (or "logistic"), "mlp", "simple_cnn"
  int64_t features = 0;          // 0: the training data's feature count
  // Labels must be in [0, classes). 0: 1 + the largest training label; set it when a site may
  // lack the highest classes, so that its model is the server's.
  int32_t classes = 0;
  std::vector<int64_t> hidden = {200};
  int64_t image_height = 28;
  int64_t image_width = 28;
  int64_t image_channels = 1;
};

// How `fl client` serves runs ([client] once and next_run_poll_s; cli/client_daemon.h).
struct ClientServiceConfig {
  // Take part in one run, then exit with a code that says how it ended (cli/exit_codes.h);
  // false: serve run after run until SIGTERM or SIGINT.
  bool once = false;
  // Between runs: how often to ask the server whether a new run has started (> 0).
  absl::Duration next_run_poll = absl::Seconds(10);
};

// Everything `fl client` runs with.
struct ClientConfig {
  fl::client::ClientOptions client;  // [server], [client] and [limits]
  ClientServiceConfig service;       // [client] once, next_run_poll_s
  ClientDataConfig data;
  ClientModelConfig model;
  fl::client::BuiltinTrainerOptions training;
};

// Reads the TOML file at `path` and writes each key it sets into `config`; keys it does not set
// keep their value. NOT_FOUND (naming the path) when the file does not exist, another error of
// ReadFile when it cannot be read, INVALID_ARGUMENT (file:line: and the key) for a syntax error,
// an unknown table or key, a value of the wrong type or out of range. On error `config` may have
// been partly written.
absl::Status ApplyClientConfig(const std::string& path, ClientConfig& config);

// Checks what no single key can: the data files the format needs, CSV options that go together
// (fl::client::ValidateCsvOptions, and none of them with format "idx"), a shard in range, the
// server's TLS files unless plaintext. INVALID_ARGUMENT naming the keys (and their flags).
absl::Status ValidateClientConfig(const ClientConfig& config);

// The CSV delimiter that data.delimiter (--delimiter) names: one character, or "\t" (the two
// characters backslash and t, as typed on a command line) or "tab" for a tab. INVALID_ARGUMENT
// with a message that starts "must" (callers prefix the key) for another string or a character
// that fl::client::ValidateCsvOptions refuses.
absl::StatusOr<char> ParseDelimiter(std::string_view text);

// The fl::client::CsvOptions of `data` ([data] label_column, delimiter, drop_columns,
// feature_columns, missing_values, impute_value) with `num_classes`. INVALID_ARGUMENT naming the
// key (and its flag) for a delimiter ParseDelimiter refuses or a missing_values outside refuse,
// drop_row, impute; the options are not otherwise checked (ValidateCsvOptions does).
absl::StatusOr<fl::client::CsvOptions> CsvOptionsFromConfig(const ClientDataConfig& data,
                                                            int32_t num_classes);

// `config` as a TOML file that ApplyClientConfig reads back to the same values, every key with a
// one-line comment. Used by `fl client --print-effective-config`.
std::string ClientConfigToToml(const ClientConfig& config);

// A commented example file listing every key with its default value and meaning: a header, then
// ClientConfigToToml(ClientConfig{}). `fl client --print-config-reference` prints it.
std::string ClientConfigReference();

// Every key of the file, in reference order; those with a flag are `fl client`'s flags too
// (cli/key_flags.h).
const std::vector<toml_keys::KeySpec<ClientConfig>>& ClientConfigKeys();

}  // namespace fl::cli

#endif  // FL_CLI_CLIENT_CONFIG_H_
