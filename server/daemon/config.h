// The `fl server` configuration file: TOML, read with toml++.
//
// The file sets ServerOptions (its engine and fit settings included), the softmax model the run
// starts from, and the grace period after the run. Keys are grouped in the tables [server], [run],
// [fit] and [model]; every key is optional, and an absent key keeps the value already in the
// struct, so a caller applies the file over defaults and may then apply command-line flags over
// the file. ServerConfigReference() lists every key with its default and meaning;
// deploy/server.example.toml is a copy of it.
//
// Errors name the file, the line and the full key, e.g.
//   server.toml:7: unknown key 'run.roundz'
//   server.toml:3: key 'run.rounds' must be an integer, got a string
//   server.toml:5: key 'run.sample_fraction' must be in (0, 1], got 1.5
// and a TOML syntax error gives file:line:column and the parser's description.
//
// Thread-safe: the functions keep no state.
#ifndef FL_SERVER_DAEMON_CONFIG_H_
#define FL_SERVER_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fl/server/server.h"

namespace fl::server {

// The model a new run starts from: softmax regression of `features` inputs to `classes` classes.
struct ServerModelOptions {
  int64_t features = 784;
  int32_t classes = 10;
  // Server-side evaluation: an IDX image and label file (optionally .gz) the server scores every
  // new global model on ("test_loss", "test_accuracy" in the round's metrics). Empty: none.
  std::string eval_images;
  std::string eval_labels;
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

// `config` as a TOML file that ApplyServerConfig reads back to the same values, every key with a
// one-line comment. Used by `fl server --print-effective-config`.
std::string ServerConfigToToml(const ServerConfig& config);

// A commented example file listing every key with its default value and meaning: a header, then
// ServerConfigToToml(ServerConfig{}). `fl server --print-config-reference` prints it.
std::string ServerConfigReference();

}  // namespace fl::server

#endif  // FL_SERVER_DAEMON_CONFIG_H_
