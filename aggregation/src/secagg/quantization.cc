#include "fl/aggregation/secagg/quantization.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace fl::secagg {

double QuantizationStep(double clip_range, int bits) {
  return 2.0 * clip_range / static_cast<double>((uint64_t{1} << bits) - 1);
}

double QuantizationErrorBound(double clip_range, int bits) {
  // One step of rounding, plus the float the mean is returned in (|mean| <= c).
  return QuantizationStep(clip_range, bits) + clip_range * 0x1p-23;
}

absl::StatusOr<std::vector<uint64_t>> Quantize(std::span<const float> values, double clip_range,
                                               int bits, RandomSource& rng) {
  if (bits < 1 || bits > 62 || !(clip_range > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantization needs bits in [1, 62] and clip_range > 0, got ", bits, ", ", clip_range));
  }
  std::vector<uint32_t> draws(values.size());
  if (absl::Status s = rng.Fill(
          std::span(reinterpret_cast<uint8_t*>(draws.data()), draws.size() * sizeof(uint32_t)));
      !s.ok()) {
    return s;
  }
  const double top = static_cast<double>((uint64_t{1} << bits) - 1);
  const double scale = top / (2.0 * clip_range);
  std::vector<uint64_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = values[i];
    if (std::isnan(x)) {
      return absl::InvalidArgumentError(absl::StrCat("value ", i, " of the update is NaN"));
    }
    const double pos =
        std::clamp((std::clamp(x, -clip_range, clip_range) + clip_range) * scale, 0.0, top);
    const double floor = std::floor(pos);
    const double frac = pos - floor;
    const double u = static_cast<double>(draws[i]) * 0x1p-32;  // uniform in [0, 1)
    uint64_t q = static_cast<uint64_t>(floor) + (u < frac ? 1 : 0);
    out[i] = std::min<uint64_t>(q, static_cast<uint64_t>(top));
  }
  return out;
}

absl::StatusOr<std::vector<uint64_t>> EncodeWeightedUpdate(const SecAggParams& params,
                                                           std::span<const float> update,
                                                           uint32_t weight, RandomSource& rng) {
  // Valid parameters guarantee that q * weight fits in 64 bits and the sum cannot wrap.
  if (absl::Status s = ValidateSecAggParams(params); !s.ok()) return s;
  if (weight == 0 || weight > params.max_weight) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight ", weight, " must be in [1, max_weight = ", params.max_weight, "]"));
  }
  absl::StatusOr<std::vector<uint64_t>> q =
      Quantize(update, params.clip_range, params.quantization_bits, rng);
  if (!q.ok()) return q.status();
  const uint64_t mask =
      params.modulus_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << params.modulus_bits) - 1;
  for (uint64_t& v : *q) v = (v * weight) & mask;
  q->push_back(weight);
  return q;
}

absl::StatusOr<std::vector<float>> DecodeWeightedMean(const SecAggParams& params,
                                                      std::span<const uint64_t> encoded_sum) {
  if (encoded_sum.empty() || encoded_sum.back() == 0) {
    return absl::InvalidArgumentError("the aggregate holds no weight: no client contributed");
  }
  const double total = static_cast<double>(encoded_sum.back());
  const double step = QuantizationStep(params.clip_range, params.quantization_bits);
  std::vector<float> mean(encoded_sum.size() - 1);
  for (size_t i = 0; i < mean.size(); ++i) {
    mean[i] =
        static_cast<float>(static_cast<double>(encoded_sum[i]) / total * step - params.clip_range);
  }
  return mean;
}

}  // namespace fl::secagg
