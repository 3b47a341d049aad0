#include "fl/aggregation/dp/discrete_gaussian.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace fl::aggregation::dp {

absl::StatusOr<DiscreteGaussianSampler> DiscreteGaussianSampler::Create(BitSource& source,
                                                                        double sigma) {
  // Below 1e-100, sigma^2 could underflow to 0 and no value would ever be accepted.
  if (!(sigma >= 1e-100 && sigma <= 1e15)) {
    return absl::InvalidArgumentError(
        absl::StrCat("discrete Gaussian sigma must be in [1e-100, 1e15], got ", sigma));
  }
  return DiscreteGaussianSampler(source, sigma);
}

DiscreteGaussianSampler::DiscreteGaussianSampler(BitSource& source, double sigma)
    : uniform_(source), sigma_(sigma), t_(static_cast<int64_t>(std::floor(sigma)) + 1) {}

absl::StatusOr<bool> DiscreteGaussianSampler::BernoulliExp(double g) {
  absl::StatusOr<double> u = uniform_.NextDouble();
  if (!u.ok()) return u.status();
  return *u < std::exp(-g);
}

absl::StatusOr<int64_t> DiscreteGaussianSampler::DiscreteLaplace() {
  const double t = static_cast<double>(t_);
  while (true) {
    // U uniform in [0, t) exactly: a 64-bit word, redrawn above the largest multiple of t.
    const uint64_t span = static_cast<uint64_t>(t_);
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % span + 1) % span;
    absl::StatusOr<uint64_t> word = uniform_.NextWord();
    if (!word.ok()) return word.status();
    if (*word > limit) continue;
    const auto u = static_cast<int64_t>(*word % span);
    absl::StatusOr<bool> keep = BernoulliExp(static_cast<double>(u) / t);
    if (!keep.ok()) return keep.status();
    if (!*keep) continue;
    // V geometric: the number of successes of Bernoulli(exp(-1)) before the first failure.
    int64_t v = 0;
    while (true) {
      absl::StatusOr<bool> more = BernoulliExp(1.0);
      if (!more.ok()) return more.status();
      if (!*more) break;
      ++v;
    }
    const int64_t x = u + t_ * v;
    absl::StatusOr<double> sign = uniform_.NextDouble();
    if (!sign.ok()) return sign.status();
    const bool negative = *sign < 0.5;
    if (negative && x == 0) continue;  // zero would be counted twice
    return negative ? -x : x;
  }
}

absl::StatusOr<int64_t> DiscreteGaussianSampler::Next() {
  const double t = static_cast<double>(t_);
  const double s2 = sigma_ * sigma_;
  while (true) {
    absl::StatusOr<int64_t> y = DiscreteLaplace();
    if (!y.ok()) return y.status();
    const double d = std::abs(static_cast<double>(*y)) - s2 / t;
    absl::StatusOr<bool> accept = BernoulliExp(d * d / (2 * s2));
    if (!accept.ok()) return accept.status();
    if (*accept) return *y;
  }
}

}  // namespace fl::aggregation::dp
