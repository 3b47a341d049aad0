#include "aggregation/internal/rdp_fixed_size.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace fl::aggregation::dp::internal {
namespace {

// log C(n, k).
double LogChoose(double n, double k) {
  int sign = 0;
  return lgamma_r(n + 1, &sign) - lgamma_r(k + 1, &sign) - lgamma_r(n - k + 1, &sign);
}

// (alpha - 1) times Theorem 9's bound at an integer order alpha >= 1, over the replace-one RDP.
double ScaledRdpAtInteger(double q, int64_t alpha, const std::function<double(double)>& base) {
  if (alpha <= 1) return 0;
  const double a = static_cast<double>(alpha);
  const double log_q = std::log(q);
  const double eps2 = base(2);
  // The j = 0 and j = 1 terms sum to 1; the j = 2 term takes the smaller of its two forms.
  const double log_second =
      std::min(std::log(4.0) + std::log(std::expm1(eps2)), std::log(2.0) + eps2);
  std::vector<double> logs = {0.0, 2 * log_q + LogChoose(a, 2) + log_second};
  logs.reserve(static_cast<size_t>(alpha) + 1);
  for (int64_t j = 3; j <= alpha; ++j) {
    const double dj = static_cast<double>(j);
    logs.push_back(dj * log_q + LogChoose(a, dj) + std::log(2.0) + (dj - 1) * base(dj));
  }
  double most = 0;  // log of the largest term, for a stable log-sum-exp
  for (double l : logs) most = std::max(most, l);
  double sum = 0;
  for (double l : logs) sum += std::exp(l - most);
  return most + std::log(sum);
}

}  // namespace

double RdpOneStepFixedSize(double q, double alpha,
                           const std::function<double(double)>& replace_one_rdp,
                           const std::function<double(double)>& zero_out_rdp) {
  const double unsampled = zero_out_rdp(alpha);
  if (q >= 1 || alpha > 10'000) return unsampled;
  const double lo = std::floor(alpha);
  const double hi = std::ceil(alpha);
  const double at_lo = ScaledRdpAtInteger(q, static_cast<int64_t>(lo), replace_one_rdp);
  if (lo == hi) return std::min(unsampled, at_lo / (alpha - 1));
  const double at_hi = ScaledRdpAtInteger(q, static_cast<int64_t>(hi), replace_one_rdp);
  const double t = alpha - lo;
  return std::min(unsampled, ((1 - t) * at_lo + t * at_hi) / (alpha - 1));
}

double RdpOneStepFixedSize(double q, double z, double alpha) {
  return RdpOneStepFixedSize(
      q, alpha, [z](double a) { return 2 * a / (z * z); },
      [z](double a) { return a / (2 * z * z); });
}

}  // namespace fl::aggregation::dp::internal
