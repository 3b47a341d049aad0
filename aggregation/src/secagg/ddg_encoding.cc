#include "fl/aggregation/secagg/ddg_encoding.h"

#include <algorithm>
#include <bit>
#include <memory>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/discrete_gaussian.h"

namespace fl::secagg {
namespace {

constexpr int kMaxRoundingDraws = 1000;
// C / gamma at most 2^50: the rounding works in doubles, exact on integers up to 2^53, and the
// rounded value plus noise stays far inside int64. Noise at most 1e15 steps: the sampler's
// bound (dp::DiscreteGaussianSampler).
constexpr double kMaxStepsPerClip = 0x1p50;
constexpr double kMaxNoiseSteps = 1e15;

// The unnormalized Walsh-Hadamard transform, in place (size a power of two).
void Hadamard(std::span<double> v) {
  for (size_t h = 1; h < v.size(); h *= 2) {
    for (size_t i = 0; i < v.size(); i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const double a = v[j];
        const double b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

// The rotation's signs: one bit per coordinate from a SplitMix64 stream of the public seed.
std::vector<double> RotationSigns(uint64_t seed, size_t padded) {
  std::unique_ptr<aggregation::dp::BitSource> source = aggregation::dp::MakeSeededBitSource(seed);
  std::vector<uint8_t> bytes((padded + 7) / 8);
  (void)source->Fill(bytes);  // the seeded source cannot fail
  std::vector<double> signs(padded);
  for (size_t i = 0; i < padded; ++i) signs[i] = (bytes[i / 8] >> (i % 8)) & 1 ? -1.0 : 1.0;
  return signs;
}

uint64_t ModulusMask(int bits) { return bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

}  // namespace

absl::Status ValidateDdgEncoding(const DdgEncoding& e) {
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(e.clip_norm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("discrete Gaussian clip norm must be a finite number > 0, got ", e.clip_norm));
  }
  if (!positive(e.granularity)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "discrete Gaussian granularity must be a finite number > 0, got ", e.granularity));
  }
  if (!positive(e.site_stddev)) {
    return absl::InvalidArgumentError(
        absl::StrCat("discrete Gaussian stddev must be a finite number > 0, got ", e.site_stddev));
  }
  // Bounds a server's parameters cannot pass: beta near 1 would redraw the rounding for ever, a
  // step finer than C / 2^50 would round beyond what doubles hold exactly, and noise below half
  // a step is outside what the accountant's tau covers (Kairouz et al.'s Theorem 1).
  if (!(e.beta >= 0 && e.beta <= 0.9)) {
    return absl::InvalidArgumentError(
        absl::StrCat("conditional rounding's beta must be in [0, 0.9], got ", e.beta));
  }
  if (!(e.clip_norm / e.granularity <= kMaxStepsPerClip)) {
    return absl::InvalidArgumentError(absl::StrCat("discrete Gaussian granularity ", e.granularity,
                                                   " is too fine for clip norm ", e.clip_norm,
                                                   ": C / gamma must be at most 2^50"));
  }
  const double steps = e.site_stddev / e.granularity;
  if (!(steps >= 0.5 && steps <= kMaxNoiseSteps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("discrete Gaussian stddev ", e.site_stddev, " is ", steps,
                     " steps of the granularity; it must be in [0.5, 1e15]"));
  }
  if (e.modulus_bits != 32 && e.modulus_bits != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("modulus bits must be 32 or 64, got ", e.modulus_bits));
  }
  return absl::OkStatus();
}

size_t DdgPaddedDimension(size_t dimension) {
  return std::bit_ceil(std::max<size_t>(dimension, 1));
}

aggregation::dp::DdgRelease DdgReleaseOf(const DdgEncoding& e, size_t dimension,
                                         int64_t num_sites) {
  const size_t padded = DdgPaddedDimension(dimension);
  const double l2 = aggregation::dp::RoundedL2Bound(e.clip_norm / e.granularity, e.beta,
                                                    static_cast<int64_t>(padded));
  return {.l2_sensitivity = l2,
          .l1_sensitivity = aggregation::dp::RoundedL1Bound(l2, static_cast<int64_t>(padded)),
          .site_stddev = e.site_stddev / e.granularity,
          .num_sites = num_sites,
          .dimension = static_cast<int64_t>(padded)};
}

absl::StatusOr<std::vector<int64_t>> ConditionalRound(std::span<const double> values, double bound,
                                                      aggregation::dp::BitSource& bits) {
  aggregation::dp::UniformSampler uniform(bits);
  std::vector<int64_t> rounded(values.size());
  for (int draw = 0; draw < kMaxRoundingDraws; ++draw) {
    double sq = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double lo = std::floor(values[i]);
      absl::StatusOr<double> u = uniform.NextDouble();
      if (!u.ok()) return u.status();
      const double r = lo + (*u < values[i] - lo ? 1.0 : 0.0);
      rounded[i] = static_cast<int64_t>(r);
      sq += r * r;
    }
    if (std::sqrt(sq) <= bound) return rounded;
  }
  return absl::InternalError(absl::StrCat("no rounding of the update within the L2 bound ", bound,
                                          " in ", kMaxRoundingDraws, " draws"));
}

absl::StatusOr<std::vector<uint64_t>> EncodeDdg(const DdgEncoding& e, std::span<const float> update,
                                                aggregation::dp::BitSource& bits) {
  if (absl::Status s = ValidateDdgEncoding(e); !s.ok()) return s;
  if (update.empty()) return absl::InvalidArgumentError("the update to encode is empty");
  const size_t padded = DdgPaddedDimension(update.size());
  // 1. Clip and pad.
  std::vector<double> x(padded, 0.0);
  double norm2 = 0;
  for (size_t i = 0; i < update.size(); ++i) {
    if (!std::isfinite(update[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("update value ", i, " is ", update[i], "; every value must be finite"));
    }
    x[i] = update[i];
    norm2 += x[i] * x[i];
  }
  const double norm = std::sqrt(norm2);
  const double clip = norm > e.clip_norm ? e.clip_norm / norm : 1.0;
  // 2-3. Rotate, and scale to integer steps (one pass: sign, transform, one factor).
  const std::vector<double> signs = RotationSigns(e.rotation_seed, padded);
  for (size_t i = 0; i < padded; ++i) x[i] *= signs[i];
  Hadamard(x);
  const double factor = clip / std::sqrt(static_cast<double>(padded)) / e.granularity;
  for (double& v : x) v *= factor;
  const double bound = aggregation::dp::RoundedL2Bound(e.clip_norm / e.granularity, e.beta,
                                                       static_cast<int64_t>(padded));
  absl::StatusOr<std::vector<int64_t>> rounded = ConditionalRound(x, bound, bits);
  if (!rounded.ok()) return rounded.status();
  // 4-5. Noise, modulo 2^m, weight.
  absl::StatusOr<aggregation::dp::DiscreteGaussianSampler> noise =
      aggregation::dp::DiscreteGaussianSampler::Create(bits, e.site_stddev / e.granularity);
  if (!noise.ok()) return noise.status();
  const uint64_t mask = ModulusMask(e.modulus_bits);
  std::vector<uint64_t> words(padded + 1);
  for (size_t i = 0; i < padded; ++i) {
    absl::StatusOr<int64_t> n = noise->Next();
    if (!n.ok()) return n.status();
    words[i] = static_cast<uint64_t>((*rounded)[i] + *n) & mask;
  }
  words[padded] = 1;
  return words;
}

absl::StatusOr<std::vector<float>> DecodeDdgMean(const DdgEncoding& e,
                                                 std::span<const uint64_t> sum, size_t dimension) {
  if (absl::Status s = ValidateDdgEncoding(e); !s.ok()) return s;
  const size_t padded = DdgPaddedDimension(dimension);
  if (sum.size() != padded + 1) {
    return absl::InvalidArgumentError(absl::StrCat("a discrete Gaussian sum of ", dimension,
                                                   " values has ", padded + 1, " words, got ",
                                                   sum.size()));
  }
  const uint64_t mask = ModulusMask(e.modulus_bits);
  const uint64_t count = sum.back() & mask;
  if (count == 0) return absl::InvalidArgumentError("the sum's weight word is 0: no site in it");
  std::vector<double> y(padded);
  for (size_t i = 0; i < padded; ++i) {
    const uint64_t w = sum[i] & mask;
    // Centered: two's complement at the modulus's width.
    const int64_t c = e.modulus_bits == 64
                          ? static_cast<int64_t>(w)
                          : static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(w)));
    y[i] = static_cast<double>(c);
  }
  Hadamard(y);
  const std::vector<double> signs = RotationSigns(e.rotation_seed, padded);
  const double factor =
      e.granularity / std::sqrt(static_cast<double>(padded)) / static_cast<double>(count);
  std::vector<float> mean(dimension);
  for (size_t i = 0; i < dimension; ++i) mean[i] = static_cast<float>(y[i] * signs[i] * factor);
  return mean;
}

absl::StatusOr<double> DdgGranularity(double clip_norm, double site_stddev, int64_t num_sites,
                                      size_t dimension, int modulus_bits, double k_stddevs) {
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(clip_norm) || !positive(site_stddev) || num_sites < 1 || dimension < 1 ||
      !positive(k_stddevs) || (modulus_bits != 32 && modulus_bits != 64)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "granularity needs positive clip norm, stddev, sites, dimension and k, and a modulus of "
        "32 or 64 bits; got C ",
        clip_norm, ", sigma ", site_stddev, ", n ", num_sites, ", d ", dimension, ", k ", k_stddevs,
        ", m ", modulus_bits));
  }
  const double n = static_cast<double>(num_sites);
  const double d = static_cast<double>(DdgPaddedDimension(dimension));
  const double room = std::ldexp(1.0, 2 * modulus_bits) / (4 * k_stddevs * k_stddevs) - n / 4;
  if (!(room > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("a ", modulus_bits, "-bit modulus cannot hold ",
                                                   num_sites, " sites at ", k_stddevs,
                                                   " standard deviations"));
  }
  const double heuristic =
      std::sqrt((clip_norm * clip_norm * n * n / d + site_stddev * site_stddev * n) / room);
  // No finer than ValidateDdgEncoding allows: with a 64-bit modulus the heuristic would ask for
  // more integer steps than a double rounds exactly or the sampler takes.
  // (1 + 1e-9): the quotients ValidateDdgEncoding takes back must not round over the limits.
  return std::max({heuristic, clip_norm / kMaxStepsPerClip * (1 + 1e-9),
                   site_stddev / kMaxNoiseSteps * (1 + 1e-9)});
}

}  // namespace fl::secagg
