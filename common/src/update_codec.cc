#include "fl/common/update_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fl {

namespace {

absl::Status NotFinite(float v, int64_t index) {
  return absl::InvalidArgumentError(absl::StrCat("update holds a non-finite value (",
                                                 std::isnan(v) ? "nan" : "inf", ") at parameter ",
                                                 index));
}

}  // namespace

const char* PayloadEncodingName(PayloadEncoding encoding) {
  switch (encoding) {
    case PayloadEncoding::kFloat32:
      return "FLOAT32";
    case PayloadEncoding::kMaskedUint32:
      return "MASKED_UINT32";
    case PayloadEncoding::kMaskedUint64:
      return "MASKED_UINT64";
    case PayloadEncoding::kFloat16:
      return "FLOAT16";
    case PayloadEncoding::kInt8:
      return "INT8";
  }
  return "?";
}

const char* UpdateEncodingName(UpdateEncoding encoding) {
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      return "float32";
    case UpdateEncoding::kFloat16:
      return "float16";
    case UpdateEncoding::kInt8:
      return "int8";
  }
  return "?";
}

absl::StatusOr<UpdateEncoding> ParseUpdateEncoding(std::string_view name) {
  for (UpdateEncoding e :
       {UpdateEncoding::kFloat32, UpdateEncoding::kFloat16, UpdateEncoding::kInt8}) {
    if (name == UpdateEncodingName(e)) return e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("update_encoding must be \"float32\", \"float16\" or \"int8\", got \"",
                   std::string(name), "\""));
}

int64_t ValuesPerChunk(UpdateEncoding encoding) {
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      return kMaxChunkBytes / 4;
    case UpdateEncoding::kFloat16:
      return kMaxChunkBytes / 2;
    case UpdateEncoding::kInt8:
      return kMaxChunkBytes - kInt8ScaleBytes;
  }
  return 0;
}

int64_t EncodedChunkBytes(UpdateEncoding encoding, int64_t values) {
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      return 4 * values;
    case UpdateEncoding::kFloat16:
      return 2 * values;
    case UpdateEncoding::kInt8:
      return values == 0 ? 0 : kInt8ScaleBytes + values;
  }
  return 0;
}

int64_t EncodedBytes(UpdateEncoding encoding, int64_t num_values) {
  const int64_t per = ValuesPerChunk(encoding);
  const int64_t full = num_values / per;
  return full * EncodedChunkBytes(encoding, per) +
         EncodedChunkBytes(encoding, num_values - full * per);
}

uint16_t FloatToHalf(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // infinity or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: overflow
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal m * 2^-24; scaling by 2^24 is exact and
    // nearbyint rounds to nearest even (m = 1024 is the smallest normal's encoding).
    const float m = std::nearbyint(std::bit_cast<float>(a) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(m));
  }
  uint32_t h = ((a >> 23) - 127 + 15) << 10 | ((a & 0x7fffffu) >> 13);
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // carries into the exponent
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exp = (half >> 10) & 0x1fu;
  const uint32_t mant = half & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

absl::Status CheckEncodable(UpdateEncoding encoding, std::span<const float> values,
                            int64_t first_index) {
  const int64_t n = static_cast<int64_t>(values.size());
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) return NotFinite(values[i], first_index + i);
    if (encoding == UpdateEncoding::kFloat16 && (FloatToHalf(values[i]) & 0x7c00u) == 0x7c00u) {
      return absl::InvalidArgumentError(
          absl::StrCat("update value ", values[i], " at parameter ", first_index + i,
                       " is not finite in float16 (|v| must stay below 65520)"));
    }
  }
  return absl::OkStatus();
}

void EncodeChunk(UpdateEncoding encoding, std::span<const float> values, std::mt19937_64& rng,
                 std::span<std::byte> out) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (n == 0 || static_cast<int64_t>(out.size()) < EncodedChunkBytes(encoding, n)) return;
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      if (n > 0) std::memcpy(out.data(), values.data(), static_cast<size_t>(n) * sizeof(float));
      return;
    case UpdateEncoding::kFloat16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToHalf(values[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      return;
    case UpdateEncoding::kInt8:
      break;
  }
  float max_abs = 0;
  for (float x : values) max_abs = std::max(max_abs, std::fabs(x));
  const float scale = max_abs / 127.0f;
  std::byte* dst = out.data();
  std::memcpy(dst, &scale, kInt8ScaleBytes);
  dst += kInt8ScaleBytes;
  for (float x : values) {
    int q = 0;
    if (scale > 0) {
      const double t = static_cast<double>(x) / scale;
      const double lo = std::floor(t);
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      q = static_cast<int>(lo) + (u < t - lo ? 1 : 0);
      q = std::clamp(q, -127, 127);
    }
    *dst++ = static_cast<std::byte>(static_cast<int8_t>(q));
  }
}

absl::StatusOr<std::vector<std::byte>> EncodeUpdate(UpdateEncoding encoding,
                                                    std::span<const float> values,
                                                    std::mt19937_64& rng) {
  if (absl::Status s = CheckEncodable(encoding, values, 0); !s.ok()) return s;
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<std::byte> out(static_cast<size_t>(EncodedBytes(encoding, n)));
  const int64_t per = ValuesPerChunk(encoding);
  std::span<std::byte> dst(out);
  for (int64_t first = 0; first < n; first += per) {
    const int64_t count = std::min(per, n - first);
    const size_t bytes = static_cast<size_t>(EncodedChunkBytes(encoding, count));
    EncodeChunk(encoding, values.subspan(static_cast<size_t>(first), static_cast<size_t>(count)),
                rng, dst.first(bytes));
    dst = dst.subspan(bytes);
  }
  return out;
}

absl::Status DecodeChunk(UpdateEncoding encoding, std::span<const std::byte> chunk,
                         int64_t first_index, std::span<float> out) {
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t want = EncodedChunkBytes(encoding, n);
  if (static_cast<int64_t>(chunk.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(UpdateEncodingName(encoding), " chunk at parameter ", first_index, " holds ",
                     chunk.size(), " bytes; its ", n, " values take ", want, " bytes"));
  }
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      if (n > 0) std::memcpy(out.data(), chunk.data(), chunk.size());
      return absl::OkStatus();
    case UpdateEncoding::kFloat16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, chunk.data() + 2 * i, 2);
        if ((h & 0x7c00u) == 0x7c00u) {
          return absl::InvalidArgumentError(
              absl::StrCat("update holds a non-finite float16 value (",
                           (h & 0x3ffu) != 0 ? "nan" : "inf", ") at parameter ", first_index + i));
        }
        out[i] = HalfToFloat(h);
      }
      return absl::OkStatus();
    case UpdateEncoding::kInt8:
      break;
  }
  if (n == 0) return absl::OkStatus();  // no values, no scale (EncodedChunkBytes: 0 bytes)
  float scale;
  std::memcpy(&scale, chunk.data(), kInt8ScaleBytes);
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(absl::StrCat("int8 chunk at parameter ", first_index,
                                                   " has a scale of ", scale,
                                                   "; it must be finite and >= 0"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const int8_t q = static_cast<int8_t>(chunk[kInt8ScaleBytes + i]);
    if (q == -128) {
      return absl::InvalidArgumentError(
          absl::StrCat("update holds the int8 value -128 at parameter ", first_index + i,
                       "; values are in [-127, 127]"));
    }
    out[i] = static_cast<float>(q) * scale;
  }
  return absl::OkStatus();
}

}  // namespace fl
