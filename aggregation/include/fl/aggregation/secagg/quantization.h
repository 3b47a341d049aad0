// Quantization of updates for secure aggregation: clipping to [-c, c], stochastic rounding to
// integers in [0, 2^b), weighting, and the inverse map of a sum of clients' encodings back to a
// weighted mean.
//
// A value x maps to (clip(x) + c) / step with step = 2c / (2^b - 1), rounded down or up at random
// with the probability that makes the rounding unbiased (E[q] * step - c = clip(x)). Every
// quantized value is within one step of its exact position, so a weighted mean of quantized
// values dequantizes to within `QuantizationErrorBound` of the weighted mean of the clipped
// inputs, for any number of clients and any weights. Thread-safe.
#ifndef FL_AGGREGATION_SECAGG_QUANTIZATION_H_
#define FL_AGGREGATION_SECAGG_QUANTIZATION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"

namespace fl::secagg {

// 2c / (2^b - 1).
double QuantizationStep(double clip_range, int bits);

// The largest possible |dequantized weighted mean - weighted mean of the clipped inputs|, per
// coordinate: one step (stochastic rounding moves each value by less than one step) plus the
// rounding of the float result (c * 2^-23).
double QuantizationErrorBound(double clip_range, int bits);

// Clips and quantizes `values` to integers in [0, 2^bits) with stochastic rounding; the rounding
// draws 32 random bits per value from `rng`. NaN is refused (INVALID_ARGUMENT naming its index);
// +-inf clip to +-c.
absl::StatusOr<std::vector<uint64_t>> Quantize(std::span<const float> values, double clip_range,
                                               int bits, RandomSource& rng);

// The encoding a client masks: Quantize(update) * weight, followed by the weight, all modulo
// 2^modulus_bits (update.size() + 1 words). INVALID_ARGUMENT when the parameters are invalid
// (ValidateSecAggParams), weight is 0 or exceeds params.max_weight, or a value is NaN.
absl::StatusOr<std::vector<uint64_t>> EncodeWeightedUpdate(const SecAggParams& params,
                                                           std::span<const float> update,
                                                           uint32_t weight, RandomSource& rng);

// The weighted mean from a sum of encodings: sum[i] / total_weight * step - c for every word but
// the last (the last word of `encoded_sum` is the total weight). INVALID_ARGUMENT when the sum
// is empty or its total weight is 0.
absl::StatusOr<std::vector<float>> DecodeWeightedMean(const SecAggParams& params,
                                                      std::span<const uint64_t> encoded_sum);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_QUANTIZATION_H_
