// The distributed discrete Gaussian encoding of an update for secure aggregation (Kairouz, Liu
// and Steinke 2021): what a site masks when each site's noise must sum exactly, in modular
// arithmetic, to noise whose privacy is known (fl/aggregation/dp/ddg_accountant.h). The
// quantization of quantization.h instead adds continuous noise first and rounds after, so the sum
// of the sites' noise is no longer Gaussian.
//
// A site's update x (d floats) becomes padded + 1 words modulo 2^m, padded the next power of two
// from d:
//   1. clip x to L2 norm C; pad with zeros to `padded`;
//   2. rotate: H D x / sqrt(padded), D diagonal random signs from the public rotation seed, H the
//      Walsh-Hadamard matrix (the norm is kept; the coordinates come out flat, so that few wrap
//      the modulus);
//   3. divide by the granularity gamma and round each coordinate down or up at random, without
//      bias; keep the rounding only when its L2 norm is within aggregation::dp::RoundedL2Bound(C /
//      gamma, beta, padded), else draw it again (conditional randomized rounding: the sensitivity
//      the accountant uses is enforced here);
//   4. add N_Z(0, (sigma / gamma)^2) to each coordinate (aggregation::dp::DiscreteGaussianSampler);
//   5. take each modulo 2^m (two's complement) and append the weight word 1.
// The sum of n encodings (what secure aggregation reveals) decodes by centering each word into
// [-2^(m-1), 2^(m-1)), multiplying by gamma, rotating back and dividing by the weight word (n):
// the mean of the clipped updates plus noise of stddev sigma sqrt(n) / n, and the rounding's
// error. A coordinate of the sum beyond 2^(m-1) wraps (the paper's modular clipping): a loss of
// accuracy, never of privacy. DdgGranularity picks gamma so that this is rare.
#ifndef FL_AGGREGATION_SECAGG_DDG_ENCODING_H_
#define FL_AGGREGATION_SECAGG_DDG_ENCODING_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/dp/gaussian_noise.h"

namespace fl::secagg {

struct DdgEncoding {
  double clip_norm = 0;    // C, the L2 norm each update is clipped to (model units)
  double granularity = 0;  // gamma, the model units of one integer step
  double site_stddev = 0;  // sigma each site adds (model units; sigma / gamma integer steps)
  // Conditional rounding's beta in [0, 0.9]: Kairouz et al.'s e^-0.5 (about 2.5 draws at most
  // on average); 0 keeps the first rounding and a looser bound.
  double beta = std::exp(-0.5);
  uint64_t rotation_seed = 0;  // public; decides the rotation's signs
  int modulus_bits = 32;       // 32 or 64
};

// OK, or INVALID_ARGUMENT naming the field and its value: each must be finite and positive,
// beta in [0, 0.9], C / gamma at most 2^50 and sigma / gamma in [0.5, 1e15] (what a server may
// ask of a site without making it loop, overflow or add noise the accountant does not cover).
absl::Status ValidateDdgEncoding(const DdgEncoding& encoding);

// The power of two at least `dimension` (>= 1).
size_t DdgPaddedDimension(size_t dimension);

// What the accountant needs of one round's sum of `num_sites` encodings of `dimension` values:
// sensitivities and stddev in integer steps.
aggregation::dp::DdgRelease DdgReleaseOf(const DdgEncoding& encoding, size_t dimension,
                                         int64_t num_sites);

// Step 3's rounding: each value down or up to an integer at random (up with probability its
// fractional part, so without bias), the whole drawn again until its L2 norm is at most
// `bound`; INTERNAL when no draw of 1,000 is, or when the source fails.
absl::StatusOr<std::vector<int64_t>> ConditionalRound(std::span<const double> values, double bound,
                                                      aggregation::dp::BitSource& bits);

// Steps 1-5 above: padded + 1 words. Rounding and noise draw from `bits` (OpenSSL's CSPRNG in
// production). INVALID_ARGUMENT for an invalid encoding, an empty update or a non-finite value
// (naming its index); INTERNAL when the source fails or no rounding within the bound came in
// 1,000 draws (which, for beta > 0, happens with probability below beta^1000).
absl::StatusOr<std::vector<uint64_t>> EncodeDdg(const DdgEncoding& encoding,
                                                std::span<const float> update,
                                                aggregation::dp::BitSource& bits);

// The mean of the encoded updates from their sum modulo 2^m (padded + 1 words, the last the
// number of sites): `dimension` values. INVALID_ARGUMENT when the sum's size is not
// DdgPaddedDimension(dimension) + 1 or its weight word is 0.
absl::StatusOr<std::vector<float>> DecodeDdgMean(const DdgEncoding& encoding,
                                                 std::span<const uint64_t> sum, size_t dimension);

// The granularity at which the sum of `num_sites` encodings keeps `k_stddevs` standard deviations
// of each coordinate inside the modulus (Kairouz et al.'s Sec. 4.4 heuristic with a flat
// rotation): gamma = sqrt((C^2 n^2 / padded + sigma^2 n) / (4^m / 4k^2 - n / 4)), raised where
// needed to what ValidateDdgEncoding accepts (C / gamma <= 2^50, sigma / gamma <= 1e15), which a
// 64-bit modulus would otherwise exceed.
// INVALID_ARGUMENT when the modulus cannot hold n sites at k stddevs (4^m <= n k^2) or an
// argument is not positive.
absl::StatusOr<double> DdgGranularity(double clip_norm, double site_stddev, int64_t num_sites,
                                      size_t dimension, int modulus_bits, double k_stddevs = 4);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_DDG_ENCODING_H_
