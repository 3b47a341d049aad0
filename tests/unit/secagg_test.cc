// Secure aggregation math: primitives against published vectors, Shamir, the Harary graph,
// quantization bounds, parameter refusals, and whole protocol rounds (without identities: the
// semi-honest setting) with dropouts at every stage, the consistency check included.
// secagg_malicious_test.cc runs them with certificates against a server that lies.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/aggregation/secagg/shamir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/secagg_federation.h"

namespace fl::secagg {
namespace {

using protocol_test::DropAt;
using protocol_test::Drops;
using protocol_test::Federation;
using protocol_test::MakeFederation;
using protocol_test::Name;
using protocol_test::RunRound;
using protocol_test::RunRoundByGraph;
using ::testing::HasSubstr;

Bytes FromHex(std::string_view hex) {
  const std::string raw = absl::HexStringToBytes(std::string(hex));
  return Bytes(raw.begin(), raw.end());
}
Key32 Key(std::string_view hex) {
  Bytes b = FromHex(hex);
  Key32 k{};
  std::memcpy(k.data(), b.data(), 32);
  return k;
}
std::string Hex(std::span<const uint8_t> b) {
  return absl::BytesToHexString(std::string(b.begin(), b.end()));
}

// ---------------------------------------------------------------------------------------------
// Primitives

TEST(SecAggX25519Test, Rfc7748Section52FirstVector) {
  absl::StatusOr<Key32> out =
      X25519Agree(Key("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4"),
                  Key("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Hex(*out), "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552");
}

TEST(SecAggX25519Test, Rfc7748Section61DiffieHellman) {
  const Key32 alice = Key("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
  const Key32 bob = Key("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
  absl::StatusOr<Key32> alice_pub = X25519PublicFromPrivate(alice);
  absl::StatusOr<Key32> bob_pub = X25519PublicFromPrivate(bob);
  ASSERT_TRUE(alice_pub.ok() && bob_pub.ok());
  EXPECT_EQ(Hex(*alice_pub), "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
  EXPECT_EQ(Hex(*bob_pub), "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
  absl::StatusOr<Key32> k1 = X25519Agree(alice, *bob_pub);
  absl::StatusOr<Key32> k2 = X25519Agree(bob, *alice_pub);
  ASSERT_TRUE(k1.ok() && k2.ok());
  EXPECT_EQ(Hex(*k1), "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");
  EXPECT_EQ(*k1, *k2);
}

TEST(SecAggX25519Test, LowOrderPeerKeyIsRefused) {
  auto rng = MakeDeterministicRandomSource(1);
  absl::StatusOr<X25519KeyPair> pair = GenerateX25519KeyPair(*rng);
  ASSERT_TRUE(pair.ok());
  const Key32 zero{};  // the point of order 4 at u = 0: the shared secret would be all zeros
  absl::StatusOr<Key32> out = X25519Agree(pair->private_key, zero);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SecAggHkdfTest, Rfc5869TestCases1And3) {
  const Bytes ikm(22, 0x0b);
  absl::StatusOr<Bytes> okm1 =
      HkdfSha256(ikm, FromHex("000102030405060708090a0b0c"), FromHex("f0f1f2f3f4f5f6f7f8f9"), 42);
  ASSERT_TRUE(okm1.ok()) << okm1.status();
  EXPECT_EQ(Hex(*okm1),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
  absl::StatusOr<Bytes> okm3 = HkdfSha256(ikm, {}, {}, 42);
  ASSERT_TRUE(okm3.ok()) << okm3.status();
  EXPECT_EQ(Hex(*okm3),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8");
  EXPECT_EQ(HkdfSha256(ikm, {}, {}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HkdfSha256(ikm, {}, {}, 8161).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SecAggAesGcmTest, RoundTripAndRandomNonce) {
  auto rng = MakeOsRandomSource();
  Key32 key{};
  ASSERT_TRUE(rng->Fill(key).ok());
  const Bytes plain = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const Bytes aad = {'i', 'd'};
  absl::StatusOr<Bytes> a = AesGcmEncrypt(key, plain, aad, *rng);
  absl::StatusOr<Bytes> b = AesGcmEncrypt(key, plain, aad, *rng);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 12 + plain.size() + 16);
  EXPECT_NE(*a, *b) << "two encryptions must use different nonces";
  absl::StatusOr<Bytes> opened = AesGcmDecrypt(key, *a, aad);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, plain);
}

TEST(SecAggAesGcmTest, TamperingIsRefused) {
  auto rng = MakeDeterministicRandomSource(7);
  Key32 key{};
  ASSERT_TRUE(rng->Fill(key).ok());
  const Bytes plain(40, 0x5a);
  const Bytes aad = {'a'};
  absl::StatusOr<Bytes> sealed = AesGcmEncrypt(key, plain, aad, *rng);
  ASSERT_TRUE(sealed.ok());
  for (size_t at : {size_t{0}, size_t{12}, size_t{30}, sealed->size() - 1}) {  // nonce, body, tag
    Bytes bad = *sealed;
    bad[at] ^= 0x01;
    absl::StatusOr<Bytes> out = AesGcmDecrypt(key, bad, aad);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss) << "byte " << at;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("authentication failed"));
  }
  EXPECT_EQ(AesGcmDecrypt(key, *sealed, Bytes{'b'}).status().code(), absl::StatusCode::kDataLoss);
  Key32 other = key;
  other[0] ^= 1;
  EXPECT_EQ(AesGcmDecrypt(other, *sealed, aad).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(AesGcmDecrypt(key, Bytes(27, 0), aad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SecAggPrgTest, KnownAnswerAndConsistency) {
  // AES-256-CTR, zero key, zero IV: the first block is AES-256_0(0) = dc95c078...
  std::vector<uint32_t> w(8);
  ASSERT_TRUE(PrgExpand32(Key32{}, w).ok());
  uint8_t bytes[32];
  std::memcpy(bytes, w.data(), 32);
  EXPECT_EQ(Hex(bytes), "dc95c078a2408989ad48a21492842087530f8afbc74536b9a963b4f1c4cb738b");
  // Same seed, same stream; a prefix of a longer expansion; 64-bit words are pairs of 32-bit ones.
  Key32 seed{};
  seed[3] = 9;
  std::vector<uint32_t> a(1000), b(10);
  std::vector<uint64_t> c(500);
  ASSERT_TRUE(PrgExpand32(seed, a).ok());
  ASSERT_TRUE(PrgExpand32(seed, b).ok());
  ASSERT_TRUE(PrgExpand64(seed, c).ok());
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));
  EXPECT_EQ(c[7], (uint64_t{a[15]} << 32) | a[14]);
  seed[3] = 10;
  std::vector<uint32_t> d(1000);
  ASSERT_TRUE(PrgExpand32(seed, d).ok());
  EXPECT_NE(a, d);
}

TEST(SecAggRandomSourceTest, DeterministicSourceRepeatsAndOsSourceDoesNot) {
  auto a = MakeDeterministicRandomSource(42);
  auto b = MakeDeterministicRandomSource(42);
  auto c = MakeDeterministicRandomSource(43);
  Bytes x(64), y(64), z(64), x2(64);
  ASSERT_TRUE(a->Fill(x).ok() && b->Fill(y).ok() && c->Fill(z).ok() && a->Fill(x2).ok());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  EXPECT_NE(x, x2) << "successive draws must continue the stream";
  auto os = MakeOsRandomSource();
  Bytes p(32), q(32);
  ASSERT_TRUE(os->Fill(p).ok() && os->Fill(q).ok());
  EXPECT_NE(p, q);
}

// ---------------------------------------------------------------------------------------------
// Shamir

TEST(SecAggShamirTest, AnyThresholdSubsetReconstructs) {
  auto rng = MakeDeterministicRandomSource(3);
  Key32 secret{};
  ASSERT_TRUE(rng->Fill(secret).ok());
  secret[31] = 0xff;  // the last (4-byte) piece at its maximum
  std::vector<uint64_t> xs;
  for (uint64_t x = 1; x <= 12; ++x) xs.push_back(x * 1000003);
  absl::StatusOr<std::vector<ShamirShare>> shares = ShamirSplit(secret, 7, xs, *rng);
  ASSERT_TRUE(shares.ok()) << shares.status();
  std::mt19937_64 pick(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<ShamirShare> subset = *shares;
    std::shuffle(subset.begin(), subset.end(), pick);
    subset.resize(7 + trial % 5);
    absl::StatusOr<Key32> got = ShamirReconstruct(subset, 7);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, secret);
  }
  // t - 1 shares plus a share of another secret do not give the secret back.
  Key32 other = secret;
  other[0] ^= 1;
  absl::StatusOr<std::vector<ShamirShare>> other_shares = ShamirSplit(other, 7, xs, *rng);
  ASSERT_TRUE(other_shares.ok());
  std::vector<ShamirShare> mixed(shares->begin(), shares->begin() + 6);
  mixed.push_back((*other_shares)[6]);
  absl::StatusOr<Key32> mixed_out = ShamirReconstruct(mixed, 7);
  EXPECT_TRUE(!mixed_out.ok() || *mixed_out != secret);
}

TEST(SecAggShamirTest, RefusesTooFewAndDuplicateShares) {
  auto rng = MakeDeterministicRandomSource(4);
  const Key32 secret{1, 2, 3};
  const std::vector<uint64_t> xs = {1, 2, 3, 4, 5};
  absl::StatusOr<std::vector<ShamirShare>> shares = ShamirSplit(secret, 3, xs, *rng);
  ASSERT_TRUE(shares.ok());
  absl::StatusOr<Key32> few = ShamirReconstruct(std::span(*shares).first(2), 3);
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(few.status().message()), HasSubstr("needs 3 shares, got 2"));
  std::vector<ShamirShare> dup = {(*shares)[0], (*shares)[1], (*shares)[1]};
  absl::StatusOr<Key32> d = ShamirReconstruct(dup, 3);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("same point"));
  const std::vector<uint64_t> bad_points = {1, 0, 3};
  EXPECT_FALSE(ShamirSplit(secret, 2, bad_points, *rng).ok());
  const std::vector<uint64_t> dup_points = {1, 2, 2};
  EXPECT_FALSE(ShamirSplit(secret, 2, dup_points, *rng).ok());
  EXPECT_FALSE(ShamirSplit(secret, 6, xs, *rng).ok());
  // Serialization round trip.
  Bytes wire;
  AppendShare((*shares)[2], wire);
  absl::StatusOr<ShamirShare> parsed = ParseShare(wire);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, (*shares)[2]);
}

// ---------------------------------------------------------------------------------------------
// Harary graph

TEST(SecAggNeighborGraphTest, IsKRegularSymmetricAndShuffled) {
  for (auto [n, k] :
       std::vector<std::pair<int, int>>{{30, 20}, {100, 22}, {10, 9}, {11, 10}, {8, 3}, {50, 2}}) {
    absl::StatusOr<NeighborGraph> g = NeighborGraph::Make(n, k, 99);
    ASSERT_TRUE(g.ok()) << g.status();
    for (int u = 0; u < n; ++u) {
      const std::vector<int>& nb = g->Neighbors(u);
      EXPECT_EQ(static_cast<int>(nb.size()), k) << "n=" << n << " k=" << k << " u=" << u;
      for (int v : nb) {
        EXPECT_NE(v, u);
        EXPECT_TRUE(g->AreNeighbors(v, u)) << u << "-" << v << " not symmetric";
      }
    }
  }
  absl::StatusOr<NeighborGraph> a = NeighborGraph::Make(40, 6, 1);
  absl::StatusOr<NeighborGraph> b = NeighborGraph::Make(40, 6, 1);
  absl::StatusOr<NeighborGraph> c = NeighborGraph::Make(40, 6, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int same_ab = 0, same_ac = 0;
  for (int u = 0; u < 40; ++u) {
    same_ab += a->Neighbors(u) == b->Neighbors(u);
    same_ac += a->Neighbors(u) == c->Neighbors(u);
  }
  EXPECT_EQ(same_ab, 40);
  EXPECT_LT(same_ac, 10) << "another seed must give another labelling";
  // Without shuffling, client 0's neighbours would be {1, 2, 3, 37, 38, 39}.
  EXPECT_NE(a->Neighbors(0), (std::vector<int>{1, 2, 3, 37, 38, 39}));
  EXPECT_FALSE(NeighborGraph::Make(9, 3, 0).ok());  // n * k odd
  EXPECT_FALSE(NeighborGraph::Make(5, 5, 0).ok());
}

// ---------------------------------------------------------------------------------------------
// Quantization and parameters

TEST(SecAggQuantizationTest, ClipsAndStaysInRange) {
  auto rng = MakeDeterministicRandomSource(8);
  const std::vector<float> v = {-100.f, -2.f, 0.f, 2.f, 100.f, INFINITY, -INFINITY};
  absl::StatusOr<std::vector<uint64_t>> q = Quantize(v, 2.0, 10, *rng);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ((*q)[0], 0u);
  EXPECT_EQ((*q)[1], 0u);
  EXPECT_EQ((*q)[3], 1023u);
  EXPECT_EQ((*q)[4], 1023u);
  EXPECT_EQ((*q)[5], 1023u);
  EXPECT_EQ((*q)[6], 0u);
  const std::vector<float> nan = {0.f, NAN};
  absl::StatusOr<std::vector<uint64_t>> bad = Quantize(nan, 2.0, 10, *rng);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("value 1"));
}

TEST(SecAggQuantizationTest, StochasticRoundingIsUnbiased) {
  auto rng = MakeDeterministicRandomSource(9);
  const int bits = 4;  // coarse: step = 2 * 1 / 15
  const std::vector<float> v(100000, 0.3f);
  absl::StatusOr<std::vector<uint64_t>> q = Quantize(v, 1.0, bits, *rng);
  ASSERT_TRUE(q.ok());
  double mean = 0;
  for (uint64_t x : *q) mean += static_cast<double>(x);
  mean /= static_cast<double>(q->size());
  const double step = QuantizationStep(1.0, bits);
  // Deterministic rounding would give 10 * step - 1 = 0.333; the mean must be 0.3 within 5 sigma
  // of a Bernoulli mean (sigma <= step / 2 / sqrt(N)).
  EXPECT_NEAR(mean * step - 1.0, 0.3, 5 * step / 2 / std::sqrt(100000.0));
}

TEST(SecAggQuantizationTest, WeightedMeanWithinBound) {
  SecAggParams p;
  p.num_clients = 50;
  p.num_neighbors = 10;
  p.threshold = 6;
  p.clip_range = 1.5;
  p.quantization_bits = 12;  // coarse, so the bound is visible
  p.max_weight = 1000;
  ASSERT_TRUE(ValidateSecAggParams(p).ok());
  auto rng = MakeDeterministicRandomSource(10);
  std::mt19937_64 gen(10);
  std::normal_distribution<float> normal(0.f, 1.f);
  const size_t dim = 3000;
  std::vector<uint64_t> sum(dim + 1, 0);
  std::vector<double> reference(dim, 0);
  double total = 0;
  for (int c = 0; c < p.num_clients; ++c) {
    std::vector<float> x(dim);
    for (float& v : x) v = normal(gen);
    const uint32_t w = 1 + static_cast<uint32_t>(gen() % 1000);
    absl::StatusOr<std::vector<uint64_t>> e = EncodeWeightedUpdate(p, x, w, *rng);
    ASSERT_TRUE(e.ok()) << e.status();
    for (size_t i = 0; i <= dim; ++i) sum[i] = (sum[i] + (*e)[i]) & 0xffffffffu;
    for (size_t i = 0; i < dim; ++i) reference[i] += w * std::clamp<double>(x[i], -1.5, 1.5);
    total += w;
  }
  absl::StatusOr<std::vector<float>> mean = DecodeWeightedMean(p, sum);
  ASSERT_TRUE(mean.ok());
  const double bound = QuantizationErrorBound(p.clip_range, p.quantization_bits);
  double worst = 0;
  for (size_t i = 0; i < dim; ++i)
    worst = std::max(worst, std::abs((*mean)[i] - reference[i] / total));
  EXPECT_LE(worst, bound);
  EXPECT_GT(worst, bound / 100) << "the error must be the quantization's, not zero";
  EXPECT_EQ(EncodeWeightedUpdate(p, std::vector<float>(3), 0, *rng).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeWeightedUpdate(p, std::vector<float>(3), 1001, *rng).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SecAggParamsTest, DefaultsAreValidAndDerivedFromN) {
  for (int n : {3, 10, 16, 17, 30, 100, 1000}) {
    absl::StatusOr<SecAggParams> p = DefaultSecAggParams(n);
    ASSERT_TRUE(p.ok()) << n << ": " << p.status();
    EXPECT_TRUE(ValidateSecAggParams(*p).ok());
    EXPECT_GT(p->threshold, p->num_neighbors / 2);
    EXPECT_GE(p->quantization_bits, 8);
  }
  EXPECT_EQ(DefaultSecAggParams(10)->num_neighbors, 9);
  EXPECT_EQ(DefaultSecAggParams(100)->num_neighbors, 20);
  EXPECT_EQ(DefaultSecAggParams(100)->threshold, 11);
  EXPECT_EQ(DefaultSecAggParams(100)->quantization_bits, 15);  // 100 * 1000 * (2^15-1) < 2^32
  EXPECT_EQ(DefaultSecAggParams(2).status().code(), absl::StatusCode::kInvalidArgument);
  // 10^5 clients at weight 1000 leave no 8-bit quantization under 2^32; 2^64 fits.
  EXPECT_EQ(DefaultSecAggParams(100000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DefaultSecAggParams(100000, 64).ok());
}

// Bell et al.'s risks, against an exact count: 12 sites, 4 colluding (gamma 0.34), k = 6, t = 4.
// A given honest site's 6 neighbours are 6 of the other 11; all 4 colluders among them:
// C(4,4) C(7,2) / C(11,6) = 21 / 462.
TEST(SecAggRiskTest, TheExposureIsTheHypergeometricTailCountedExactly) {
  SecAggParams p = *DefaultSecAggParams(12);
  p.num_neighbors = 6;
  p.threshold = 4;
  p.corrupt_fraction = 0.34;
  SecAggRisk r = SecAggRiskOf(p, 0);
  EXPECT_NEAR(r.exposed_site, 21.0 / 462, 1e-12);
  EXPECT_NEAR(r.privacy, 8 * 21.0 / 462, 1e-12);  // 8 honest sites
  EXPECT_EQ(r.stall, 0);                          // nobody drops
  // 3 of 12 dropping (0.25): fewer than 4 of 6 neighbours live takes 3 dropped among them:
  // C(3,3) C(8,3) / C(11,6) = 56 / 462 for a site; 12 sites make the round's bound 1.
  EXPECT_NEAR(SecAggRiskOf(p, 0.25).stalled_site, 56.0 / 462, 1e-12);
  EXPECT_EQ(SecAggRiskOf(p, 0.25).stall, 1.0);
  // 2 dropping: 4 of the 6 stay live whatever happens.
  EXPECT_EQ(SecAggRiskOf(p, 0.2).stalled_site, 0);
  p.threshold = 5;  // more than the 4 colluders: none can be exposed
  EXPECT_EQ(SecAggRiskOf(p, 0).privacy, 0);
  // Every pair: the colluders are all neighbours, so t must exceed them.
  p.num_neighbors = 11;
  p.threshold = 6;
  EXPECT_EQ(SecAggRiskOf(p, 0).privacy, 0);
  p.corrupt_fraction = 0.49;  // 5 colluding
  p.threshold = 5;
  EXPECT_EQ(SecAggRiskOf(p, 0).exposed_site, 1);
}

// The defaults are chosen for gamma and delta: at 100 sites with a third colluding and 30 %
// dropping, 72 of the 99 peers; with a tenth colluding at 2,000 sites a sparse graph holds. Both
// keep the risks within their bounds, with the least such t; with gamma = delta = 0 the defaults
// are Bell et al.'s O(log n) as before. What no graph can do is refused with the figures.
TEST(SecAggRiskTest, DefaultsAreChosenForTheCollusionAndTheDropouts) {
  absl::StatusOr<SecAggParams> third = DefaultSecAggParams(100, 32, 1000, 1.0 / 3, 0.3);
  ASSERT_TRUE(third.ok()) << third.status();
  // 33 colluders and 30 dropouts among 100: with t above 33 no site can be exposed, and with
  // k - 30 >= t none can stall, so the least such k (on the search's steps) is far from every
  // pair.
  EXPECT_EQ(third->num_neighbors, 72);
  EXPECT_EQ(third->threshold, 37);
  EXPECT_LE(SecAggRiskOf(*third, 0.3).privacy, kMaxPrivacyRisk);
  EXPECT_LE(SecAggRiskOf(*third, 0.3).stall, kMaxStallRisk);
  // The old defaults at a third colluding: about 2 % of the sites exposed each round.
  SecAggParams old = *DefaultSecAggParams(100);
  old.corrupt_fraction = 1.0 / 3;
  EXPECT_GT(SecAggRiskOf(old, 0).exposed_site, 0.01);

  absl::StatusOr<SecAggParams> tenth = DefaultSecAggParams(2000, 64, 1000, 0.1, 0.05);
  ASSERT_TRUE(tenth.ok()) << tenth.status();
  EXPECT_LT(tenth->num_neighbors, 1999);
  EXPECT_GT(tenth->num_neighbors, 34);  // more than the semi-honest 3 log2 n
  const SecAggRisk risk = SecAggRiskOf(*tenth, 0.05);
  EXPECT_LE(risk.privacy, kMaxPrivacyRisk);
  EXPECT_LE(risk.stall, kMaxStallRisk);
  SecAggParams lower = *tenth;
  --lower.threshold;
  if (lower.threshold > lower.num_neighbors / 2) {
    EXPECT_GT(SecAggRiskOf(lower, 0.05).privacy, kMaxPrivacyRisk);  // t is the least
  }

  EXPECT_EQ(DefaultSecAggParams(100)->num_neighbors, 20);
  // Half the sites dropping stalls every graph of 9: every pair, private (t = 5 above the 4
  // colluders), with its stall risk there to be reported.
  absl::StatusOr<SecAggParams> stalls = DefaultSecAggParams(9, 32, 1000, 0.45, 0.5);
  ASSERT_TRUE(stalls.ok()) << stalls.status();
  EXPECT_EQ(stalls->num_neighbors, 8);
  EXPECT_EQ(stalls->threshold, 5);
  EXPECT_EQ(SecAggRiskOf(*stalls, 0.5).privacy, 0);
  EXPECT_GT(SecAggRiskOf(*stalls, 0.5).stall, kMaxStallRisk);
  EXPECT_EQ(DefaultSecAggParams(10, 32, 1000, 0.5, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The consistency check's majority: with c = floor(gamma |U1|) colluders able to sign every set,
// two sets would need 2T <= |U1| + c signers, so T = floor((|U1| + c) / 2) + 1 keeps one.
TEST(SecAggParamsTest, ConsistencyThresholdHoldsWithTheColludingShare) {
  EXPECT_EQ(ConsistencyThreshold(9, 0), 5);
  EXPECT_EQ(ConsistencyThreshold(10, 0), 6);
  EXPECT_EQ(ConsistencyThreshold(9, 1.0 / 3), 7);     // c = 3
  EXPECT_EQ(ConsistencyThreshold(10, 1.0 / 3), 7);    // c = 3
  EXPECT_EQ(ConsistencyThreshold(100, 1.0 / 3), 67);  // c = 33
  EXPECT_EQ(ConsistencyThreshold(100, 0.49), 75);     // c = 49
  for (int n : {3, 7, 50, 1001}) {
    for (double gamma : {0.0, 0.1, 1.0 / 3, 0.45}) {
      const int c = static_cast<int>(std::floor(gamma * n));
      const int t = ConsistencyThreshold(n, gamma);
      EXPECT_GT(2 * t, n + c) << n << " " << gamma;        // no two sets
      EXPECT_LE(2 * (t - 1), n + c) << n << " " << gamma;  // the least that does it
      EXPECT_LE(t, n) << n << " " << gamma;                // reachable with no dropout
    }
  }
  SecAggParams p = *DefaultSecAggParams(10);
  p.corrupt_fraction = 0.5;
  EXPECT_THAT(std::string(ValidateSecAggParams(p).message()),
              HasSubstr("corrupt_fraction must be in [0, 0.5)"));
}

TEST(SecAggParamsTest, RefusesNoPrivacyAndOverflow) {
  SecAggParams p = *DefaultSecAggParams(30);
  SecAggParams q = p;
  q.threshold = q.num_neighbors / 2;
  absl::Status s = ValidateSecAggParams(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no privacy"));
  q = p;
  q.quantization_bits = 22;  // 30 * 1000 * (2^22 - 1) > 2^32
  s = ValidateSecAggParams(q);
  EXPECT_THAT(std::string(s.message()), HasSubstr("wrap the modulus"));
  q.modulus_bits = 64;
  EXPECT_TRUE(ValidateSecAggParams(q).ok());
  q = p;
  q.modulus_bits = 48;
  EXPECT_THAT(std::string(ValidateSecAggParams(q).message()), HasSubstr("modulus_bits"));
  q = p;
  q.num_clients = 31;
  q.num_neighbors = 15;
  q.threshold = 8;
  EXPECT_THAT(std::string(ValidateSecAggParams(q).message()), HasSubstr("both odd"));
  q = p;
  q.clip_range = 0;
  EXPECT_THAT(std::string(ValidateSecAggParams(q).message()), HasSubstr("clip_range"));
  q = p;
  q.threshold = q.num_neighbors + 1;
  EXPECT_THAT(std::string(ValidateSecAggParams(q).message()), HasSubstr("exceeds"));
}

// ---------------------------------------------------------------------------------------------
// The protocol

// The plain sum modulo 2^32 of the encodings of `survivors`.
std::vector<uint64_t> PlainSum32(const Federation& f, const std::vector<int>& survivors) {
  std::vector<uint64_t> sum(f.dim + 1, 0);
  for (int c : survivors) {
    for (size_t i = 0; i <= f.dim; ++i) sum[i] = (sum[i] + f.encodings[c][i]) & 0xffffffffu;
  }
  return sum;
}

// 30 clients on a 20-regular graph with t = 11: any 9 dropped clients leave every client at
// least 11 live neighbours, and at least 21 >= ConsistencyThreshold(30, 0) = 16 signers, so each
// case below must succeed.
SecAggParams ProtocolParams() {
  SecAggParams p = *DefaultSecAggParams(30);
  p.num_neighbors = 20;
  p.threshold = 11;
  p.clip_range = 2.0;  // N(0, 1) updates: some values are clipped
  p.graph_seed = 1234;
  return p;
}

class SecAggDropoutTest : public ::testing::TestWithParam<std::tuple<DropAt, double>> {};

TEST_P(SecAggDropoutTest, AggregateIsExactAndWithinBoundOfFedAvg) {
  const auto [at, fraction] = GetParam();
  const SecAggParams params = ProtocolParams();
  ASSERT_TRUE(ValidateSecAggParams(params).ok());
  const size_t dim = 2000;
  Federation f = MakeFederation(params, dim, 77);
  std::set<int> drop;
  std::vector<int> order(params.num_clients);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 pick(static_cast<uint64_t>(fraction * 100) + static_cast<uint64_t>(at));
  std::shuffle(order.begin(), order.end(), pick);
  const int dropped = static_cast<int>(std::lround(fraction * params.num_clients));
  drop.insert(order.begin(), order.begin() + dropped);

  absl::StatusOr<AggregateResult> result = RunRound(f, at, drop);
  ASSERT_TRUE(result.ok()) << result.status();

  // Survivors: everyone but those dropped before their masked input arrived (a client that
  // vanishes at the consistency check or the unmasking has its input in the sum).
  std::vector<int> survivors;
  for (int c = 0; c < params.num_clients; ++c) {
    if (at == DropAt::kDuringConsistency || at == DropAt::kDuringUnmasking || drop.count(c) == 0) {
      survivors.push_back(c);
    }
  }
  EXPECT_EQ(result->survivors, survivors);
  // Exact: the plain sum of the survivors' encodings modulo 2^32.
  std::vector<uint64_t> expected(dim + 1, 0);
  for (int c : survivors) {
    for (size_t i = 0; i <= dim; ++i) expected[i] = (expected[i] + f.encodings[c][i]) & 0xffffffffu;
  }
  ASSERT_EQ(result->sum.size(), expected.size());
  EXPECT_TRUE(result->sum == expected) << "the unmasked sum differs from the plain sum";
  // Within the quantization bound of the survivors' FedAvg of the clipped updates.
  double total = 0;
  for (int c : survivors) total += f.weights[c];
  const double bound = QuantizationErrorBound(params.clip_range, params.quantization_bits);
  double worst = 0;
  for (size_t i = 0; i < dim; ++i) {
    double ref = 0;
    for (int c : survivors) {
      ref +=
          f.weights[c] * std::clamp<double>(f.updates[c][i], -params.clip_range, params.clip_range);
    }
    worst = std::max(worst, std::abs(result->mean[i] - ref / total));
  }
  EXPECT_LE(worst, bound);
}

INSTANTIATE_TEST_SUITE_P(SecAggStages, SecAggDropoutTest,
                         ::testing::Values(std::make_tuple(DropAt::kNone, 0.0),
                                           std::make_tuple(DropAt::kBeforeSharing, 0.1),
                                           std::make_tuple(DropAt::kBeforeSharing, 0.3),
                                           std::make_tuple(DropAt::kAfterSharing, 0.1),
                                           std::make_tuple(DropAt::kAfterSharing, 0.3),
                                           std::make_tuple(DropAt::kBeforeMaskedInput, 0.1),
                                           std::make_tuple(DropAt::kBeforeMaskedInput, 0.3),
                                           std::make_tuple(DropAt::kDuringConsistency, 0.1),
                                           std::make_tuple(DropAt::kDuringConsistency, 0.3),
                                           std::make_tuple(DropAt::kDuringUnmasking, 0.1),
                                           std::make_tuple(DropAt::kDuringUnmasking, 0.3)),
                         [](const auto& info) {
                           return Name(std::get<0>(info.param)) + "_" +
                                  std::to_string(static_cast<int>(std::get<1>(info.param) * 100)) +
                                  "pct";
                         });

TEST(SecAggProtocolTest, Modulus64IsExact) {
  SecAggParams p = *DefaultSecAggParams(12, 64);
  p.quantization_bits = 30;
  ASSERT_TRUE(ValidateSecAggParams(p).ok());
  Federation f = MakeFederation(p, 500, 5);
  absl::StatusOr<AggregateResult> result = RunRound(f, DropAt::kBeforeMaskedInput, {3});
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<uint64_t> expected(501, 0);
  for (int c = 0; c < 12; ++c) {
    if (c == 3) continue;
    for (size_t i = 0; i <= 500; ++i) expected[i] += f.encodings[c][i];
  }
  EXPECT_TRUE(result->sum == expected);
}

TEST(SecAggProtocolTest, DropoutsAtEveryStageInOneRound) {
  // 50 clients, k = 32, t = 17: three clients vanish at each of the five stages (30 % in all);
  // every neighbourhood keeps at least 17 of 32, and 38 >= 26 clients sign the survivors.
  SecAggParams params = *DefaultSecAggParams(50);
  params.num_neighbors = 32;
  params.threshold = 17;
  params.graph_seed = 5;
  ASSERT_TRUE(ValidateSecAggParams(params).ok());
  Federation f = MakeFederation(params, 300, 21);
  const Drops drops = {{DropAt::kBeforeSharing, {1, 17, 33}},
                       {DropAt::kAfterSharing, {4, 20, 36}},
                       {DropAt::kBeforeMaskedInput, {9, 25, 41}},
                       {DropAt::kDuringConsistency, {6, 22, 38}},
                       {DropAt::kDuringUnmasking, {12, 28, 44}}};
  absl::StatusOr<AggregateResult> result = RunRound(f, drops);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<int> survivors;
  for (int c = 0; c < 50; ++c) {
    bool lost = false;
    for (DropAt at : {DropAt::kBeforeSharing, DropAt::kAfterSharing, DropAt::kBeforeMaskedInput}) {
      lost = lost || drops.at(at).count(c) != 0;
    }
    if (!lost) survivors.push_back(c);
  }
  EXPECT_EQ(result->survivors, survivors);
  EXPECT_TRUE(result->sum == PlainSum32(f, survivors));
}

TEST(SecAggProtocolTest, FailsWhenFewerThanThresholdHoldersOfADroppedKeyAnswer) {
  // Whether they never sign the survivors or sign and then vanish, they reveal nothing.
  for (DropAt at : {DropAt::kDuringConsistency, DropAt::kDuringUnmasking}) {
    SCOPED_TRACE(Name(at));
    const SecAggParams params = ProtocolParams();
    Federation f = MakeFederation(params, 100, 15);
    // Client 29 never sends its masked input; 10 of its 20 neighbours then vanish, so only
    // 10 < t = 11 shares of its mask key arrive.
    absl::StatusOr<AggregateResult> result = RunRoundByGraph(f, [at](const NeighborGraph& graph) {
      const std::vector<int>& nb = graph.Neighbors(29);
      return Drops{{DropAt::kBeforeMaskedInput, {29}},
                   {at, std::set<int>(nb.end() - 10, nb.end())}};
    });
    ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
    EXPECT_THAT(
        std::string(result.status().message()),
        HasSubstr("client 29 dropped after sharing: 10 of its neighbours revealed shares of "
                  "its mask key, 11 needed"));
  }
}

TEST(SecAggProtocolTest, FailsWhenFewerThanThresholdNeighboursAnswer) {
  for (DropAt at : {DropAt::kDuringConsistency, DropAt::kDuringUnmasking}) {
    SCOPED_TRACE(Name(at));
    const SecAggParams params = ProtocolParams();
    Federation f = MakeFederation(params, 100, 8);
    // Ten of client 0's twenty neighbours vanish: 10 shares < t = 11.
    absl::StatusOr<AggregateResult> result = RunRoundByGraph(f, [at](const NeighborGraph& graph) {
      const std::vector<int>& nb = graph.Neighbors(0);
      return Drops{{at, std::set<int>(nb.begin(), nb.begin() + 10)}};
    });
    ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr("client 0: 10 of its neighbours revealed shares of its self-mask seed, "
                          "11 needed"));
  }
}

TEST(SecAggProtocolTest, ClientRefusesWithTooFewNeighboursSharing) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 9);
  absl::StatusOr<AggregateResult> result = RunRoundByGraph(f, [](const NeighborGraph& graph) {
    const std::vector<int>& nb = graph.Neighbors(0);
    return Drops{{DropAt::kBeforeSharing, std::set<int>(nb.begin(), nb.begin() + 10)}};
  });
  ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("client 0: only 10 neighbours shared their keys"));
}

TEST(SecAggProtocolTest, TheGraphComesFromTheSessionNotFromTheServersSeed) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 10, 30);
  EXPECT_EQ(f.server->graph().num_clients(), 0) << "no graph before the keys are in";
  for (int c = 0; c < params.num_clients; ++c) {
    ASSERT_TRUE(f.server->ReceiveKeys(*f.clients[c]->AdvertiseKeys()).ok());
  }
  ASSERT_TRUE(f.server->CloseAdvertiseKeys().ok());
  const NeighborGraph& graph = f.server->graph();
  ASSERT_EQ(graph.num_clients(), params.num_clients);
  EXPECT_EQ(graph.degree(), params.num_neighbors);
  absl::StatusOr<NeighborGraph> from_seed =
      NeighborGraph::Make(params.num_clients, params.num_neighbors, params.graph_seed);
  ASSERT_TRUE(from_seed.ok());
  int same = 0;
  for (int c = 0; c < params.num_clients; ++c)
    same += graph.Neighbors(c) == from_seed->Neighbors(c);
  EXPECT_LT(same, params.num_clients / 2) << "the server's graph_seed alone fixed the graph";
  // A client's directory: its own and its neighbours' entries in full, the others by digest.
  for (int c : {0, 17}) {
    const KeyDirectory dir = f.server->DirectoryFor(c);
    EXPECT_EQ(dir.keys.size(), static_cast<size_t>(params.num_neighbors) + 1);
    EXPECT_EQ(dir.digests.size(),
              static_cast<size_t>(params.num_clients - params.num_neighbors - 1));
    EXPECT_EQ(dir.keys.count(c), 1u);
    for (int v : graph.Neighbors(c)) EXPECT_EQ(dir.keys.count(v), 1u) << v;
  }
}

// Drives a round up to the survivor list (stage 4): every client advertises and shares; the clients
// in `vanish_before_input` never send their masked input. Returns the list to sign.
SurvivorList UpToConsistency(Federation& f, const std::set<int>& vanish_before_input) {
  for (int c = 0; c < f.params.num_clients; ++c) {
    EXPECT_TRUE(f.server->ReceiveKeys(*f.clients[c]->AdvertiseKeys()).ok());
  }
  KeyDirectory dir = *f.server->CloseAdvertiseKeys();  // every entry in full, to everyone
  for (int c = 0; c < f.params.num_clients; ++c) {
    EXPECT_TRUE(f.server->ReceiveShares(*f.clients[c]->ShareKeys(dir)).ok());
  }
  std::map<int, ShareBundle> bundles = *f.server->CloseShareKeys();
  for (auto& [c, bundle] : bundles) {
    absl::StatusOr<MaskedInput> m = f.clients[c]->MaskEncodedInput(bundle, f.encodings[c]);
    EXPECT_TRUE(m.ok()) << m.status();
    if (vanish_before_input.count(c) == 0) {
      EXPECT_TRUE(f.server->ReceiveMaskedInput(*m).ok());
    }
  }
  absl::StatusOr<SurvivorList> list = f.server->CloseMaskedInput();
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? *list : SurvivorList{};
}

// Every client of `list` but the `silent` ones signs it; returns the server's unmask request.
UnmaskRequest SignAndClose(Federation& f, const SurvivorList& list,
                           const std::set<int>& silent = {}) {
  for (int c : list.survivors) {
    if (silent.count(c) != 0) continue;
    absl::StatusOr<SurvivorSignature> signature = f.clients[c]->SignSurvivors(list);
    EXPECT_TRUE(signature.ok()) << signature.status();
    if (signature.ok()) {
      EXPECT_TRUE(f.server->ReceiveSurvivorSignature(*signature).ok());
    }
  }
  absl::StatusOr<UnmaskRequest> request = f.server->CloseConsistency();
  EXPECT_TRUE(request.ok()) << request.status();
  return request.ok() ? *request : UnmaskRequest{};
}

// Drives a round up to the unmask request, every survivor signing; returns it.
UnmaskRequest UpToUnmask(Federation& f, const std::set<int>& vanish_before_input) {
  return SignAndClose(f, UpToConsistency(f, vanish_before_input));
}

TEST(SecAggProtocolTest, ClientRefusesToRevealBothSharesOfOnePeer) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 10);
  const SurvivorList list = UpToConsistency(f, {});
  const int peer = f.server->graph().Neighbors(4)[0];
  // A list without client 4, which sent its input (its neighbours would then be asked for its mask
  // key): it refuses to sign it.
  SurvivorList self_dropped = list;
  self_dropped.survivors.erase(
      std::find(self_dropped.survivors.begin(), self_dropped.survivors.end(), 4));
  absl::StatusOr<SurvivorSignature> unsigned_list = f.clients[4]->SignSurvivors(self_dropped);
  EXPECT_EQ(unsigned_list.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unsigned_list.status().message()),
              HasSubstr("client 4 refuses to sign the survivors: the server does not list it"));
  const UnmaskRequest honest = SignAndClose(f, list);
  ASSERT_EQ(honest.signatures.size(), 30u);
  // The survivors it signed, and the peer also "dropped": asks for its mask key and its self seed.
  UnmaskRequest evil = honest;
  evil.dropped.push_back(peer);
  absl::StatusOr<UnmaskResponse> refused = f.clients[4]->Unmask(evil);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("asks for both the self-mask-seed share and the mask-key share of client " +
                        std::to_string(peer)));
  // Asking it as a dropped client (survivors other than the set it signed) is refused too; the
  // honest request still works once.
  UnmaskRequest as_dropped = honest;
  as_dropped.survivors.erase(
      std::find(as_dropped.survivors.begin(), as_dropped.survivors.end(), 4));
  as_dropped.dropped.push_back(4);
  absl::StatusOr<UnmaskResponse> not_signed = f.clients[4]->Unmask(as_dropped);
  EXPECT_EQ(not_signed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(not_signed.status().message()),
              HasSubstr("client 4 refuses to unmask: the survivors in the request are not the set "
                        "it signed (29 listed, 30 signed)"));
  absl::StatusOr<UnmaskResponse> ok = f.clients[4]->Unmask(honest);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->self_seed_shares.size(), 20u);
  EXPECT_TRUE(ok->mask_key_shares.empty());
  // A second request, whatever it asks, is refused: shares are revealed once.
  UnmaskRequest later = honest;
  later.survivors.erase(std::find(later.survivors.begin(), later.survivors.end(), peer));
  later.dropped = {peer};
  absl::StatusOr<UnmaskResponse> again = f.clients[4]->Unmask(later);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("out of order"));
}

TEST(SecAggProtocolTest, ClientRefusesToSignASurvivorListWithTooFewOfItsNeighbours) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 25);
  const SurvivorList list = UpToConsistency(f, {});
  // Ten of client 0's twenty neighbours left out: its own seed could not be rebuilt (t = 11).
  const std::vector<int>& nb = f.server->graph().Neighbors(0);
  const std::set<int> left_out(nb.begin(), nb.begin() + 10);
  SurvivorList few;
  for (int c : list.survivors) {
    if (left_out.count(c) == 0) few.survivors.push_back(c);
  }
  absl::StatusOr<SurvivorSignature> refused = f.clients[0]->SignSurvivors(few);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("client 0 refuses to sign the survivors: only 10 of its neighbours are "
                        "listed, 11 needed"));
  EXPECT_TRUE(f.clients[0]->holds_secrets());
  // Nine left out still leave 11: signed.
  few.survivors.push_back(nb[0]);
  std::sort(few.survivors.begin(), few.survivors.end());
  EXPECT_TRUE(f.clients[0]->SignSurvivors(few).ok());
}

TEST(SecAggProtocolTest, TamperedRelayedShareIsRefused) {
  const SecAggParams params = *DefaultSecAggParams(8);
  Federation f = MakeFederation(params, 20, 11);
  for (int c = 0; c < 8; ++c)
    ASSERT_TRUE(f.server->ReceiveKeys(*f.clients[c]->AdvertiseKeys()).ok());
  KeyDirectory dir = *f.server->CloseAdvertiseKeys();
  for (int c = 0; c < 8; ++c)
    ASSERT_TRUE(f.server->ReceiveShares(*f.clients[c]->ShareKeys(dir)).ok());
  std::map<int, ShareBundle> bundles = *f.server->CloseShareKeys();
  ShareBundle bad = bundles[2];
  bad.ciphertexts.begin()->second[20] ^= 0x80;
  absl::StatusOr<MaskedInput> m = f.clients[2]->MaskEncodedInput(bad, f.encodings[2]);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("authentication failed"));
  // A bundle relayed to the wrong client does not open either.
  absl::StatusOr<MaskedInput> wrong = f.clients[2]->MaskEncodedInput(bundles[3], f.encodings[2]);
  EXPECT_FALSE(wrong.ok());
}

TEST(SecAggProtocolTest, ServerRefusesOutOfOrderDuplicateAndUnknownMessages) {
  const SecAggParams params = *DefaultSecAggParams(5);
  Federation f = MakeFederation(params, 10, 12);
  KeyAdvertisement a0 = *f.clients[0]->AdvertiseKeys();
  ASSERT_TRUE(f.server->ReceiveKeys(a0).ok());
  EXPECT_EQ(f.server->ReceiveKeys(a0).code(), absl::StatusCode::kAlreadyExists);
  KeyAdvertisement stranger = a0;
  stranger.client = 5;
  EXPECT_EQ(f.server->ReceiveKeys(stranger).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.server->ReceiveMaskedInput(MaskedInput{.client = 0, .words = {}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      f.server->ReceiveSurvivorSignature(SurvivorSignature{.client = 0, .signature = {}}).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.server->CloseConsistency().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.server->CloseAdvertiseKeys().status().code(),
            absl::StatusCode::kFailedPrecondition);  // 1 < t + 1 clients
  EXPECT_EQ(f.clients[1]->ShareKeys(KeyDirectory{}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // before AdvertiseKeys
  EXPECT_EQ(f.clients[1]->SignSurvivors(SurvivorList{}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // before its masked input
}

TEST(SecAggProtocolTest, ConsistencyStageRefusesWhoCannotSignAndTooFewSigners) {
  const SecAggParams params = *DefaultSecAggParams(8);  // k = 7, t = 4; 5 of U1 must sign
  Federation f = MakeFederation(params, 10, 26);
  const SurvivorList list = UpToConsistency(f, {6});
  ASSERT_EQ(list.survivors, (std::vector<int>{0, 1, 2, 3, 4, 5, 7}));
  absl::Status st =
      f.server->ReceiveSurvivorSignature(SurvivorSignature{.client = 6, .signature = {}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("client 6 signed the survivors but is not one"));
  st = f.server->ReceiveSurvivorSignature(SurvivorSignature{.client = 8, .signature = {}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("client id 8 is outside [0, 8)"));
  for (int c : {0, 1, 2, 3}) {
    absl::StatusOr<SurvivorSignature> signature = f.clients[c]->SignSurvivors(list);
    ASSERT_TRUE(signature.ok()) << signature.status();
    ASSERT_TRUE(f.server->ReceiveSurvivorSignature(*signature).ok());
    if (c == 0) {
      st = f.server->ReceiveSurvivorSignature(*signature);
      EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
      EXPECT_THAT(std::string(st.message()), HasSubstr("client 0 already signed the survivors"));
    }
  }
  // A client signs once.
  EXPECT_EQ(f.clients[0]->SignSurvivors(list).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // 4 of the 8 clients of U1 (not of the 7 survivors) signed: not more than half.
  absl::StatusOr<UnmaskRequest> early = f.server->CloseConsistency();
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()),
              HasSubstr("only 4 survivors signed the survivor set; 5 of the 8 sites of the "
                        "round (a majority with 0 of them colluding) must sign it before "
                        "any reveals a share"));
  // The stage stays open: a fifth signature closes it.
  ASSERT_TRUE(f.server->ReceiveSurvivorSignature(*f.clients[4]->SignSurvivors(list)).ok());
  absl::StatusOr<UnmaskRequest> request = f.server->CloseConsistency();
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->survivors, list.survivors);
  EXPECT_EQ(request->dropped, std::vector<int>{6});
  std::vector<int> signers;
  for (const auto& [c, endorsement] : request->signatures) signers.push_back(c);
  EXPECT_EQ(signers, (std::vector<int>{0, 1, 2, 3, 4}));
  // Too late to sign; a survivor that did not sign is not heard at the unmasking.
  absl::StatusOr<SurvivorSignature> late = f.clients[5]->SignSurvivors(list);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(f.server->ReceiveSurvivorSignature(*late).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<UnmaskResponse> unheard = f.clients[5]->Unmask(*request);
  ASSERT_TRUE(unheard.ok()) << unheard.status();
  st = f.server->ReceiveUnmask(*unheard);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("client 5 answered the unmasking but did not sign the survivor set"));
  // The five signers' shares suffice (t = 4 per secret): exact.
  for (const auto& [c, endorsement] : request->signatures) {
    absl::StatusOr<UnmaskResponse> r = f.clients[c]->Unmask(*request);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(f.server->ReceiveUnmask(*r).ok());
  }
  absl::StatusOr<AggregateResult> result = f.server->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->survivors, list.survivors);
  EXPECT_TRUE(result->sum == PlainSum32(f, list.survivors));
}

TEST(SecAggProtocolTest, LateUnmaskAnswersLetAFailedFinishSucceed) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 200, 16);
  UnmaskRequest request = UpToUnmask(f, {});
  const std::vector<int>& nb = f.server->graph().Neighbors(0);
  const std::set<int> late(nb.begin(), nb.begin() + 10);
  for (const auto& [c, endorsement] : request.signatures) {
    if (late.count(c) != 0) continue;
    ASSERT_TRUE(f.server->ReceiveUnmask(*f.clients[c]->Unmask(request)).ok());
  }
  EXPECT_EQ(f.server->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  for (int c : late) ASSERT_TRUE(f.server->ReceiveUnmask(*f.clients[c]->Unmask(request)).ok());
  absl::StatusOr<AggregateResult> result = f.server->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->sum == PlainSum32(f, request.survivors));
}

// Answers the unmask request of every signer, `tamper` changing each response before the server
// receives it; the refused ones are collected by client. Returns Finish's result.
absl::StatusOr<AggregateResult> UnmaskAndFinish(Federation& f, const UnmaskRequest& request,
                                                const std::function<void(UnmaskResponse&)>& tamper,
                                                std::map<int, absl::Status>* refused = nullptr) {
  for (const auto& [c, endorsement] : request.signatures) {
    absl::StatusOr<UnmaskResponse> r = f.clients[c]->Unmask(request);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return r.status();
    tamper(*r);
    absl::Status st = f.server->ReceiveUnmask(*r);
    if (!st.ok() && refused != nullptr) (*refused)[c] = st;
  }
  return f.server->Finish();
}

// Adds one to a piece of the n-th share of `owner` the server receives (counting from 0).
std::function<void(UnmaskResponse&)> CorruptNth(int owner, std::set<int> nth, bool mask_key) {
  auto seen = std::make_shared<int>(0);
  return [=](UnmaskResponse& r) {
    std::map<int, ShamirShare>& shares = mask_key ? r.mask_key_shares : r.self_seed_shares;
    auto it = shares.find(owner);
    if (it == shares.end()) return;
    if (nth.count((*seen)++) != 0) it->second.y[0] = (it->second.y[0] + 1) % kShamirPrime;
  };
}

TEST(SecAggProtocolTest, OneWrongMaskKeyShareIsOutvoted) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 14);
  const int victim = 7;  // drops before its masked input; its mask key must be rebuilt
  UnmaskRequest request = UpToUnmask(f, {victim});
  ASSERT_EQ(request.dropped, std::vector<int>{victim});
  // The first share the server receives is wrong: the first t do not give the advertised public
  // key, another t-subset does.
  absl::StatusOr<AggregateResult> result =
      UnmaskAndFinish(f, request, CorruptNth(victim, {0}, /*mask_key=*/true));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->sum == PlainSum32(f, request.survivors));
}

TEST(SecAggProtocolTest, WrongRevealedMaskKeySharesAreDetected) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 14);
  const int victim = 7;
  UnmaskRequest request = UpToUnmask(f, {victim});
  // 20 shares, t = 11: every window of 11 consecutive shares holds the 6th or the 16th.
  absl::StatusOr<AggregateResult> result =
      UnmaskAndFinish(f, request, CorruptNth(victim, {5, 15}, /*mask_key=*/true));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("mask key reconstructed for client 7 does not match"));
}

TEST(SecAggProtocolTest, OneWrongSelfSeedShareIsOutvoted) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 17);
  UnmaskRequest request = UpToUnmask(f, {});
  absl::StatusOr<AggregateResult> result =
      UnmaskAndFinish(f, request, CorruptNth(0, {0}, /*mask_key=*/false));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->sum == PlainSum32(f, request.survivors));
}

TEST(SecAggProtocolTest, InconsistentSelfSeedSharesFailNamingTheClient) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 17);
  UnmaskRequest request = UpToUnmask(f, {});
  absl::StatusOr<AggregateResult> result =
      UnmaskAndFinish(f, request, CorruptNth(0, {5, 15}, /*mask_key=*/false));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("the self-mask seed of client 0 cannot be rebuilt"));
}

TEST(SecAggProtocolTest, AConsistentWrongSelfSeedGivesDataLossNotAModel) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 18);
  UnmaskRequest request = UpToUnmask(f, {});
  // Every share of client 3's seed is replaced by a share of another secret at the same point:
  // they agree, and rebuild a wrong seed that no share check can catch.
  auto rng = MakeDeterministicRandomSource(99);
  Key32 wrong{};
  ASSERT_TRUE(rng->Fill(wrong).ok());
  std::vector<uint64_t> xs;
  for (int c = 0; c < params.num_clients; ++c) xs.push_back(static_cast<uint64_t>(c) + 1);
  std::vector<ShamirShare> fake = *ShamirSplit(wrong, params.threshold, xs, *rng);
  absl::StatusOr<AggregateResult> result = UnmaskAndFinish(f, request, [&](UnmaskResponse& r) {
    if (r.self_seed_shares.count(3) != 0) r.self_seed_shares[3] = fake[r.client];
  });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("a client revealed a wrong share or masked a wrong input"));
}

TEST(SecAggProtocolTest, AWrongMaskedInputGivesDataLossNotAModel) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 19);
  // Client 3 masks an encoding far outside what quantization gives, with an honest weight.
  f.encodings[3][5] = uint64_t{1} << 31;
  UnmaskRequest request = UpToUnmask(f, {});
  EXPECT_FALSE(f.server->unmasked());
  absl::StatusOr<AggregateResult> result = UnmaskAndFinish(f, request, [](UnmaskResponse&) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  const std::string message(result.status().message());
  EXPECT_THAT(message, HasSubstr("the unmasked sum is out of range at coordinate 5 (outside +-"));
  // The server saw the sum: the caller must not run the round again (and is told so).
  EXPECT_TRUE(f.server->unmasked());
  // No value of the unmasked sum leaves in the message: not the coordinate's mean (the only other
  // numbers are the index and the public bound c + step).
  absl::StatusOr<std::vector<float>> mean =
      DecodeWeightedMean(params, PlainSum32(f, request.survivors));
  ASSERT_TRUE(mean.ok());
  EXPECT_THAT(message, ::testing::Not(HasSubstr(absl::StrCat((*mean)[5]))));
}

TEST(SecAggProtocolTest, AnOutOfRangeTotalWeightIsRefusedWithoutItsValue) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 22);
  f.encodings[3].back() += uint64_t{1} << 31;  // the weight word
  UnmaskRequest request = UpToUnmask(f, {});
  absl::StatusOr<AggregateResult> result = UnmaskAndFinish(f, request, [](UnmaskResponse&) {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  const std::string message(result.status().message());
  EXPECT_THAT(message, HasSubstr("the unmasked total weight is outside ["));
  EXPECT_TRUE(f.server->unmasked());
  const uint64_t weight = PlainSum32(f, request.survivors).back();
  EXPECT_THAT(message, ::testing::Not(HasSubstr(absl::StrCat(weight))));
}

TEST(SecAggProtocolTest, AClientRefusesListsPaddedWithIdsThatAreNoClients) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 23);
  const SurvivorList list = UpToConsistency(f, {7});  // 7: advertised and shared, then dropped
  const int asked = list.survivors[0];
  // Stage 4: a survivor list padded with an id that is no client of the round, or repeating one.
  for (int extra : {1000, -5, list.survivors[1]}) {
    SurvivorList padded = list;
    padded.survivors.push_back(extra);
    absl::StatusOr<SurvivorSignature> s = f.clients[asked]->SignSurvivors(padded);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << extra;
    EXPECT_THAT(
        std::string(s.status().message()),
        HasSubstr(absl::StrCat(
            "client ", asked, " refuses to sign the survivors: the server's list holds ", extra,
            extra == list.survivors[1] ? " twice"
                                       : ", which did not advertise keys in this round")));
  }
  const UnmaskRequest request = SignAndClose(f, list);  // the refusals left it able to sign
  ASSERT_EQ(request.dropped, std::vector<int>{7});
  // Stage 5: survivors padded are not the set it signed; dropped ids padded are refused by name.
  for (int extra : {1000, -5, list.survivors[1]}) {
    UnmaskRequest padded = request;
    padded.survivors.push_back(extra);
    absl::StatusOr<UnmaskResponse> r = f.clients[asked]->Unmask(padded);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << extra;
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("the survivors in the request are not the set it signed"));
  }
  for (int extra : {1000, -5, 7}) {
    UnmaskRequest padded = request;
    padded.dropped.push_back(extra);
    absl::StatusOr<UnmaskResponse> r = f.clients[asked]->Unmask(padded);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << extra;
    EXPECT_THAT(
        std::string(r.status().message()),
        HasSubstr(absl::StrCat(
            "client ", asked, " refuses to unmask: the server's list of dropped clients holds ",
            extra, extra == 7 ? " twice" : ", which did not advertise keys in this round")));
  }
  EXPECT_TRUE(f.clients[asked]->Unmask(request).ok());  // refusals leave the session as it was
}

// Key material is overwritten once no longer needed: a client's private keys, self-mask seed and
// the shares it holds once it answered the unmasking, not at the session's end only.
TEST(SecAggProtocolTest, AClientForgetsItsSecretsOnceItAnsweredTheUnmasking) {
  Key32 key;
  key.fill(0xab);
  Wipe(key);
  EXPECT_EQ(key, Key32{});
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 24);
  const SurvivorList list = UpToConsistency(f, {});
  const int c = list.survivors[0];
  EXPECT_TRUE(f.clients[c]->holds_secrets());
  // A refused list or request (an id that is no client) keeps them: the right one may still come.
  SurvivorList padded_list = list;
  padded_list.survivors.push_back(params.num_clients);
  EXPECT_FALSE(f.clients[c]->SignSurvivors(padded_list).ok());
  EXPECT_TRUE(f.clients[c]->holds_secrets());
  const UnmaskRequest request = SignAndClose(f, list);
  EXPECT_TRUE(f.clients[c]->holds_secrets()) << "signing reveals nothing";
  UnmaskRequest padded = request;
  padded.survivors.push_back(params.num_clients);
  EXPECT_FALSE(f.clients[c]->Unmask(padded).ok());
  EXPECT_TRUE(f.clients[c]->holds_secrets());
  ASSERT_TRUE(f.clients[c]->Unmask(request).ok());
  EXPECT_FALSE(f.clients[c]->holds_secrets());
  EXPECT_EQ(f.clients[c]->Unmask(request).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SecAggProtocolTest, AFailureBeforeTheMasksAreRemovedLeavesTheSumMasked) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 21);
  UnmaskRequest request = UpToUnmask(f, {});
  // Too few answers to rebuild anyone's seed: nothing is unmasked, and more may still come.
  absl::StatusOr<UnmaskResponse> one = f.clients[request.survivors[0]]->Unmask(request);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(f.server->ReceiveUnmask(*one).ok());
  EXPECT_EQ(f.server->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(f.server->unmasked());
}

TEST(SecAggProtocolTest, AnOutOfFieldShareDropsOnlyItsSender) {
  const SecAggParams params = ProtocolParams();
  Federation f = MakeFederation(params, 50, 20);
  UnmaskRequest request = UpToUnmask(f, {});
  const int liar = request.survivors[2];
  int owner = -1;
  std::map<int, absl::Status> refused;
  absl::StatusOr<AggregateResult> result = UnmaskAndFinish(
      f, request,
      [&](UnmaskResponse& r) {
        if (r.client != liar) return;
        owner = r.self_seed_shares.begin()->first;
        r.self_seed_shares.begin()->second.y[4] = kShamirPrime + 3;
      },
      &refused);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[liar].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused[liar].message()),
              HasSubstr(absl::StrCat("client ", liar, " revealed a self-mask-seed share of client ",
                                     owner, " with a value outside the field")));
  // The others' shares suffice: the round still unmasks, exactly.
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->sum == PlainSum32(f, request.survivors));
}

TEST(SecAggProtocolTest, ServerRefusesKeysItsNeighboursWouldRefuse) {
  const SecAggParams params = *DefaultSecAggParams(8);
  Federation f = MakeFederation(params, 10, 22);
  const KeyAdvertisement a0 = *f.clients[0]->AdvertiseKeys();
  ASSERT_TRUE(f.server->ReceiveKeys(a0).ok());
  const KeyAdvertisement a1 = *f.clients[1]->AdvertiseKeys();
  auto refused = [&](KeyAdvertisement bad, const std::string& why) {
    const absl::Status st = f.server->ReceiveKeys(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(std::string(st.message()), HasSubstr("client 1 advertised")) << why;
    return std::string(st.message());
  };
  KeyAdvertisement bad = a1;
  bad.mask_public = a1.cipher_public;
  EXPECT_THAT(refused(bad, "same key twice"), HasSubstr("the same key"));
  bad = a1;
  bad.mask_public = a0.cipher_public;
  EXPECT_THAT(refused(bad, "client 0's key"), HasSubstr("client 0 already advertised"));
  bad = a1;
  bad.cipher_public = a0.mask_public;
  refused(bad, "client 0's other key");
  Key32 one{};
  one[0] = 1;
  Key32 p_plus_one{};  // 2^255 - 18: u = 1 written unreduced
  p_plus_one.fill(0xff);
  p_plus_one[0] = 0xee;
  p_plus_one[31] = 0x7f;
  for (const Key32& small : {Key32{}, one, p_plus_one}) {
    bad = a1;
    bad.cipher_public = small;
    EXPECT_THAT(refused(bad, "small order"), HasSubstr("small order"));
    bad = a1;
    bad.mask_public = small;
    refused(bad, "small order");
  }
  // Refusals leave nothing behind: its real keys are taken, and the others share as usual.
  ASSERT_TRUE(f.server->ReceiveKeys(a1).ok());
  for (int c = 2; c < 8; ++c) {
    const KeyAdvertisement a = *f.clients[c]->AdvertiseKeys();
    if (c == 5) {
      KeyAdvertisement copy = a;
      copy.cipher_public = a1.mask_public;
      EXPECT_EQ(f.server->ReceiveKeys(copy).code(), absl::StatusCode::kInvalidArgument);
      continue;  // client 5 is dropped
    }
    ASSERT_TRUE(f.server->ReceiveKeys(a).ok());
  }
  const KeyDirectory dir = *f.server->CloseAdvertiseKeys();
  EXPECT_EQ(dir.keys.size(), 7u);
  for (int c = 0; c < 8; ++c) {
    if (c == 5) continue;
    absl::StatusOr<EncryptedShares> shares = f.clients[c]->ShareKeys(dir);
    ASSERT_TRUE(shares.ok()) << shares.status();
    EXPECT_TRUE(f.server->ReceiveShares(*shares).ok());
  }
}

TEST(SecAggProtocolTest, ServerRefusesSharesNotOneSealedShareForEveryNeighbour) {
  const SecAggParams params = *DefaultSecAggParams(8);  // k = 7: everyone
  Federation f = MakeFederation(params, 10, 23);
  for (int c = 0; c < 8; ++c) {
    if (c == 6) continue;  // never advertises: no shares go to it
    ASSERT_TRUE(f.server->ReceiveKeys(*f.clients[c]->AdvertiseKeys()).ok());
  }
  const KeyDirectory dir = *f.server->CloseAdvertiseKeys();
  const EncryptedShares honest = *f.clients[0]->ShareKeys(dir);
  ASSERT_EQ(honest.ciphertexts.size(), 6u);
  for (const auto& [to, sealed] : honest.ciphertexts) EXPECT_EQ(sealed.size(), kSealedShareBytes);
  auto expect_refused = [&](const EncryptedShares& m, const std::string& what) {
    const absl::Status st = f.server->ReceiveShares(m);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(st.message()), HasSubstr("client 0")) << what;
    return std::string(st.message());
  };
  EncryptedShares bad = honest;
  bad.ciphertexts.erase(3);
  EXPECT_THAT(expect_refused(bad, "one missing"), HasSubstr("sent no shares to client 3"));
  bad = honest;
  bad.ciphertexts[6] = honest.ciphertexts.at(1);
  EXPECT_THAT(expect_refused(bad, "one too many"), HasSubstr("client 6"));
  bad = honest;
  bad.ciphertexts[2].pop_back();
  EXPECT_THAT(expect_refused(bad, "short"),
              HasSubstr(absl::StrCat(kSealedShareBytes - 1, " bytes, not ", kSealedShareBytes)));
  bad = honest;
  bad.ciphertexts[2].push_back(0);
  expect_refused(bad, "long");
  EXPECT_TRUE(f.server->ReceiveShares(honest).ok());
}

// Chi-square statistic of the top 4 bits of 32-bit words over 16 bins.
double ChiSquareHighBits(std::span<const uint64_t> words) {
  std::vector<double> bins(16, 0);
  for (uint64_t w : words) bins[(w >> 28) & 15] += 1;
  const double expected = static_cast<double>(words.size()) / 16;
  double chi2 = 0;
  for (double b : bins) chi2 += (b - expected) * (b - expected) / expected;
  return chi2;
}

TEST(SecAggProtocolTest, WhatTheServerHoldsForOneClientIsUniform) {
  const SecAggParams params = ProtocolParams();
  const size_t dim = 4000;
  Federation f = MakeFederation(params, dim, 13);
  std::vector<MaskedInput> masked;
  absl::StatusOr<AggregateResult> result = RunRound(f, DropAt::kNone, {}, &masked);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(masked.size(), 30u);
  const MaskedInput& one = masked[0];
  // 15 degrees of freedom: 37.7 is the 0.999 quantile. The encoding itself (w * q < 1000 * 2^17
  // < 2^27 per client) sits in the lowest bin.
  const double masked_chi2 = ChiSquareHighBits(std::span(one.words).first(dim));
  const double plain_chi2 = ChiSquareHighBits(std::span(f.encodings[one.client]).first(dim));
  EXPECT_LT(masked_chi2, 37.7);
  EXPECT_GT(plain_chi2, 1000.0);
  // And the masked words are not correlated with the encoding: their low bits differ as often as
  // chance says (about half).
  int same_low_bit = 0;
  for (size_t i = 0; i < dim; ++i) same_low_bit += (one.words[i] & 1) == (f.encodings[0][i] & 1);
  EXPECT_NEAR(same_low_bit, dim / 2.0, 4 * std::sqrt(dim / 4.0));
}

}  // namespace
}  // namespace fl::secagg
