// Differential privacy: clipping, Gaussian noise and the Renyi-DP accountant.
//
// The accountant's reference vectors are those of ../shared/reference/papers.md (from the Opacus
// and TF Privacy test suites), checked with the tolerance those suites use, since papers.md gives
// them rounded to 4-6 digits. Each is also checked within 1e-6 relative against its value to 15
// digits, computed independently by numerical integration of
//   A_alpha = E_{x ~ N(0, z^2)} [((1 - q) + q exp((2x - 1) / (2 z^2)))^alpha]
// with mpmath at 40 digits (mp.quad), rdp = steps * ln(A_alpha) / (alpha - 1).
#include <cmath>
#include <numeric>
#include <vector>

#include "fl/aggregation/dp/central_dp.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/scaffold.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::aggregation::dp {
namespace {

using ::testing::HasSubstr;

void ExpectRelNear(double actual, double expected, double rel, const std::string& what) {
  EXPECT_LE(std::abs(actual - expected), rel * std::abs(expected))
      << what << ": got " << actual << ", expected " << expected;
}

// --- Accountant: reference vectors -------------------------------------------------------------

TEST(RdpAccountantTest, FullBatchClosedForm) {
  // q = 1, sigma = 10, 1 step, order 20: alpha / (2 sigma^2) = 0.1.
  const std::vector<double> orders = {20};
  absl::StatusOr<std::vector<double>> rdp = ComputeRdp(1.0, 10.0, 1, orders);
  ASSERT_TRUE(rdp.ok()) << rdp.status();
  ExpectRelNear((*rdp)[0], 0.1, 1e-12, "q=1 sigma=10 order 20");
}

TEST(RdpAccountantTest, SampledGaussianIntegerOrder) {
  const std::vector<double> orders = {5};
  absl::StatusOr<std::vector<double>> rdp = ComputeRdp(0.1, 2.0, 10, orders);
  ASSERT_TRUE(rdp.ok()) << rdp.status();
  EXPECT_NEAR((*rdp)[0], 0.07737, 5e-6);  // papers.md, 5 decimal places (TF Privacy: places=5)
  ExpectRelNear((*rdp)[0], 0.0773696848979587, 1e-6, "q=0.1 sigma=2 10 steps order 5");
}

TEST(RdpAccountantTest, SampledGaussianFractionalAndLargeOrders) {
  const std::vector<double> orders = {1.5, 2.5, 5, 50, 100};
  absl::StatusOr<std::vector<double>> rdp = ComputeRdp(0.01, 2.5, 50, orders);
  ASSERT_TRUE(rdp.ok()) << rdp.status();
  const std::vector<double> papers = {0.00065, 0.001085, 0.00218075, 0.023846, 167.416307};
  const std::vector<double> precise = {0.00065007089718804, 0.00108541805691812,
                                       0.00218075656230788, 0.0238460375387062, 167.416307548418};
  for (size_t i = 0; i < orders.size(); ++i) {
    EXPECT_NEAR((*rdp)[i], papers[i], 1e-5) << "order " << orders[i];
    ExpectRelNear((*rdp)[i], precise[i], 1e-6, "order " + std::to_string(orders[i]));
  }
}

TEST(RdpAccountantTest, FractionalOrdersOfTheDefaultListMatchNumericalIntegration) {
  const std::vector<double> orders = {1.1, 3.7, 10.9};
  absl::StatusOr<std::vector<double>> rdp = ComputeRdp(0.05, 1.1, 1, orders);
  ASSERT_TRUE(rdp.ok()) << rdp.status();
  const std::vector<double> precise = {0.00165277362293632, 0.00691953876682479, 1.21185289995907};
  for (size_t i = 0; i < orders.size(); ++i) {
    ExpectRelNear((*rdp)[i], precise[i], 1e-6, "order " + std::to_string(orders[i]));
  }
}

TEST(RdpAccountantTest, BalleConversionOfConstantRdp) {
  std::vector<double> orders;
  for (int a = 2; a <= 32; ++a) orders.push_back(a);
  const std::vector<double> rdp(orders.size(), 1.1);
  absl::StatusOr<PrivacySpent> spent = RdpToEpsilon(orders, rdp, 1e-5);
  ASSERT_TRUE(spent.ok()) << spent.status();
  ExpectRelNear(spent->epsilon, 1.32783806176, 1e-6, "constant RDP 1.1, delta 1e-5");
  // The minimum is at an order of the list: check it is the one that gives that epsilon.
  const double a = spent->best_order;
  EXPECT_NEAR(1.1 - (std::log(1e-5) + std::log(a)) / (a - 1) + std::log((a - 1) / a),
              spent->epsilon, 1e-12);
}

TEST(RdpAccountantTest, DefaultOrdersAreOpacus) {
  const std::vector<double> orders = DefaultRdpOrders();
  ASSERT_EQ(orders.size(), 99u + 52u);
  EXPECT_DOUBLE_EQ(orders.front(), 1.1);
  EXPECT_DOUBLE_EQ(orders[98], 10.9);
  EXPECT_DOUBLE_EQ(orders[99], 12);
  EXPECT_DOUBLE_EQ(orders.back(), 63);
}

// --- Accountant: behaviour ----------------------------------------------------------------------

TEST(RdpAccountantTest, MoreStepsSpendMoreEpsilon) {
  double previous = 0;
  for (int64_t steps : {1, 10, 100, 1000}) {
    absl::StatusOr<PrivacySpent> spent = ComputeEpsilon(0.1, 1.0, steps, 1e-5);
    ASSERT_TRUE(spent.ok()) << spent.status();
    EXPECT_GT(spent->epsilon, previous) << steps << " steps";
    previous = spent->epsilon;
  }
}

TEST(RdpAccountantTest, MoreNoiseSpendsLessEpsilon) {
  double previous = std::numeric_limits<double>::infinity();
  for (double z : {0.5, 0.8, 1.0, 2.0, 5.0}) {
    absl::StatusOr<PrivacySpent> spent = ComputeEpsilon(0.01, z, 1000, 1e-5);
    ASSERT_TRUE(spent.ok()) << spent.status();
    EXPECT_LT(spent->epsilon, previous) << "z=" << z;
    previous = spent->epsilon;
  }
}

TEST(RdpAccountantTest, SamplingAmplifiesPrivacy) {
  absl::StatusOr<PrivacySpent> all = ComputeEpsilon(1.0, 1.0, 10, 1e-5);
  absl::StatusOr<PrivacySpent> sampled = ComputeEpsilon(0.1, 1.0, 10, 1e-5);
  ASSERT_TRUE(all.ok() && sampled.ok());
  EXPECT_LT(sampled->epsilon, all->epsilon);
}

TEST(RdpAccountantTest, AccountantComposesRoundsLikeOneCall) {
  absl::StatusOr<RdpAccountant> acc = RdpAccountant::Create();
  ASSERT_TRUE(acc.ok()) << acc.status();
  absl::StatusOr<PrivacySpent> none = acc->Spent(1e-5);
  ASSERT_TRUE(none.ok());
  EXPECT_GT(none->epsilon, 0);  // even without steps, the conversion has delta's floor
  absl::StatusOr<PrivacySpent> predicted = acc->SpentAfter(0.2, 1.3, 30, 1e-5);
  ASSERT_TRUE(predicted.ok());
  for (int round = 0; round < 30; ++round) ASSERT_TRUE(acc->AddSteps(0.2, 1.3).ok());
  EXPECT_EQ(acc->total_steps(), 30);
  absl::StatusOr<PrivacySpent> spent = acc->Spent(1e-5);
  absl::StatusOr<PrivacySpent> direct = ComputeEpsilon(0.2, 1.3, 30, 1e-5);
  ASSERT_TRUE(spent.ok() && direct.ok());
  ExpectRelNear(spent->epsilon, direct->epsilon, 1e-12, "30 rounds vs one call");
  ExpectRelNear(predicted->epsilon, direct->epsilon, 1e-12, "SpentAfter vs one call");
  // A refused step records nothing.
  EXPECT_FALSE(acc->AddSteps(0.2, -1).ok());
  EXPECT_EQ(acc->total_steps(), 30);
}

TEST(RdpAccountantTest, NoiseMultiplierForEpsilonIsTheSmallestThatMeetsTheTarget) {
  for (double target : {0.5, 1.0, 3.0, 8.0}) {
    absl::StatusOr<double> z = NoiseMultiplierForEpsilon(target, 0.01, 1000, 1e-5);
    ASSERT_TRUE(z.ok()) << z.status();
    absl::StatusOr<PrivacySpent> at = ComputeEpsilon(0.01, *z, 1000, 1e-5);
    absl::StatusOr<PrivacySpent> below = ComputeEpsilon(0.01, *z * (1 - 1e-5), 1000, 1e-5);
    ASSERT_TRUE(at.ok() && below.ok());
    EXPECT_LE(at->epsilon, target) << "z=" << *z;
    EXPECT_GT(below->epsilon, target) << "z=" << *z;
  }
}

TEST(RdpAccountantTest, UnreachableEpsilonIsOutOfRange) {
  absl::StatusOr<double> z = NoiseMultiplierForEpsilon(0.05, 0.01, 100, 1e-5);
  ASSERT_EQ(z.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(z.status().message(), HasSubstr("0.05"));
}

// --- Accountant: refusals
// -------------------------------------------------------------------------

TEST(RdpAccountantTest, RefusesBadArgumentsNamingTheValue) {
  const std::vector<double> orders = {2, 4};
  struct Case {
    double q, z;
    int64_t steps;
    const char* needle;
  };
  for (const Case& c : {Case{0.1, 0.0, 1, "noise multiplier z must be a finite number > 0, got 0"},
                        Case{0.1, -2.5, 1, "got -2.5"}, Case{0.0, 1.0, 1, "(0, 1], got 0"},
                        Case{1.5, 1.0, 1, "(0, 1], got 1.5"}, Case{-0.1, 1.0, 1, "got -0.1"},
                        Case{0.1, 1.0, -3, "steps must be >= 0, got -3"}}) {
    absl::StatusOr<std::vector<double>> rdp = ComputeRdp(c.q, c.z, c.steps, orders);
    ASSERT_EQ(rdp.status().code(), absl::StatusCode::kInvalidArgument) << c.needle;
    EXPECT_THAT(rdp.status().message(), HasSubstr(c.needle));
  }
  const std::vector<double> bad_orders = {2, 1.0};
  EXPECT_THAT(ComputeRdp(0.1, 1, 1, bad_orders).status().message(), HasSubstr("got 1"));
  for (double delta : {0.0, 1.0, -1e-5, 2.0}) {
    absl::StatusOr<PrivacySpent> spent = ComputeEpsilon(0.1, 1.0, 10, delta);
    ASSERT_EQ(spent.status().code(), absl::StatusCode::kInvalidArgument) << delta;
    EXPECT_THAT(spent.status().message(), HasSubstr("delta must be in (0, 1)"));
  }
  EXPECT_THAT(ComputeEpsilon(0.1, 1.0, 10, 1.5).status().message(), HasSubstr("got 1.5"));
  EXPECT_THAT(NoiseMultiplierForEpsilon(-1, 0.1, 10, 1e-5).status().message(),
              HasSubstr("target epsilon must be a finite number > 0, got -1"));
  EXPECT_THAT(NoiseMultiplierForEpsilon(1, 0.1, 10, 0).status().message(),
              HasSubstr("delta must be in (0, 1), got 0"));
  const std::vector<double> rdp = {0.1};
  EXPECT_THAT(RdpToEpsilon(orders, rdp, 1e-5).status().message(),
              HasSubstr("2 RDP orders but 1 RDP values"));
}

// --- Clipping
// -------------------------------------------------------------------------------------

TEST(ClippingTest, LongUpdateIsScaledToTheClipNormKeepingItsDirection) {
  std::vector<float> delta = {3, -4, 0, 12};  // norm 13
  const std::vector<float> before = delta;
  absl::StatusOr<double> norm = ClipL2(delta, 2.0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_DOUBLE_EQ(*norm, 13.0);
  EXPECT_NEAR(L2Norm(delta), 2.0, 1e-6);
  for (size_t i = 0; i < delta.size(); ++i) EXPECT_NEAR(delta[i], before[i] * 2.0 / 13.0, 1e-6);
}

TEST(ClippingTest, ShortUpdateIsUnchanged) {
  std::vector<float> delta = {0.3f, -0.4f};  // norm 0.5
  absl::StatusOr<double> norm = ClipL2(delta, 1.0);
  ASSERT_TRUE(norm.ok());
  EXPECT_NEAR(*norm, 0.5, 1e-7);
  EXPECT_EQ(delta, (std::vector<float>{0.3f, -0.4f}));
  std::vector<float> zero(5, 0.0f);
  ASSERT_TRUE(ClipL2(zero, 1.0).ok());
  EXPECT_EQ(L2Norm(zero), 0.0);
}

TEST(ClippingTest, NormAfterIsMinOfNormAndClipOnRandomUpdates) {
  auto source = MakeSeededBitSource(7);
  GaussianSampler sampler(*source);
  for (double scale : {0.001, 0.1, 1.0, 10.0}) {
    std::vector<float> delta(1000, 0.0f);
    ASSERT_TRUE(AddGaussianNoise(std::span<float>(delta), scale, sampler).ok());
    const double norm_before = L2Norm(delta);
    absl::StatusOr<double> norm = ClipL2(delta, 1.5);
    ASSERT_TRUE(norm.ok());
    EXPECT_NEAR(*norm, norm_before, 1e-9 * norm_before);
    EXPECT_NEAR(L2Norm(delta), std::min(norm_before, 1.5), 1e-5) << "scale " << scale;
  }
}

TEST(ClippingTest, ClipsTheModelDeltaNotTheModel) {
  const ModelSpec spec({TensorSpec{"w", {4}}});
  Model global_model(spec);
  Model local_model(spec);
  Model* global = &global_model;
  Model* local = &local_model;
  const std::vector<float> g = {10, 10, 10, 10};
  const std::vector<float> l = {13, 6, 10, 10};  // delta (3, -4, 0, 0), norm 5
  std::copy(g.begin(), g.end(), global->data().begin());
  std::copy(l.begin(), l.end(), local->data().begin());
  absl::StatusOr<double> norm = ClipModelUpdate(*global, *local, 1.0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_NEAR(*norm, 5.0, 1e-6);
  EXPECT_NEAR(local->data()[0], 10.6, 1e-5);
  EXPECT_NEAR(local->data()[1], 9.2, 1e-5);
  EXPECT_EQ(local->data()[2], 10.0f);
  EXPECT_EQ(global->data()[0], 10.0f);
  // Another spec is refused.
  Model other(ModelSpec({TensorSpec{"w", {5}}}));
  EXPECT_THAT(ClipModelUpdate(*global, other, 1.0).status().message(), HasSubstr("tensors differ"));
}

TEST(ClippingTest, RefusesBadClipNormAndNonFiniteUpdates) {
  std::vector<float> delta = {1, 2};
  for (double c : {0.0, -1.0, std::nan("")}) {
    absl::StatusOr<double> norm = ClipL2(delta, c);
    ASSERT_EQ(norm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(norm.status().message(), HasSubstr("clip norm must be a finite number > 0"));
  }
  EXPECT_THAT(ClipL2(delta, -1.0).status().message(), HasSubstr("got -1"));
  std::vector<float> bad = {1, INFINITY, 2};
  absl::StatusOr<double> norm = ClipL2(bad, 1.0);
  ASSERT_EQ(norm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(norm.status().message(), HasSubstr("element 1 is inf"));
  EXPECT_EQ(bad[0], 1.0f);  // untouched
}

// --- Noise
// ----------------------------------------------------------------------------------------

TEST(GaussianNoiseTest, StatisticsOfManySamplesMatchTheStddev) {
  // 10^6 samples with a fixed seed. Standard errors: mean sigma/1000 = 0.003 for sigma 3;
  // variance sigma^2 sqrt(2/n) = 0.0127 for sigma^2 = 9. Bounds are 5 standard errors.
  auto source = MakeSeededBitSource(2026);
  GaussianSampler sampler(*source);
  const double sigma = 3.0;
  std::vector<double> x(1'000'000, 1.0);
  ASSERT_TRUE(AddGaussianNoise(std::span<double>(x), sigma, sampler).ok());
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / x.size();
  double var = 0, fourth = 0;
  int beyond_2sigma = 0;
  for (double v : x) {
    const double d = v - mean;
    var += d * d;
    fourth += d * d * d * d;
    if (std::abs(d) > 2 * sigma) ++beyond_2sigma;
  }
  var /= x.size() - 1;
  fourth /= x.size();
  EXPECT_NEAR(mean, 1.0, 5 * sigma / 1000);
  EXPECT_NEAR(var, sigma * sigma, 5 * sigma * sigma * std::sqrt(2.0 / x.size()));
  EXPECT_NEAR(fourth / (var * var), 3.0, 0.03);  // Gaussian kurtosis
  // P(|X| > 2 sigma) = 0.0455; binomial standard error 2.1e-4.
  EXPECT_NEAR(beyond_2sigma / static_cast<double>(x.size()), 0.0455, 1e-3);
}

TEST(GaussianNoiseTest, SeededSourceIsRepeatableAndSecureSourceIsNot) {
  auto a = MakeSeededBitSource(1);
  auto b = MakeSeededBitSource(1);
  GaussianSampler sa(*a), sb(*b);
  std::vector<float> x(100, 0.0f), y(100, 0.0f);
  ASSERT_TRUE(AddGaussianNoise(std::span<float>(x), 1.0, sa).ok());
  ASSERT_TRUE(AddGaussianNoise(std::span<float>(y), 1.0, sb).ok());
  EXPECT_EQ(x, y);
  auto s1 = MakeSecureBitSource();
  auto s2 = MakeSecureBitSource();
  GaussianSampler g1(*s1), g2(*s2);
  std::vector<float> u(100, 0.0f), v(100, 0.0f);
  ASSERT_TRUE(AddGaussianNoise(std::span<float>(u), 1.0, g1).ok());
  ASSERT_TRUE(AddGaussianNoise(std::span<float>(v), 1.0, g2).ok());
  EXPECT_NE(u, v);
  EXPECT_GT(L2Norm(u), 5.0);  // norm of 100 N(0,1) is ~10; below 5 has probability < 1e-10
}

TEST(GaussianNoiseTest, SecureSourceHasTheRightVariance) {
  auto source = MakeSecureBitSource();
  GaussianSampler sampler(*source);
  std::vector<double> x(200'000, 0.0);
  ASSERT_TRUE(AddGaussianNoise(std::span<double>(x), 0.5, sampler).ok());
  double var = 0;
  for (double v : x) var += v * v;
  var /= x.size();
  // Standard error of the variance: 0.25 * sqrt(2 / 2e5) = 7.9e-4; 6 of them.
  EXPECT_NEAR(var, 0.25, 6 * 7.9e-4);
}

TEST(GaussianNoiseTest, DistributedNoiseSumsToTheCentralNoise) {
  // n clients each add N(0, (zC)^2 / n); over many coordinates, the sum's variance is (zC)^2.
  const double z = 1.2, c = 0.5;
  const int n = 8;
  absl::StatusOr<double> central = CentralNoiseStddev(z, c);
  absl::StatusOr<double> each = DistributedNoiseStddev(z, c, n);
  ASSERT_TRUE(central.ok() && each.ok());
  EXPECT_DOUBLE_EQ(*central, 0.6);
  EXPECT_DOUBLE_EQ(*each, 0.6 / std::sqrt(8.0));
  std::vector<double> sum(200'000, 0.0);
  for (int client = 0; client < n; ++client) {
    auto source = MakeSeededBitSource(100 + client);
    GaussianSampler sampler(*source);
    std::vector<double> update(sum.size(), 0.0);
    ASSERT_TRUE(AddGaussianNoise(std::span<double>(update), *each, sampler).ok());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += update[i];
  }
  double var = 0;
  for (double v : sum) var += v * v;
  var /= sum.size();
  EXPECT_NEAR(var, 0.36, 6 * 0.36 * std::sqrt(2.0 / sum.size()));
}

TEST(GaussianNoiseTest, RefusesBadParametersNamingTheValue) {
  auto source = MakeSeededBitSource(1);
  GaussianSampler sampler(*source);
  std::vector<float> x(3, 0.0f);
  absl::Status s = AddGaussianNoise(std::span<float>(x), -0.5, sampler);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("got -0.5"));
  EXPECT_THAT(CentralNoiseStddev(0, 1).status().message(),
              HasSubstr("noise multiplier must be a finite number > 0, got 0"));
  EXPECT_THAT(CentralNoiseStddev(1, -2).status().message(),
              HasSubstr("clip norm must be a finite number > 0, got -2"));
  EXPECT_THAT(DistributedNoiseStddev(1, 1, 0).status().message(),
              HasSubstr("number of clients sharing the noise must be >= 1, got 0"));
}

// --- Central DP strategy wrapper
// ------------------------------------------------------------------

Model Filled(const ModelSpec& spec, float value) {
  Model m(spec);
  std::fill(m.data().begin(), m.data().end(), value);
  return m;
}

CentralDpOptions Options(double z, double c) {
  CentralDpOptions options;
  options.noise_multiplier = z;
  options.clip_norm = c;
  return options;
}

void FoldWhole(RoundAggregator& agg, const Model& m, double weight) {
  agg.Fold(0, m.data(), weight);
  agg.Accept(weight);
}

TEST(CentralDpTest, UnweightedMeanPlusSeededNoiseOfStddevZCOverN) {
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  const ModelSpec spec({TensorSpec{"w", {1000}}});
  CentralDpOptions options{.noise_multiplier = 0.8, .clip_norm = 0.5, .make_source = [] {
                             return MakeSeededBitSource(42);
                           }};
  absl::StatusOr<std::unique_ptr<Strategy>> dp = MakeCentralDp(*fedavg, options);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ((*dp)->name(), "fedavg+central_dp");
  Model global = Filled(spec, 0);
  std::unique_ptr<RoundAggregator> agg = (*dp)->BeginRound(global);
  FoldWhole(*agg, Filled(spec, 1), 1);
  FoldWhole(*agg, Filled(spec, 3), 100);  // many examples: still counts once
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_TRUE(next.ok()) << next.status();
  // The same seed's Gaussian values, scaled by z * C / n = 0.8 * 0.5 / 2 = 0.2.
  auto source = MakeSeededBitSource(42);
  GaussianSampler sampler(*source);
  for (size_t i = 0; i < 1000; ++i) {
    absl::StatusOr<double> g = sampler.Next();
    ASSERT_TRUE(g.ok());
    ASSERT_NEAR(next->data()[i], 2.0 + 0.2 * *g, 1e-5) << i;
  }
}

TEST(CentralDpTest, NoiseOfTheSecureSourceHasStddevZCOverN) {
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  const ModelSpec spec({TensorSpec{"w", {200'000}}});
  absl::StatusOr<std::unique_ptr<Strategy>> dp = MakeCentralDp(*fedavg, Options(1.0, 2.0));
  ASSERT_TRUE(dp.ok());
  Model global = Filled(spec, 0);
  std::unique_ptr<RoundAggregator> agg = (*dp)->BeginRound(global);
  for (int c = 0; c < 4; ++c) FoldWhole(*agg, Filled(spec, 0.25f), 10 + c);
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_TRUE(next.ok());
  double mean = 0, var = 0;
  for (float v : next->data()) mean += v;
  mean /= spec.NumFloats();
  for (float v : next->data()) var += (v - mean) * (v - mean);
  var /= spec.NumFloats();
  EXPECT_NEAR(mean, 0.25, 5 * 0.5 / std::sqrt(2e5));
  // stddev 1 * 2 / 4 = 0.5; standard error of the variance 0.25 * sqrt(2 / 2e5) = 7.9e-4.
  EXPECT_NEAR(var, 0.25, 6 * 7.9e-4);
}

class FailingSource final : public BitSource {
 public:
  absl::Status Fill(std::span<uint8_t>) override {
    return absl::InternalError("RAND_bytes failed: entropy source unavailable");
  }
};

TEST(CentralDpTest, ARoundWhoseNoiseFailsFailsInsteadOfPublishingTheMean) {
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  const ModelSpec spec({TensorSpec{"w", {10}}});
  absl::StatusOr<std::unique_ptr<Strategy>> dp =
      MakeCentralDp(*fedavg, {.noise_multiplier = 1.0, .clip_norm = 1.0, .make_source = [] {
                                return std::make_unique<FailingSource>();
                              }});
  ASSERT_TRUE(dp.ok());
  Model global = Filled(spec, 0);
  std::unique_ptr<RoundAggregator> agg = (*dp)->BeginRound(global);
  FoldWhole(*agg, Filled(spec, 1), 1);
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_EQ(next.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(next.status().message(), HasSubstr("entropy source unavailable"));
}

TEST(CentralDpTest, RefusesBadSettingsAndScaffold) {
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  EXPECT_THAT(MakeCentralDp(*fedavg, Options(0, 1)).status().message(),
              HasSubstr("noise multiplier must be a finite number > 0, got 0"));
  EXPECT_THAT(MakeCentralDp(*fedavg, Options(1, -3)).status().message(),
              HasSubstr("clip norm must be a finite number > 0, got -3"));
  std::unique_ptr<Strategy> scaffold = MakeScaffold({});
  EXPECT_THAT(MakeCentralDp(*scaffold, {}).status().message(),
              HasSubstr("cannot wrap strategy 'scaffold'"));
}

}  // namespace
}  // namespace fl::aggregation::dp
