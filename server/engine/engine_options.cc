// EngineOptions' JSON form (recorded with each run) and the real clock.
#include <cmath>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
  if (mode != "central") {
    return absl::InvalidArgumentError(
        absl::StrCat("privacy.mode must be \"off\" or \"central\", got \"", mode, "\""));
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

std::string EngineOptions::ToJson() const {
  nlohmann::json j = {
      {"run_name", run_name},
      {"num_rounds", num_rounds},
      {"min_clients", min_clients},
      {"min_fit_clients", min_fit_clients},
      {"sample_fraction", sample_fraction},
      {"round_timeout_ms", absl::ToInt64Milliseconds(round_timeout)},
      {"client_timeout_ms", absl::ToInt64Milliseconds(client_timeout)},
      {"max_round_retries", max_round_retries},
      {"wait_timeout_ms", absl::ToInt64Milliseconds(wait_timeout)},
      {"seed", seed},
      {"stop_metric", stop_metric},
      {"stop_threshold", stop_threshold},
      {"stop_when_below", stop_when_below},
      {"eval_every", eval_every},
      {"eval_fraction", eval_fraction},
      {"eval_timeout_ms", absl::ToInt64Milliseconds(eval_timeout)},
      {"local_epochs", fit.local_epochs},
      {"batch_size", fit.batch_size},
      {"learning_rate", fit.learning_rate},
      {"model_name", fit.model_name},
      {"fit_config", fit.extra},
      {"privacy",
       {{"mode", privacy.mode},
        {"noise_multiplier", privacy.noise_multiplier},
        {"clip_norm", privacy.clip_norm},
        {"delta", privacy.delta},
        {"epsilon_budget", privacy.epsilon_budget}}},
  };
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
    o.max_round_retries = j.value("max_round_retries", o.max_round_retries);
    o.wait_timeout =
        absl::Milliseconds(j.value("wait_timeout_ms", absl::ToInt64Milliseconds(o.wait_timeout)));
    o.seed = j.value("seed", o.seed);
    o.fit.local_epochs = j.value("local_epochs", o.fit.local_epochs);
    o.fit.batch_size = j.value("batch_size", o.fit.batch_size);
    o.fit.learning_rate = j.value("learning_rate", o.fit.learning_rate);
    o.fit.model_name = j.value("model_name", o.fit.model_name);
    o.fit.extra = j.value("fit_config", o.fit.extra);
    o.stop_metric = j.value("stop_metric", o.stop_metric);
    o.stop_threshold = j.value("stop_threshold", o.stop_threshold);
    o.stop_when_below = j.value("stop_when_below", o.stop_when_below);
    o.eval_every = j.value("eval_every", o.eval_every);
    o.eval_fraction = j.value("eval_fraction", o.eval_fraction);
    o.eval_timeout =
        absl::Milliseconds(j.value("eval_timeout_ms", absl::ToInt64Milliseconds(o.eval_timeout)));
    if (j.contains("privacy")) {
      const nlohmann::json& p = j.at("privacy");
      o.privacy.mode = p.value("mode", o.privacy.mode);
      o.privacy.noise_multiplier = p.value("noise_multiplier", o.privacy.noise_multiplier);
      o.privacy.clip_norm = p.value("clip_norm", o.privacy.clip_norm);
      o.privacy.delta = p.value("delta", o.privacy.delta);
      o.privacy.epsilon_budget = p.value("epsilon_budget", o.privacy.epsilon_budget);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("run configuration: ", e.what()));
  }
  return o;
}

}  // namespace fl::server
