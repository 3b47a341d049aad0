// The configuration keys that `fl server`'s file and `fl sim`'s share: [fit], [strategy],
// [privacy] and [secure_aggregation], declared once over accessors to the structs they set, so
// that the two files name, document and check them alike.
//
// Header-only (templates over the Config type); internal to the server and the CLI (a target that
// includes it names `INTERNAL common` for toml_keys.h and links tomlplusplus::tomlplusplus).
#ifndef FL_SERVER_DAEMON_SHARED_KEYS_H_
#define FL_SERVER_DAEMON_SHARED_KEYS_H_

#include <vector>

#include "common/internal/toml_keys.h"
#include "fl/aggregation/strategies.h"
#include "fl/server/engine.h"

namespace fl::server::config_keys {

namespace tk = fl::toml_keys;
using tk::Range;

// [fit]: `get(config)` is the config's FitSettings.
template <typename C, typename Get>
std::vector<tk::KeySpec<C>> FitKeys(Get get) {
  return {tk::IntKey<C, int32_t>(
              "fit", "local_epochs", "Epochs each client trains per round.",
              1, [get](auto& c) -> auto& { return get(c).local_epochs; })
              .Flag("--local-epochs"),
          tk::IntKey<C, int32_t>(
              "fit", "batch_size", "Mini-batch size of the clients' SGD.",
              1, [get](auto& c) -> auto& { return get(c).batch_size; })
              .Flag("--batch-size"),
          tk::FloatKey<C>(
              "fit", "learning_rate", "Learning rate of the clients' SGD.",
              Range::kPositive, [get](auto& c) -> auto& { return get(c).learning_rate; })
              .Flag("--lr")};
}

// [strategy]: `get(config)` is the config's aggregation::StrategyOptions.
template <typename C, typename Get>
std::vector<tk::KeySpec<C>> StrategyKeys(Get get) {
  return {
      tk::StringKey<C>(
          "strategy", "name",
          "fedavg (weighted mean), fedprox (plus the clients' proximal term), "
          "scaffold (control variates), a server optimizer over the mean's "
          "change: fedavgm, fedadagrad, fedadam, fedyogi, or robust aggregation: fedmedian, "
          "fedtrimmedavg, krum, multikrum, bulyan, fltrust (with a root dataset on the server), "
          "or fair weighting: qfedavg.",
          true, [get](auto& c) -> auto& { return get(c).name; },
          {"fedavg", "fedprox", "scaffold", "fedavgm", "fedadagrad", "fedadam", "fedyogi",
           "fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan", "qfedavg", "fltrust"})
          .Flag("--strategy",
                "fedavg, fedprox, scaffold, fedavgm, fedadagrad, fedadam, fedyogi, fedmedian, "
                "fedtrimmedavg, krum, multikrum, bulyan, qfedavg or fltrust"),
      tk::FloatKey<C>(
          "strategy", "proximal_mu",
          "FedProx: the proximal coefficient mu sent to the clients (> 0; used only by fedprox).",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).proximal_mu; })
          .Flag("--proximal-mu", "FedProx: mu (> 0)"),
      tk::FloatKey<C>(
          "strategy", "momentum", "The clients' SGD momentum, in [0, 1).",
          Range::kHalfOpenFraction, [get](auto& c) -> auto& { return get(c).momentum; })
          .Flag("--momentum", "Sites' SGD momentum"),
      tk::FloatKey<C>(
          "strategy", "weight_decay", "The clients' L2 weight decay.",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).weight_decay; })
          .Flag("--weight-decay", "Sites' weight decay"),
      tk::FloatKey<C>(
          "strategy", "clip_norm",
          "The clients clip each batch's gradient to this L2 norm; 0: no clipping.",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).clip_norm; })
          .Flag("--clip-norm", "Sites' gradient clipping norm (0: off)"),
      tk::FloatKey<C>(
          "strategy", "server_learning_rate",
          "The server's step size: SCAFFOLD's eta_g (1: the weighted mean of the clients' "
          "models), a server optimizer's eta; 0: the strategy's default (SCAFFOLD, fedavgm 1; "
          "fedadagrad, fedadam 0.1; fedyogi 0.01).",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).server_learning_rate; })
          .Flag("--server-lr",
                "Server step size: SCAFFOLD's eta_g, a server optimizer's eta (0: the strategy's "
                "default)"),
      tk::IntKey<C, int64_t>(
          "strategy", "num_parties",
          "SCAFFOLD: the number of parties N in the control variate's update; 0: the enrolled "
          "clients.",
          0, [get](auto& c) -> auto& { return get(c).num_parties; })
          .Flag("--num-parties",
                "SCAFFOLD: parties N in the control variate's update (0: the enrolled clients)"),
      tk::FloatKey<C>(
          "strategy", "server_momentum", "fedavgm: the server's momentum, in [0, 1).",
          Range::kHalfOpenFraction, [get](auto& c) -> auto& { return get(c).server_momentum; })
          .Flag("--server-momentum", "fedavgm: momentum"),
      tk::FloatKey<C>(
          "strategy", "beta_1",
          "fedadagrad, fedadam, fedyogi: the first moment's decay, in [0, 1).",
          Range::kHalfOpenFraction, [get](auto& c) -> auto& { return get(c).beta_1; })
          .Flag("--beta-1", "fedadagrad/adam/yogi: beta_1"),
      tk::FloatKey<C>(
          "strategy", "beta_2", "fedadam, fedyogi: the second moment's decay, in [0, 1).",
          Range::kHalfOpenFraction, [get](auto& c) -> auto& { return get(c).beta_2; })
          .Flag("--beta-2", "fedadam/yogi: beta_2"),
      tk::FloatKey<C>(
          "strategy", "tau", "fedadagrad, fedadam, fedyogi: the adaptivity (> 0).",
          Range::kPositive, [get](auto& c) -> auto& { return get(c).tau; })
          .Flag("--tau", "fedadagrad/adam/yogi: adaptivity tau"),
      tk::FloatKey<C>(
          "strategy", "trim_beta",
          "fedtrimmedavg: the fraction of each coordinate's values cut at each end, in [0, 0.5).",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).trim_beta; })
          .Flag("--trim-beta", "fedtrimmedavg: fraction cut at each end, in [0, 0.5)"),
      tk::IntKey<C, int32_t>(
          "strategy", "num_malicious",
          "krum, multikrum, bulyan: the attacking sites f to withstand (rounds need 2f + 3 "
          "updates, Bulyan 4f + 3).",
          0, [get](auto& c) -> auto& { return get(c).num_malicious; })
          .Flag("--num-malicious", "krum/multikrum/bulyan: attacking sites f to withstand"),
      tk::IntKey<C, int32_t>(
          "strategy", "num_to_keep",
          "multikrum: the models of best Krum score averaged; 0: the round's updates less "
          "num_malicious.",
          0, [get](auto& c) -> auto& { return get(c).num_to_keep; })
          .Flag("--num-to-keep", "multikrum: models averaged (0: updates - f)"),
      tk::FloatKey<C>(
          "strategy", "q",
          "qfedavg: the fairness exponent (0: sites weigh alike; larger: worse-served sites "
          "weigh more).",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).q; })
          .Flag("--q", "qfedavg: fairness exponent q (>= 0)"),
      tk::FloatKey<C>(
          "strategy", "qffl_learning_rate",
          "qfedavg: its Lipschitz estimate is 1 / this; set it to the clients' learning rate.",
          Range::kPositive, [get](auto& c) -> auto& { return get(c).qffl_learning_rate; })
          .Flag("--qffl-lr", "qfedavg: 1 / its Lipschitz estimate (the clients' learning rate)"),
      tk::FloatKey<C>(
          "strategy", "norm_bound",
          "Any strategy: each update's change from the global model is clipped to this L2 norm "
          "before it is aggregated (a defence against scaled updates; 0: off; not with secure "
          "aggregation).",
          Range::kNonNegative, [get](auto& c) -> auto& { return get(c).norm_bound; })
          .Flag("--norm-bound",
                "Clip each update's change to this L2 norm before aggregating (0: off)"),
      tk::BoolKey<C>(
          "strategy", "accept_failures",
          "Any strategy: false fails a round in which a sampled site dropped, declined, was "
          "refused or missed the deadline (the attempt is retried).",
          [get](auto& c) -> auto& { return get(c).accept_failures; })
          .Flag("--no-accept-failures", "Fail a round in which any sampled site failed")};
}

// [privacy] and [secure_aggregation]: `privacy(config)` is the config's PrivacyOptions,
// `secagg(config)` its SecureAggregationOptions.
template <typename C, typename GetPrivacy, typename GetSecAgg>
std::vector<tk::KeySpec<C>> PrivacyKeys(GetPrivacy privacy, GetSecAgg secagg) {
  return {
      tk::StringKey<C>("privacy", "mode",
                       "off; central: the server clips each update's change, averages them "
                       "unweighted and adds noise; distributed (with secure aggregation): each "
                       "client clips its change and adds its share of the noise.",
                       false, [privacy](auto& c) -> auto& { return privacy(c).mode; },
                       {"off", "central", "distributed"})
          .Flag("--dp-mode", "Differential privacy: off, central, or distributed (with --secagg)"),
      tk::StringKey<C>(
          "privacy", "distributed_noise",
          "With mode distributed: gaussian (each site adds continuous noise before quantizing) "
          "or discrete_gaussian (each site adds integer noise after a rotation and rounding that "
          "bound its norm, so the sum of the sites' noise is exact modulo the secure sum's; "
          "Kairouz et al. 2021).",
          false, [privacy](auto& c) -> auto& { return privacy(c).distributed_noise; },
          {"gaussian", "discrete_gaussian"})
          .Flag("--dp-distributed-noise", "DP: gaussian or discrete_gaussian (distributed mode)"),
      tk::FloatKey<C>(
          "privacy", "noise_multiplier", "z: the noise's standard deviation over clip_norm.",
          Range::kPositive, [privacy](auto& c) -> auto& { return privacy(c).noise_multiplier; })
          .Flag("--dp-noise-multiplier", "DP: z (> 0)"),
      tk::FloatKey<C>(
          "privacy", "clip_norm",
          "L2 norm each update's change from the global model is clipped to.",
          Range::kPositive, [privacy](auto& c) -> auto& { return privacy(c).clip_norm; })
          .Flag("--dp-clip-norm", "DP: L2 norm each update's change is clipped to"),
      tk::FloatKey<C>(
          "privacy", "delta", "The delta of the (epsilon, delta) reported, in (0, 1).",
          Range::kFraction, [privacy](auto& c) -> auto& { return privacy(c).delta; })
          .Flag("--dp-delta", "DP: delta, in (0, 1)"),
      tk::FloatKey<C>(
          "privacy", "epsilon_budget",
          "The run finishes before a round that would spend more epsilon; 0: no budget.",
          Range::kNonNegative, [privacy](auto& c) -> auto& { return privacy(c).epsilon_budget; })
          .Flag("--dp-epsilon-budget",
                "DP: the run stops before exceeding this epsilon (0: no budget)"),

      tk::BoolKey<C>(
          "secure_aggregation", "enabled", "Run every round with secure aggregation.",
          [secagg](auto& c) -> auto& { return secagg(c).enabled; })
          .Flag("--secagg",
                "Secure aggregation (SecAgg+): the server sees only the sum of the changes"),
      tk::IntKey<C, int32_t>(
          "secure_aggregation", "num_neighbors",
          "k: each client shares its secrets with k neighbours; 0: the least k (from n - 1 up to "
          "16 clients, 3 log2(n) above) whose threshold keeps a site's input from its colluding "
          "neighbours (corrupt_fraction, risk <= 2^-(40 + grinding_bits)) and the round live "
          "with max_dropout dropping (<= 2^-20).",
          0, [secagg](auto& c) -> auto& { return secagg(c).num_neighbors; })
          .Flag("--secagg-neighbors", "SecAgg: k (0: default for n)"),
      tk::IntKey<C, int32_t>(
          "secure_aggregation", "threshold",
          "t: shares needed to recover a dropped client's masks, in (k/2, k]; 0: the least that "
          "keeps the privacy risk <= 2^-(40 + grinding_bits) with corrupt_fraction colluding. "
          "Settings with more risk are refused with the figures.",
          0, [secagg](auto& c) -> auto& { return secagg(c).threshold; })
          .Flag("--secagg-threshold", "SecAgg: t, in (k/2, k] (0: the least that keeps privacy)"),
      tk::FloatKey<C>(
          "secure_aggregation", "clip_range",
          "c: each coordinate of a client's change is clipped to [-c, c] before quantizing.",
          Range::kPositive, [secagg](auto& c) -> auto& { return secagg(c).clip_range; })
          .Flag("--secagg-clip-range", "SecAgg: each coordinate of a change is clipped to [-c, c]"),
      tk::IntKey<C, int32_t>(
          "secure_aggregation", "quantization_bits",
          "b: bits per quantized value; 0: the most that cannot wrap the modulus.",
          0, [secagg](auto& c) -> auto& { return secagg(c).quantization_bits; }, 62)
          .Flag("--secagg-bits", "SecAgg: quantization bits (0: the most that fit)"),
      tk::IntKey<C, int32_t>(
          "secure_aggregation", "modulus_bits", "Arithmetic modulo 2^32 or 2^64: 32 or 64.",
          32, [secagg](auto& c) -> auto& { return secagg(c).modulus_bits; }, 64)
          .Flag("--secagg-modulus-bits", "SecAgg: 32 or 64"),
      tk::IntKey<C, uint32_t>(
          "secure_aggregation", "max_weight",
          "Largest weight of one client's update (its examples over example_unit, capped).",
          1, [secagg](auto& c) -> auto& { return secagg(c).max_weight; }),
      tk::IntKey<C, int64_t>(
          "secure_aggregation", "example_unit",
          "A client's weight is ceil(examples / example_unit), in [1, max_weight].",
          1, [secagg](auto& c) -> auto& { return secagg(c).example_unit; }),
      tk::SecondsKey<C>(
          "secure_aggregation", "stage_timeout_s",
          "Deadline of the key, sharing, signing and unmasking stages; clients silent by then "
          "drop out (seconds).",
          Range::kPositive, [secagg](auto& c) -> auto& { return secagg(c).stage_timeout; })
          .Flag("--secagg-stage-timeout",
                "SecAgg: seconds for the key, sharing and unmasking stages"),
      tk::FloatKey<C>(
          "secure_aggregation", "max_dropout",
          "Distributed DP: the share of sampled clients that may drop out; the noise is planned "
          "for the rest, and a round with fewer survivors fails.",
          Range::kHalfOpenFraction, [secagg](auto& c) -> auto& { return secagg(c).max_dropout; }),
      tk::FloatKey<C>(
          "secure_aggregation", "corrupt_fraction",
          "The share of a round's sites that may collude with a malicious server, in [0, 0.5): "
          "sites reveal shares only once a majority of them that holds with this many colluders "
          "signed one survivor set, so more dropouts before that stage fail the round.",
          Range::kHalfOpenFraction,
          [secagg](auto& c) -> auto& { return secagg(c).corrupt_fraction; }),
      tk::IntKey<C, int32_t>(
          "secure_aggregation", "grinding_bits",
          "How many directories, as a power of two, a malicious server may try for a graph that "
          "surrounds a site with colluders (the graph follows a hash of the directory it sends): "
          "each graph must hold at 2^-(40 + grinding_bits), so k grows with it. 40: months of "
          "one core's hashing; 0: a server that does not grind. Sites judge the graph themselves "
          "too (their limits.grinding_bits). In [0, 100].",
          0, [secagg](auto& c) -> auto& { return secagg(c).grinding_bits; })};
}

}  // namespace fl::server::config_keys

#endif  // FL_SERVER_DAEMON_SHARED_KEYS_H_
