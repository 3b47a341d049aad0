#include "aggregation/internal/rdp_fixed_size.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace fl::aggregation::dp::internal {
namespace {

// log C(n, k).
double LogChoose(double n, double k) {
  double a = 0;
  double b = 0;
  double c = 0;
  int sign = 0;
  a = lgamma_r(n + 1, &sign);
  b = lgamma_r(k + 1, &sign);
  c = lgamma_r(n - k + 1, &sign);
  return a - b - c;
}

// (alpha - 1) times Theorem 9's bound at an integer order alpha >= 1, capped by the Gaussian.
double ScaledRdpAtInteger(double q, double z, int64_t alpha) {
  if (alpha <= 1) return 0;
  const double a = static_cast<double>(alpha);
  const double gaussian = (a - 1) * a / (2 * z * z);
  const double log_q = std::log(q);
  const double eps2 = 2 / (2 * z * z);
  // The j = 0 and j = 1 terms sum to 1; the j = 2 term takes the smaller of its two forms.
  const double log_second =
      std::min(std::log(4.0) + std::log(std::expm1(eps2)), std::log(2.0) + eps2);
  double most = 0;  // log of the largest term, for a stable log-sum-exp
  std::vector<double> logs = {0.0, 2 * log_q + LogChoose(a, 2) + log_second};
  logs.reserve(static_cast<size_t>(alpha) + 1);
  for (int64_t j = 3; j <= alpha; ++j) {
    const double dj = static_cast<double>(j);
    logs.push_back(dj * log_q + LogChoose(a, dj) + std::log(2.0) + (dj - 1) * dj / (2 * z * z));
  }
  for (double l : logs) most = std::max(most, l);
  double sum = 0;
  for (double l : logs) sum += std::exp(l - most);
  return std::min(gaussian, most + std::log(sum));
}

}  // namespace

double RdpOneStepFixedSize(double q, double z, double alpha) {
  const double gaussian = alpha / (2 * z * z);
  if (q >= 1 || alpha > 10'000) return gaussian;
  const double lo = std::floor(alpha);
  const double hi = std::ceil(alpha);
  const double at_lo = ScaledRdpAtInteger(q, z, static_cast<int64_t>(lo));
  if (lo == hi) return std::min(gaussian, at_lo / (alpha - 1));
  const double at_hi = ScaledRdpAtInteger(q, z, static_cast<int64_t>(hi));
  const double t = alpha - lo;
  return std::min(gaussian, ((1 - t) * at_lo + t * at_hi) / (alpha - 1));
}

}  // namespace fl::aggregation::dp::internal
