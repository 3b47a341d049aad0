#include "cli/client_config.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/internal/toml_keys.h"

namespace fl::cli {
namespace {

namespace tk = fl::toml_keys;
using Key = tk::KeySpec<ClientConfig>;
using tk::Range;

const std::vector<std::string>& MissingValueChoices() {
  static const auto* const kChoices = new std::vector<std::string>{"refuse", "drop_row", "impute"};
  return *kChoices;
}

// data.delimiter: a string key that ParseDelimiter must take; written back as given.
Key DelimiterKey() {
  Key k = tk::StringKey<ClientConfig>(
              "data", "delimiter",
              "CSV field separator: one character such as \",\", \";\", \"|\" or \"\\t\" (a tab).",
              false, [](auto& c) -> auto& { return c.data.delimiter; })
              .Flag("--delimiter", "CSV field separator: one character; \\t or tab for a tab");
  k.apply = [read = k.apply](const toml::node& node, const std::string& file,
                             const std::string& full_key, ClientConfig& config) -> absl::Status {
    if (const toml::value<std::string>* v = node.as_string()) {
      if (absl::StatusOr<char> c = ParseDelimiter(v->get()); !c.ok()) {
        return tk::ErrorAt(file, node.source(),
                           absl::StrCat("key '", full_key, "' ", c.status().message()));
      }
    }
    return read(node, file, full_key, config);
  };
  return k;
}

const std::vector<tk::TableSpec>& Tables() {
  static const auto* const kTables = new std::vector<tk::TableSpec>{
      {"server", "The server to join, and this site's TLS identity."},
      {"data", "This site's data, checked against [model] before the client connects."},
      {"model", "The built-in model this site trains; it must be the server's model."},
      {"training",
       "How this site trains; the server may override momentum, weight_decay, proximal_mu, "
       "clip_norm."},
      {"limits",
       "What this site agrees to do, whatever the server asks; other tasks are declined, audited."},
      {"client", "Liveness, reconnection, and serving run after run."},
  };
  return *kTables;
}

// client.next_run_poll_s: seconds in [0.01, 86400], so that a site between runs neither floods
// the server nor sleeps past a day.
Key NextRunPollKey() {
  Key k =
      tk::SecondsKey<ClientConfig>(
          "client", "next_run_poll_s",
          "Between runs: how often to ask the server whether a new run started (seconds, "
          "0.01 to 86400).",
          Range::kPositive, [](auto& c) -> auto& { return c.service.next_run_poll; })
          .Flag("--next-run-poll", "Between runs: seconds between asking the server for a new run");
  k.apply = [read = k.apply](const toml::node& node, const std::string& file,
                             const std::string& full_key, ClientConfig& config) -> absl::Status {
    if (absl::Status s = read(node, file, full_key, config); !s.ok()) return s;
    const double seconds = absl::ToDoubleSeconds(config.service.next_run_poll);
    if (seconds < 0.01 || seconds > 86400) {
      return tk::ErrorAt(file, node.source(),
                         absl::StrCat("key '", full_key, "' must be in [0.01, 86400] seconds, got ",
                                      tk::FormatFloat(seconds)));
    }
    return absl::OkStatus();
  };
  return k;
}

const std::vector<Key>& Keys() {
  using C = ClientConfig;
  static const auto* const kKeys = new std::vector<Key>{
      tk::StringKey<C>(
          "server", "address", "host:port of the server.", false,
          [](auto& c) -> auto& { return c.client.server_address; })
          .Flag("--server", "host:port of the server"),
      tk::StringKey<C>(
          "server", "ca", "Federation CA certificate (PEM file); needed for TLS.", true,
          [](auto& c) -> auto& { return c.client.ca_cert_path; })
          .Flag("--ca", "Federation CA certificate (PEM)"),
      tk::StringKey<C>(
          "server", "cert", "This site's certificate (PEM file); needed for TLS.", true,
          [](auto& c) -> auto& { return c.client.cert_path; })
          .Flag("--cert", "This site's certificate (PEM)"),
      tk::StringKey<C>(
          "server", "key", "This site's private key (PEM file); needed for TLS.", true,
          [](auto& c) -> auto& { return c.client.key_path; })
          .Flag("--key", "This site's private key (PEM)"),
      tk::StringKey<C>(
          "server", "name",
          "Site name in logs; empty: the certificate's common name (the identity in plaintext).",
          true, [](auto& c) -> auto& { return c.client.name; })
          .Flag(
              "--name",
              "Site name for logs (default: the certificate's CN; the identity in plaintext mode)"),
      tk::BoolKey<C>(
          "server", "insecure_plaintext", "No TLS, to a loopback address only: for tests.",
          [](auto& c) -> auto& { return c.client.insecure_plaintext; })
          .Flag("--insecure-plaintext", "No TLS; loopback only; for tests"),

      tk::StringKey<C>("data", "format",
                       "\"csv\" (path, label_column) or \"idx\" (images, labels).", false,
                       [](auto& c) -> auto& { return c.data.format; }, {"csv", "idx"})
          .Flag("--format", "csv or idx (default: idx when --images is given)"),
      tk::StringKey<C>(
          "data", "path",
          "Training CSV file with a header row; features: feature_columns, else every column "
          "but the label and drop_columns.",
          true, [](auto& c) -> auto& { return c.data.path; })
          .Flag("--csv", "Training CSV file with a header row"),
      tk::StringKey<C>(
          "data", "label_column", "The CSV column of integer class labels 0..classes-1.", false,
          [](auto& c) -> auto& { return c.data.label_column; })
          .Flag("--label-column"),
      DelimiterKey(),
      tk::StringArrayKey<C>(
          "data", "drop_columns",
          "CSV columns never used as features (patient ids, dates, free text); not read.",
          [](auto& c) -> auto& { return c.data.drop_columns; })
          .Flag("--drop-column",
                "CSV column never used as a feature, e.g. a patient id (repeatable)"),
      tk::StringArrayKey<C>(
          "data", "feature_columns",
          "Not empty: exactly these CSV columns, in this order, are the features; others are "
          "ignored.",
          [](auto& c) -> auto& { return c.data.feature_columns; })
          .Flag("--feature-column",
                "Exactly these CSV columns, in this order, are the features (repeatable)"),
      tk::StringKey<C>(
          "data", "missing_values",
          "A value that is empty or NA, N/A, NaN, null, ? (any case): \"refuse\" the file, "
          "\"drop_row\" or \"impute\".",
          false, [](auto& c) -> auto& { return c.data.missing_values; }, MissingValueChoices())
          .Flag("--missing-values",
                "A missing CSV value (empty, NA, N/A, NaN, null, ?): refuse, drop_row or impute"),
      tk::FloatKey<C>(
          "data", "impute_value", "missing_values = \"impute\": what a missing feature becomes.",
          Range::kAny, [](auto& c) -> auto& { return c.data.impute_value; })
          .Flag("--impute-value",
                "With --missing-values impute: what a missing feature value becomes"),
      tk::StringKey<C>(
          "data", "images", "Training IDX image file (optionally .gz).", true,
          [](auto& c) -> auto& { return c.data.images; })
          .Flag("--images", "Training IDX images (optionally .gz)"),
      tk::StringKey<C>(
          "data", "labels", "Training IDX label file (optionally .gz).", true,
          [](auto& c) -> auto& { return c.data.labels; })
          .Flag("--labels", "Training IDX labels (optionally .gz)"),
      tk::StringKey<C>(
          "data", "test_path", "Test CSV file (same columns); empty: none.", true,
          [](auto& c) -> auto& { return c.data.test_path; })
          .Flag("--test-csv", "Test CSV file"),
      tk::StringKey<C>(
          "data", "test_images", "Test IDX image file; empty: none.", true,
          [](auto& c) -> auto& { return c.data.test_images; })
          .Flag("--test-images", "Test IDX images"),
      tk::StringKey<C>(
          "data", "test_labels", "Test IDX label file; empty: none.", true,
          [](auto& c) -> auto& { return c.data.test_labels; })
          .Flag("--test-labels", "Test IDX labels"),
      tk::FloatKey<C>(
          "data", "test_fraction",
          "Without test files: hold out this fraction of the training rows for evaluation.",
          Range::kHalfOpenFraction, [](auto& c) -> auto& { return c.data.test_fraction; })
          .Flag("--test-fraction",
                "Without test files: hold out this fraction of the training rows"),
      tk::IntKey<C, uint64_t>(
          "data", "split_seed", "Seed of the shuffle behind test_fraction and the shards.", 0,
          [](auto& c) -> auto& { return c.data.split_seed; })
          .Flag("--split-seed", "Seed of the shards and the test split (default: --seed)"),
      tk::IntKey<C, int32_t>(
          "data", "shard", "Train on IID shard `shard` of num_shards (for demos).", 0,
          [](auto& c) -> auto& { return c.data.shard; })
          .Flag("--shard", "Train on IID shard K of --num-shards"),
      tk::IntKey<C, int32_t>(
          "data", "num_shards", "Number of IID shards of the training rows; 0: no sharding.", 0,
          [](auto& c) -> auto& { return c.data.num_shards; })
          .Flag("--num-shards"),

      tk::StringKey<C>("model", "kind", "\"softmax\" (or \"logistic\"), \"mlp\" or \"simple_cnn\".",
                       false, [](auto& c) -> auto& { return c.model.kind; },
                       {"softmax", "logistic", "mlp", "simple_cnn"})
          .Flag("--model", "softmax, mlp or simple_cnn"),
      tk::IntKey<C, int64_t>(
          "model", "features",
          "Input features the model expects; 0: the training data's (simple_cnn: "
          "height*width*channels).",
          0, [](auto& c) -> auto& { return c.model.features; })
          .Flag("--features", "Features the model expects (0: the data's)"),
      tk::IntKey<C, int32_t>(
          "model", "classes",
          "Output classes; labels must be in [0, classes). 0: 1 + the largest training label "
          "(set it when a site may lack the highest classes).",
          0, [](auto& c) -> auto& { return c.model.classes; })
          .Flag("--classes", "Classes (0: 1 + the largest training label)"),
      tk::IntArrayKey<C>(
          "model", "hidden", "mlp: widths of the hidden layers.", 1,
          [](auto& c) -> auto& { return c.model.hidden; })
          .Flag("--hidden", "mlp hidden layer widths"),
      tk::IntKey<C, int64_t>(
          "model", "image_height", "simple_cnn: image height in pixels.", 1,
          [](auto& c) -> auto& { return c.model.image_height; }),
      tk::IntKey<C, int64_t>(
          "model", "image_width", "simple_cnn: image width in pixels.", 1,
          [](auto& c) -> auto& { return c.model.image_width; }),
      tk::IntKey<C, int64_t>(
          "model", "image_channels", "simple_cnn: channels per pixel.", 1,
          [](auto& c) -> auto& { return c.model.image_channels; }),

      tk::StringKey<C>("training", "backend",
                       "\"auto\" (CUDA when a device is present), \"cpu\" or \"cuda\".", false,
                       [](auto& c) -> auto& { return c.training.backend; }, {"auto", "cpu", "cuda"})
          .Flag("--backend", "auto, cpu or cuda"),
      tk::IntKey<C, int>(
          "training", "cpu_threads", "Threads of the CPU backend; 0: every core.", 0,
          [](auto& c) -> auto& { return c.training.cpu_threads; })
          .Flag("--cpu-threads", "0: every core"),
      tk::FloatKey<C>(
          "training", "momentum", "SGD heavy-ball momentum.", Range::kNonNegative,
          [](auto& c) -> auto& { return c.training.momentum; }),
      tk::FloatKey<C>(
          "training", "weight_decay", "L2 coefficient added to the gradient.", Range::kNonNegative,
          [](auto& c) -> auto& { return c.training.weight_decay; }),
      tk::FloatKey<C>(
          "training", "proximal_mu", "FedProx proximal term mu; 0: plain SGD.", Range::kNonNegative,
          [](auto& c) -> auto& { return c.training.proximal_mu; }),
      tk::FloatKey<C>(
          "training", "clip_norm", "Clip each batch's gradient to this L2 norm; 0: off.",
          Range::kNonNegative, [](auto& c) -> auto& { return c.training.clip_norm; }),
      tk::BoolKey<C>(
          "training", "scaffold", "SCAFFOLD control variates (the server must run SCAFFOLD).",
          [](auto& c) -> auto& { return c.training.scaffold; }),
      tk::IntKey<C, uint64_t>(
          "training", "seed", "Seed of the batch order.", 0,
          [](auto& c) -> auto& { return c.training.seed; })
          .Flag("--seed", "Seed of the batch order"),

      tk::IntKey<C, int32_t>(
          "limits", "max_local_epochs", "Most local epochs a task may ask for; 0: no limit.", 0,
          [](auto& c) -> auto& { return c.client.limits.max_local_epochs; })
          .Flag("--max-local-epochs", "Decline tasks asking for more local epochs (0: no limit)"),
      tk::StringArrayKey<C>(
          "limits", "allowed_models",
          "Models a task may train (softmax, mlp, simple_cnn); empty: any.",
          [](auto& c) -> auto& { return c.client.limits.allowed_models; })
          .Flag("--allowed-model", "Decline tasks for any other model (repeatable; default: any)"),
      tk::BoolKey<C>(
          "limits", "require_differential_privacy",
          "Decline tasks of runs without differential privacy.",
          [](auto& c) -> auto& { return c.client.limits.require_differential_privacy; })
          .Flag("--require-differential-privacy",
                "Decline tasks of runs without differential privacy"),
      tk::BoolKey<C>(
          "limits", "require_secure_aggregation",
          "Decline tasks of runs without secure aggregation (the server would see this update).",
          [](auto& c) -> auto& { return c.client.limits.require_secure_aggregation; })
          .Flag("--require-secure-aggregation",
                "Decline tasks of rounds without secure aggregation"),
      tk::FloatKey<C>(
          "limits", "min_noise_multiplier",
          "Secure rounds with distributed DP: decline unless the noise this site adds gives its "
          "input at least this noise multiplier against the server (stddev / clip norm); also "
          "declines plain rounds. 0: no floor.",
          Range::kNonNegative,
          [](auto& c) -> auto& { return c.client.limits.min_noise_multiplier; })
          .Flag("--min-noise-multiplier", "Decline rounds with less noise than this (0: no floor)"),
      tk::FloatKey<C>(
          "limits", "max_epsilon",
          "Decline a secure round that would bring this site's epsilon against the server (no "
          "amplification, composed over every input in privacy_ledger, or this process's "
          "without one) above this; also declines plain rounds. 0: no limit.",
          Range::kNonNegative, [](auto& c) -> auto& { return c.client.limits.max_epsilon; })
          .Flag("--max-epsilon", "Most epsilon against the server (0: no limit)"),
      tk::FloatKey<C>(
          "limits", "epsilon_delta", "The delta max_epsilon is counted at.", Range::kOpenFraction,
          [](auto& c) -> auto& { return c.client.limits.epsilon_delta; }),
      tk::StringKey<C>(
          "limits", "privacy_ledger",
          "File where each masked input's noise is recorded (synced before the input is sent) "
          "and read back at start, so that max_epsilon counts across restarts. Empty: none.",
          true, [](auto& c) -> auto& { return c.client.limits.privacy_ledger; })
          .Flag("--privacy-ledger", "File that keeps max_epsilon's count across restarts"),
      tk::IntKey<C, int32_t>(
          "limits", "min_sum_size",
          "Secure rounds: refuse to unmask a sum of fewer inputs (protects the federation when "
          "the sites holding each other's shares set it alike). 0: no floor.",
          0, [](auto& c) -> auto& { return c.client.limits.min_sum_size; })
          .Flag("--min-sum-size", "Refuse to unmask sums of fewer inputs (0: no floor)"),
      tk::FloatKey<C>(
          "limits", "min_corrupt_fraction",
          "Secure rounds: decline a round whose consistency check holds against fewer colluding "
          "sites than this share, in [0, 0.5). 0: any.",
          Range::kHalfOpenFraction,
          [](auto& c) -> auto& { return c.client.limits.min_corrupt_fraction; }),
      tk::IntKey<C, int32_t>(
          "limits", "grinding_bits",
          "Secure rounds: decline a graph (k, t) that leaves a site with t colluding neighbours "
          "(at the round's corrupt_fraction) with probability above 2^-(40 + this), which keeps "
          "the site safe from a server that tries 2^this directories, or sends a small k. In "
          "[0, 100].",
          0, [](auto& c) -> auto& { return c.client.limits.grinding_bits; }),
      tk::BoolKey<C>(
          "limits", "share_site_evaluation",
          "In runs with secure aggregation, let the server record this site's own evaluation "
          "results (fl admin evals); false: only the federation's aggregate is kept. Runs "
          "without secure aggregation record every site's. With "
          "limits.require_secure_aggregation, false also keeps the results from the server: "
          "the site declines evaluation tasks.",
          [](auto& c) -> auto& { return c.client.share_site_evaluation; }),

      tk::SecondsKey<C>(
          "client", "heartbeat_s",
          "Heartbeat period while working on a task (seconds); well under the server's "
          "client_timeout_s.",
          Range::kPositive, [](auto& c) -> auto& { return c.client.heartbeat_interval; })
          .Flag("--heartbeat", "Heartbeat period while working (seconds)"),
      tk::SecondsKey<C>(
          "client", "reconnect_timeout_s",
          "Retry an unreachable server this long (seconds); then once exits 5, serving "
          "logs it and goes on.",
          Range::kPositive, [](auto& c) -> auto& { return c.client.reconnect_timeout; })
          .Flag("--reconnect-timeout",
                "Seconds the server may stay unreachable: then --once exits 5; serving, the client "
                "logs server_unreachable and keeps retrying"),
      tk::SecondsKey<C>(
          "client", "poll_wait_s", "How long one poll for a task waits (seconds).",
          Range::kPositive, [](auto& c) -> auto& { return c.client.poll_wait; }),
      tk::BoolKey<C>(
          "client", "once",
          "One run, then exit (0 finished, 4 failed); false: serve run after run until "
          "stopped.",
          [](auto& c) -> auto& { return c.service.once; })
          .Flag("--once",
                "Take part in one run, then exit: 0 finished, 4 failed, 5 server unreachable"),
      NextRunPollKey(),
  };
  return *kKeys;
}

}  // namespace

const std::vector<toml_keys::KeySpec<ClientConfig>>& ClientConfigKeys() { return Keys(); }

absl::Status ApplyClientConfig(const std::string& path, ClientConfig& config) {
  return tk::ApplyTomlFile(path, Tables(), Keys(), config);
}

absl::Status ValidateClientConfig(const ClientConfig& config) {
  const ClientDataConfig& d = config.data;
  if (d.format == "csv") {
    if (d.path.empty()) {
      return absl::InvalidArgumentError(
          "give the training data: data.path (--csv) with data.format = \"csv\"");
    }
    if (!d.images.empty() || !d.labels.empty() || !d.test_images.empty() ||
        !d.test_labels.empty()) {
      return absl::InvalidArgumentError(
          "data.format is \"csv\" but IDX files are given (data.images, data.labels, "
          "data.test_images, data.test_labels); set data.format = \"idx\" (--format idx)");
    }
    absl::StatusOr<fl::client::CsvOptions> csv = CsvOptionsFromConfig(d, 0);
    if (!csv.ok()) return csv.status();
    if (absl::Status s = fl::client::ValidateCsvOptions(*csv); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("data.", s.message()));
    }
  } else if (d.format == "idx") {
    if (d.images.empty() || d.labels.empty()) {
      return absl::InvalidArgumentError(
          "give the training data: data.images and data.labels (--images, --labels) with "
          "data.format = \"idx\"");
    }
    if (d.test_images.empty() != d.test_labels.empty()) {
      return absl::InvalidArgumentError(
          "data.test_images and data.test_labels go together: give both or neither");
    }
    if (!d.path.empty() || !d.test_path.empty()) {
      return absl::InvalidArgumentError(
          "data.format is \"idx\" but CSV files are given (data.path, data.test_path); set "
          "data.format = \"csv\"");
    }
    const ClientDataConfig csv_defaults;
    if (d.delimiter != csv_defaults.delimiter || !d.drop_columns.empty() ||
        !d.feature_columns.empty() || d.missing_values != csv_defaults.missing_values ||
        d.impute_value != csv_defaults.impute_value) {
      return absl::InvalidArgumentError(
          "data.delimiter, data.drop_columns, data.feature_columns, data.missing_values and "
          "data.impute_value are for CSV files, but data.format is \"idx\"");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("data.format must be \"csv\" or \"idx\", got \"", d.format, "\""));
  }
  const bool has_test_files = !d.test_path.empty() || !d.test_images.empty();
  if (has_test_files && d.test_fraction > 0) {
    return absl::InvalidArgumentError(
        "data.test_fraction holds out training rows for testing, but test files are given too: "
        "choose one");
  }
  if (!(d.test_fraction >= 0 && d.test_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.test_fraction must be in [0, 1), got ", d.test_fraction));
  }
  if (d.num_shards < 0 || (d.num_shards > 0 && (d.shard < 0 || d.shard >= d.num_shards))) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.shard (--shard) must be in [0, ", d.num_shards, "), got ", d.shard));
  }
  const ClientModelConfig& m = config.model;
  if (m.kind == "simple_cnn" && m.features > 0 &&
      m.features != m.image_height * m.image_width * m.image_channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.features is ", m.features, " but simple_cnn's image is ",
                     m.image_height, "x", m.image_width, "x", m.image_channels, " = ",
                     m.image_height * m.image_width * m.image_channels, " features"));
  }
  if (m.kind == "mlp" && m.hidden.empty()) {
    return absl::InvalidArgumentError("model.hidden must name at least one layer for mlp");
  }
  if (m.classes < 0 || m.classes == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.classes (--classes) must be 0 (from the data) or >= 2, got ", m.classes));
  }
  const fl::client::ClientOptions& c = config.client;
  if (!c.insecure_plaintext &&
      (c.ca_cert_path.empty() || c.cert_path.empty() || c.key_path.empty())) {
    return absl::InvalidArgumentError(
        "mutual TLS needs server.ca, server.cert and server.key (--ca, --cert, --key); "
        "plaintext needs server.insecure_plaintext (--insecure-plaintext) and a loopback "
        "address");
  }
  if (c.limits.max_local_epochs < 0) {
    return absl::InvalidArgumentError("limits.max_local_epochs must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<char> ParseDelimiter(std::string_view text) {
  char c = 0;
  if (text.size() == 1) {
    c = text[0];
  } else if (text == "\\t" || text == "tab") {
    c = '\t';
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "must be one character (\"\\t\" or \"tab\" for a tab), got ", tk::Quote(text)));
  }
  fl::client::CsvOptions options;
  options.delimiter = c;
  if (absl::Status s = fl::client::ValidateCsvOptions(options); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("must be usable: ", s.message()));
  }
  return c;
}

absl::StatusOr<fl::client::CsvOptions> CsvOptionsFromConfig(const ClientDataConfig& data,
                                                            int32_t num_classes) {
  fl::client::CsvOptions o;
  absl::StatusOr<char> delimiter = ParseDelimiter(data.delimiter);
  if (!delimiter.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.delimiter (--delimiter) ", delimiter.status().message()));
  }
  o.delimiter = *delimiter;
  if (data.missing_values == "refuse") {
    o.missing_values = fl::client::MissingValues::kRefuse;
  } else if (data.missing_values == "drop_row") {
    o.missing_values = fl::client::MissingValues::kDropRow;
  } else if (data.missing_values == "impute") {
    o.missing_values = fl::client::MissingValues::kImpute;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.missing_values (--missing-values) must be one of ",
        absl::StrJoin(MissingValueChoices(), ", "), ", got ", tk::Quote(data.missing_values)));
  }
  o.label_column = data.label_column;
  o.drop_columns = data.drop_columns;
  o.feature_columns = data.feature_columns;
  o.impute_value = data.impute_value;
  o.num_classes = num_classes;
  return o;
}

std::string ClientConfigToToml(const ClientConfig& config) {
  return tk::TomlFromConfig(Tables(), Keys(), config);
}

std::string ClientConfigReference() {
  return absl::StrCat(
      "# Configuration of `fl client --config FILE`: a site of the federation.\n"
      "#\n"
      "# Every key is optional and is shown here with its default value. A flag given on the\n"
      "# command line (named beside its key) overrides the file. Durations are in seconds and,\n"
      "# like every number that is not a count, may be written as integers or decimals.\n"
      "# Relative paths are taken from the working directory, as for flags.\n"
      "# Printed by `fl client --print-config-reference`; `--print-effective-config` prints\n"
      "# the configuration a client would run with.\n"
      "\n",
      tk::TomlFromConfig(Tables(), Keys(), ClientConfig{}, /*with_flags=*/true));
}

}  // namespace fl::cli
