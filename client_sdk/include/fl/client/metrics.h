// Metrics a site reports on its held-out data beyond accuracy.
#ifndef FL_CLIENT_METRICS_H_
#define FL_CLIENT_METRICS_H_

#include <cstdint>
#include <optional>
#include <span>

namespace fl::client {

// Area under the ROC curve of `scores` (higher: more likely positive) against `positive`: the
// probability that a random positive scores above a random negative, ties counting one half
// (the Mann-Whitney statistic). Empty when there are no positives or no negatives, where the
// curve is undefined, or when a score is NaN (a diverged model). O(n log n).
std::optional<double> BinaryAuc(std::span<const float> scores, std::span<const uint8_t> positive);

}  // namespace fl::client

#endif  // FL_CLIENT_METRICS_H_
