#include "fl/client/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

namespace fl::client {

std::optional<double> BinaryAuc(std::span<const float> scores, std::span<const uint8_t> positive) {
  const size_t n = std::min(scores.size(), positive.size());
  // A NaN has no rank (and would break the sort's ordering); an infinite score is ranked fine.
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) return std::nullopt;
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' ranks (1-based, tied scores sharing their mean rank).
  double positive_rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (positive[order[k]] != 0) {
        positive_rank_sum += mean_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return std::nullopt;
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace fl::client
