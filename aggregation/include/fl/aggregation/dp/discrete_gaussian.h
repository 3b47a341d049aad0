// The discrete Gaussian N_Z(0, sigma^2): P[X = x] proportional to exp(-x^2 / (2 sigma^2)) over
// the integers. Summed over sites under secure aggregation it stays (nearly) a discrete Gaussian
// and is exact in modular arithmetic, which continuous noise rounded to a grid is not (Kairouz,
// Liu and Steinke 2021, the distributed discrete Gaussian; fl/aggregation/secagg/ddg_encoding.h).
//
// Sampling follows Canonne, Kamath and Steinke 2020 (Algorithm 3): a discrete Laplace proposal
// with scale t = floor(sigma) + 1, accepted with probability exp(-(|y| - sigma^2/t)^2 / 2sigma^2).
// Their exact version computes every Bernoulli(exp(-g)) in rational arithmetic; here each one
// compares a 53-bit uniform with exp(-g) in double precision, so each probability is off by at
// most 2^-53 (the same trade as TensorFlow Privacy's sampler). Expected draws per value are a
// small constant (about 3 uniforms at sigma >= 1).
#ifndef FL_AGGREGATION_DP_DISCRETE_GAUSSIAN_H_
#define FL_AGGREGATION_DP_DISCRETE_GAUSSIAN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "fl/aggregation/dp/gaussian_noise.h"

namespace fl::aggregation::dp {

// Not thread-safe; does not own the source, which must outlive it.
class DiscreteGaussianSampler {
 public:
  // sigma must be a finite number > 0 (Create refuses others with INVALID_ARGUMENT, naming it).
  static absl::StatusOr<DiscreteGaussianSampler> Create(BitSource& source, double sigma);

  // The next value; INTERNAL when the source fails.
  absl::StatusOr<int64_t> Next();

  double sigma() const { return sigma_; }

 private:
  DiscreteGaussianSampler(BitSource& source, double sigma);
  absl::StatusOr<bool> BernoulliExp(double g);  // true with probability exp(-g), g >= 0
  absl::StatusOr<int64_t> DiscreteLaplace();    // P[y] proportional to exp(-|y| / t)

  UniformSampler uniform_;
  double sigma_;
  int64_t t_;
};

}  // namespace fl::aggregation::dp

#endif  // FL_AGGREGATION_DP_DISCRETE_GAUSSIAN_H_
