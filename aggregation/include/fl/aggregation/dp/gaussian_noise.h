// Gaussian noise for differential privacy, from a cryptographically secure source.
//
// Central DP: the server adds N(0, (z * C)^2) to every coordinate of the sum of the clipped
// updates (CentralNoiseStddev). Distributed DP: each of n clients adds N(0, (z * C)^2 / n) to its
// own clipped update (DistributedNoiseStddev), so the sum of n updates carries N(0, (z * C)^2),
// also when the server only sees that sum (secure aggregation). If fewer than n clients survive,
// the sum carries less noise than planned; callers choose n as the number of clients expected to
// survive (a lower bound), not the number sampled.
//
// Gaussian values come from uniform bits through the Box-Muller transform (documented at
// GaussianSampler). The bits come from a BitSource: MakeSecureBitSource() reads OpenSSL's
// RAND_bytes (the CSPRNG every DP deployment must use); MakeSeededBitSource() is a deterministic
// generator for exact, repeatable tests and must never be used to protect real data.
//
// Known limit: like Opacus and TF Privacy, values are float64 Gaussians rounded to the model's
// floating-point type, not a discrete Gaussian; Mironov (CCS 2012) shows that such textbook
// floating-point noise leaks through the low-order bits in adversarial settings.
#ifndef FL_AGGREGATION_DP_GAUSSIAN_NOISE_H_
#define FL_AGGREGATION_DP_GAUSSIAN_NOISE_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::aggregation::dp {

// A source of uniformly random bytes. Not thread-safe: one per thread or caller.
class BitSource {
 public:
  virtual ~BitSource() = default;
  // Fills `out` with random bytes. INTERNAL with OpenSSL's reason when the CSPRNG fails (it is
  // then not safe to publish anything that was to be noised).
  virtual absl::Status Fill(std::span<uint8_t> out) = 0;
};

// OpenSSL's RAND_bytes (a CSPRNG seeded by the operating system).
std::unique_ptr<BitSource> MakeSecureBitSource();

// A deterministic stream (SplitMix64 of `seed`): same seed, same bytes on every platform. For
// tests only: it is not cryptographically secure.
std::unique_ptr<BitSource> MakeSeededBitSource(uint64_t seed);

// Uniform words and doubles from a BitSource, read in blocks of 4 KiB. Not thread-safe; does not
// own the source, which must outlive it.
class UniformSampler {
 public:
  explicit UniformSampler(BitSource& source) : source_(source) {}
  // The next 64 bits (little-endian from the source's bytes); INTERNAL when the source fails.
  absl::StatusOr<uint64_t> NextWord();
  // The top 53 bits of the next word over 2^53: uniform in [0, 1).
  absl::StatusOr<double> NextDouble();

 private:
  BitSource& source_;
  uint8_t buffer_[4096];
  size_t buffer_pos_ = sizeof(buffer_);
};

// Standard normal values from a BitSource by the Box-Muller transform: two 64-bit words k1, k2
// give u1 = (top 53 bits of k1 + 1) / 2^53 in (0, 1] and u2 = (top 53 bits of k2) / 2^53 in
// [0, 1), then r = sqrt(-2 ln u1) and the pair r cos(2 pi u2), r sin(2 pi u2) (both are used).
// u1 > 0, so the logarithm is always finite; |value| <= sqrt(2 * 53 ln 2) ~ 8.57. The bytes are
// read in blocks of 4 KiB. Not thread-safe; does not own the source, which must outlive it.
class GaussianSampler {
 public:
  explicit GaussianSampler(BitSource& source) : words_(source) {}
  // The next N(0, 1) value; INTERNAL when the source fails.
  absl::StatusOr<double> Next();

 private:
  UniformSampler words_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// Adds independent N(0, stddev^2) values to every element of `values`. INVALID_ARGUMENT, naming
// the value, when stddev is negative or not finite (stddev 0 adds nothing); INTERNAL when the
// source fails, in which case `values` may be partly noised and must be discarded.
absl::Status AddGaussianNoise(std::span<float> values, double stddev, GaussianSampler& sampler);
absl::Status AddGaussianNoise(std::span<double> values, double stddev, GaussianSampler& sampler);

// z * C: the standard deviation the server adds to the SUM of clipped updates (central DP).
// INVALID_ARGUMENT, naming the value, when z or C is not a finite number > 0.
absl::StatusOr<double> CentralNoiseStddev(double noise_multiplier, double clip_norm);

// z * C / sqrt(n): the standard deviation each of n clients adds to its clipped update so that the
// sum of the n updates carries N(0, (z * C)^2) (distributed DP). INVALID_ARGUMENT as above, or
// when n < 1.
absl::StatusOr<double> DistributedNoiseStddev(double noise_multiplier, double clip_norm,
                                              int num_clients);

}  // namespace fl::aggregation::dp

#endif  // FL_AGGREGATION_DP_GAUSSIAN_NOISE_H_
