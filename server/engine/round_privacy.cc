// A round's differential privacy: the survivors distributed noise is planned for, the discrete
// Gaussian encoding of a round, and what one round adds to the accountant.
//
// The round draw (StartRoundLocked) takes a uniform subset of fixed size without replacement, so
// every round is accounted as such (aggregation::dp::Sampling::kFixedSize, and the same bound
// over the discrete Gaussian): Poisson sampling's bound would understate epsilon.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/secagg/ddg_encoding.h"
#include "fl/common/logging.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

int32_t EngineImpl::DpMinSurvivors(int32_t n) const {
  const double kept = (1.0 - options_.secure_aggregation.max_dropout) * static_cast<double>(n);
  return std::max(options_.min_fit_clients, static_cast<int32_t>(std::floor(kept)));
}

absl::StatusOr<secagg::DdgEncoding> EngineImpl::DdgEncodingFor(int32_t n) const {
  const PrivacyOptions& p = options_.privacy;
  const int32_t n_min = DpMinSurvivors(n);
  absl::StatusOr<double> stddev =
      aggregation::dp::DistributedNoiseStddev(p.noise_multiplier, p.clip_norm, n_min);
  if (!stddev.ok()) return stddev.status();
  const int modulus = options_.secure_aggregation.modulus_bits;
  const auto dimension = static_cast<size_t>(global_->spec().NumFloats());
  absl::StatusOr<double> granularity =
      secagg::DdgGranularity(p.clip_norm, *stddev, n, dimension, modulus);
  if (!granularity.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "privacy.distributed_noise = \"discrete_gaussian\": ", granularity.status().message(),
        "; use secure_aggregation.modulus_bits = 64"));
  }
  return secagg::DdgEncoding{.clip_norm = p.clip_norm,
                             .granularity = *granularity,
                             .site_stddev = *stddev,
                             .modulus_bits = modulus};
}

absl::StatusOr<std::vector<double>> EngineImpl::RoundRdpLocked(double q, int32_t n) const {
  const PrivacyOptions& p = options_.privacy;
  const std::vector<double>& orders = accountant_->orders();
  if (!p.discrete()) {
    return aggregation::dp::ComputeRdp(q, p.noise_multiplier, 1, orders,
                                       aggregation::dp::Sampling::kFixedSize);
  }
  absl::StatusOr<secagg::DdgEncoding> encoding = DdgEncodingFor(n);
  if (!encoding.ok()) return encoding.status();
  const aggregation::dp::DdgRelease release = secagg::DdgReleaseOf(
      *encoding, static_cast<size_t>(global_->spec().NumFloats()), DpMinSurvivors(n));
  return aggregation::dp::ComputeDdgRdp(release, q, 1, orders);
}

std::string EngineImpl::CountInterruptedReleaseLocked(const RoundRecord& attempt) {
  if (!accountant_.has_value() || attempt.dp_epsilon > 0) {
    return "";  // no DP, or counted already (when the attempt failed, or by an earlier restart)
  }
  if (!(attempt.dp_sampling_rate > 0)) {
    // A marker written before markers carried the rate: the release cannot be replayed.
    LogEvent(LogLevel::kWarn, "privacy_release_uncounted",
             {{"round", absl::StrCat(attempt.round)},
              {"attempt", absl::StrCat(attempt.attempt)},
              {"why", "its record holds no sampling rate (written by an older server)"}});
    return "; its release could not be counted: the record holds no sampling rate";
  }
  const PrivacyOptions& p = options_.privacy;
  absl::StatusOr<std::vector<double>> rdp =
      RoundRdpLocked(attempt.dp_sampling_rate, attempt.num_sampled);
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      rdp.ok() ? accountant_->SpentAfterRdp(*rdp, p.delta) : rdp.status();
  if (spent.ok()) {
    if (absl::Status added = accountant_->AddRdp(*rdp); !added.ok()) spent = added;
  }
  if (!spent.ok()) {
    return absl::StrCat("; the release could not be counted: ", spent.status().message());
  }
  std::vector<ParticipationRecord> summed;
  nlohmann::json j = nlohmann::json::parse(attempt.secagg_json, nullptr, false);
  if (j.is_object() && j.contains("summed") && j["summed"].is_array()) {
    for (const nlohmann::json& id : j["summed"]) {
      if (!id.is_string()) continue;
      summed.emplace_back().client_id = id.get<std::string>();
    }
  }
  ReplayServerExposureLocked(attempt, summed);
  const SpentPrivacy counted{.sampling_rate = attempt.dp_sampling_rate,
                             .epsilon = spent->epsilon,
                             .epsilon_server = p.distributed() ? ServerEpsilonLocked() : 0};
  if (absl::Status s =
          store_->SetAbortedRoundPrivacy(run_.run_id, attempt.round, attempt.attempt, counted);
      !s.ok()) {
    LogEvent(LogLevel::kWarn, "privacy_record_failed", {{"reason", std::string(s.message())}});
  }
  return absl::StrCat("; the release is counted: epsilon ", counted.epsilon,
                      counted.epsilon_server > 0
                          ? absl::StrCat(", ", counted.epsilon_server, " against the server")
                          : "");
}

}  // namespace fl::server::internal
