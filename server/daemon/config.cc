#include "server/daemon/config.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/internal/toml_keys.h"
#include "fl/aggregation/robust.h"
#include "fl/aggregation/strategies.h"
#include "grpc/impl/codegen/grpc_types.h"
#include "server/daemon/shared_keys.h"
#include "toml++/toml.h"

namespace fl::server {
namespace {

namespace tk = fl::toml_keys;
using Key = tk::KeySpec<ServerConfig>;
using tk::Range;

const std::vector<tk::TableSpec>& Tables() {
  static const auto* const kTables = new std::vector<tk::TableSpec>{
      {"server", "Where the server listens, its TLS identity, and who may join."},
      {"run",
       "The run. A server that resumes an unfinished run keeps that run's recorded [run] and "
       "[fit]."},
      {"fit", "What each sampled client is asked to do in a round."},
      {"strategy",
       "How the server aggregates updates, and the training values every fit task carries."},
      {"model", "The built-in model a new run starts from; a resumed run's must have its shape."},
      {"privacy", "Differential privacy (see `mode`); a resumed run keeps its recorded [privacy]."},
      {"secure_aggregation",
       "Secure aggregation (SecAgg+): the server learns only the sum of the sampled clients' "
       "changes, never one client's. 0 for num_neighbors, threshold or quantization_bits: the "
       "default for each round's number of clients."},
      {"limits",
       "What the server takes from a client's text and maps; a request over a limit is refused "
       "(INVALID_ARGUMENT naming the field and the limit) and audited."},
  };
  return *kTables;
}

const std::vector<Key>& Keys() {
  using C = ServerConfig;
  static const auto* const kKeys = [] {
    auto* keys = new std::vector<Key>{
        tk::StringKey<C>(
            "server", "listen", "host:port to listen on; port 0 picks a free port.", false,
            [](auto& c) -> auto& { return c.server.listen_address; })
            .Flag("--listen", "host:port to listen on"),
        tk::StringKey<C>(
            "server", "data_dir",
            "Directory of the SQLite file, the checkpoints and the spill files.", false,
            [](auto& c) -> auto& { return c.server.data_dir; })
            .Flag("--data-dir", "SQLite file and checkpoints go here"),
        tk::StringKey<C>(
            "server", "ca", "Federation CA certificate (PEM file); needed for TLS.", true,
            [](auto& c) -> auto& { return c.server.ca_cert_path; })
            .Flag("--ca", "Federation CA certificate (PEM)"),
        tk::StringKey<C>(
            "server", "cert", "This server's certificate (PEM file); needed for TLS.", true,
            [](auto& c) -> auto& { return c.server.cert_path; })
            .Flag("--cert", "Server certificate (PEM)"),
        tk::StringKey<C>(
            "server", "key", "This server's private key (PEM file); needed for TLS.", true,
            [](auto& c) -> auto& { return c.server.key_path; })
            .Flag("--key", "Server private key (PEM)"),
        tk::StringArrayKey<C>(
            "server", "enroll",
            "Client certificates (PEM files) to enroll at start, besides those "
            "enrolled before.",
            [](auto& c) -> auto& { return c.server.enroll_cert_paths; })
            .Flag("--enroll", "Client certificate to enroll (repeatable)"),
        tk::BoolKey<C>(
            "server", "insecure_plaintext",
            "No TLS, loopback addresses only, clients named by what they send: for tests.",
            [](auto& c) -> auto& { return c.server.insecure_plaintext; })
            .Flag("--insecure-plaintext", "No TLS; loopback addresses only; for tests"),
        tk::SecondsKey<C>(
            "server", "max_poll_wait_s",
            "Longest a client's poll is held open while there is no task (seconds).",
            Range::kPositive, [](auto& c) -> auto& { return c.server.max_poll_wait; }),
        tk::IntKey<C, int32_t>(
            "server", "stream_window_mib",
            "Per-upload buffer (MiB); an upload's speed is at most this / round trip. 0: gRPC's "
            "auto-tuned window (faster, but tens of MiB per upload).",
            0, [](auto& c) -> auto& { return c.server.stream_window_mib; }, 1024),
        tk::StringKey<C>(
            "server", "metrics_listen",
            "host:port of the Prometheus /metrics and /healthz endpoint; empty: off.", true,
            [](auto& c) -> auto& { return c.server.metrics_address; })
            .Flag("--metrics-listen",
                  "host:port of the /metrics and /healthz HTTP endpoint (empty: off)"),
        tk::IntKey<C, int64_t>(
            "limits", "max_name_bytes",
            "Longest client_name, sdk_version, capability or task id a client may send (bytes).", 1,
            [](auto& c) -> auto& { return c.server.client_limits.max_name_bytes; }),
        tk::IntKey<C, int32_t>(
            "limits", "max_capabilities", "Most capabilities a join may list.", 1,
            [](auto& c) -> auto& { return c.server.client_limits.max_capabilities; }),
        tk::IntKey<C, int32_t>(
            "limits", "max_metrics", "Most entries in one update's or evaluation's metrics.", 1,
            [](auto& c) -> auto& { return c.server.client_limits.max_metrics; }),
        tk::IntKey<C, int64_t>(
            "limits", "max_metric_key_bytes", "Longest metric name (bytes).", 1,
            [](auto& c) -> auto& { return c.server.client_limits.max_metric_key_bytes; }),
        tk::IntKey<C, int64_t>(
            "limits", "max_text_bytes",
            "A client's decline reason or evaluation error is cut to this many bytes (and "
            "recorded, not refused).",
            1, [](auto& c) -> auto& { return c.server.client_limits.max_text_bytes; }),
        tk::IntKey<C, int32_t>(
            "limits", "max_streams_per_client",
            "Most calls one client may have in progress at once (polls, downloads, uploads, "
            "short calls); past it, RESOURCE_EXHAUSTED.",
            1, [](auto& c) -> auto& { return c.server.client_limits.max_streams_per_client; }),
        tk::IntKey<C, int32_t>(
            "limits", "max_uploads_per_client",
            "Most uploads one client may have in progress at once; past it, RESOURCE_EXHAUSTED.", 1,
            [](auto& c) -> auto& { return c.server.client_limits.max_uploads_per_client; }),
        tk::IntKey<C, int32_t>(
            "limits", "max_metadata_bytes",
            "Most bytes of metadata (headers) one call may carry; gRPC refuses a call past it.",
            1024, [](auto& c) -> auto& { return c.server.client_limits.max_metadata_bytes; },
            1 << 20),
        tk::SecondsKey<C>(
            "limits", "stream_idle_timeout_s",
            "An upload or download that moves no data for this long is cut and audited "
            "(seconds); one whose round closed is cut at once.",
            Range::kPositive,
            [](auto& c) -> auto& { return c.server.client_limits.stream_idle_timeout; }),
        tk::IntKey<C, int32_t>(
            "server", "service_threads",
            "Threads that run the federation service's calls into the engine and the store; "
            "waiting polls and idle streams hold none.",
            1, [](auto& c) -> auto& { return c.server.service_threads; }, 256),
        tk::IntKey<C, int32_t>(
            "server", "cert_warn_days",
            "Warn (log certificate_expiring at start and daily; metric fl_site_certificates_"
            "expiring) when the server's or an enrolled site's certificate expires within this "
            "many days.",
            0, [](auto& c) -> auto& { return c.server.cert_warn_days; }),
        tk::IntKey<C, int32_t>(
            "server", "keep_checkpoints",
            "Checkpoint retention: each run keeps the global models of its last N committed "
            "rounds (and its initial model); older ones are deleted after each commit. 0: keep "
            "every round's.",
            0, [](auto& c) -> auto& { return c.server.checkpoints_keep_last; }),
        tk::IntKey<C, int32_t>(
            "server", "keep_checkpoint_every",
            "With keep_checkpoints: also keep every round that is a multiple of this (0: none).", 0,
            [](auto& c) -> auto& { return c.server.checkpoints_keep_every; }),
        tk::SecondsKey<C>(
            "server", "stall_after_s",
            "A run with no progress (no round opened or closed, no update, no site at work) for "
            "this long is reported stalled by /healthz and fl_run_state (seconds).",
            Range::kPositive, [](auto& c) -> auto& { return c.server.stall_after; }),
        tk::SecondsKey<C>(
            "server", "grace_s",
            "After the run ends, keep serving this long so clients hear DONE (seconds).",
            Range::kNonNegative, [](auto& c) -> auto& { return c.grace; })
            .Flag("--grace", "Seconds to keep serving DONE after the run ends"),
        tk::BoolKey<C>(
            "server", "stay_up",
            "Run as a daemon: start no run of this file's own, resume the unfinished run, take "
            "runs submitted with `fl run submit` one after another, and stay up between them. "
            "false: serve this file's run (and any submitted meanwhile), then exit.",
            [](auto& c) -> auto& { return c.server.stay_up; })
            .Flag("--stay-up",
                  "A daemon: take runs submitted with `fl run submit`, one after another, and stay "
                  "up between them (no run of its own configuration)"),

        tk::StringKey<C>(
            "run", "name", "The run's name, recorded with it.", false,
            [](auto& c) -> auto& { return c.server.engine.run_name; }),
        tk::IntKey<C, int32_t>(
            "run", "rounds", "Rounds to commit.", 1,
            [](auto& c) -> auto& { return c.server.engine.num_rounds; })
            .Flag("--rounds"),
        tk::IntKey<C, int32_t>(
            "run", "min_clients", "Clients online before a round starts.", 1,
            [](auto& c) -> auto& { return c.server.engine.min_clients; })
            .Flag("--min-clients", "Clients online before a round starts"),
        tk::IntKey<C, int32_t>(
            "run", "min_fit_clients",
            "Accepted updates needed to commit a round (at most min_clients).", 1,
            [](auto& c) -> auto& { return c.server.engine.min_fit_clients; })
            .Flag("--min-fit-clients", "Accepted updates needed to commit a round"),
        tk::FloatKey<C>(
            "run", "sample_fraction",
            "Fraction of the online clients sampled per round (at least min_fit_clients).",
            Range::kFraction, [](auto& c) -> auto& { return c.server.engine.sample_fraction; })
            .Flag("--sample-fraction"),
        tk::SecondsKey<C>(
            "run", "round_timeout_s", "A round's deadline (seconds).", Range::kPositive,
            [](auto& c) -> auto& { return c.server.engine.round_timeout; })
            .Flag("--round-timeout", "Round deadline in seconds"),
        tk::SecondsKey<C>(
            "run", "client_timeout_s",
            "A client silent this long is offline; rounds stop waiting for it (seconds).",
            Range::kPositive, [](auto& c) -> auto& { return c.server.engine.client_timeout; }),
        tk::SecondsKey<C>(
            "run", "task_pickup_timeout_s",
            "A client sampled in a round that has not asked for its task this long after the "
            "round opened is dropped from it (seconds).",
            Range::kPositive, [](auto& c) -> auto& { return c.server.engine.task_pickup_timeout; }),
        tk::IntKey<C, int32_t>(
            "run", "max_round_retries", "Failed attempts of a round retried before the run fails.",
            0, [](auto& c) -> auto& { return c.server.engine.max_round_retries; })
            .Flag("--max-round-retries"),
        tk::SecondsKey<C>(
            "run", "retry_backoff_s",
            "Delay before a failed round's next attempt, doubled for each further failure, at "
            "most 60 (seconds); 0: at once.",
            Range::kNonNegative, [](auto& c) -> auto& { return c.server.engine.retry_backoff; }),
        tk::IntKey<C, uint64_t>(
            "run", "seed", "Seed of the client sampling.", 0,
            [](auto& c) -> auto& { return c.server.engine.seed; })
            .Flag("--seed"),
        tk::SecondsKey<C>(
            "run", "wait_timeout_s",
            "Longest wait for min_clients to be online, for a strategy that cannot configure a "
            "round, or for a store that cannot record one; then the run fails (seconds).",
            Range::kPositive, [](auto& c) -> auto& { return c.server.engine.wait_timeout; }),
        tk::StringKey<C>(
            "run", "stop_metric",
            "Stopping rule: the metric that ends the run early (train_loss, test_*, eval_loss, "
            "eval_*, e.g. eval_auc); empty: none.",
            true, [](auto& c) -> auto& { return c.server.engine.stop_metric; })
            .Flag("--stop-metric",
                  "Stopping rule: end the run when this round metric reaches --stop-threshold"),
        tk::FloatKey<C>(
            "run", "stop_threshold", "Stopping rule: the value stop_metric must reach.",
            Range::kAny, [](auto& c) -> auto& { return c.server.engine.stop_threshold; })
            .Flag("--stop-threshold"),
        tk::BoolKey<C>(
            "run", "stop_when_below",
            "Stopping rule: stop when stop_metric falls to the threshold (a loss) instead of "
            "rising to it.",
            [](auto& c) -> auto& { return c.server.engine.stop_when_below; }),
        tk::StringKey<C>(
            "run", "update_encoding",
            "How clients encode their updates: float32 (the weights), float16 or int8 (the change "
            "from the global model, int8 with a scale per 1 MiB chunk); secure aggregation needs "
            "float32.",
            false, [](auto& c) -> auto& { return c.server.engine.update_encoding; },
            {"float32", "float16", "int8"})
            .Flag("--update-encoding",
                  "How clients encode updates: float32 (weights), float16 or int8 (changes)"),
        tk::IntKey<C, int32_t>(
            "run", "eval_every",
            "Federated evaluation after every this many committed rounds; 0: never.", 0,
            [](auto& c) -> auto& { return c.server.engine.eval_every; })
            .Flag("--eval-every", "Federated evaluation after every N committed rounds (0: never)"),
        tk::FloatKey<C>(
            "run", "eval_fraction", "Fraction of the online clients that evaluate.",
            Range::kFraction, [](auto& c) -> auto& { return c.server.engine.eval_fraction; }),
        tk::SecondsKey<C>(
            "run", "eval_timeout_s", "Deadline of a federated evaluation (seconds).",
            Range::kPositive, [](auto& c) -> auto& { return c.server.engine.eval_timeout; }),
        tk::BoolKey<C>(
            "run", "federated_standardization",
            "Before round 1, add up the sites' per-feature sums into the federation's means and "
            "standard deviations, which every site then standardises its features with.",
            [](auto& c) -> auto& { return c.server.engine.federated_standardization; })
            .Flag("--federated-standardization",
                  "Before round 1, aggregate the sites' feature statistics; every site "
                  "standardises its features with them"),

        tk::StringKey<C>(
            "model", "initial",
            "A safetensors file the run starts from (tensor names, shapes and values; sites bring "
            "their own model code); empty: the built-in kind below.",
            true, [](auto& c) -> auto& { return c.model.initial; })
            .Flag("--initial-model",
                  "Start a new run from this safetensors file (the sites' own model); instead of "
                  "--model"),
        tk::StringKey<C>("model", "kind",
                         "softmax (regression; \"logistic\" is the same), mlp or simple_cnn.", true,
                         [](auto& c) -> auto& { return c.model.kind; },
                         {"softmax", "logistic", "mlp", "simple_cnn"})
            .Flag("--model", "softmax, mlp or simple_cnn"),
        tk::IntKey<C, int64_t>(
            "model", "features",
            "Input features (784 for 28x28 images; simple_cnn: height * width * channels).", 1,
            [](auto& c) -> auto& { return c.model.features; })
            .Flag("--features", "Model: input features"),
        tk::IntKey<C, int32_t>(
            "model", "classes", "Output classes.", 2,
            [](auto& c) -> auto& { return c.model.classes; })
            .Flag("--classes", "Model: classes"),
        tk::IntArrayKey<C>(
            "model", "hidden", "mlp: the widths of the hidden layers.", 1,
            [](auto& c) -> auto& { return c.model.hidden; }, /*may_be_empty=*/false)
            .Flag("--hidden", "mlp: hidden layer widths"),
        tk::IntKey<C, int64_t>(
            "model", "image_height", "simple_cnn: the input images' height.", 1,
            [](auto& c) -> auto& { return c.model.image_height; })
            .Flag("--image-height"),
        tk::IntKey<C, int64_t>(
            "model", "image_width", "simple_cnn: the input images' width.", 1,
            [](auto& c) -> auto& { return c.model.image_width; })
            .Flag("--image-width"),
        tk::IntKey<C, int64_t>(
            "model", "image_channels", "simple_cnn: the input images' channels.", 1,
            [](auto& c) -> auto& { return c.model.image_channels; })
            .Flag("--image-channels"),
        tk::IntKey<C, uint64_t>(
            "model", "init_seed", "Seed of the initial weights (the same seed, the same model).", 0,
            [](auto& c) -> auto& { return c.model.init_seed; })
            .Flag("--init-seed", "Seed of the initial weights"),
        tk::StringKey<C>(
            "model", "eval_images",
            "Server-side evaluation: IDX images the server scores each new model on; empty: none.",
            true, [](auto& c) -> auto& { return c.model.eval_images; })
            .Flag("--eval-images", "Server-side evaluation of each new model: IDX images"),
        tk::StringKey<C>(
            "model", "eval_labels", "Server-side evaluation: the IDX labels of eval_images.", true,
            [](auto& c) -> auto& { return c.model.eval_labels; })
            .Flag("--eval-labels", "Server-side evaluation: IDX labels"),
        tk::StringKey<C>(
            "model", "root_images",
            "fltrust: IDX images of the server's root dataset, which it trains the built-in "
            "model on every round (the paper uses 100 rows).",
            true, [](auto& c) -> auto& { return c.model.root_images; })
            .Flag("--root-images", "fltrust: IDX images of the server's root dataset"),
        tk::StringKey<C>(
            "model", "root_labels", "fltrust: the IDX labels of root_images.", true,
            [](auto& c) -> auto& { return c.model.root_labels; })
            .Flag("--root-labels", "fltrust: IDX labels of the root dataset"),

    };
    auto append = [keys](std::vector<Key> more) {
      keys->insert(keys->end(), more.begin(), more.end());
    };
    append(config_keys::FitKeys<C>([](auto& c) -> auto& { return c.server.engine.fit; }));
    append(config_keys::StrategyKeys<C>([](auto& c) -> auto& { return c.server.strategy; }));
    append(config_keys::PrivacyKeys<C>(
        [](auto& c) -> auto& { return c.server.engine.privacy; },
        [](auto& c) -> auto& { return c.server.engine.secure_aggregation; }));
    return keys;
  }();
  return *kKeys;
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
                     tk::FormatFloat(strategy.proximal_mu)),
        {{"strategy", "proximal_mu"}, {"strategy", "name"}}};
  }
  if (strategy.name == "scaffold" && strategy.num_parties > 0 &&
      strategy.num_parties < c.server.engine.min_fit_clients) {
    // Every committed round folds at least min_fit_clients deltas into c <- c + (1/N) sum.
    return CrossKeyProblem{
        absl::StrCat("key 'strategy.num_parties' (", strategy.num_parties,
                     ") must be at least run.min_fit_clients (", c.server.engine.min_fit_clients,
                     "): SCAFFOLD's N counts every party that can report in a round"),
        {{"strategy", "num_parties"}, {"run", "min_fit_clients"}}};
  }
  if (absl::Status s = c.server.engine.privacy.Validate(); !s.ok()) {
    return CrossKeyProblem{std::string(s.message()), {{"privacy", "delta"}, {"privacy", "mode"}}};
  }
  const SecureAggregationOptions& sa = c.server.engine.secure_aggregation;
  if (absl::Status s = sa.Validate(); !s.ok()) {
    return CrossKeyProblem{std::string(s.message()),
                           {{"secure_aggregation", "modulus_bits"},
                            {"secure_aggregation", "threshold"},
                            {"secure_aggregation", "num_neighbors"},
                            {"secure_aggregation", "enabled"}}};
  }
  const std::string& dp_mode = c.server.engine.privacy.mode;
  if (dp_mode == "distributed" && !sa.enabled) {
    return CrossKeyProblem{
        "privacy.mode 'distributed' needs secure_aggregation.enabled: without it the server "
        "reads every update, so use 'central'",
        {{"privacy", "mode"}, {"secure_aggregation", "enabled"}}};
  }
  if (sa.enabled && dp_mode == "central") {
    return CrossKeyProblem{
        "privacy.mode 'central' needs the server to read each update to clip it, which secure "
        "aggregation prevents; use 'distributed'",
        {{"privacy", "mode"}, {"secure_aggregation", "enabled"}}};
  }
  if (sa.enabled && c.server.engine.update_encoding != "float32") {
    return CrossKeyProblem{
        absl::StrCat("run.update_encoding '", c.server.engine.update_encoding,
                     "' cannot run with secure aggregation, whose rounds send masked words; use "
                     "float32"),
        {{"run", "update_encoding"}, {"secure_aggregation", "enabled"}}};
  }
  if (sa.enabled && strategy.name == "scaffold") {
    return CrossKeyProblem{
        "strategy 'scaffold' cannot run with secure aggregation (its control variates are "
        "summed unweighted beside the weighted model); use fedavg or fedprox",
        {{"strategy", "name"}, {"secure_aggregation", "enabled"}}};
  }
  const bool root_given = !c.model.root_images.empty() || !c.model.root_labels.empty();
  if (strategy.name == "fltrust" &&
      (c.model.root_images.empty() || c.model.root_labels.empty() || !c.model.initial.empty())) {
    return CrossKeyProblem{
        "strategy 'fltrust' trains the built-in model on a root dataset of the server's own: set "
        "model.root_images and model.root_labels (IDX files, e.g. 100 labelled rows), with no "
        "model.initial",
        {{"model", "initial"},
         {"model", "root_images"},
         {"model", "root_labels"},
         {"strategy", "name"}}};
  }
  if (strategy.name != "fltrust" && root_given) {
    return CrossKeyProblem{
        absl::StrCat("model.root_images and root_labels are FLTrust's root dataset; strategy '",
                     strategy.name,
                     "' does not use them (set strategy.name = \"fltrust\" or "
                     "remove them)"),
        {{"model", "root_images"}, {"model", "root_labels"}}};
  }
  if (strategy.norm_bound > 0 && strategy.name == "scaffold") {
    return CrossKeyProblem{
        "strategy.norm_bound cannot wrap strategy 'scaffold': its updates carry control "
        "variates, which are no change of the model to bound; use fedavg, fedprox or a robust "
        "strategy, or set norm_bound = 0",
        {{"strategy", "norm_bound"}, {"strategy", "name"}}};
  }
  if (aggregation::IsRobustStrategy(strategy.name) || strategy.name == "qfedavg" ||
      strategy.name == "fltrust" || strategy.norm_bound > 0) {
    // The strategy's own refusal (robust.h), pointed at the keys that cause it. (FLTrust's root
    // trainer is made later, from the files; only its plan is checked here.)
    absl::StatusOr<std::unique_ptr<aggregation::Strategy>> robust = aggregation::MakeStrategy(
        strategy, {}, nullptr, [](const Model&, int32_t) -> absl::StatusOr<Model> {
          return absl::UnimplementedError("not trained in a configuration check");
        });
    const bool central = c.server.engine.privacy.mode == "central";
    absl::Status s = robust.ok()
                         ? (*robust)->CheckPlan({.min_updates = c.server.engine.min_fit_clients,
                                                 .secure_aggregation = sa.enabled,
                                                 .central_dp = central})
                         : robust.status();
    if (!s.ok()) {
      std::vector<std::pair<std::string, std::string>> keys;
      if (sa.enabled && strategy.norm_bound > 0) {
        keys = {{"strategy", "norm_bound"}, {"secure_aggregation", "enabled"}};
      } else if (sa.enabled) {
        keys = {{"strategy", "name"}, {"secure_aggregation", "enabled"}};
      } else if (central) {
        keys = {{"strategy", "name"}, {"privacy", "mode"}};
      } else {
        keys = {{"strategy", "num_malicious"},
                {"strategy", "num_to_keep"},
                {"strategy", "trim_beta"},
                {"run", "min_fit_clients"},
                {"strategy", "name"}};
      }
      return CrossKeyProblem{std::string(s.message()), std::move(keys)};
    }
  }
  if (sa.enabled && c.server.engine.min_clients < 3) {
    return CrossKeyProblem{
        absl::StrCat("secure aggregation needs run.min_clients >= 3 (with 2, each client could "
                     "subtract its own change from the sum), got ",
                     c.server.engine.min_clients),
        {{"run", "min_clients"}, {"secure_aggregation", "enabled"}}};
  }
  if (sa.enabled && c.server.engine.stop_metric.rfind("train_", 0) == 0) {
    return CrossKeyProblem{
        absl::StrCat("run.stop_metric '", c.server.engine.stop_metric,
                     "' cannot be used with secure aggregation: the clients' training metrics "
                     "are not sent in the clear"),
        {{"run", "stop_metric"}, {"secure_aggregation", "enabled"}}};
  }
  const ServerModelOptions& m = c.model;
  if (!m.initial.empty() && (!m.eval_images.empty() || !m.eval_labels.empty())) {
    return CrossKeyProblem{
        "model.eval_images and eval_labels score a built-in model; a model from model.initial "
        "is evaluated by the sites (run.eval_every)",
        {{"model", "eval_images"}, {"model", "eval_labels"}, {"model", "initial"}}};
  }
  if (m.initial.empty() && m.kind == "simple_cnn" &&
      m.features != m.image_height * m.image_width * m.image_channels) {
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

}  // namespace

const std::vector<toml_keys::KeySpec<ServerConfig>>& ServerConfigKeys() { return Keys(); }

absl::Status ApplyServerConfig(const std::string& path, ServerConfig& config) {
  absl::StatusOr<toml::table> root = tk::ParseTomlFile(path);
  if (!root.ok()) return root.status();
  if (absl::Status s = tk::ApplyTomlTable(path, *root, Tables(), Keys(), config); !s.ok()) {
    return s;
  }
  if (std::optional<CrossKeyProblem> problem = FindCrossKeyProblem(config)) {
    // Only the keys this file sets can be to blame for it; a problem the file did not make waits
    // for CheckServerConfig, after the flags.
    for (const auto& [table, name] : problem->keys) {
      const toml::node* node = (*root)[table][name].node();
      if (node != nullptr) return tk::ErrorAt(path, node->source(), problem->message);
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyRunConfig(const std::string& text, const std::string& name,
                            ServerConfig& config) {
  absl::StatusOr<toml::table> root = tk::ParseTomlText(text, name);
  if (!root.ok()) return root.status();
  for (const auto& [table, node] : *root) {
    if (table != "server") continue;
    return tk::ErrorAt(name, node.source(),
                       "table 'server' is the server's own configuration: a run file sets "
                       "[run], [fit], [strategy], [model], [privacy] and [secure_aggregation]");
  }
  if (absl::Status s = tk::ApplyTomlTable(name, *root, Tables(), Keys(), config); !s.ok()) {
    return s;
  }
  return CheckServerConfig(config);
}

std::string RunTomlOfKeys(const ServerConfig& config, const std::set<std::string>& keys) {
  absl::StatusOr<toml::table> all = tk::ParseTomlText(ServerConfigToToml(config), "config");
  if (!all.ok()) return "";
  toml::table out;
  for (const auto& [table, node] : *all) {
    // The model is checked by its spec when a run resumes; [server] is not a run's.
    if (table == "server" || table == "model" || !node.is_table()) continue;
    toml::table picked;
    for (const auto& [key, value] : *node.as_table()) {
      if (keys.contains(std::string(table.str()) + "." + std::string(key.str()))) {
        picked.insert_or_assign(key, value);
      }
    }
    if (!picked.empty()) out.insert_or_assign(table, std::move(picked));
  }
  if (out.empty()) return "";
  std::ostringstream text;
  text << out << "\n";
  return text.str();
}

absl::Status CheckServerConfig(const ServerConfig& config) {
  if (std::optional<CrossKeyProblem> problem = FindCrossKeyProblem(config)) {
    return absl::InvalidArgumentError(problem->message);
  }
  return absl::OkStatus();
}

std::string ServerConfigToToml(const ServerConfig& config) {
  return tk::TomlFromConfig(Tables(), Keys(), config);
}

std::string ServerConfigReference() {
  // A named object: GCC 12 warns (-Wmaybe-uninitialized, wrongly) about a ServerConfig{} temporary.
  const ServerConfig defaults;
  return absl::StrCat(
      "# Configuration of `fl server --config FILE`.\n"
      "#\n"
      "# Every key is optional and is shown here with its default value. A flag given on the\n"
      "# command line (named beside its key) overrides the file. Durations are in seconds and,\n"
      "# like every number that is not a count, may be written as integers or decimals.\n"
      "# Relative paths are taken from the working directory, as for flags.\n"
      "# Printed by `fl server --print-config-reference`; `--print-effective-config` prints\n"
      "# the configuration a server would run with.\n"
      "\n",
      tk::TomlFromConfig(Tables(), Keys(), defaults, /*with_flags=*/true));
}

std::vector<std::pair<std::string, int>> UploadWindowChannelArgs(int32_t stream_window_mib) {
  if (stream_window_mib == 0) return {};
  const int window_mib = std::clamp(stream_window_mib, 1, 1024);
  return {{GRPC_ARG_HTTP2_BDP_PROBE, 0}, {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, window_mib << 20}};
}

}  // namespace fl::server
