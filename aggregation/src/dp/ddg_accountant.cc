#include "fl/aggregation/dp/ddg_accountant.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "aggregation/internal/rdp_fixed_size.h"

namespace fl::aggregation::dp {

double RoundedL2Bound(double scaled_norm, double beta, int64_t dimension) {
  const double d = static_cast<double>(dimension);
  const double loose = scaled_norm + std::sqrt(d);
  if (beta <= 0) return loose;
  const double squared = scaled_norm * scaled_norm + 0.25 * d +
                         std::sqrt(2 * std::log(1 / beta)) * (scaled_norm + 0.5 * std::sqrt(d));
  return std::min(loose, std::sqrt(squared));
}

double RoundedL1Bound(double rounded_l2, int64_t dimension) {
  return rounded_l2 * std::min(std::sqrt(static_cast<double>(dimension)), rounded_l2);
}

double DdgTau(double site_stddev, int64_t num_sites) {
  const double pi_sigma = std::numbers::pi * site_stddev;
  double tau = 0;
  for (int64_t k = 1; k < num_sites; ++k) {
    const double kk = static_cast<double>(k);
    const double term = std::exp(-2 * pi_sigma * pi_sigma * kk / (kk + 1));
    tau += term;
    // The terms fall with k; past a million, each later one is counted as this one (an upper
    // bound), so that a huge n stays cheap.
    if (k == 1'000'000) {
      tau += term * static_cast<double>(num_sites - 1 - k);
      break;
    }
  }
  return 10 * tau;
}

double DdgRdp(const DdgRelease& release, double tau, double order) {
  const double s = std::sqrt(static_cast<double>(release.num_sites)) * release.site_stddev;
  const double l2 = release.l2_sensitivity / s;
  const double l1 = release.l1_sensitivity / s;
  const double d = static_cast<double>(release.dimension);
  const double first = order / 2 * l2 * l2 + tau * d;
  const double second = order / 2 * (l2 * l2 + 2 * l1 * tau + tau * tau * d);
  const double third = order / 2 * (l2 + std::sqrt(d) * tau) * (l2 + std::sqrt(d) * tau);
  return std::min({first, second, third});
}

absl::StatusOr<std::vector<double>> ComputeDdgRdp(const DdgRelease& release, double sampling_rate,
                                                  int64_t steps, std::span<const double> orders) {
  if (!(sampling_rate > 0 && sampling_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling rate q must be in (0, 1], got ", sampling_rate));
  }
  if (steps < 0) return absl::InvalidArgumentError(absl::StrCat("steps must be >= 0, got ", steps));
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(release.l2_sensitivity) || !positive(release.l1_sensitivity) ||
      !positive(release.site_stddev) || release.num_sites < 1 || release.dimension < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a discrete Gaussian release needs positive sensitivities, stddev, sites and dimension; "
        "got L2 ",
        release.l2_sensitivity, ", L1 ", release.l1_sensitivity, ", sigma ", release.site_stddev,
        ", n ", release.num_sites, ", d ", release.dimension));
  }
  if (orders.empty()) return absl::InvalidArgumentError("the list of RDP orders is empty");
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  const double tau = DdgTau(release.site_stddev, release.num_sites);
  // The fixed-size draw's bound compares one site's vector with another's: twice the norms.
  DdgRelease swapped = release;
  swapped.l2_sensitivity = 2 * release.l2_sensitivity;
  swapped.l1_sensitivity = 2 * release.l1_sensitivity;
  const auto replace_one = [&swapped, tau](double a) { return DdgRdp(swapped, tau, a); };
  const auto zero_out = [&release, tau](double a) { return DdgRdp(release, tau, a); };
  for (double a : orders) {
    if (!std::isfinite(a) || a <= 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("every RDP order must be a finite number > 1, got ", a));
    }
    rdp.push_back(internal::RdpOneStepFixedSize(sampling_rate, a, replace_one, zero_out) *
                  static_cast<double>(steps));
  }
  return rdp;
}

}  // namespace fl::aggregation::dp
