#include "fl/simulation/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fl::simulation {
namespace {

// The size model of the authors' code: floor(LogNormal(kSizeMu, kSizeSigma)) + kSizeFloor.
constexpr double kSizeMu = 4;
constexpr double kSizeSigma = 2;
constexpr int64_t kSizeFloor = 50;
constexpr double kCovarianceExponent = -1.2;

// A uniform draw from (0, 1]: the top 53 bits of one output.
double UniformOpenClosed(std::mt19937_64& rng) {
  return static_cast<double>((rng() >> 11) + 1) * 0x1.0p-53;
}

// N(0, 1) by Box-Muller, one value per two uniforms.
double StandardNormal(std::mt19937_64& rng) {
  const double radius = std::sqrt(-2 * std::log(UniformOpenClosed(rng)));
  return radius * std::cos(2 * std::numbers::pi * UniformOpenClosed(rng));
}

std::vector<double> Normals(size_t n, double mean, double stddev, std::mt19937_64& rng) {
  std::vector<double> v(n);
  for (double& x : v) x = mean + stddev * StandardNormal(rng);
  return v;
}

absl::Status CheckSpread(const char* name, double value) {
  if (!(value >= 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be non-negative and finite, not ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<SyntheticDevice>> GenerateSynthetic(const SyntheticOptions& options) {
  if (absl::Status s = CheckSpread("alpha", options.alpha); !s.ok()) return s;
  if (absl::Status s = CheckSpread("beta", options.beta); !s.ok()) return s;
  if (options.num_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_devices must be >= 1, not ", options.num_devices));
  }
  if (options.max_examples_per_device < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_examples_per_device must be >= 1, not ",
                                                   options.max_examples_per_device));
  }
  constexpr auto kF = static_cast<size_t>(kSyntheticNumFeatures);
  constexpr auto kC = static_cast<size_t>(kSyntheticNumClasses);
  const auto num_devices = static_cast<size_t>(options.num_devices);
  std::mt19937_64 rng(options.seed);

  // The draws in the order of the authors' code: sizes, u, B, v, (the shared model), W, b, x.
  std::vector<int64_t> sizes(num_devices);
  for (int64_t& size : sizes) {
    // Capped in double first: exp() of a large draw does not fit an int64.
    const double drawn = std::floor(std::exp(kSizeMu + kSizeSigma * StandardNormal(rng)));
    size = static_cast<int64_t>(
        std::min(drawn + kSizeFloor, static_cast<double>(options.max_examples_per_device)));
  }
  std::vector<SyntheticDevice> devices(num_devices);
  if (!options.iid) {
    for (SyntheticDevice& d : devices) d.u = options.alpha * StandardNormal(rng);
  }
  for (SyntheticDevice& d : devices) d.feature_center = options.beta * StandardNormal(rng);
  for (SyntheticDevice& d : devices) {
    d.v = options.iid ? std::vector<double>(kF, d.feature_center)
                      : Normals(kF, d.feature_center, 1, rng);
  }
  std::vector<double> shared_weights;
  std::vector<double> shared_bias;
  if (options.iid) {
    shared_weights = Normals(kC * kF, 0, 1, rng);
    shared_bias = Normals(kC, 0, 1, rng);
  }
  std::vector<double> stddev(kF);
  for (size_t j = 0; j < kF; ++j) {
    stddev[j] = std::sqrt(std::pow(static_cast<double>(j + 1), kCovarianceExponent));
  }
  for (size_t k = 0; k < num_devices; ++k) {
    SyntheticDevice& d = devices[k];
    d.weights = options.iid ? shared_weights : Normals(kC * kF, d.u, 1, rng);
    d.bias = options.iid ? shared_bias : Normals(kC, d.u, 1, rng);
    const auto n = static_cast<size_t>(sizes[k]);
    d.features.resize(n * kF);
    d.labels.resize(n);
    for (size_t i = 0; i < n; ++i) {
      float* x = &d.features[i * kF];
      for (size_t j = 0; j < kF; ++j) {
        x[j] = static_cast<float>(d.v[j] + stddev[j] * StandardNormal(rng));
      }
      int32_t best = 0;
      double best_logit = 0;
      for (size_t c = 0; c < kC; ++c) {
        double logit = d.bias[c];
        for (size_t j = 0; j < kF; ++j) logit += d.weights[c * kF + j] * x[j];
        if (c == 0 || logit > best_logit) {
          best = static_cast<int32_t>(c);
          best_logit = logit;
        }
      }
      d.labels[i] = best;
    }
  }
  return devices;
}

SyntheticDataset FlattenSynthetic(const std::vector<SyntheticDevice>& devices) {
  SyntheticDataset data;
  data.partition.reserve(devices.size());
  for (const SyntheticDevice& d : devices) {
    std::vector<int64_t>& rows = data.partition.emplace_back(static_cast<size_t>(d.num_examples()));
    std::iota(rows.begin(), rows.end(), static_cast<int64_t>(data.labels.size()));
    data.features.insert(data.features.end(), d.features.begin(), d.features.end());
    data.labels.insert(data.labels.end(), d.labels.begin(), d.labels.end());
  }
  return data;
}

}  // namespace fl::simulation
