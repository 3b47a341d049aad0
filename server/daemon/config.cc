#include "server/daemon/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/file_util.h"
#include "toml++/toml.h"

namespace fl::server {
namespace {

// One key of the file: where it lives, what it means, how it is read and written. The one table
// of keys below drives parsing, the reference and the effective configuration, so they agree.
struct KeySpec {
  std::string table;
  std::string name;
  std::string doc;
  // Reads `node` (the value of key `full_key` in `file`) into `config`.
  std::function<absl::Status(const toml::node& node, const std::string& file,
                             const std::string& full_key, ServerConfig& config)>
      apply;
  // The key's value in `config`, as a TOML value.
  std::function<std::string(const ServerConfig& config)> format;
};

struct TableSpec {
  std::string name;
  std::string doc;
};

absl::Status ErrorAt(const std::string& file, const toml::source_region& where,
                     const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", where.begin.line, ": ", message));
}

const char* TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

absl::Status WrongType(const toml::node& node, const std::string& file, const std::string& full_key,
                       const char* expected) {
  return ErrorAt(file, node.source(),
                 absl::StrCat("key '", full_key, "' must be ", expected, ", got ", TypeName(node)));
}

// The shortest text that reads back as `v`, always with a '.' or an exponent so that TOML reads
// it as a float ("600.0", "0.05", "inf", "nan").
template <typename Float>
std::string FormatFloat(Float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned char>(c));
          out += esc;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The accessors below are generic lambdas `[](auto& c) -> auto& { return c.<field>; }`, so one
// accessor serves both reading (const) and writing.

template <typename Int, typename Field>
KeySpec IntKey(std::string table, std::string name, std::string doc, int64_t min, Field field) {
  constexpr int64_t kMax =
      std::cmp_less(std::numeric_limits<Int>::max(), std::numeric_limits<int64_t>::max())
          ? static_cast<int64_t>(std::numeric_limits<Int>::max())
          : std::numeric_limits<int64_t>::max();
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field, min](const toml::node& node, const std::string& file,
                         const std::string& full_key, ServerConfig& config) {
    const toml::value<int64_t>* v = node.as_integer();
    if (v == nullptr) return WrongType(node, file, full_key, "an integer");
    const int64_t x = v->get();
    if (x < min || x > kMax) {
      return ErrorAt(file, node.source(),
                     absl::StrCat("key '", full_key, "' must be ",
                                  x < min ? absl::StrCat(">= ", min) : absl::StrCat("<= ", kMax),
                                  ", got ", x));
    }
    field(config) = static_cast<Int>(x);
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) { return absl::StrCat(field(config)); };
  return k;
}

enum class Range { kPositive, kNonNegative, kFraction, kBelowOne, kAny };

// Reads a number (a TOML float, or an integer) that must be finite and in `range`.
absl::StatusOr<double> ReadNumber(const toml::node& node, const std::string& file,
                                  const std::string& full_key, Range range) {
  double x = 0;
  if (const toml::value<double>* f = node.as_floating_point()) {
    x = f->get();
  } else if (const toml::value<int64_t>* i = node.as_integer()) {
    x = static_cast<double>(i->get());
  } else {
    return WrongType(node, file, full_key, "a number");
  }
  const char* want = nullptr;
  switch (range) {
    case Range::kPositive:
      if (!(x > 0)) want = "> 0";
      break;
    case Range::kNonNegative:
      if (!(x >= 0)) want = ">= 0";
      break;
    case Range::kFraction:
      if (!(x > 0 && x <= 1)) want = "in (0, 1]";
      break;
    case Range::kBelowOne:
      if (!(x >= 0 && x < 1)) want = "in [0, 1)";
      break;
    case Range::kAny:
      break;
  }
  if (want == nullptr && !std::isfinite(x)) want = "finite";
  if (want != nullptr) {
    return ErrorAt(file, node.source(),
                   absl::StrCat("key '", full_key, "' must be ", want, ", got ", FormatFloat(x)));
  }
  return x;
}

template <typename Field>
KeySpec FloatKey(std::string table, std::string name, std::string doc, Range range, Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field, range](const toml::node& node, const std::string& file,
                           const std::string& full_key, ServerConfig& config) -> absl::Status {
    absl::StatusOr<double> x = ReadNumber(node, file, full_key, range);
    if (!x.ok()) return x.status();
    using Float = std::remove_reference_t<decltype(field(config))>;
    field(config) = static_cast<Float>(*x);
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) { return FormatFloat(field(config)); };
  return k;
}

// A duration, written in seconds.
template <typename Field>
KeySpec SecondsKey(std::string table, std::string name, std::string doc, Range range, Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field, range](const toml::node& node, const std::string& file,
                           const std::string& full_key, ServerConfig& config) -> absl::Status {
    absl::StatusOr<double> x = ReadNumber(node, file, full_key, range);
    if (!x.ok()) return x.status();
    field(config) = absl::Seconds(*x);
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) {
    return FormatFloat(absl::ToDoubleSeconds(field(config)));
  };
  return k;
}

template <typename Field>
KeySpec StringKey(std::string table, std::string name, std::string doc, bool may_be_empty,
                  Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field, may_be_empty](const toml::node& node, const std::string& file,
                                  const std::string& full_key, ServerConfig& config) {
    const toml::value<std::string>* v = node.as_string();
    if (v == nullptr) return WrongType(node, file, full_key, "a string");
    if (!may_be_empty && v->get().empty()) {
      return ErrorAt(file, node.source(), absl::StrCat("key '", full_key, "' must not be empty"));
    }
    field(config) = v->get();
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) { return Quote(field(config)); };
  return k;
}

template <typename Field>
KeySpec BoolKey(std::string table, std::string name, std::string doc, Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field](const toml::node& node, const std::string& file, const std::string& full_key,
                    ServerConfig& config) {
    const toml::value<bool>* v = node.as_boolean();
    if (v == nullptr) return WrongType(node, file, full_key, "a boolean");
    field(config) = v->get();
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) {
    return std::string(field(config) ? "true" : "false");
  };
  return k;
}

template <typename Field>
KeySpec StringArrayKey(std::string table, std::string name, std::string doc, Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field](const toml::node& node, const std::string& file, const std::string& full_key,
                    ServerConfig& config) {
    const toml::array* array = node.as_array();
    if (array == nullptr) return WrongType(node, file, full_key, "an array of strings");
    std::vector<std::string> values;
    for (size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = *array->get(i);
      const toml::value<std::string>* v = element.as_string();
      if (v == nullptr) {
        return WrongType(element, file, absl::StrCat(full_key, "[", i, "]"), "a string");
      }
      values.push_back(v->get());
    }
    field(config) = std::move(values);
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) {
    std::vector<std::string> quoted;
    for (const std::string& s : field(config)) quoted.push_back(Quote(s));
    return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
  };
  return k;
}

// A string that must be one of `choices`.
template <typename Field>
KeySpec ChoiceKey(std::string table, std::string name, std::string doc,
                  std::vector<std::string> choices, Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field, choices](const toml::node& node, const std::string& file,
                             const std::string& full_key, ServerConfig& config) {
    const toml::value<std::string>* v = node.as_string();
    if (v == nullptr) return WrongType(node, file, full_key, "a string");
    if (std::find(choices.begin(), choices.end(), v->get()) == choices.end()) {
      return ErrorAt(file, node.source(),
                     absl::StrCat("key '", full_key, "' must be one of ",
                                  absl::StrJoin(choices, ", "), ", got ", Quote(v->get())));
    }
    field(config) = v->get();
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) { return Quote(field(config)); };
  return k;
}

// A non-empty array of integers, each >= `min`.
template <typename Field>
KeySpec IntArrayKey(std::string table, std::string name, std::string doc, int64_t min,
                    Field field) {
  KeySpec k{std::move(table), std::move(name), std::move(doc), nullptr, nullptr};
  k.apply = [field, min](const toml::node& node, const std::string& file,
                         const std::string& full_key, ServerConfig& config) {
    const toml::array* array = node.as_array();
    if (array == nullptr || array->empty()) {
      return WrongType(node, file, full_key, "a non-empty array of integers");
    }
    std::vector<int64_t> values;
    for (size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = *array->get(i);
      const std::string element_key = absl::StrCat(full_key, "[", i, "]");
      const toml::value<int64_t>* v = element.as_integer();
      if (v == nullptr) return WrongType(element, file, element_key, "an integer");
      if (v->get() < min) {
        return ErrorAt(
            file, element.source(),
            absl::StrCat("key '", element_key, "' must be >= ", min, ", got ", v->get()));
      }
      values.push_back(v->get());
    }
    field(config) = std::move(values);
    return absl::OkStatus();
  };
  k.format = [field](const ServerConfig& config) {
    return absl::StrCat("[", absl::StrJoin(field(config), ", "), "]");
  };
  return k;
}

const std::vector<TableSpec>& Tables() {
  static const auto* const kTables = new std::vector<TableSpec>{
      {"server", "Where the server listens, its TLS identity, and who may join."},
      {"run",
       "The run. A server that resumes an unfinished run keeps that run's recorded [run] and "
       "[fit]."},
      {"fit", "What each sampled client is asked to do in a round."},
      {"strategy",
       "How the server aggregates updates, and the training values every fit task carries."},
      {"model", "The built-in model a new run starts from; a resumed run's must have its shape."},
  };
  return *kTables;
}

const std::vector<KeySpec>& Keys() {
  static const auto* const kKeys = new std::vector<KeySpec>{
      StringKey(
          "server", "listen", "host:port to listen on; port 0 picks a free port.", false,
          [](auto& c) -> auto& { return c.server.listen_address; }),
      StringKey(
          "server", "data_dir",
          "Directory of the SQLite file, the checkpoints and the spill files.", false,
          [](auto& c) -> auto& { return c.server.data_dir; }),
      StringKey(
          "server", "ca", "Federation CA certificate (PEM file); needed for TLS.", true,
          [](auto& c) -> auto& { return c.server.ca_cert_path; }),
      StringKey(
          "server", "cert", "This server's certificate (PEM file); needed for TLS.", true,
          [](auto& c) -> auto& { return c.server.cert_path; }),
      StringKey(
          "server", "key", "This server's private key (PEM file); needed for TLS.", true,
          [](auto& c) -> auto& { return c.server.key_path; }),
      StringArrayKey(
          "server", "enroll",
          "Client certificates (PEM files) to enroll at start, besides those "
          "enrolled before.",
          [](auto& c) -> auto& { return c.server.enroll_cert_paths; }),
      BoolKey(
          "server", "insecure_plaintext",
          "No TLS, loopback addresses only, clients named by what they send: for tests.",
          [](auto& c) -> auto& { return c.server.insecure_plaintext; }),
      SecondsKey(
          "server", "max_poll_wait_s",
          "Longest a client's poll is held open while there is no task (seconds).",
          Range::kPositive, [](auto& c) -> auto& { return c.server.max_poll_wait; }),
      StringKey(
          "server", "metrics_listen",
          "host:port of the Prometheus /metrics and /healthz endpoint; empty: off.", true,
          [](auto& c) -> auto& { return c.server.metrics_address; }),
      SecondsKey(
          "server", "grace_s",
          "After the run ends, keep serving this long so clients hear DONE (seconds).",
          Range::kNonNegative, [](auto& c) -> auto& { return c.grace; }),

      StringKey(
          "run", "name", "The run's name, recorded with it.", false,
          [](auto& c) -> auto& { return c.server.engine.run_name; }),
      IntKey<int32_t>(
          "run", "rounds", "Rounds to commit.", 1,
          [](auto& c) -> auto& { return c.server.engine.num_rounds; }),
      IntKey<int32_t>(
          "run", "min_clients", "Clients online before a round starts.", 1,
          [](auto& c) -> auto& { return c.server.engine.min_clients; }),
      IntKey<int32_t>(
          "run", "min_fit_clients",
          "Accepted updates needed to commit a round (at most min_clients).", 1,
          [](auto& c) -> auto& { return c.server.engine.min_fit_clients; }),
      FloatKey(
          "run", "sample_fraction",
          "Fraction of the online clients sampled per round (at least min_fit_clients).",
          Range::kFraction, [](auto& c) -> auto& { return c.server.engine.sample_fraction; }),
      SecondsKey(
          "run", "round_timeout_s", "A round's deadline (seconds).", Range::kPositive,
          [](auto& c) -> auto& { return c.server.engine.round_timeout; }),
      SecondsKey(
          "run", "client_timeout_s",
          "A client silent this long is offline; rounds stop waiting for it (seconds).",
          Range::kPositive, [](auto& c) -> auto& { return c.server.engine.client_timeout; }),
      IntKey<int32_t>(
          "run", "max_round_retries", "Failed attempts of a round retried before the run fails.", 0,
          [](auto& c) -> auto& { return c.server.engine.max_round_retries; }),
      IntKey<uint64_t>(
          "run", "seed", "Seed of the client sampling.", 0,
          [](auto& c) -> auto& { return c.server.engine.seed; }),
      SecondsKey(
          "run", "wait_timeout_s",
          "Longest wait for min_clients to be online; then the run fails (seconds).",
          Range::kPositive, [](auto& c) -> auto& { return c.server.engine.wait_timeout; }),
      StringKey(
          "run", "stop_metric",
          "Stopping rule: a round metric (e.g. test_accuracy) that ends the run early; empty: "
          "none.",
          true, [](auto& c) -> auto& { return c.server.engine.stop_metric; }),
      FloatKey(
          "run", "stop_threshold", "Stopping rule: the value stop_metric must reach.", Range::kAny,
          [](auto& c) -> auto& { return c.server.engine.stop_threshold; }),
      BoolKey(
          "run", "stop_when_below",
          "Stopping rule: stop when stop_metric falls to the threshold (a loss) instead of "
          "rising to it.",
          [](auto& c) -> auto& { return c.server.engine.stop_when_below; }),
      IntKey<int32_t>(
          "run", "eval_every",
          "Federated evaluation after every this many committed rounds; 0: never.", 0,
          [](auto& c) -> auto& { return c.server.engine.eval_every; }),
      FloatKey(
          "run", "eval_fraction", "Fraction of the online clients that evaluate.", Range::kFraction,
          [](auto& c) -> auto& { return c.server.engine.eval_fraction; }),
      SecondsKey(
          "run", "eval_timeout_s", "Deadline of a federated evaluation (seconds).",
          Range::kPositive, [](auto& c) -> auto& { return c.server.engine.eval_timeout; }),

      IntKey<int32_t>(
          "fit", "local_epochs", "Epochs each client trains per round.", 1,
          [](auto& c) -> auto& { return c.server.engine.fit.local_epochs; }),
      IntKey<int32_t>(
          "fit", "batch_size", "Mini-batch size of the clients' SGD.", 1,
          [](auto& c) -> auto& { return c.server.engine.fit.batch_size; }),
      FloatKey(
          "fit", "learning_rate", "Learning rate of the clients' SGD.", Range::kPositive,
          [](auto& c) -> auto& { return c.server.engine.fit.learning_rate; }),

      ChoiceKey(
          "strategy", "name",
          "fedavg (weighted mean), fedprox (plus the clients' proximal term) or "
          "scaffold (control variates).",
          {"fedavg", "fedprox", "scaffold"},
          [](auto& c) -> auto& { return c.server.strategy.name; }),
      FloatKey(
          "strategy", "proximal_mu",
          "FedProx: the proximal coefficient mu sent to the clients (> 0; used only by fedprox).",
          Range::kNonNegative, [](auto& c) -> auto& { return c.server.strategy.proximal_mu; }),
      FloatKey(
          "strategy", "momentum", "The clients' SGD momentum, in [0, 1).", Range::kBelowOne,
          [](auto& c) -> auto& { return c.server.strategy.momentum; }),
      FloatKey(
          "strategy", "weight_decay", "The clients' L2 weight decay.", Range::kNonNegative,
          [](auto& c) -> auto& { return c.server.strategy.weight_decay; }),
      FloatKey(
          "strategy", "clip_norm",
          "The clients clip each batch's gradient to this L2 norm; 0: no clipping.",
          Range::kNonNegative, [](auto& c) -> auto& { return c.server.strategy.clip_norm; }),
      FloatKey(
          "strategy", "server_learning_rate",
          "SCAFFOLD: the global step size eta_g (1: the weighted mean of the clients' models).",
          Range::kPositive,
          [](auto& c) -> auto& { return c.server.strategy.server_learning_rate; }),
      IntKey<int64_t>(
          "strategy", "num_parties",
          "SCAFFOLD: the number of parties N in the control variate's update; 0: the enrolled "
          "clients.",
          0, [](auto& c) -> auto& { return c.server.strategy.num_parties; }),

      ChoiceKey(
          "model", "kind", "softmax (regression), mlp or simple_cnn.",
          {"softmax", "mlp", "simple_cnn"}, [](auto& c) -> auto& { return c.model.kind; }),
      IntKey<int64_t>(
          "model", "features",
          "Input features (784 for 28x28 images; simple_cnn: height * width * channels).", 1,
          [](auto& c) -> auto& { return c.model.features; }),
      IntKey<int32_t>(
          "model", "classes", "Output classes.", 2,
          [](auto& c) -> auto& { return c.model.classes; }),
      IntArrayKey(
          "model", "hidden", "mlp: the widths of the hidden layers.", 1,
          [](auto& c) -> auto& { return c.model.hidden; }),
      IntKey<int64_t>(
          "model", "image_height", "simple_cnn: the input images' height.", 1,
          [](auto& c) -> auto& { return c.model.image_height; }),
      IntKey<int64_t>(
          "model", "image_width", "simple_cnn: the input images' width.", 1,
          [](auto& c) -> auto& { return c.model.image_width; }),
      IntKey<int64_t>(
          "model", "image_channels", "simple_cnn: the input images' channels.", 1,
          [](auto& c) -> auto& { return c.model.image_channels; }),
      IntKey<uint64_t>(
          "model", "init_seed", "Seed of the initial weights (the same seed, the same model).", 0,
          [](auto& c) -> auto& { return c.model.init_seed; }),
      StringKey(
          "model", "eval_images",
          "Server-side evaluation: IDX images the server scores each new model on; empty: none.",
          true, [](auto& c) -> auto& { return c.model.eval_images; }),
      StringKey(
          "model", "eval_labels", "Server-side evaluation: the IDX labels of eval_images.", true,
          [](auto& c) -> auto& { return c.model.eval_labels; }),
  };
  return *kKeys;
}

const KeySpec* FindKey(std::string_view table, std::string_view name) {
  for (const KeySpec& k : Keys()) {
    if (k.table == table && k.name == name) return &k;
  }
  return nullptr;
}

bool IsTable(std::string_view name) {
  for (const TableSpec& t : Tables()) {
    if (t.name == name) return true;
  }
  return false;
}

// A problem that spans keys: the message, and the keys where the file is wrong, most specific
// first (the error points at the first of them that the file sets).
struct CrossKeyProblem {
  std::string message;
  std::vector<std::pair<std::string, std::string>> keys;  // (table, name)
};

std::optional<CrossKeyProblem> FindCrossKeyProblem(const ServerConfig& c) {
  const aggregation::StrategyOptions& strategy = c.server.strategy;
  if (strategy.name == "fedprox" && !(strategy.proximal_mu > 0)) {
    return CrossKeyProblem{
        absl::StrCat("key 'strategy.proximal_mu' must be > 0 for strategy 'fedprox', got ",
                     FormatFloat(strategy.proximal_mu)),
        {{"strategy", "proximal_mu"}, {"strategy", "name"}}};
  }
  const ServerModelOptions& m = c.model;
  if (m.kind == "simple_cnn" && m.features != m.image_height * m.image_width * m.image_channels) {
    return CrossKeyProblem{
        absl::StrCat("key 'model.features' must be image_height * image_width * image_channels = ",
                     m.image_height * m.image_width * m.image_channels,
                     " for kind 'simple_cnn', got ", m.features),
        {{"model", "features"},
         {"model", "image_height"},
         {"model", "image_width"},
         {"model", "image_channels"},
         {"model", "kind"}}};
  }
  return std::nullopt;
}

// A problem found in the file, kept so that the first one in the file is reported (toml++'s
// tables iterate in key order, not file order).
struct Problem {
  toml::source_position at;
  absl::Status status;
};

}  // namespace

absl::Status ApplyServerConfig(const std::string& path, ServerConfig& config) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  toml::table root;
  try {
    root = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.source().begin.line, ":",
                                                   e.source().begin.column, ": ",
                                                   std::string(e.description())));
  }

  std::optional<Problem> first;
  auto note = [&first](const toml::source_region& where, absl::Status status) {
    if (!first || where.begin < first->at) first = Problem{where.begin, std::move(status)};
  };
  for (auto&& [table_key, table_node] : root) {
    const std::string table(table_key.str());
    if (!IsTable(table)) {
      note(table_key.source(),
           ErrorAt(path, table_key.source(),
                   absl::StrCat(table_node.is_table() ? "unknown table '" : "unknown key '", table,
                                "'")));
      continue;
    }
    const toml::table* entries = table_node.as_table();
    if (entries == nullptr) {
      note(table_node.source(), WrongType(table_node, path, table, "a table"));
      continue;
    }
    for (auto&& [key, node] : *entries) {
      const std::string name(key.str());
      const std::string full_key = absl::StrCat(table, ".", name);
      const KeySpec* spec = FindKey(table, name);
      if (spec == nullptr) {
        note(key.source(),
             ErrorAt(path, key.source(), absl::StrCat("unknown key '", full_key, "'")));
        continue;
      }
      if (absl::Status s = spec->apply(node, path, full_key, config); !s.ok()) {
        note(node.source(), std::move(s));
      }
    }
  }
  if (first) return first->status;
  if (std::optional<CrossKeyProblem> problem = FindCrossKeyProblem(config)) {
    // Only the keys this file sets can be to blame for it; a problem the file did not make waits
    // for CheckServerConfig, after the flags.
    for (const auto& [table, name] : problem->keys) {
      const toml::node* node = root[table][name].node();
      if (node != nullptr) return ErrorAt(path, node->source(), problem->message);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckServerConfig(const ServerConfig& config) {
  if (std::optional<CrossKeyProblem> problem = FindCrossKeyProblem(config)) {
    return absl::InvalidArgumentError(problem->message);
  }
  return absl::OkStatus();
}

std::string ServerConfigToToml(const ServerConfig& config) {
  std::string out;
  for (const TableSpec& table : Tables()) {
    if (!out.empty()) out += "\n";
    absl::StrAppend(&out, "# ", table.doc, "\n[", table.name, "]\n");
    for (const KeySpec& k : Keys()) {
      if (k.table != table.name) continue;
      absl::StrAppend(&out, "# ", k.doc, "\n", k.name, " = ", k.format(config), "\n");
    }
  }
  return out;
}

std::string ServerConfigReference() {
  return absl::StrCat(
      "# Configuration of `fl server --config FILE`.\n"
      "#\n"
      "# Every key is optional and is shown here with its default value. A flag given on the\n"
      "# command line overrides the file. Durations are in seconds and, like every number that\n"
      "# is not a count, may be written as integers or decimals. Relative paths are taken from\n"
      "# the working directory, as for flags.\n"
      "# Printed by `fl server --print-config-reference`; `--print-effective-config` prints\n"
      "# the configuration a server would run with.\n"
      "\n",
      ServerConfigToToml(ServerConfig{}));
}

}  // namespace fl::server
