#include "fl/aggregation/strategies.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/fedprox.h"
#include "fl/aggregation/qfedavg.h"
#include "fl/aggregation/robust.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/server_optimizers.h"
#include "fl/aggregation/wrappers.h"
#include "fl/common/logging.h"

namespace fl::aggregation {
namespace {

absl::Status OutOfRange(const std::string& key, const std::string& bound, double value) {
  return absl::InvalidArgumentError(absl::StrCat(key, " must be ", bound, ", got ", value));
}

}  // namespace

const char* StrategyNames() {
  return "fedavg, fedprox, scaffold, fedavgm, fedadagrad, fedadam, fedyogi, fedmedian, "
         "fedtrimmedavg, krum, multikrum, bulyan, qfedavg, fltrust";
}

absl::Status StrategyOptions::Validate() const {
  if (name != "fedavg" && name != "fedprox" && name != "scaffold" && !IsServerOptimizer(name) &&
      !IsRobustStrategy(name) && name != "qfedavg" && name != "fltrust") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown strategy '", name, "'; choose one of ", StrategyNames()));
  }
  if (!std::isfinite(proximal_mu) || proximal_mu < 0) {
    return OutOfRange("proximal_mu", ">= 0", proximal_mu);
  }
  if (name == "fedprox" && !(proximal_mu > 0)) {
    return OutOfRange("proximal_mu", "> 0 for strategy 'fedprox'", proximal_mu);
  }
  if (!(momentum >= 0 && momentum < 1)) return OutOfRange("momentum", "in [0, 1)", momentum);
  if (!std::isfinite(weight_decay) || weight_decay < 0) {
    return OutOfRange("weight_decay", ">= 0", weight_decay);
  }
  if (!std::isfinite(clip_norm) || clip_norm < 0) {
    return OutOfRange("clip_norm", ">= 0 (0: off)", clip_norm);
  }
  if (!std::isfinite(server_learning_rate) || server_learning_rate < 0) {
    return OutOfRange("server_learning_rate", ">= 0 (0: the strategy's default)",
                      server_learning_rate);
  }
  if (!(server_momentum >= 0 && server_momentum < 1)) {
    return OutOfRange("server_momentum", "in [0, 1)", server_momentum);
  }
  if (!(beta_1 >= 0 && beta_1 < 1)) return OutOfRange("beta_1", "in [0, 1)", beta_1);
  if (!(beta_2 >= 0 && beta_2 < 1)) return OutOfRange("beta_2", "in [0, 1)", beta_2);
  if (!std::isfinite(tau) || !(tau > 0)) return OutOfRange("tau", "> 0", tau);
  if (!(trim_beta >= 0 && trim_beta < 0.5)) {
    return OutOfRange("trim_beta", "in [0, 0.5) (at 0.5 the trimmed mean trims every value)",
                      trim_beta);
  }
  if (num_malicious < 0) return OutOfRange("num_malicious", ">= 0", num_malicious);
  if (num_to_keep < 0) return OutOfRange("num_to_keep", ">= 0 (0: K - num_malicious)", num_to_keep);
  if (!std::isfinite(q) || q < 0) return OutOfRange("q", ">= 0", q);
  if (!std::isfinite(qffl_learning_rate) || !(qffl_learning_rate > 0)) {
    return OutOfRange("qffl_learning_rate", "> 0", qffl_learning_rate);
  }
  if (root_examples < 1) return OutOfRange("root_examples", ">= 1", root_examples);
  if (!std::isfinite(norm_bound) || norm_bound < 0) {
    return OutOfRange("norm_bound", ">= 0 (0: off)", norm_bound);
  }
  if (num_parties < 0) {
    return OutOfRange("num_parties", ">= 0 (0: the enrolled clients)",
                      static_cast<double>(num_parties));
  }
  return absl::OkStatus();
}

std::map<std::string, double> StrategyOptions::ClientConfig() const {
  std::map<std::string, double> config = {
      {"momentum", momentum}, {"weight_decay", weight_decay}, {"clip_norm", clip_norm}};
  if (name == "fedprox") config["proximal_mu"] = proximal_mu;
  if (name == "qfedavg") config[kReportInitialLossKey] = 1;
  return config;
}

double EffectiveServerLearningRate(const StrategyOptions& options) {
  if (options.server_learning_rate > 0) return options.server_learning_rate;
  if (options.name == "scaffold") return 1.0;
  if (IsServerOptimizer(options.name)) return DefaultServerLearningRate(options.name);
  return 0.0;
}

namespace {

// The strategy `options` names, unwrapped (options validated).
absl::StatusOr<std::unique_ptr<Strategy>> MakeNamedStrategy(
    const StrategyOptions& options, std::function<int64_t()> enrolled_clients,
    std::shared_ptr<SpillSpace> spill, RootTrainer root) {
  if (options.name == "fedprox") return MakeFedProx();
  if (options.name == "qfedavg") {
    return MakeQFedAvg({.q = options.q, .qffl_learning_rate = options.qffl_learning_rate});
  }
  if (IsRobustStrategy(options.name) || options.name == "fltrust") {
    if (spill == nullptr) {
      const char* tmp = std::getenv("TMPDIR");
      spill = MakeFileSpill(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
    }
    if (options.name == "fltrust") return MakeFLTrust(std::move(root), std::move(spill));
    return MakeRobustStrategy({.name = options.name,
                               .trim_beta = options.trim_beta,
                               .num_malicious = options.num_malicious,
                               .num_to_keep = options.num_to_keep},
                              std::move(spill));
  }
  if (IsServerOptimizer(options.name)) {
    if (options.server_learning_rate == 1.0 && options.name != "fedavgm") {
      // 1.0 was the key's default (SCAFFOLD's) in configuration files written before the
      // server optimizers: likely not meant as an adaptive optimizer's step.
      LogEvent(LogLevel::kWarn, "server_learning_rate_high",
               {{"strategy", options.name},
                {"server_learning_rate", "1"},
                {"default", absl::StrCat(DefaultServerLearningRate(options.name))},
                {"fix", "set server_learning_rate = 0 for the strategy's default"}});
    }
    return MakeServerOptimizer({.name = options.name,
                                .learning_rate = EffectiveServerLearningRate(options),
                                .momentum = options.server_momentum,
                                .beta_1 = options.beta_1,
                                .beta_2 = options.beta_2,
                                .tau = options.tau});
  }
  if (options.name == "scaffold") {
    ScaffoldOptions scaffold;
    scaffold.server_learning_rate = EffectiveServerLearningRate(options);
    if (options.num_parties > 0) {
      scaffold.num_parties = [n = options.num_parties] { return n; };
    } else {
      scaffold.num_parties = std::move(enrolled_clients);
    }
    return MakeScaffold(std::move(scaffold));
  }
  return MakeFedAvg();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const StrategyOptions& options,
                                                       std::function<int64_t()> enrolled_clients,
                                                       std::shared_ptr<SpillSpace> spill,
                                                       RootTrainer root) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Strategy>> strategy =
      MakeNamedStrategy(options, std::move(enrolled_clients), std::move(spill), std::move(root));
  if (!strategy.ok()) return strategy;
  if (options.norm_bound > 0) {
    strategy = MakeNormBound(*std::move(strategy), options.norm_bound);
    if (!strategy.ok()) return strategy;
  }
  if (!options.accept_failures) strategy = MakeRequireEverySite(*std::move(strategy));
  return strategy;
}

}  // namespace fl::aggregation
