#include "fl/simulation/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

using ::testing::HasSubstr;

constexpr size_t kF = kSyntheticNumFeatures;
constexpr size_t kC = kSyntheticNumClasses;

std::vector<SyntheticDevice> Generate(const SyntheticOptions& options) {
  absl::StatusOr<std::vector<SyntheticDevice>> devices = GenerateSynthetic(options);
  EXPECT_TRUE(devices.ok()) << devices.status();
  return devices.ok() ? *std::move(devices) : std::vector<SyntheticDevice>{};
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double StdDev(const std::vector<double>& v) {
  const double mean = Mean(v);
  double sum = 0;
  for (double x : v) sum += (x - mean) * (x - mean);
  return std::sqrt(sum / static_cast<double>(v.size() - 1));
}

TEST(SyntheticTest, ShapesAndLabelRange) {
  SyntheticOptions options;  // Synthetic(1, 1), 30 devices
  const std::vector<SyntheticDevice> devices = Generate(options);
  ASSERT_EQ(devices.size(), 30u);
  for (const SyntheticDevice& d : devices) {
    EXPECT_GE(d.num_examples(), 50);
    EXPECT_LE(d.num_examples(), options.max_examples_per_device);
    EXPECT_EQ(d.features.size(), static_cast<size_t>(d.num_examples()) * kF);
    EXPECT_EQ(d.v.size(), kF);
    EXPECT_EQ(d.weights.size(), kC * kF);
    EXPECT_EQ(d.bias.size(), kC);
    for (int32_t y : d.labels) {
      ASSERT_GE(y, 0);
      ASSERT_LT(y, 10);
    }
  }
}

TEST(SyntheticTest, LabelIsTheArgmaxOfTheDevicesModel) {
  const std::vector<SyntheticDevice> devices = Generate(SyntheticOptions{});
  for (const SyntheticDevice& d : devices) {
    for (size_t i = 0; i < static_cast<size_t>(d.num_examples()); ++i) {
      std::vector<double> logits(kC);
      for (size_t c = 0; c < kC; ++c) {
        logits[c] = d.bias[c];
        for (size_t j = 0; j < kF; ++j) logits[c] += d.weights[c * kF + j] * d.features[i * kF + j];
      }
      ASSERT_EQ(d.labels[i], std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
  }
}

TEST(SyntheticTest, SeedDecidesTheData) {
  SyntheticOptions options;
  options.num_devices = 5;
  options.seed = 1;
  const std::vector<SyntheticDevice> a = Generate(options);
  const std::vector<SyntheticDevice> b = Generate(options);
  options.seed = 2;
  const std::vector<SyntheticDevice> c = Generate(options);
  ASSERT_EQ(a.size(), 5u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].features, b[k].features);
    EXPECT_EQ(a[k].labels, b[k].labels);
    EXPECT_EQ(a[k].weights, b[k].weights);
  }
  EXPECT_NE(a[0].features, c[0].features);
  EXPECT_NE(a[0].weights, c[0].weights);
}

TEST(SyntheticTest, SizesFollowACappedPowerLaw) {
  SyntheticOptions options;
  options.num_devices = 1000;
  options.max_examples_per_device = 60;
  const std::vector<SyntheticDevice> capped = Generate(options);
  int64_t at_cap = 0;
  for (const SyntheticDevice& d : capped) {
    ASSERT_GE(d.num_examples(), 50);
    ASSERT_LE(d.num_examples(), 60);
    at_cap += d.num_examples() == 60 ? 1 : 0;
  }
  // P(floor(LogNormal(4, 2)) >= 10) = P(Z >= (log 10 - 4) / 2) = P(Z >= -0.85) = 0.80.
  EXPECT_NEAR(static_cast<double>(at_cap) / 1000, 0.80, 0.05);

  options.num_devices = 200;
  options.max_examples_per_device = 1'000'000;
  const std::vector<SyntheticDevice> uncapped = Generate(options);
  std::vector<double> sizes;
  for (const SyntheticDevice& d : uncapped) {
    ASSERT_GE(d.num_examples(), 50);
    sizes.push_back(static_cast<double>(d.num_examples()));
  }
  std::sort(sizes.begin(), sizes.end());
  // Heavy-tailed: the median is about 50 + e^4 = 105, the largest of 200 in the thousands.
  EXPECT_NEAR(sizes[sizes.size() / 2], 105, 40);
  EXPECT_GT(sizes.back(), 20 * sizes[sizes.size() / 2]);
}

TEST(SyntheticTest, AlphaAndBetaZeroGiveCenteredModelsAndFeatures) {
  SyntheticOptions options;
  options.alpha = 0;
  options.beta = 0;
  options.num_devices = 30;
  options.max_examples_per_device = 50;
  const std::vector<SyntheticDevice> devices = Generate(options);
  std::vector<double> weights;
  std::vector<double> v;
  for (const SyntheticDevice& d : devices) {
    EXPECT_EQ(d.u, 0);
    EXPECT_EQ(d.feature_center, 0);
    weights.insert(weights.end(), d.weights.begin(), d.weights.end());
    v.insert(v.end(), d.v.begin(), d.v.end());
  }
  // W_k ~ N(0, 1) and v_k ~ N(0, 1) on every device: 18000 and 1800 draws.
  EXPECT_NEAR(Mean(weights), 0, 0.05);
  EXPECT_NEAR(StdDev(weights), 1, 0.05);
  EXPECT_NEAR(Mean(v), 0, 0.1);
  EXPECT_NEAR(StdDev(v), 1, 0.1);
}

TEST(SyntheticTest, AlphaAndBetaSpreadTheDevices) {
  SyntheticOptions options;
  options.alpha = 3;
  options.beta = 2;
  options.num_devices = 300;
  options.max_examples_per_device = 1;
  const std::vector<SyntheticDevice> devices = Generate(options);
  std::vector<double> u, centers, weight_means, v_means;
  for (const SyntheticDevice& d : devices) {
    u.push_back(d.u);
    centers.push_back(d.feature_center);
    weight_means.push_back(Mean(d.weights) - d.u);  // W_k - u_k ~ N(0, 1): mean of 600 near 0
    v_means.push_back(Mean(d.v) - d.feature_center);
  }
  EXPECT_NEAR(StdDev(u), 3, 0.4);
  EXPECT_NEAR(StdDev(centers), 2, 0.3);
  EXPECT_NEAR(Mean(u), 0, 0.5);
  EXPECT_LT(StdDev(weight_means), 0.1);
  EXPECT_LT(StdDev(v_means), 0.25);
}

TEST(SyntheticTest, FeaturesHaveTheDiagonalCovariance) {
  SyntheticOptions options;
  options.num_devices = 20;
  options.max_examples_per_device = 500;
  const std::vector<SyntheticDevice> devices = Generate(options);
  for (size_t j : {size_t{0}, size_t{9}, size_t{59}}) {
    std::vector<double> residuals;  // x_j - v_j ~ N(0, (j+1)^-1.2)
    for (const SyntheticDevice& d : devices) {
      for (size_t i = 0; i < static_cast<size_t>(d.num_examples()); ++i) {
        residuals.push_back(d.features[i * kF + j] - d.v[j]);
      }
    }
    const double expected = std::pow(static_cast<double>(j + 1), -0.6);
    EXPECT_NEAR(StdDev(residuals) / expected, 1, 0.08) << "dimension " << j;
    EXPECT_NEAR(Mean(residuals) / expected, 0, 0.1) << "dimension " << j;
  }
}

TEST(SyntheticTest, IidSharesOneModelAndCentersFeatures) {
  SyntheticOptions options;
  options.iid = true;
  options.num_devices = 4;
  options.max_examples_per_device = 100;
  const std::vector<SyntheticDevice> devices = Generate(options);
  for (const SyntheticDevice& d : devices) {
    EXPECT_EQ(d.u, 0);
    EXPECT_EQ(d.weights, devices[0].weights);
    EXPECT_EQ(d.bias, devices[0].bias);
    EXPECT_EQ(d.v, std::vector<double>(kF, d.feature_center));
  }
}

TEST(SyntheticTest, FlattensDeviceAfterDevice) {
  SyntheticOptions options;
  options.num_devices = 6;
  options.max_examples_per_device = 200;
  const std::vector<SyntheticDevice> devices = Generate(options);
  const SyntheticDataset data = FlattenSynthetic(devices);
  EXPECT_EQ(data.num_features, 60);
  EXPECT_EQ(data.num_classes, 10);
  ASSERT_EQ(data.partition.size(), 6u);
  int64_t row = 0;
  for (size_t k = 0; k < devices.size(); ++k) {
    const SyntheticDevice& d = devices[k];
    ASSERT_EQ(data.partition[k].size(), static_cast<size_t>(d.num_examples()));
    for (size_t i = 0; i < data.partition[k].size(); ++i, ++row) {
      ASSERT_EQ(data.partition[k][i], row);
      ASSERT_EQ(data.labels[static_cast<size_t>(row)], d.labels[i]);
      ASSERT_TRUE(std::equal(d.features.begin() + static_cast<int64_t>(i * kF),
                             d.features.begin() + static_cast<int64_t>((i + 1) * kF),
                             data.features.begin() + row * 60));
    }
  }
  EXPECT_EQ(static_cast<int64_t>(data.labels.size()), row);
  EXPECT_EQ(static_cast<int64_t>(data.features.size()), row * 60);
}

TEST(SyntheticTest, RefusesBadOptions) {
  auto refusal = [](auto set) {
    SyntheticOptions options;
    set(options);
    absl::StatusOr<std::vector<SyntheticDevice>> devices = GenerateSynthetic(options);
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(devices.status().message());
  };
  EXPECT_THAT(refusal([](SyntheticOptions& o) { o.alpha = -1; }),
              HasSubstr("alpha must be non-negative and finite, not -1"));
  EXPECT_THAT(refusal([](SyntheticOptions& o) { o.beta = NAN; }),
              HasSubstr("beta must be non-negative and finite, not nan"));
  EXPECT_THAT(refusal([](SyntheticOptions& o) { o.alpha = INFINITY; }),
              HasSubstr("alpha must be non-negative and finite, not inf"));
  EXPECT_THAT(refusal([](SyntheticOptions& o) { o.num_devices = 0; }),
              HasSubstr("num_devices must be >= 1, not 0"));
  EXPECT_THAT(refusal([](SyntheticOptions& o) { o.max_examples_per_device = 0; }),
              HasSubstr("max_examples_per_device must be >= 1, not 0"));
}

}  // namespace
}  // namespace fl::simulation
