#include "cli/sim_config.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/internal/toml_keys.h"
#include "server/daemon/shared_keys.h"
#include "toml++/toml.h"

namespace fl::cli {
namespace {

namespace tk = fl::toml_keys;
using Key = tk::KeySpec<SimConfig>;
using tk::Range;

const std::vector<tk::TableSpec>& Tables() {
  static const auto* const kTables = new std::vector<tk::TableSpec>{
      {"run", "The run: how many sites, rounds and samples, its seed, where it is written."},
      {"data",
       "The data: fashion-mnist (IDX files), csv (a file with a label column) or synthetic "
       "(FedProx's Synthetic(alpha, beta)); the server evaluates every new global model on its "
       "test set."},
      {"partition",
       "How the training rows are split among the sites (NIID-Bench's settings, Flower "
       "Datasets' names)."},
      {"model", "The built-in model every site trains."},
      {"sites", "How the virtual sites reach the server, and how fast they are in simulated time."},
      {"fit", "What each sampled site is asked to do in a round."},
      {"strategy",
       "How the server aggregates updates, and the training values every fit task carries."},
      {"privacy", "Differential privacy (see `mode`)."},
      {"secure_aggregation",
       "Secure aggregation (SecAgg+): the server learns only the sum of the sampled sites' "
       "changes. 0 for num_neighbors, threshold or quantization_bits: the default for each "
       "round's number of sites."},
      {"attack",
       "Attacking sites, to measure robust aggregation: a share of the sites (chosen by the "
       "seed) poison their updates or their labels. Model-poisoning attacks need float32 "
       "updates in the clear (no secure aggregation, no other update encoding, no MPI)."},
  };
  return *kTables;
}

std::vector<Key> RunKeys() {
  using C = SimConfig;
  return {
      tk::StringKey<C>(
          "run", "work_dir",
          "Each run is written to work_dir/run-<time>: its SQLite file, checkpoints "
          "and report.",
          false, [](auto& c) -> auto& { return c.sim.work_dir; })
          .Flag("--work-dir", "Each run is written to WORK_DIR/run-<time>"),
      tk::IntKey<C, int32_t>(
          "run", "sites",
          "Virtual sites; 0: one per key (csv) or 30 devices (synthetic) with a natural split, "
          "else "
          "10.",
          0, [](auto& c) -> auto& { return c.sim.num_clients; })
          .Flag("--clients",
                "Virtual sites (0: one per key or device with a natural split, else 10)"),
      tk::IntKey<C, int32_t>(
          "run", "rounds", "Rounds to commit.", 1,
          [](auto& c) -> auto& { return c.sim.num_rounds; })
          .Flag("--rounds"),
      tk::FloatKey<C>(
          "run", "sample_fraction", "Fraction of the sites sampled per round.", Range::kFraction,
          [](auto& c) -> auto& { return c.sim.sample_fraction; })
          .Flag("--sample-fraction", "Share of the sites sampled, in (0, 1]"),
      tk::IntKey<C, int32_t>(
          "run", "min_fit_clients",
          "Accepted updates a round needs to commit; 0: every sampled site (a round with a "
          "straggler or a dropout is then retried).",
          0, [](auto& c) -> auto& { return c.sim.min_fit_clients; })
          .Flag("--min-fit-clients",
                "Accepted updates a round needs (0: every sampled site; set it lower with "
                "--dropout-fraction or slow sites, or their rounds fail and are retried)"),
      tk::IntKey<C, uint64_t>(
          "run", "seed",
          "Seed of the partition, the sampling, the initial model and the sites' batches.", 0,
          [](auto& c) -> auto& { return c.sim.seed; })
          .Flag("--seed"),
      tk::SecondsKey<C>(
          "run", "round_timeout_s", "A round's deadline (seconds; simulated time with inproc).",
          Range::kPositive, [](auto& c) -> auto& { return c.sim.round_timeout; })
          .Flag("--round-timeout", "Round deadline in seconds"),
      tk::StringKey<C>("run", "update_encoding",
                       "How sites encode their updates: float32, float16 or int8 (changes).", false,
                       [](auto& c) -> auto& { return c.sim.update_encoding; },
                       {"float32", "float16", "int8"})
          .Flag("--update-encoding",
                "How sites encode updates: float32 (weights), float16 or int8 (changes)"),
      tk::StringKey<C>(
          "run", "export",
          "Write the final global model to this safetensors file; empty: not written.", true,
          [](auto& c) -> auto& { return c.export_path; })
          .Flag("--export", "Write the final global model to this safetensors file"),
      tk::BoolKey<C>(
          "run", "report", "Write report.html, report.csv and report.json next to the SQLite file.",
          [](auto& c) -> auto& { return c.report; })
          .Flag("--no-report", "Do not write report.html, .csv and .json next to the SQLite file"),
  };
}

std::vector<Key> DataKeys() {
  using C = SimConfig;
  return {
      tk::StringKey<C>("data", "source", "fashion-mnist, csv or synthetic.", false,
                       [](auto& c) -> auto& { return c.sim.data; },
                       {"fashion-mnist", "csv", "synthetic"})
          .Flag("--data", "fashion-mnist, csv or synthetic"),
      tk::StringKey<C>(
          "data", "dir", "fashion-mnist: the directory of the IDX files.", false,
          [](auto& c) -> auto& { return c.sim.dataset_dir; })
          .Flag("--dataset-dir", "fashion-mnist: the IDX files"),
      tk::StringKey<C>(
          "data", "csv", "csv: the file, with a header row.", true,
          [](auto& c) -> auto& { return c.sim.csv_path; })
          .Flag("--csv", "csv: the file (implies --data csv)"),
      tk::StringKey<C>(
          "data", "test_csv",
          "csv: the server's test file (same columns); empty: test_fraction of the "
          "rows, held out before partitioning.",
          true, [](auto& c) -> auto& { return c.sim.test_csv_path; })
          .Flag("--test-csv", "csv: the server's test file (default: --test-fraction of the rows)"),
      tk::StringKey<C>(
          "data", "label_column", "csv: the column of integer class labels.", false,
          [](auto& c) -> auto& { return c.csv.label_column; })
          .Flag("--label-column", "csv: the label column"),
      tk::StringKey<C>(
          "data", "delimiter",
          "csv: the field separator, one character such as \",\", \";\", \"|\" or "
          "\"\\t\" (a tab).",
          false, [](auto& c) -> auto& { return c.csv.delimiter; })
          .Flag("--delimiter", "csv: the field separator (\"\\t\": a tab)"),
      tk::StringArrayKey<C>(
          "data", "feature_columns",
          "csv: exactly these columns, in this order, are the features; empty: "
          "every column but the label, the key and drop_columns.",
          [](auto& c) -> auto& { return c.csv.feature_columns; }),
      tk::StringKey<C>("data", "missing_values",
                       "csv: a value that is empty or NA, N/A, NaN, null, ? (any case): "
                       "\"refuse\" the file, \"drop_row\" or \"impute\".",
                       false, [](auto& c) -> auto& { return c.csv.missing_values; },
                       {"refuse", "drop_row", "impute"})
          .Flag("--missing-values",
                "csv: what a missing value does: refuse the file, drop_row or impute"),
      tk::FloatKey<C>(
          "data", "impute_value",
          "csv, missing_values = \"impute\": what a missing feature becomes.", Range::kAny,
          [](auto& c) -> auto& { return c.csv.impute_value; })
          .Flag("--impute-value", "csv, --missing-values impute: what a missing feature becomes"),
      tk::StringKey<C>(
          "data", "key_column",
          "csv: a column (e.g. a hospital id) whose values are the natural split's "
          "sites; never a feature. Empty: none.",
          true, [](auto& c) -> auto& { return c.sim.csv.key_column; })
          .Flag("--key-column",
                "csv: a column (e.g. hospital id) whose values are the natural split's sites"),
      tk::StringArrayKey<C>(
          "data", "drop_columns", "csv: columns that are not features.",
          [](auto& c) -> auto& { return c.csv.drop_columns; }),
      tk::FloatKey<C>(
          "data", "test_fraction",
          "csv without test_csv, synthetic: the share of rows the server tests on.",
          Range::kHalfOpenFraction, [](auto& c) -> auto& { return c.sim.test_fraction; })
          .Flag("--test-fraction",
                "csv without --test-csv, synthetic: rows held out for the server's test set"),
      tk::IntKey<C, int64_t>(
          "data", "examples_per_site", "Each site keeps at most this many of its rows; 0: all.", 0,
          [](auto& c) -> auto& { return c.sim.max_examples_per_client; })
          .Flag("--examples-per-client",
                "Each site keeps at most this many of its rows (0: all); for 'sampled', the rows "
                "each site draws"),
      tk::FloatKey<C>(
          "data", "synthetic_alpha",
          "synthetic: how much the devices' models differ (the paper's alpha).",
          Range::kNonNegative, [](auto& c) -> auto& { return c.sim.synthetic.alpha; })
          .Flag("--synthetic-alpha", "synthetic: how much the devices' models differ"),
      tk::FloatKey<C>(
          "data", "synthetic_beta",
          "synthetic: how much the devices' features differ (the paper's beta).",
          Range::kNonNegative, [](auto& c) -> auto& { return c.sim.synthetic.beta; })
          .Flag("--synthetic-beta", "synthetic: how much the devices' features differ"),
      tk::BoolKey<C>(
          "data", "synthetic_iid",
          "synthetic: the paper's Synthetic-IID (one model for every device).",
          [](auto& c) -> auto& { return c.sim.synthetic.iid; })
          .Flag("--synthetic-iid", "synthetic: the paper's Synthetic-IID"),
  };
}

std::vector<Key> PartitionKeys() {
  using C = SimConfig;
  return {
      tk::StringKey<C>(
          "partition", "name",
          "iid, dirichlet (label skew), label_k (#C=k classes per site), shards (McMahan's 2 "
          "shards of sorted labels), quantity_skew (sizes from Dir(beta)), sampled (each site "
          "draws examples_per_site rows; sites may share rows: for more sites than rows), or "
          "natural (the data's own split); empty: natural when the data has one, else iid.",
          true, [](auto& c) -> auto& { return c.sim.partition.name; },
          {"", "iid", "dirichlet", "label_k", "pathological", "shards", "quantity_skew", "sampled",
           "natural", "column"})
          .Flag("--partition",
                "iid, dirichlet, label_k (#C=k), shards, quantity_skew, sampled, natural (default: "
                "natural when the data has a split of its own, else iid)"),
      tk::FloatKey<C>(
          "partition", "beta", "dirichlet, quantity_skew: the concentration beta.",
          Range::kPositive, [](auto& c) -> auto& { return c.sim.partition.beta; })
          .Flag("--beta", "dirichlet, quantity_skew: concentration"),
      tk::IntKey<C, int32_t>(
          "partition", "k", "label_k: classes per site.", 1,
          [](auto& c) -> auto& { return c.sim.partition.k; })
          .Flag("--classes-per-client", "label_k: k classes per site"),
      tk::IntKey<C, int32_t>(
          "partition", "shards_per_client", "shards: shards per site.", 1,
          [](auto& c) -> auto& { return c.sim.partition.shards_per_client; })
          .Flag("--shards-per-client", "shards: per site"),
  };
}

std::vector<Key> ModelAndSiteKeys() {
  using C = SimConfig;
  return {
      tk::StringKey<C>("model", "kind", "softmax, mlp or simple_cnn (Fashion-MNIST only).", false,
                       [](auto& c) -> auto& { return c.sim.model; },
                       {"softmax", "logistic", "mlp", "simple_cnn"})
          .Flag("--model", "softmax, mlp or simple_cnn"),
      tk::IntArrayKey<C>(
          "model", "hidden", "mlp: the hidden layers' widths.", 1,
          [](auto& c) -> auto& { return c.sim.hidden; })
          .Flag("--hidden", "mlp: hidden layer widths"),
      tk::StringKey<C>("model", "backend", "Where sites train and the server evaluates.", false,
                       [](auto& c) -> auto& { return c.sim.backend; }, {"auto", "cpu", "cuda"})
          .Flag("--backend", "auto, cpu or cuda"),
      tk::StringKey<C>("sites", "transport",
                       "inproc: the real engine in this process; grpc: the real server on "
                       "loopback, working sites connecting over mutual TLS.",
                       false, [](auto& c) -> auto& { return c.sim.transport; }, {"inproc", "grpc"})
          .Flag("--transport",
                "inproc: the engine in this process, no network; grpc: the real server on "
                "loopback, working sites connect over mutual TLS. Both: virtual sites on a worker "
                "pool, a simulated clock, the same model for the same seed"),
      tk::IntKey<C, int32_t>(
          "sites", "workers", "Threads that run the sampled sites' tasks; 0: every core.", 0,
          [](auto& c) -> auto& { return c.sim.workers; })
          .Flag("--workers",
                "Threads that run the sampled sites' tasks (0: every core); the result does not "
                "depend on it"),
      tk::BoolKey<C>(
          "sites", "tls", "grpc: mutual TLS (false: plaintext on loopback).",
          [](auto& c) -> auto& { return c.sim.tls; }),
      tk::BoolKey<C>(
          "sites", "mpi",
          "Spread the sites over the ranks of an MPI job (mpirun, srun): rank 0 runs "
          "the server, the others the sites, over gRPC.",
          [](auto& c) -> auto& { return c.sim.mpi; })
          .Flag("--mpi",
                "Spread the sites over the ranks of an MPI job (run under mpirun or srun): rank 0 "
                "runs the server, the others the sites, over gRPC"),
      tk::SecondsKey<C>(
          "sites", "compute_per_example_s",
          "Simulated time one example takes for one local epoch on a site of normal speed.",
          Range::kNonNegative,
          [](auto& c) -> auto& { return c.sim.heterogeneity.compute_per_example; }),
      tk::FloatKey<C>(
          "sites", "link_mbps", "Every site's simulated link, each direction.", Range::kPositive,
          [](auto& c) -> auto& { return c.sim.heterogeneity.link_mbps; })
          .Flag("--link-mbps", "Every site's simulated link speed, each direction"),
      tk::FloatKey<C>(
          "sites", "slow_fraction", "Share of the sites that are slower.", Range::kHalfOpenFraction,
          [](auto& c) -> auto& { return c.sim.heterogeneity.slow_fraction; })
          .Flag("--slow-fraction", "Share of the sites that are slower (simulated time)"),
      tk::FloatKey<C>(
          "sites", "slow_factor", "How much slower they compute and send.", Range::kPositive,
          [](auto& c) -> auto& { return c.sim.heterogeneity.slow_factor; })
          .Flag("--slow-factor", "How much slower those sites compute and send"),
      tk::FloatKey<C>(
          "sites", "dropout_fraction", "Chance that a sampled site drops out of a round attempt.",
          Range::kHalfOpenFraction,
          [](auto& c) -> auto& { return c.sim.heterogeneity.dropout_fraction; })
          .Flag("--dropout-fraction", "Chance that a sampled site drops out of a round"),
      tk::FloatKey<C>(
          "sites", "availability",
          "Chance that a site is there in a round, drawn per site and round; a "
          "sampled site that is not is dropped by the server's client timeout.",
          Range::kFraction, [](auto& c) -> auto& { return c.sim.heterogeneity.availability; })
          .Flag("--availability",
                "Chance that a site is there in a round (per site and round): a sampled site that "
                "is not is dropped by the client timeout"),
      tk::StringKey<C>(
          "attack", "kind",
          "What attacking sites do: none, sign_flip, scale (model replacement), gaussian, "
          "label_flip, alie (a little is enough).",
          true, [](auto& c) -> auto& { return c.sim.attack.kind; },
          {"none", "sign_flip", "scale", "gaussian", "label_flip", "alie"})
          .Flag("--attack",
                "Attacking sites: none, sign_flip, scale, gaussian, label_flip or alie"),
      tk::FloatKey<C>(
          "attack", "fraction", "Share of the sites that attack (chosen by the seed), in [0, 1).",
          Range::kHalfOpenFraction, [](auto& c) -> auto& { return c.sim.attack.fraction; })
          .Flag("--attack-fraction", "Share of the sites that attack, in [0, 1)"),
      tk::FloatKey<C>(
          "attack", "scale",
          "The attack's strength: sign_flip's and scale's factor on the change, gaussian's "
          "stddev; 0: its default (1, the number of sites, 1).",
          Range::kNonNegative, [](auto& c) -> auto& { return c.sim.attack.scale; })
          .Flag("--attack-scale", "The attack's strength (0: its default)"),
  };
}

const std::vector<Key>& Keys() {
  using C = SimConfig;
  static const auto* const kKeys = [] {
    auto* keys = new std::vector<Key>;
    auto append = [keys](std::vector<Key> more) {
      keys->insert(keys->end(), more.begin(), more.end());
    };
    append(RunKeys());
    append(DataKeys());
    append(PartitionKeys());
    append(ModelAndSiteKeys());
    append(server::config_keys::FitKeys<C>([](auto& c) -> auto& { return c.sim.fit; }));
    append(server::config_keys::StrategyKeys<C>([](auto& c) -> auto& { return c.sim.strategy; }));
    append(
        {tk::IntKey<C, int32_t>(
             "strategy", "root_examples",
             "fltrust: the training rows (drawn by the seed) the server keeps as its root dataset.",
             1, [](auto& c) -> auto& { return c.sim.strategy.root_examples; })
             .Flag("--root-examples",
                   "fltrust: training rows the server keeps as its root dataset")});
    append(server::config_keys::PrivacyKeys<C>(
        [](auto& c) -> auto& { return c.sim.privacy; },
        [](auto& c) -> auto& { return c.sim.secure_aggregation; }));
    return keys;
  }();
  return *kKeys;
}

struct Preset {
  const char* name;
  const char* doc;
  const char* toml;
};

// The presets, as TOML over the defaults.
const std::vector<Preset>& Presets() {
  static const auto* const kPresets = new std::vector<Preset>{
      {"demo", "10 sites, IID Fashion-MNIST, softmax, FedAvg, 10 rounds (a few seconds)",
       "[run]\nrounds = 10\n"},
      {"niid-bench-fmnist",
       "NIID-Bench's Fashion-MNIST setting: the simple CNN, 10 parties, 50 rounds, 10 local "
       "epochs, batch 64, SGD lr 0.01 momentum 0.9 weight decay 1e-5, Dir(0.5) label skew",
       "[run]\nsites = 10\nrounds = 50\n"
       "[partition]\nname = \"dirichlet\"\nbeta = 0.5\n"
       "[model]\nkind = \"simple_cnn\"\n"
       "[fit]\nlocal_epochs = 10\nbatch_size = 64\nlearning_rate = 0.01\n"
       "[strategy]\nmomentum = 0.9\nweight_decay = 1e-5\n"},
      {"throughput",
       "The throughput benchmark: 1,000 sites of 60 examples, 10 sampled per round, 100 "
       "rounds, 1 epoch, batch 10, softmax, evaluation every round",
       "[run]\nsites = 1000\nrounds = 100\nsample_fraction = 0.01\n"
       "[data]\nexamples_per_site = 60\n"
       "[fit]\nlocal_epochs = 1\nbatch_size = 10\nlearning_rate = 0.1\n"},
      {"scale",
       "100,000 sites of 60 rows each drawn from Fashion-MNIST (sites share rows), 100 "
       "sampled per round, 5 rounds",
       "[run]\nsites = 100000\nrounds = 5\nsample_fraction = 0.001\n"
       "[data]\nexamples_per_site = 60\n"
       "[partition]\nname = \"sampled\"\n"},
  };
  return *kPresets;
}

absl::Status ApplyToml(const std::string& where, const std::string& text, SimConfig& config) {
  toml::table root;
  try {
    root = toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ":", e.source().begin.line, ":",
                                                   e.source().begin.column, ": ",
                                                   std::string(e.description())));
  }
  return tk::ApplyTomlTable(where, root, Tables(), Keys(), config);
}

}  // namespace

const std::vector<toml_keys::KeySpec<SimConfig>>& SimConfigKeys() { return Keys(); }

std::vector<std::string> SimPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : Presets()) names.emplace_back(p.name);
  return names;
}

std::string SimPresetDoc(const std::string& name) {
  for (const Preset& p : Presets()) {
    if (name == p.name) return p.doc;
  }
  return "";
}

absl::Status ApplySimPreset(const std::string& name, SimConfig& config) {
  for (const Preset& p : Presets()) {
    if (name == p.name) return ApplyToml(absl::StrCat("preset ", name), p.toml, config);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown preset '", name, "'; choose one of ",
                                                 absl::StrJoin(SimPresetNames(), ", ")));
}

absl::Status ApplySimConfig(const std::string& path, SimConfig& config) {
  return tk::ApplyTomlFile(path, Tables(), Keys(), config);
}

absl::Status FinishSimConfig(SimConfig& config) {
  if (config.sim.data != "csv") {
    const ClientDataConfig defaults;
    const ClientDataConfig& c = config.csv;
    if (c.label_column != defaults.label_column || c.delimiter != defaults.delimiter ||
        !c.drop_columns.empty() || !c.feature_columns.empty() ||
        c.missing_values != defaults.missing_values || c.impute_value != defaults.impute_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.label_column, delimiter, drop_columns, feature_columns, missing_values and "
          "impute_value (--label-column, --delimiter, --missing-values, --impute-value) are for "
          "a CSV file, but the data is '",
          config.sim.data, "': set data.source = \"csv\" or leave them out"));
    }
  }
  absl::StatusOr<client::CsvOptions> csv = CsvOptionsFromConfig(config.csv, 0);
  if (!csv.ok()) return csv.status();
  csv->key_column = config.sim.csv.key_column;
  config.sim.csv = *std::move(csv);
  return absl::OkStatus();
}

std::string SimConfigToToml(const SimConfig& config) {
  return tk::TomlFromConfig(Tables(), Keys(), config);
}

std::string SimConfigReference() {
  const SimConfig defaults;
  return absl::StrCat(
      "# Configuration of `fl sim --config FILE`.\n"
      "#\n"
      "# Every key is optional and is shown here with its default value. The order is: these\n"
      "# defaults, then a preset (--preset NAME), then the file, then the flags given on the\n"
      "# command line. Durations are in seconds. Printed by `fl sim --print-config-reference`;\n"
      "# `fl sim --print-effective-config` prints the configuration a run would use.\n"
      "\n",
      tk::TomlFromConfig(Tables(), Keys(), defaults, /*with_flags=*/true));
}

}  // namespace fl::cli
