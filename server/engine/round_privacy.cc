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

}  // namespace fl::server::internal
