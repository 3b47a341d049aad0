// The `fl server` configuration file: TOML, read with toml++.
//
// The file sets ServerOptions (its engine, fit and strategy settings included), the built-in model
// the run starts from, and the grace period after the run. Keys are grouped in the tables
// [server], [run], [fit], [strategy] and [model]; every key is optional, and an absent key keeps
// the value already in the struct, so a caller applies the file over defaults and may then apply
// command-line flags over the file (and then check the result with CheckServerConfig).
// ServerConfigReference() lists every key with its default and meaning; deploy/server.example.toml
// is a copy of it.
//
// Errors name the file, the line and the full key, e.g.
//   server.toml:7: unknown key 'run.roundz'
//   server.toml:3: key 'run.rounds' must be an integer, got a string
//   server.toml:5: key 'run.sample_fraction' must be in (0, 1], got 1.5
//   server.toml:9: key 'strategy.proximal_mu' must be > 0 for strategy 'fedprox', got 0.0
// and a TOML syntax error gives file:line:column and the parser's description.
//
// Thread-safe: the functions keep no state.
#ifndef FL_SERVER_DAEMON_CONFIG_H_
#define FL_SERVER_DAEMON_CONFIG_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/internal/toml_keys.h"
#include "fl/server/server.h"

namespace fl::server {

// The built-in model a new run starts from (see fl/client/builtin_models.h): its architecture
// and the seed of its initial weights. With strategy "scaffold" the model also carries the
// server's control variates (zero at the start).
struct ServerModelOptions {
  // A safetensors file the new run starts from: its tensors' names, shapes and values (float32;
  // F16, BF16 and F64 are converted) are the global model, and the sites train it with their own
  // Trainer. When set, kind and the architecture keys below are not used. Empty: the built-in
  // `kind`. A resumed run continues from its last committed round either way.
  std::string initial;
  std::string kind = "softmax";  // "softmax", "mlp" or "simple_cnn"
  int64_t features = 784;        // for simple_cnn: image_height * image_width * image_channels
  int32_t classes = 10;
  std::vector<int64_t> hidden = {200};  // mlp: the hidden layers' widths
  int64_t image_height = 28;            // simple_cnn: the input image
  int64_t image_width = 28;
  int64_t image_channels = 1;
  uint64_t init_seed = 0;
  // Server-side evaluation: an IDX image and label file (optionally .gz) the server scores every
  // new global model on ("test_loss", "test_accuracy" in the round's metrics). Empty: none.
  std::string eval_images;
  std::string eval_labels;
  // FLTrust (strategy "fltrust"): the IDX images and labels of the server's root dataset, which
  // it trains the built-in model on every round with the run's fit settings (the paper uses 100
  // rows). Needed by fltrust, refused by any other strategy.
  std::string root_images;
  std::string root_labels;
};

// Everything `fl server` runs with. The round timeout lives in server.engine.round_timeout.
struct ServerConfig {
  ServerOptions server;
  ServerModelOptions model;
  // After the run is over, the server keeps serving this long so that clients hear DONE.
  absl::Duration grace = absl::Seconds(10);
};

// Reads the TOML file at `path` and writes each key it sets into `config`; keys it does not set
// keep their value. Returns NOT_FOUND (naming the path) when the file does not exist, another
// error of ReadFile when it cannot be read, and INVALID_ARGUMENT for a syntax error, an unknown
// table or key, a value of the wrong type, or a value out of range. On error `config` may have
// been partly written.
absl::Status ApplyServerConfig(const std::string& path, ServerConfig& config);

// A run file submitted through the control API (fl run submit): TOML text with the tables of a
// run ([run], [fit], [strategy], [model], [privacy], [secure_aggregation]) applied over `config`
// (the server's own configuration), then checked as CheckServerConfig. INVALID_ARGUMENT naming
// `name`, the line and the key; [server] is refused.
absl::Status ApplyRunConfig(const std::string& text, const std::string& name, ServerConfig& config);

// The keys of `config` named in `keys` ("run.rounds", "fit.batch_size", ...) that belong to a
// run's tables, with their values, as a run file: what an operator gave at this start, for a
// resumed run to take (ServerOptions::resume_toml). Keys of [server] and [model] (a resumed run
// checks its model by its spec) and keys not named are left out; "" when none is left.
std::string RunTomlOfKeys(const ServerConfig& config, const std::set<std::string>& keys);

// The checks that span keys, for a configuration put together from a file and flags:
// INVALID_ARGUMENT naming the key, e.g. "strategy.proximal_mu must be > 0 for strategy 'fedprox',
// got 0" (ApplyServerConfig makes the same checks on what the file sets, with its line).
absl::Status CheckServerConfig(const ServerConfig& config);

// `config` as a TOML file that ApplyServerConfig reads back to the same values, every key with a
// one-line comment. Used by `fl server --print-effective-config`.
std::string ServerConfigToToml(const ServerConfig& config);

// A commented example file listing every key with its default value and meaning: a header, then
// ServerConfigToToml(ServerConfig{}). `fl server --print-config-reference` prints it.
std::string ServerConfigReference();

// Every key of the file, in reference order; those with a flag (KeySpec::flag) are `fl server`'s
// flags too (cli/key_flags.h).
const std::vector<toml_keys::KeySpec<ServerConfig>>& ServerConfigKeys();

// The gRPC channel arguments behind ServerOptions::stream_window_mib: for a window of N MiB
// (N >= 1; negative values count as 1, more than 1024 as 1024) the bandwidth-delay probe off and
// every stream's window fixed at N MiB; for 0, none (gRPC's probe-tuned window).
std::vector<std::pair<std::string, int>> UploadWindowChannelArgs(int32_t stream_window_mib);

}  // namespace fl::server

#endif  // FL_SERVER_DAEMON_CONFIG_H_
