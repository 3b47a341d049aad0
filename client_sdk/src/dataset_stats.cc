// Per-feature statistics, standardization and the feature schema's hash (fl/client/dataset.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/client/dataset.h"
#include "fl/common/crypto.h"

namespace fl::client {

std::string FeatureSchemaSha256(const std::vector<std::string>& feature_names) {
  return NameListSha256(feature_names);
}

absl::Status FeatureSums::Add(const FeatureSums& other) {
  if (other.sum.size() != other.sum_sq.size() || sum.size() != sum_sq.size()) {
    return absl::InvalidArgumentError("FeatureSums: sum and sum_sq differ in length");
  }
  if (other.count == 0 && other.sum.empty()) return absl::OkStatus();
  if (count == 0 && sum.empty()) {
    *this = other;
    return absl::OkStatus();
  }
  if (other.sum.size() != sum.size()) {
    return absl::InvalidArgumentError(absl::StrCat("FeatureSums: cannot add sums of ",
                                                   other.sum.size(), " features to sums of ",
                                                   sum.size(), " features"));
  }
  count += other.count;
  for (size_t j = 0; j < sum.size(); ++j) {
    sum[j] += other.sum[j];
    sum_sq[j] += other.sum_sq[j];
  }
  return absl::OkStatus();
}

FeatureSums ComputeFeatureSums(const Dataset& data) {
  FeatureSums sums;
  const size_t f = static_cast<size_t>(data.num_features);
  sums.count = data.num_examples();
  sums.sum.assign(f, 0.0);
  sums.sum_sq.assign(f, 0.0);
  for (int64_t i = 0; i < data.num_examples(); ++i) {
    const float* row = data.row(i);
    for (size_t j = 0; j < f; ++j) {
      const double x = row[j];
      sums.sum[j] += x;
      sums.sum_sq[j] += x * x;
    }
  }
  return sums;
}

absl::StatusOr<ColumnStats> StatsFromSums(const FeatureSums& sums) {
  if (sums.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature statistics need at least one row, got ", sums.count));
  }
  if (sums.sum.size() != sums.sum_sq.size()) {
    return absl::InvalidArgumentError("FeatureSums: sum and sum_sq differ in length");
  }
  const double n = static_cast<double>(sums.count);
  ColumnStats stats;
  stats.mean.resize(sums.sum.size());
  stats.stddev.resize(sums.sum.size());
  for (size_t j = 0; j < sums.sum.size(); ++j) {
    const double mean = sums.sum[j] / n;
    // Cancellation can leave a constant column's variance slightly below 0.
    const double variance = std::max(0.0, sums.sum_sq[j] / n - mean * mean);
    stats.mean[j] = mean;
    stats.stddev[j] = std::sqrt(variance);
  }
  return stats;
}

absl::StatusOr<ColumnStats> DescribeColumns(const Dataset& data) {
  return StatsFromSums(ComputeFeatureSums(data));
}

std::vector<std::string> UnscaledFeatures(const Dataset& data, const ColumnStats& stats,
                                          double threshold) {
  std::vector<std::string> out;
  const size_t n = std::min(stats.mean.size(), stats.stddev.size());
  for (size_t j = 0; j < n; ++j) {
    if (!(std::abs(stats.mean[j]) > threshold || stats.stddev[j] > threshold)) continue;
    out.push_back(j < data.feature_names.size() ? data.feature_names[j]
                                                : absl::StrCat("feature ", j));
  }
  return out;
}

absl::Status Standardize(Dataset& data, const std::vector<double>& mean,
                         const std::vector<double>& stddev) {
  const size_t f = static_cast<size_t>(data.num_features);
  if (mean.size() != f || stddev.size() != f) {
    return absl::InvalidArgumentError(absl::StrCat("Standardize: the dataset has ", f,
                                                   " features but mean has ", mean.size(),
                                                   " entries and stddev ", stddev.size()));
  }
  for (size_t j = 0; j < f; ++j) {
    if (!std::isfinite(mean[j]) || !std::isfinite(stddev[j]) || stddev[j] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Standardize: feature ", j, ": mean ", mean[j],
                                                     " and stddev ", stddev[j],
                                                     " must be finite, stddev >= 0"));
    }
  }
  std::vector<double> scale(f);
  for (size_t j = 0; j < f; ++j) {
    scale[j] = stddev[j] > 0 && std::isfinite(1.0 / stddev[j]) ? 1.0 / stddev[j] : 1.0;
  }
  for (int64_t i = 0; i < data.num_examples(); ++i) {
    float* row = data.features.data() + i * data.num_features;
    for (size_t j = 0; j < f; ++j) {
      row[j] = static_cast<float>((row[j] - mean[j]) * scale[j]);
    }
  }
  return absl::OkStatus();
}

}  // namespace fl::client
