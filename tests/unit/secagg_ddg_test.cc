// Secure aggregation whose inputs are discrete Gaussian encodings (SecAggParams::ddg): the whole
// protocol, with dropouts, gives the modular sum of the survivors' encodings and its decoded
// mean; the parameters are validated and bound in the session.
#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "aggregation/internal/secagg_masking.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/secagg/ddg_encoding.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/secagg_federation.h"

namespace fl::secagg {
namespace {

using protocol_test::DropAt;
using protocol_test::Federation;
using protocol_test::MakeFederation;
using protocol_test::RunRound;
using ::testing::HasSubstr;

constexpr size_t kDim = 300;  // padded to 512

SecAggParams DdgParams(int n, double sigma) {
  SecAggParams p = *DefaultSecAggParams(n);
  p.ddg = {.clip_norm = 1.0,
           .granularity = *DdgGranularity(1.0, sigma, n, kDim, 32),
           .site_stddev = sigma,
           .rotation_seed = 99,
           .modulus_bits = 32};
  return p;
}

// The federation's sites encode their (normal) updates with the discrete Gaussian instead.
void EncodeAllWithDdg(Federation& f) {
  for (size_t c = 0; c < f.updates.size(); ++c) {
    std::unique_ptr<aggregation::dp::BitSource> bits = aggregation::dp::MakeSeededBitSource(c);
    f.encodings[c] = *EncodeDdg(f.params.ddg, f.updates[c], *bits);
  }
}

TEST(SecAggDdgTest, ARoundWithADropoutSumsTheSurvivorsEncodingsAndDecodesTheirMean) {
  constexpr int kSites = 12;
  Federation f = MakeFederation(DdgParams(kSites, 0.05), kDim, 3);
  EncodeAllWithDdg(f);
  ASSERT_EQ(f.encodings[0].size(), 513u);
  absl::StatusOr<AggregateResult> result = RunRound(f, DropAt::kBeforeMaskedInput, {4});
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<uint64_t> expected(513, 0);
  std::vector<double> mean(kDim, 0.0);
  for (int c = 0; c < kSites; ++c) {
    if (c == 4) continue;
    for (size_t i = 0; i < expected.size(); ++i) {
      expected[i] = (expected[i] + f.encodings[c][i]) & 0xffffffffu;
    }
    // Each update clipped to norm 1 (they are N(0, 1) in 300 dimensions: norm about 17).
    double norm = 0;
    for (float v : f.updates[c]) norm += v * v;
    norm = std::sqrt(norm);
    for (size_t i = 0; i < kDim; ++i) mean[i] += f.updates[c][i] / norm / (kSites - 1);
  }
  EXPECT_TRUE(result->sum == expected);
  EXPECT_EQ(result->sum.back(), static_cast<uint64_t>(kSites - 1));
  ASSERT_EQ(result->mean.size(), kDim);
  // The noise of 11 sites at 0.05 over 11: stddev 0.015 per coordinate, next to means of 0.06.
  double err_sq = 0;
  for (size_t i = 0; i < kDim; ++i) err_sq += std::pow(result->mean[i] - mean[i], 2);
  EXPECT_NEAR(std::sqrt(err_sq / kDim), 0.05 / std::sqrt(11.0), 0.004);
}

TEST(SecAggDdgTest, AnInputOfTheUnpaddedSizeIsRefused) {
  EXPECT_EQ(EncodedWords(DdgParams(5, 0.05), kDim), 513u);
  EXPECT_EQ(EncodedWords(*DefaultSecAggParams(5), kDim), 301u);
  Federation f = MakeFederation(DdgParams(5, 0.05), kDim, 8);
  EncodeAllWithDdg(f);
  f.encodings[2].resize(301);  // the quantized encoding's size
  absl::StatusOr<AggregateResult> result = RunRound(f, DropAt::kNone, {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("expected 513"));
}

TEST(SecAggDdgTest, ParamsAreValidatedAndBoundInTheSession) {
  SecAggParams p = DdgParams(10, 0.05);
  ASSERT_TRUE(ValidateSecAggParams(p).ok());
  SecAggParams bad = p;
  bad.ddg.modulus_bits = 64;
  EXPECT_THAT(std::string(ValidateSecAggParams(bad).message()), HasSubstr("modulo 2^64"));
  bad = p;
  bad.ddg.site_stddev = -1;
  EXPECT_THAT(std::string(ValidateSecAggParams(bad).message()), HasSubstr("stddev"));
  // Another rotation, granularity or stddev is another session: a site that took one view of
  // the parameters cannot open shares made under another.
  const std::vector<uint8_t> context = {1, 2, 3};
  std::map<int, Key32> digests = {{0, Key32{}}};
  const Key32 base = internal::SessionHash(context, p, digests);
  for (auto change :
       std::vector<void (*)(SecAggParams&)>{[](SecAggParams& q) { q.ddg.rotation_seed ^= 1; },
                                            [](SecAggParams& q) { q.ddg.granularity *= 2; },
                                            [](SecAggParams& q) { q.ddg.site_stddev *= 0.5; },
                                            [](SecAggParams& q) { q.ddg.clip_norm *= 3; }}) {
    SecAggParams q = p;
    change(q);
    EXPECT_NE(internal::SessionHash(context, q, digests), base);
  }
}

}  // namespace
}  // namespace fl::secagg
