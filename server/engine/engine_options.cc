// EngineOptions' JSON form (recorded with each run) and the real clock.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/server/engine.h"
#include "nlohmann/json.hpp"

namespace fl::server {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

absl::Status PrivacyOptions::Validate() const {
  if (mode == "off") return absl::OkStatus();
  if (mode != "central" && mode != "distributed") {
    return absl::InvalidArgumentError(absl::StrCat(
        "privacy.mode must be \"off\", \"central\" or \"distributed\", got \"", mode, "\""));
  }
  if (distributed_noise != "gaussian" && distributed_noise != "discrete_gaussian") {
    return absl::InvalidArgumentError(absl::StrCat(
        "privacy.distributed_noise must be \"gaussian\" or \"discrete_gaussian\", got \"",
        distributed_noise, "\""));
  }
  if (distributed_noise == "discrete_gaussian" && mode != "distributed") {
    return absl::InvalidArgumentError(
        "privacy.distributed_noise = \"discrete_gaussian\" is the sites' noise: it needs "
        "privacy.mode = \"distributed\" (with secure aggregation)");
  }
  if (!std::isfinite(noise_multiplier) || noise_multiplier <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "privacy.noise_multiplier must be a finite number > 0, got ", noise_multiplier));
  }
  if (!std::isfinite(clip_norm) || clip_norm <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("privacy.clip_norm must be a finite number > 0, got ", clip_norm));
  }
  if (!(delta > 0 && delta < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("privacy.delta must be in (0, 1), got ", delta));
  }
  if (!std::isfinite(epsilon_budget) || epsilon_budget < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "privacy.epsilon_budget must be a finite number >= 0 (0: none), got ", epsilon_budget));
  }
  return absl::OkStatus();
}

absl::Status SecureAggregationOptions::Validate() const {
  if (!enabled) return absl::OkStatus();
  auto bad = [](const char* key, auto value, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure_aggregation.", key, " must be ", want, ", got ", value));
  };
  if (num_neighbors < 0) return bad("num_neighbors", num_neighbors, ">= 0 (0: default)");
  if (threshold < 0) return bad("threshold", threshold, ">= 0 (0: the least that keeps privacy)");
  if (!std::isfinite(clip_range) || clip_range <= 0) {
    return bad("clip_range", clip_range, "a finite number > 0");
  }
  if (quantization_bits < 0 || quantization_bits > 62) {
    return bad("quantization_bits", quantization_bits, "in [0, 62] (0: the most that fits)");
  }
  if (modulus_bits != 32 && modulus_bits != 64)
    return bad("modulus_bits", modulus_bits, "32 or 64");
  if (max_weight < 1) return bad("max_weight", max_weight, ">= 1");
  if (example_unit < 1) return bad("example_unit", example_unit, ">= 1");
  if (stage_timeout <= absl::ZeroDuration()) {
    return bad("stage_timeout_s", absl::FormatDuration(stage_timeout), "positive");
  }
  if (!(max_dropout >= 0 && max_dropout < 1)) return bad("max_dropout", max_dropout, "in [0, 1)");
  if (grinding_bits < 0 || grinding_bits > 100) {
    return bad("grinding_bits", grinding_bits, "in [0, 100]");
  }
  if (!(corrupt_fraction >= 0 && corrupt_fraction < 0.5)) {
    return bad("corrupt_fraction", corrupt_fraction, "in [0, 0.5)");
  }
  return absl::OkStatus();
}

absl::StatusOr<secagg::SecAggParams> SecureAggregationOptions::ParamsFor(
    int32_t num_clients, uint64_t graph_seed) const {
  if (absl::Status s = Validate(); !s.ok()) return s;
  const double target = secagg::PrivacyRiskTarget(grinding_bits);
  // With b set, the defaults only choose k and t (at max_weight 1, which always fits b >= 8);
  // with b = 0, the library picks the largest b that fits max_weight.
  absl::StatusOr<secagg::SecAggParams> p = secagg::DefaultSecAggParams(
      num_clients, modulus_bits, quantization_bits == 0 ? max_weight : 1,
      num_neighbors == 0 ? corrupt_fraction : 0, num_neighbors == 0 ? max_dropout : 0, target);
  if (!p.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation for ", num_clients, " clients: ", p.status().message()));
  }
  p->max_weight = max_weight;
  if (quantization_bits != 0) {
    // n x max_weight x (2^b - 1) < 2^m, exactly in 128 bits.
    const unsigned __int128 worst = ((static_cast<unsigned __int128>(1) << quantization_bits) - 1) *
                                    static_cast<unsigned __int128>(num_clients) * max_weight;
    if (worst >= (static_cast<unsigned __int128>(1) << modulus_bits)) {
      return absl::InvalidArgumentError(
          absl::StrCat("secure aggregation for ", num_clients,
                       " clients: secure_aggregation.quantization_bits ", quantization_bits,
                       " lets the sum wrap the modulus (", num_clients, " clients x max_weight ",
                       max_weight, " x (2^", quantization_bits, " - 1) >= 2^", modulus_bits,
                       "); lower quantization_bits (0: the most that fits) or max_weight, or "
                       "set modulus_bits = 64"));
    }
    p->quantization_bits = quantization_bits;
  }
  if (num_neighbors != 0) {
    // A round samples n clients, possibly fewer than k + 1: at most n - 1 neighbours, and a
    // k-regular graph on n nodes needs n * k even.
    int32_t k = std::min(num_neighbors, num_clients - 1);
    if ((static_cast<int64_t>(num_clients) * k) % 2 != 0) --k;
    if (threshold > k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "secure aggregation for ", num_clients, " clients: secure_aggregation.threshold ",
          threshold, " exceeds num_neighbors ", k,
          k == num_neighbors
              ? ""
              : absl::StrCat(" (", num_neighbors, " lowered to fit ", num_clients, " clients)"),
          "; lower the threshold or leave it 0 (the least that keeps privacy)"));
    }
    p->num_neighbors = k;
    p->threshold = k / 2 + 1;
  }
  if (threshold != 0) p->threshold = threshold;
  p->clip_range = clip_range;
  p->graph_seed = graph_seed;
  p->corrupt_fraction = corrupt_fraction;
  if (absl::Status s = secagg::ValidateSecAggParams(*p); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation for ", num_clients, " clients: ", s.message()));
  }
  if (num_neighbors != 0 || threshold != 0) {
    // Settings of one's own: the least private threshold for the given k, and nothing that
    // leaves a site's input to its colluding neighbours more often than the defaults would.
    // Checked for the round's n: a k that holds at min_clients may not at a larger sample.
    std::optional<int> least = secagg::LeastPrivateThreshold(*p, target);
    if (num_neighbors != 0 && threshold == 0 && least.has_value()) p->threshold = *least;
    const secagg::SecAggRisk risk = secagg::SecAggRiskOf(*p, max_dropout);
    if (risk.privacy > target) {
      std::string advice = "raise the threshold, or leave it 0 for the least that holds";
      if (!least.has_value()) {
        // No t up to k holds: name the least k that has one, as the defaults would pick it.
        secagg::SecAggParams wider = *p;
        for (int k = p->num_neighbors + 1; k < num_clients; ++k) {
          if ((static_cast<int64_t>(num_clients) * k) % 2 != 0) continue;
          wider.num_neighbors = k;
          if (secagg::LeastPrivateThreshold(wider, target).has_value()) break;
        }
        advice = absl::StrCat("no threshold up to ", p->num_neighbors,
                              " neighbours holds: raise num_neighbors to at least ",
                              wider.num_neighbors, ", or leave it 0");
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "secure aggregation for ", num_clients, " clients: num_neighbors ", p->num_neighbors,
          " and threshold ", p->threshold, " leave a site with ", p->threshold,
          " or more colluding neighbours (corrupt_fraction ", corrupt_fraction,
          ") with probability ", risk.exposed_site, ", some site of the round with probability ",
          risk.privacy, "; at most ", target, " (2^-", 40 + grinding_bits,
          ", with secure_aggregation.grinding_bits ", grinding_bits, ") is accepted: ", advice));
    }
  }
  return *p;
}

std::string EngineOptions::ToJson() const {
  nlohmann::json j = {
      {"run_name", run_name},
      {"num_rounds", num_rounds},
      {"min_clients", min_clients},
      {"min_fit_clients", min_fit_clients},
      {"sample_fraction", sample_fraction},
      {"round_timeout_ms", absl::ToInt64Milliseconds(round_timeout)},
      {"client_timeout_ms", absl::ToInt64Milliseconds(client_timeout)},
      {"task_pickup_timeout_ms", absl::ToInt64Milliseconds(task_pickup_timeout)},
      {"max_round_retries", max_round_retries},
      {"retry_backoff_ms", absl::ToInt64Milliseconds(retry_backoff)},
      {"wait_timeout_ms", absl::ToInt64Milliseconds(wait_timeout)},
      {"seed", seed},
      {"stop_metric", stop_metric},
      {"stop_threshold", stop_threshold},
      {"stop_when_below", stop_when_below},
      {"eval_every", eval_every},
      {"eval_fraction", eval_fraction},
      {"eval_timeout_ms", absl::ToInt64Milliseconds(eval_timeout)},
      {"federated_standardization", federated_standardization},
      {"local_epochs", fit.local_epochs},
      {"batch_size", fit.batch_size},
      {"learning_rate", fit.learning_rate},
      {"model_name", fit.model_name},
      {"fit_config", fit.extra},
      {"update_encoding", update_encoding},
      {"privacy",
       {{"mode", privacy.mode},
        {"distributed_noise", privacy.distributed_noise},
        {"noise_multiplier", privacy.noise_multiplier},
        {"clip_norm", privacy.clip_norm},
        {"delta", privacy.delta},
        {"epsilon_budget", privacy.epsilon_budget}}},
      {"secure_aggregation",
       {{"enabled", secure_aggregation.enabled},
        {"num_neighbors", secure_aggregation.num_neighbors},
        {"threshold", secure_aggregation.threshold},
        {"clip_range", secure_aggregation.clip_range},
        {"quantization_bits", secure_aggregation.quantization_bits},
        {"modulus_bits", secure_aggregation.modulus_bits},
        {"max_weight", secure_aggregation.max_weight},
        {"example_unit", secure_aggregation.example_unit},
        {"stage_timeout_ms", absl::ToInt64Milliseconds(secure_aggregation.stage_timeout)},
        {"max_dropout", secure_aggregation.max_dropout},
        {"corrupt_fraction", secure_aggregation.corrupt_fraction},
        {"grinding_bits", secure_aggregation.grinding_bits}}},
  };
  if (strategy.has_value()) {
    j["strategy"] = {{"name", strategy->name},
                     {"proximal_mu", strategy->proximal_mu},
                     {"momentum", strategy->momentum},
                     {"weight_decay", strategy->weight_decay},
                     {"clip_norm", strategy->clip_norm},
                     {"server_learning_rate", strategy->server_learning_rate},
                     {"num_parties", strategy->num_parties},
                     {"server_momentum", strategy->server_momentum},
                     {"beta_1", strategy->beta_1},
                     {"beta_2", strategy->beta_2},
                     {"tau", strategy->tau},
                     {"trim_beta", strategy->trim_beta},
                     {"num_malicious", strategy->num_malicious},
                     {"num_to_keep", strategy->num_to_keep},
                     {"q", strategy->q},
                     {"qffl_learning_rate", strategy->qffl_learning_rate},
                     {"root_examples", strategy->root_examples},
                     {"norm_bound", strategy->norm_bound},
                     {"accept_failures", strategy->accept_failures}};
  }
  return j.dump();
}

absl::StatusOr<EngineOptions> EngineOptions::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("run configuration is not a JSON object");
  }
  EngineOptions o;
  try {
    o.run_name = j.value("run_name", o.run_name);
    o.num_rounds = j.at("num_rounds").get<int32_t>();
    o.min_clients = j.value("min_clients", o.min_clients);
    o.min_fit_clients = j.value("min_fit_clients", o.min_fit_clients);
    o.sample_fraction = j.value("sample_fraction", o.sample_fraction);
    o.round_timeout =
        absl::Milliseconds(j.value("round_timeout_ms", absl::ToInt64Milliseconds(o.round_timeout)));
    o.client_timeout = absl::Milliseconds(
        j.value("client_timeout_ms", absl::ToInt64Milliseconds(o.client_timeout)));
    o.task_pickup_timeout = absl::Milliseconds(
        j.value("task_pickup_timeout_ms", absl::ToInt64Milliseconds(o.task_pickup_timeout)));
    o.max_round_retries = j.value("max_round_retries", o.max_round_retries);
    o.retry_backoff =
        absl::Milliseconds(j.value("retry_backoff_ms", absl::ToInt64Milliseconds(o.retry_backoff)));
    o.wait_timeout =
        absl::Milliseconds(j.value("wait_timeout_ms", absl::ToInt64Milliseconds(o.wait_timeout)));
    o.seed = j.value("seed", o.seed);
    o.fit.local_epochs = j.value("local_epochs", o.fit.local_epochs);
    o.fit.batch_size = j.value("batch_size", o.fit.batch_size);
    o.fit.learning_rate = j.value("learning_rate", o.fit.learning_rate);
    o.fit.model_name = j.value("model_name", o.fit.model_name);
    o.fit.extra = j.value("fit_config", o.fit.extra);
    o.update_encoding = j.value("update_encoding", o.update_encoding);  // absent: older runs
    o.stop_metric = j.value("stop_metric", o.stop_metric);
    o.stop_threshold = j.value("stop_threshold", o.stop_threshold);
    o.stop_when_below = j.value("stop_when_below", o.stop_when_below);
    o.eval_every = j.value("eval_every", o.eval_every);
    o.eval_fraction = j.value("eval_fraction", o.eval_fraction);
    o.eval_timeout =
        absl::Milliseconds(j.value("eval_timeout_ms", absl::ToInt64Milliseconds(o.eval_timeout)));
    o.federated_standardization = j.value("federated_standardization", o.federated_standardization);
    if (j.contains("privacy")) {
      const nlohmann::json& p = j.at("privacy");
      o.privacy.mode = p.value("mode", o.privacy.mode);
      // Runs stored before the discrete Gaussian have none: theirs was the Gaussian.
      o.privacy.distributed_noise = p.value("distributed_noise", std::string("gaussian"));
      o.privacy.noise_multiplier = p.value("noise_multiplier", o.privacy.noise_multiplier);
      o.privacy.clip_norm = p.value("clip_norm", o.privacy.clip_norm);
      o.privacy.delta = p.value("delta", o.privacy.delta);
      o.privacy.epsilon_budget = p.value("epsilon_budget", o.privacy.epsilon_budget);
    }
    if (j.contains("secure_aggregation")) {
      const nlohmann::json& a = j.at("secure_aggregation");
      SecureAggregationOptions& sa = o.secure_aggregation;
      sa.enabled = a.value("enabled", sa.enabled);
      sa.num_neighbors = a.value("num_neighbors", sa.num_neighbors);
      sa.threshold = a.value("threshold", sa.threshold);
      sa.clip_range = a.value("clip_range", sa.clip_range);
      sa.quantization_bits = a.value("quantization_bits", sa.quantization_bits);
      sa.modulus_bits = a.value("modulus_bits", sa.modulus_bits);
      sa.max_weight = a.value("max_weight", sa.max_weight);
      sa.example_unit = a.value("example_unit", sa.example_unit);
      sa.stage_timeout = absl::Milliseconds(
          a.value("stage_timeout_ms", absl::ToInt64Milliseconds(sa.stage_timeout)));
      sa.max_dropout = a.value("max_dropout", sa.max_dropout);
      sa.corrupt_fraction = a.value("corrupt_fraction", sa.corrupt_fraction);
      // Runs stored before grinding was counted keep the graphs they had.
      sa.grinding_bits = a.value("grinding_bits", 0);
    }
    if (j.contains("strategy")) {  // absent: a run from before it was recorded
      const nlohmann::json& s = j.at("strategy");
      aggregation::StrategyOptions& st = o.strategy.emplace();
      st.name = s.at("name").get<std::string>();
      st.proximal_mu = s.value("proximal_mu", st.proximal_mu);
      st.momentum = s.value("momentum", st.momentum);
      st.weight_decay = s.value("weight_decay", st.weight_decay);
      st.clip_norm = s.value("clip_norm", st.clip_norm);
      st.server_learning_rate = s.value("server_learning_rate", st.server_learning_rate);
      st.num_parties = s.value("num_parties", st.num_parties);
      st.server_momentum = s.value("server_momentum", st.server_momentum);
      st.beta_1 = s.value("beta_1", st.beta_1);
      st.beta_2 = s.value("beta_2", st.beta_2);
      st.tau = s.value("tau", st.tau);
      st.trim_beta = s.value("trim_beta", st.trim_beta);
      st.num_malicious = s.value("num_malicious", st.num_malicious);
      st.num_to_keep = s.value("num_to_keep", st.num_to_keep);
      st.q = s.value("q", st.q);
      st.qffl_learning_rate = s.value("qffl_learning_rate", st.qffl_learning_rate);
      st.root_examples = s.value("root_examples", st.root_examples);
      st.norm_bound = s.value("norm_bound", st.norm_bound);
      st.accept_failures = s.value("accept_failures", st.accept_failures);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("run configuration: ", e.what()));
  }
  return o;
}

}  // namespace fl::server
