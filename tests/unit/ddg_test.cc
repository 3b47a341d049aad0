// The distributed discrete Gaussian: the sampler's distribution, the accountant against the
// reference implementation of Kairouz, Liu and Steinke 2021 (google-research/federated,
// distributed_dp/accounting_utils.py, run with Opacus-style conversion on orders 2..128 and 256),
// and the encoding's round trip through a modular sum.
#include <cmath>
#include <memory>
#include <numbers>
#include <random>
#include <vector>

#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/dp/discrete_gaussian.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/secagg/ddg_encoding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::aggregation::dp {
namespace {

using ::testing::HasSubstr;

// P[X = x] of N_Z(0, sigma^2), normalized over |x| <= 60 sigma + 10.
std::vector<double> ExactPmf(double sigma, int64_t half) {
  std::vector<double> p(2 * half + 1);
  double total = 0;
  for (int64_t x = -half; x <= half; ++x) {
    p[x + half] = std::exp(-static_cast<double>(x * x) / (2 * sigma * sigma));
    total += p[x + half];
  }
  for (double& v : p) v /= total;
  return p;
}

TEST(DiscreteGaussianTest, FrequenciesMatchTheExactMassFunction) {
  for (double sigma : {0.5, 2.0, 7.3}) {
    std::unique_ptr<BitSource> bits = MakeSeededBitSource(11);
    absl::StatusOr<DiscreteGaussianSampler> sampler = DiscreteGaussianSampler::Create(*bits, sigma);
    ASSERT_TRUE(sampler.ok());
    const int64_t half = static_cast<int64_t>(std::ceil(12 * sigma)) + 2;
    const std::vector<double> pmf = ExactPmf(sigma, half);
    constexpr int kDraws = 200'000;
    std::vector<int> counts(pmf.size(), 0);
    double sum = 0;
    double sum_sq = 0;
    for (int i = 0; i < kDraws; ++i) {
      absl::StatusOr<int64_t> x = sampler->Next();
      ASSERT_TRUE(x.ok());
      ASSERT_LE(std::abs(*x), half) << "sigma " << sigma;
      ++counts[*x + half];
      sum += static_cast<double>(*x);
      sum_sq += static_cast<double>(*x * *x);
    }
    double variance = 0;
    for (int64_t x = -half; x <= half; ++x) variance += pmf[x + half] * x * x;
    // Each cell within 5 standard errors of its expected count.
    for (size_t c = 0; c < pmf.size(); ++c) {
      const double expected = pmf[c] * kDraws;
      if (expected < 20) continue;
      EXPECT_NEAR(counts[c], expected, 5 * std::sqrt(expected))
          << "sigma " << sigma << " value " << static_cast<int64_t>(c) - half;
    }
    EXPECT_NEAR(sum / kDraws, 0, 5 * std::sqrt(variance / kDraws)) << sigma;
    EXPECT_NEAR(sum_sq / kDraws, variance, 0.02 * variance) << sigma;
    if (sigma >= 2) EXPECT_NEAR(variance, sigma * sigma, 1e-6 * sigma * sigma);
  }
}

TEST(DiscreteGaussianTest, RefusesASigmaThatIsNotPositiveAndFinite) {
  std::unique_ptr<BitSource> bits = MakeSeededBitSource(1);
  for (double sigma : {0.0, -1.0, 1e-200, std::nan(""), static_cast<double>(INFINITY)}) {
    absl::StatusOr<DiscreteGaussianSampler> s = DiscreteGaussianSampler::Create(*bits, sigma);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << sigma;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("sigma")) << sigma;
  }
}

TEST(DdgAccountantTest, NormBoundsAndTauMatchTheReference) {
  EXPECT_NEAR(RoundedL2Bound(100.0, std::exp(-0.5), 1024), 101.84301645179212, 1e-9);
  EXPECT_NEAR(RoundedL2Bound(100.0, 0.0, 1024), 132.0, 1e-12);
  EXPECT_NEAR(RoundedL1Bound(117.0, 1024), 3744.0, 1e-9);
  EXPECT_NEAR(RoundedL1Bound(20.0, 1024), 400.0, 1e-12);
  EXPECT_NEAR(DdgTau(1.0, 100), 0.000547788699060149, 1e-15);
  EXPECT_NEAR(DdgTau(0.5, 100), 9.701158454121376, 1e-12);
  EXPECT_EQ(DdgTau(3.0, 1), 0.0);
}

TEST(DdgAccountantTest, Proposition14MatchesTheReference) {
  // (l1 scale, l2 scale, tau, d) -> RDP at orders 2, 8, 32; a release whose total stddev
  // sqrt(n) sigma is 1 makes the scales the sensitivities.
  struct Row {
    double l1, l2, tau;
    int64_t d;
    double rdp[3];
  };
  const Row rows[] = {
      {3.0, 0.5, 0.0, 1024, {0.25, 1.0, 4.0}},
      {30.0, 0.8, 1e-3, 4096, {0.7040960000000002, 2.8163840000000007, 11.265536000000003}},
      {5.0, 0.3, 0.05, 64, {0.48999999999999994, 1.9599999999999997, 4.640000000000001}}};
  for (const Row& r : rows) {
    const DdgRelease release{.l2_sensitivity = r.l2,
                             .l1_sensitivity = r.l1,
                             .site_stddev = 1.0,
                             .num_sites = 1,
                             .dimension = r.d};
    const double orders[] = {2, 8, 32};
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(DdgRdp(release, r.tau, orders[i]), r.rdp[i], 1e-12) << r.l2 << " " << orders[i];
    }
  }
}

// Orders 2..128 and 256, as the reference.
std::vector<double> ReferenceOrders() {
  std::vector<double> orders;
  for (int a = 2; a <= 128; ++a) orders.push_back(a);
  orders.push_back(256);
  return orders;
}

TEST(DdgAccountantTest, EpsilonOfWholeRunsMatchesTheReference) {
  struct Run {
    double gamma, sigma;
    int64_t n;
    double clip;
    size_t d;
    int64_t steps;
    double epsilon;
  };
  const Run runs[] = {{1e-3, 0.1, 100, 1.0, 1 << 16, 50, 61.002231103850335},
                      {5e-3, 0.05, 400, 1.0, 1 << 10, 10, 19.978691480042894},
                      {0.02, 0.03, 1000, 0.5, 1 << 12, 5, 10.488359371448132},
                      {0.3, 0.3, 50, 1.0, 1 << 8, 20, 44.972946480742955}};
  const std::vector<double> orders = ReferenceOrders();
  for (const Run& r : runs) {
    const secagg::DdgEncoding encoding{
        .clip_norm = r.clip, .granularity = r.gamma, .site_stddev = r.sigma};
    const DdgRelease release = secagg::DdgReleaseOf(encoding, r.d, r.n);
    absl::StatusOr<std::vector<double>> rdp = ComputeDdgRdp(release, 1.0, r.steps, orders);
    ASSERT_TRUE(rdp.ok()) << rdp.status();
    absl::StatusOr<PrivacySpent> spent = RdpToEpsilon(orders, *rdp, 1e-5);
    ASSERT_TRUE(spent.ok());
    EXPECT_NEAR(spent->epsilon, r.epsilon, 1e-9 * r.epsilon) << "gamma " << r.gamma;
  }
}

TEST(DdgAccountantTest, WithNegligibleTauAFixedSizeDrawIsTheGaussians) {
  // sigma of 50 steps: tau is below 1e-300, and the release is the Gaussian mechanism with
  // z = sqrt(n) sigma / D2, under the same bound for the fixed-size draw.
  const DdgRelease release{.l2_sensitivity = 400.0,
                           .l1_sensitivity = 400.0 * 32,
                           .site_stddev = 50.0,
                           .num_sites = 64,
                           .dimension = 1024};
  const double z = std::sqrt(64.0) * 50.0 / 400.0;
  const std::vector<double> orders = DefaultRdpOrders();
  absl::StatusOr<std::vector<double>> ddg = ComputeDdgRdp(release, 0.1, 30, orders);
  absl::StatusOr<std::vector<double>> gauss = ComputeRdp(0.1, z, 30, orders, Sampling::kFixedSize);
  ASSERT_TRUE(ddg.ok() && gauss.ok());
  for (size_t i = 0; i < orders.size(); ++i) {
    EXPECT_NEAR((*ddg)[i], (*gauss)[i], 1e-12 * (*gauss)[i] + 1e-300) << orders[i];
  }
}

TEST(DdgAccountantTest, RefusesBadReleasesAndRates) {
  const DdgRelease good{
      .l2_sensitivity = 1, .l1_sensitivity = 1, .site_stddev = 1, .num_sites = 2, .dimension = 4};
  const double orders[] = {2.0};
  EXPECT_FALSE(ComputeDdgRdp(good, 0.0, 1, orders).ok());
  EXPECT_FALSE(ComputeDdgRdp(good, 1.0, -1, orders).ok());
  DdgRelease bad = good;
  bad.site_stddev = 0;
  absl::StatusOr<std::vector<double>> r = ComputeDdgRdp(bad, 1.0, 1, orders);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("sigma 0"));
  const double bad_order[] = {1.0};
  EXPECT_FALSE(ComputeDdgRdp(good, 1.0, 1, bad_order).ok());
}

}  // namespace
}  // namespace fl::aggregation::dp

namespace fl::secagg {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomUpdate(size_t d, double norm, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> v(d);
  double sq = 0;
  for (float& x : v) {
    x = g(rng);
    sq += x * x;
  }
  for (float& x : v) x = static_cast<float>(x * norm / std::sqrt(sq));
  return v;
}

// The modular sum of the sites' encodings: what secure aggregation reveals.
std::vector<uint64_t> ModularSum(const std::vector<std::vector<uint64_t>>& encodings, int bits) {
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  std::vector<uint64_t> sum(encodings[0].size(), 0);
  for (const auto& e : encodings) {
    for (size_t i = 0; i < e.size(); ++i) sum[i] = (sum[i] + e[i]) & mask;
  }
  return sum;
}

// `sites` updates of L2 norm `norm` (below the clip norm), each encoded, summed modulo 2^m as
// secure aggregation would and decoded: the decoded mean minus the true mean, per coordinate
// (empty when a step failed, which is reported).
std::vector<double> RoundTripErrors(const DdgEncoding& e, size_t dim, int sites, double norm,
                                    uint32_t seed) {
  std::vector<std::vector<uint64_t>> encodings;
  std::vector<double> mean(dim, 0.0);
  for (int s = 0; s < sites; ++s) {
    const std::vector<float> u = RandomUpdate(dim, norm, seed + s);
    for (size_t i = 0; i < dim; ++i) mean[i] += u[i] / sites;
    std::unique_ptr<aggregation::dp::BitSource> bits = aggregation::dp::MakeSeededBitSource(s);
    absl::StatusOr<std::vector<uint64_t>> words = EncodeDdg(e, u, *bits);
    EXPECT_TRUE(words.ok()) << words.status();
    if (!words.ok()) return {};
    EXPECT_EQ(words->size(), DdgPaddedDimension(dim) + 1);
    EXPECT_EQ(words->back(), 1u);  // the weight word
    encodings.push_back(*std::move(words));
  }
  absl::StatusOr<std::vector<float>> decoded =
      DecodeDdgMean(e, ModularSum(encodings, e.modulus_bits), dim);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  if (!decoded.ok() || decoded->size() != dim) return {};
  std::vector<double> errors(dim);
  for (size_t i = 0; i < dim; ++i) errors[i] = (*decoded)[i] - mean[i];
  return errors;
}

TEST(DdgEncodingTest, TheModularSumDecodesToTheMeanWithTheNoiseOfTheSitesTogether) {
  constexpr size_t kDim = 1000;  // padded to 1024
  constexpr int kSites = 20;
  const double sigma = 0.02;
  absl::StatusOr<double> gamma = DdgGranularity(1.0, sigma, kSites, kDim, 32);
  ASSERT_TRUE(gamma.ok()) << gamma.status();
  const DdgEncoding e{
      .clip_norm = 1.0, .granularity = *gamma, .site_stddev = sigma, .rotation_seed = 77};
  const std::vector<double> errors = RoundTripErrors(e, kDim, kSites, 0.9, 100);
  ASSERT_EQ(errors.size(), kDim);
  double err_sum = 0;
  double err_sq = 0;
  for (double err : errors) {
    err_sum += err;
    err_sq += err * err;
  }
  // Per coordinate: noise sigma^2 n and rounding at most gamma^2 / 4 per site, over n^2.
  const double low = sigma * sigma / kSites;
  const double high = (sigma * sigma + *gamma * *gamma / 4) / kSites;
  EXPECT_NEAR(err_sum / kDim, 0, 5 * std::sqrt(high / kDim));
  EXPECT_GT(err_sq / kDim, 0.85 * low);
  EXPECT_LT(err_sq / kDim, 1.15 * high);
}

// A 64-bit modulus: the heuristic would ask for steps finer than the encoding takes, so the
// granularity is raised to the finest it does take, and the round trip still gives the mean.
TEST(DdgEncodingTest, A64BitModulusUsesTheFinestGranularityTheEncodingTakes) {
  constexpr size_t kDim = 200;
  constexpr int kSites = 5;
  const double sigma = 0.05;
  absl::StatusOr<double> gamma = DdgGranularity(1.0, sigma, kSites, kDim, 64);
  ASSERT_TRUE(gamma.ok()) << gamma.status();
  const DdgEncoding e{.clip_norm = 1.0,
                      .granularity = *gamma,
                      .site_stddev = sigma,
                      .rotation_seed = 3,
                      .modulus_bits = 64};
  ASSERT_TRUE(ValidateDdgEncoding(e).ok()) << ValidateDdgEncoding(e);
  EXPECT_NEAR(1.0 / *gamma, std::ldexp(1.0, 50), std::ldexp(1.0, 50) * 1e-6);  // at the cap
  const std::vector<double> errors = RoundTripErrors(e, kDim, kSites, 0.5, 40);
  ASSERT_EQ(errors.size(), kDim);
  double err_sq = 0;
  for (double err : errors) err_sq += err * err;
  EXPECT_NEAR(std::sqrt(err_sq / kDim), sigma / std::sqrt(kSites), 0.005);
}

TEST(DdgEncodingTest, ALongUpdateIsClippedToTheNorm) {
  constexpr size_t kDim = 300;  // padded to 512
  // Half a step of noise, the least allowed: 0.005 per coordinate after decoding.
  const DdgEncoding e{
      .clip_norm = 2.0, .granularity = 0.01, .site_stddev = 0.005, .rotation_seed = 5};
  const std::vector<float> u = RandomUpdate(kDim, 50.0, 9);
  std::unique_ptr<aggregation::dp::BitSource> bits = aggregation::dp::MakeSeededBitSource(3);
  absl::StatusOr<std::vector<uint64_t>> words = EncodeDdg(e, u, *bits);
  ASSERT_TRUE(words.ok()) << words.status();
  absl::StatusOr<std::vector<float>> decoded = DecodeDdgMean(e, *words, kDim);
  ASSERT_TRUE(decoded.ok());
  // The clipped update: norm 2 in the update's direction, to within rounding and noise.
  for (size_t i = 0; i < kDim; ++i) EXPECT_NEAR((*decoded)[i], u[i] * 2.0 / 50.0, 0.03) << i;
}

TEST(DdgEncodingTest, ConditionalRoundingIsUnbiasedAndKeepsItsBound) {
  // 256 values at half-integers: an unconditioned rounding's squared norm varies by about
  // 8 around its mean, so a bound at the mean redraws about half the time.
  std::vector<double> values(256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = (i % 2 == 0 ? 3.5 : -2.5);
  double mean_sq = 0;
  for (double v : values) mean_sq += v * v + 0.25;
  const double bound = std::sqrt(mean_sq);
  std::unique_ptr<aggregation::dp::BitSource> bits = aggregation::dp::MakeSeededBitSource(8);
  std::vector<double> average(values.size(), 0.0);
  constexpr int kDraws = 2000;
  for (int d = 0; d < kDraws; ++d) {
    absl::StatusOr<std::vector<int64_t>> r = ConditionalRound(values, bound, *bits);
    ASSERT_TRUE(r.ok()) << r.status();
    double sq = 0;
    for (size_t i = 0; i < r->size(); ++i) {
      const double x = static_cast<double>((*r)[i]);
      ASSERT_TRUE(x == std::floor(values[i]) || x == std::ceil(values[i]));
      sq += x * x;
      average[i] += x / kDraws;
    }
    ASSERT_LE(std::sqrt(sq), bound);
  }
  // Conditioning on the norm biases each value inwards a little, never by a whole step.
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(average[i], values[i], 0.2) << i;
  // A bound no rounding meets fails after its draws, saying so.
  absl::StatusOr<std::vector<int64_t>> none = ConditionalRound(values, 1.0, *bits);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("1000 draws"));
}

TEST(DdgEncodingTest, RefusesBadInputNamingIt) {
  const DdgEncoding good{.clip_norm = 1.0, .granularity = 0.01, .site_stddev = 0.1};
  std::unique_ptr<aggregation::dp::BitSource> bits = aggregation::dp::MakeSeededBitSource(1);
  std::vector<float> u = {0.1f, NAN, 0.2f};
  absl::StatusOr<std::vector<uint64_t>> w = EncodeDdg(good, u, *bits);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("update value 1"));
  EXPECT_FALSE(EncodeDdg(good, std::vector<float>{}, *bits).ok());
  DdgEncoding bad = good;
  bad.granularity = 0;
  EXPECT_THAT(std::string(ValidateDdgEncoding(bad).message()), HasSubstr("granularity"));
  bad = good;
  bad.beta = 0.95;  // would redraw the rounding almost for ever
  EXPECT_THAT(std::string(ValidateDdgEncoding(bad).message()), HasSubstr("beta"));
  bad = good;
  bad.granularity = 1e-16;  // C / gamma past 2^50: the integers would overflow
  EXPECT_THAT(std::string(ValidateDdgEncoding(bad).message()), HasSubstr("2^50"));
  bad = good;
  bad.site_stddev = 0.001;  // a tenth of a step: outside what tau covers
  EXPECT_THAT(std::string(ValidateDdgEncoding(bad).message()), HasSubstr("[0.5, 1e15]"));
  bad = good;
  bad.modulus_bits = 16;
  EXPECT_THAT(std::string(ValidateDdgEncoding(bad).message()), HasSubstr("modulus"));
  absl::StatusOr<std::vector<float>> d = DecodeDdgMean(good, std::vector<uint64_t>(3, 1), 3);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("has 5 words, got 3"));
  std::vector<uint64_t> empty(5, 1);
  empty.back() = 0;
  EXPECT_THAT(std::string(DecodeDdgMean(good, empty, 3).status().message()),
              HasSubstr("weight word is 0"));
}

TEST(DdgEncodingTest, GranularityFollowsTheHeuristicAndRefusesAModulusTooSmall) {
  absl::StatusOr<double> g = DdgGranularity(1.0, 0.1, 100, 1000, 32, 4);
  ASSERT_TRUE(g.ok());
  const double room = std::ldexp(1.0, 64) / 64 - 25;
  EXPECT_NEAR(*g, std::sqrt((1.0 * 100 * 100 / 1024 + 0.01 * 100) / room), 1e-15);
  // Round trip of the heuristic: 2 k stddevs of the sum in steps of gamma fill 2^32.
  const double spread = 2 * 4 * std::sqrt(100.0 * 100 / 1024 + (*g * *g / 4 + 0.01) * 100) / *g;
  EXPECT_NEAR(spread, std::ldexp(1.0, 32), 1e-3 * std::ldexp(1.0, 32));
  absl::StatusOr<double> no = DdgGranularity(1.0, 0.1, int64_t{1} << 61, 1000, 32, 4);
  EXPECT_EQ(no.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no.status().message()), HasSubstr("cannot hold"));
}

}  // namespace
}  // namespace fl::secagg
