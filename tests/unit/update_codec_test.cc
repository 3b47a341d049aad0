// The update encodings (fl/common/update_codec.h): exact sizes, half precision's rounding, int8's
// per-chunk scale, error bound and unbiasedness, and what a decoder refuses.
#include "fl/common/update_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"

namespace fl {
namespace {

std::vector<float> Normal(size_t n, float stddev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Decodes a whole payload chunk by chunk, as the server does.
std::vector<float> DecodeAll(UpdateEncoding e, std::span<const std::byte> payload, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t per = ValuesPerChunk(e);
  int64_t offset = 0;
  for (int64_t first = 0; first < n; first += per) {
    const int64_t k = std::min(per, n - first);
    const int64_t bytes = EncodedChunkBytes(e, k);
    EXPECT_EQ(offset, first / per * kMaxChunkBytes);
    absl::Status s = DecodeChunk(e, payload.subspan(offset, bytes), first,
                                 std::span<float>(out).subspan(first, k));
    EXPECT_TRUE(s.ok()) << s;
    offset += bytes;
  }
  EXPECT_EQ(offset, static_cast<int64_t>(payload.size()));
  return out;
}

TEST(UpdateCodecTest, NamesRoundTripAndUnknownIsRefused) {
  for (UpdateEncoding e :
       {UpdateEncoding::kFloat32, UpdateEncoding::kFloat16, UpdateEncoding::kInt8}) {
    absl::StatusOr<UpdateEncoding> back = ParseUpdateEncoding(UpdateEncodingName(e));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, e);
  }
  absl::StatusOr<UpdateEncoding> bad = ParseUpdateEncoding("bfloat16");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bfloat16"), std::string::npos);
}

TEST(UpdateCodecTest, ExactPayloadSizes) {
  EXPECT_EQ(ValuesPerChunk(UpdateEncoding::kInt8), (1 << 20) - 4);
  EXPECT_EQ(EncodedBytes(UpdateEncoding::kFloat32, 300000), 1200000);
  EXPECT_EQ(EncodedBytes(UpdateEncoding::kFloat16, 300000), 600000);
  EXPECT_EQ(EncodedBytes(UpdateEncoding::kInt8, 300000), 300004);
  EXPECT_EQ(EncodedBytes(UpdateEncoding::kInt8, 0), 0);
  // One full chunk and one value in a second.
  EXPECT_EQ(EncodedBytes(UpdateEncoding::kInt8, (1 << 20) - 3), (1 << 20) + 5);
  EXPECT_EQ(EncodedBytes(UpdateEncoding::kInt8, 3 * ((1 << 20) - 4)), 3 << 20);
  std::mt19937_64 rng(1);
  for (int64_t n : {int64_t{1}, int64_t{7851}, int64_t{(1 << 20) - 3}}) {
    std::vector<float> v = Normal(static_cast<size_t>(n), 0.01f, 2);
    for (UpdateEncoding e :
         {UpdateEncoding::kFloat32, UpdateEncoding::kFloat16, UpdateEncoding::kInt8}) {
      absl::StatusOr<std::vector<std::byte>> p = EncodeUpdate(e, v, rng);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(static_cast<int64_t>(p->size()), EncodedBytes(e, n)) << UpdateEncodingName(e);
    }
  }
}

TEST(UpdateCodecTest, HalfRoundsToNearestEvenWithinRelativeHalfUlp) {
  // Exact values and ties.
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                          // rounds to infinity
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);             // below half of it
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  // Every half converts back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  std::mt19937_64 rng(3);
  std::vector<float> v = Normal(200000, 1.f, 4);
  v.push_back(1e-3f);
  v.push_back(-40000.f);
  absl::StatusOr<std::vector<std::byte>> p = EncodeUpdate(UpdateEncoding::kFloat16, v, rng);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<float> back = DecodeAll(UpdateEncoding::kFloat16, *p, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::fabs(v[i]) >= std::ldexp(1.0f, -14)) {
      ASSERT_LE(std::fabs(back[i] - v[i]), std::ldexp(std::fabs(v[i]), -11)) << i;
    } else {  // subnormal halves: absolute half a step
      ASSERT_LE(std::fabs(back[i] - v[i]), std::ldexp(1.0f, -25)) << i;
    }
  }
}

TEST(UpdateCodecTest, HalfRefusesWhatItCannotHold) {
  std::mt19937_64 rng(5);
  std::vector<float> v = {1.f, 2.f, 70000.f};
  absl::StatusOr<std::vector<std::byte>> p = EncodeUpdate(UpdateEncoding::kFloat16, v, rng);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("parameter 2"), std::string::npos) << p.status();
  v[2] = std::numeric_limits<float>::quiet_NaN();
  p = EncodeUpdate(UpdateEncoding::kFloat16, v, rng);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("parameter 2"), std::string::npos) << p.status();
  // A decoder refuses an infinite half, naming the parameter.
  const uint16_t halves[2] = {0x3c00, 0x7c00};
  std::vector<float> out(2);
  absl::Status s = DecodeChunk(UpdateEncoding::kFloat16,
                               std::as_bytes(std::span<const uint16_t>(halves)), 100, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parameter 101"), std::string::npos) << s;
}

TEST(UpdateCodecTest, Int8ErrorIsWithinOneScaleStepPerChunk) {
  // Two chunks with very different ranges: each gets its own scale.
  const int64_t per = ValuesPerChunk(UpdateEncoding::kInt8);
  std::vector<float> v = Normal(static_cast<size_t>(per + 5000), 0.001f, 6);
  for (int64_t i = per; i < per + 5000; ++i) v[i] *= 1000.f;
  std::mt19937_64 rng(7);
  absl::StatusOr<std::vector<std::byte>> p = EncodeUpdate(UpdateEncoding::kInt8, v, rng);
  ASSERT_TRUE(p.ok()) << p.status();
  float scales[2];
  std::memcpy(&scales[0], p->data(), 4);
  std::memcpy(&scales[1], p->data() + kMaxChunkBytes, 4);
  float max0 = 0, max1 = 0;
  for (int64_t i = 0; i < per; ++i) max0 = std::max(max0, std::fabs(v[i]));
  for (int64_t i = per; i < per + 5000; ++i) max1 = std::max(max1, std::fabs(v[i]));
  EXPECT_FLOAT_EQ(scales[0], max0 / 127);
  EXPECT_FLOAT_EQ(scales[1], max1 / 127);
  std::vector<float> back = DecodeAll(UpdateEncoding::kInt8, *p, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    const float s = scales[static_cast<int64_t>(i) < per ? 0 : 1];
    ASSERT_LE(std::fabs(back[i] - v[i]), s * (1 + 1e-6f)) << i;
  }
}

TEST(UpdateCodecTest, Int8StochasticRoundingIsUnbiased) {
  // The same values encoded many times: the mean of the decoded values converges to them
  // (deterministic rounding would keep an error of up to s / 2).
  std::vector<float> v = {1.0f, 0.3f, -0.77f, 0.013f, -0.5f};  // scale 1/127
  std::mt19937_64 rng(8);
  const int draws = 20000;
  std::vector<double> sum(v.size(), 0);
  for (int d = 0; d < draws; ++d) {
    absl::StatusOr<std::vector<std::byte>> p = EncodeUpdate(UpdateEncoding::kInt8, v, rng);
    ASSERT_TRUE(p.ok());
    std::vector<float> back = DecodeAll(UpdateEncoding::kInt8, *p, static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < v.size(); ++i) sum[i] += back[i];
  }
  const double s = 1.0 / 127;
  for (size_t i = 0; i < v.size(); ++i) {
    // Standard error of the mean <= (s / 2) / sqrt(draws) = 2.8e-5; allow 5 of them.
    EXPECT_NEAR(sum[i] / draws, v[i], 5 * 0.5 * s / std::sqrt(draws)) << i;
  }
  // 0.3 lies between steps: a round-to-nearest encoder would be off by 0.3 * 127 - 38 = 0.1 step.
  EXPECT_GT(std::fabs(0.3 * 127 - std::round(0.3 * 127)) * s, 5 * 0.5 * s / std::sqrt(draws));
}

// A sender that encodes chunk by chunk (the SDK, so that it never holds the whole payload) sends
// the same bytes as EncodeUpdate, and CheckEncodable names parameters from the chunk's first.
TEST(UpdateCodecTest, ChunkByChunkEncodingEqualsTheWholePayload) {
  for (UpdateEncoding e :
       {UpdateEncoding::kFloat32, UpdateEncoding::kFloat16, UpdateEncoding::kInt8}) {
    SCOPED_TRACE(UpdateEncodingName(e));
    const int64_t per = ValuesPerChunk(e);
    const std::vector<float> v = Normal(static_cast<size_t>(2 * per + 1234), 0.3f, 7);
    const int64_t n = static_cast<int64_t>(v.size());
    std::mt19937_64 whole_rng(99);
    absl::StatusOr<std::vector<std::byte>> whole = EncodeUpdate(e, v, whole_rng);
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::mt19937_64 rng(99);
    std::vector<std::byte> streamed;
    std::vector<std::byte> chunk(static_cast<size_t>(kMaxChunkBytes));
    for (int64_t first = 0; first < n; first += per) {
      std::span<const float> values =
          std::span<const float>(v).subspan(first, std::min(per, n - first));
      ASSERT_TRUE(CheckEncodable(e, values, first).ok());
      std::span<std::byte> out(chunk.data(), EncodedChunkBytes(e, values.size()));
      EncodeChunk(e, values, rng, out);
      streamed.insert(streamed.end(), out.begin(), out.end());
    }
    EXPECT_EQ(streamed, *whole);
  }
  std::vector<float> bad(100, 0.5f);
  bad[17] = 70000.0f;
  absl::Status s = CheckEncodable(UpdateEncoding::kFloat16, bad, 1000000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at parameter 1000017"), absl::string_view::npos) << s;
  EXPECT_TRUE(CheckEncodable(UpdateEncoding::kInt8, bad, 0).ok());
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  s = CheckEncodable(UpdateEncoding::kInt8, bad, 10);
  EXPECT_NE(s.message().find("non-finite value (nan) at parameter 13"), absl::string_view::npos)
      << s;
}

TEST(UpdateCodecTest, Int8AllZeroChunkHasZeroScale) {
  std::vector<float> v(10, 0.f);
  std::mt19937_64 rng(9);
  absl::StatusOr<std::vector<std::byte>> p = EncodeUpdate(UpdateEncoding::kInt8, v, rng);
  ASSERT_TRUE(p.ok());
  std::vector<float> back = DecodeAll(UpdateEncoding::kInt8, *p, 10);
  for (float x : back) EXPECT_EQ(x, 0.f);
}

TEST(UpdateCodecTest, Int8DecoderRefusesBadScaleSizeAndMinus128) {
  std::vector<std::byte> chunk(4 + 3, std::byte{0});
  std::vector<float> out(3);
  float scale = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(chunk.data(), &scale, 4);
  absl::Status s = DecodeChunk(UpdateEncoding::kInt8, chunk, 42, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("scale"), std::string::npos) << s;
  EXPECT_NE(s.message().find("parameter 42"), std::string::npos) << s;
  scale = -1.f;
  std::memcpy(chunk.data(), &scale, 4);
  EXPECT_EQ(DecodeChunk(UpdateEncoding::kInt8, chunk, 0, out).code(),
            absl::StatusCode::kInvalidArgument);
  scale = 0.5f;
  std::memcpy(chunk.data(), &scale, 4);
  chunk[5] = std::byte{0x80};
  s = DecodeChunk(UpdateEncoding::kInt8, chunk, 10, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parameter 11"), std::string::npos) << s;
  chunk[5] = std::byte{0x7f};
  ASSERT_TRUE(DecodeChunk(UpdateEncoding::kInt8, chunk, 10, out).ok());
  EXPECT_EQ(out[1], 63.5f);
  // Wrong size.
  std::vector<float> four(4);
  s = DecodeChunk(UpdateEncoding::kInt8, chunk, 0, four);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("7 bytes"), std::string::npos) << s;
}

}  // namespace
}  // namespace fl
