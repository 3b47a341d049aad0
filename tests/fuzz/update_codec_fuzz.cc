// Fuzz target for the update codecs (fl/common/update_codec.h): what a site's float16 or int8
// update chunk decodes to, and what the encoders make of any float32 values.
//
// Input: a mode byte, a parameter byte, then the payload.
//   mode & 0x80 clear: DecodeChunk(mode % 3 = float32, float16, int8) of the payload, for as many
//     values as its size holds, or (mode & 0x40) for `parameter` values. Any chunk gives a value
//     or INVALID_ARGUMENT; a decoded chunk has the size EncodedChunkBytes says, a float16 chunk
//     holds only finite values and encodes back to the same bytes, an int8 chunk's values lie
//     within 127 of its scale, a float32 chunk is its bytes.
//   mode & 0x80 set: the payload as little-endian float32 values, CheckEncodable and EncodeUpdate
//     (int8 rounded with a generator seeded by `parameter`), then every chunk decoded again:
//     float16 rounds each value to the nearest half (ties to even), int8 is within one step
//     (the chunk's scale) of each value.
// common/src/update_codec.cc is compiled into the executable with the sanitizers.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "fl/common/update_codec.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

int64_t ValuesInBytes(UpdateEncoding encoding, size_t bytes) {
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      return static_cast<int64_t>(bytes / 4);
    case UpdateEncoding::kFloat16:
      return static_cast<int64_t>(bytes / 2);
    case UpdateEncoding::kInt8:
      return bytes > 4 ? static_cast<int64_t>(bytes) - 4 : 0;
  }
  return 0;
}

void CheckDecoded(UpdateEncoding encoding, std::span<const std::byte> chunk,
                  std::span<const float> out) {
  Check(static_cast<int64_t>(chunk.size()) ==
            EncodedChunkBytes(encoding, static_cast<int64_t>(out.size())),
        "a decoded chunk has the encoding's size");
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      Check(out.empty() || std::memcmp(out.data(), chunk.data(), chunk.size()) == 0,
            "a float32 chunk decodes to its bytes");
      return;
    case UpdateEncoding::kFloat16: {
      std::vector<std::byte> again(chunk.size());
      std::mt19937_64 rng(0);
      for (float v : out) Check(std::isfinite(v), "a decoded float16 value is finite");
      Check(CheckEncodable(encoding, out, 0).ok(), "decoded float16 values can be encoded");
      EncodeChunk(encoding, out, rng, again);
      Check(again.empty() || std::memcmp(again.data(), chunk.data(), chunk.size()) == 0,
            "a float16 chunk encodes back to its bytes");
      return;
    }
    case UpdateEncoding::kInt8: {
      if (out.empty()) return;
      float scale;
      std::memcpy(&scale, chunk.data(), sizeof(scale));
      Check(std::isfinite(scale) && scale >= 0, "a decoded int8 chunk's scale is finite and >= 0");
      // In float, as decoded: q * scale with |q| <= 127 (both may overflow to infinity, which
      // the header leaves to the callers' finiteness checks).
      for (float v : out)
        Check(std::fabs(v) <= 127.0f * scale, "a decoded int8 value is within 127 steps");
      return;
    }
  }
}

// The half `h` is the nearest to `v` (ties to the even one) among the finite halves of its sign.
void CheckNearestHalf(float v, uint16_t h) {
  const uint16_t sign = h & 0x8000u;
  const uint16_t magnitude = h & 0x7fffu;
  Check(magnitude <= 0x7bffu, "an encodable value encodes to a finite half");
  const double error = std::fabs(static_cast<double>(HalfToFloat(h)) - v);
  for (int step : {-1, 1}) {
    const int neighbour = magnitude + step;
    if (neighbour < 0 || neighbour > 0x7bff) continue;
    const double other =
        std::fabs(static_cast<double>(HalfToFloat(static_cast<uint16_t>(sign | neighbour))) - v);
    Check(error < other || (error == other && magnitude % 2 == 0),
          "float16 rounds to the nearest half, ties to even");
  }
}

void Encode(UpdateEncoding encoding, uint8_t parameter, std::string_view payload) {
  std::vector<float> values(payload.size() / 4);
  if (!values.empty()) std::memcpy(values.data(), payload.data(), values.size() * 4);
  const absl::Status encodable = CheckEncodable(encoding, values, 0);
  std::mt19937_64 rng(parameter);
  absl::StatusOr<std::vector<std::byte>> encoded = EncodeUpdate(encoding, values, rng);
  if (!encodable.ok()) {
    CheckRefusal(encodable, absl::StatusCode::kInvalidArgument, "CheckEncodable refuses");
    Check(!encoded.ok() && encoded.status() == encodable, "EncodeUpdate refuses as CheckEncodable");
    return;
  }
  Check(encoded.ok(), "EncodeUpdate encodes what CheckEncodable accepts");
  Check(static_cast<int64_t>(encoded->size()) ==
            EncodedBytes(encoding, static_cast<int64_t>(values.size())),
        "an encoded update has EncodedBytes bytes");
  // Inputs are far smaller than a codec chunk: one chunk.
  std::vector<float> decoded(values.size());
  const absl::Status s = DecodeChunk(encoding, *encoded, 0, decoded);
  Check(s.ok(), "an encoded update decodes");
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    const double d = decoded[i];
    switch (encoding) {
      case UpdateEncoding::kFloat32:
        Check(std::memcmp(&values[i], &decoded[i], 4) == 0, "float32 survives a round trip");
        break;
      case UpdateEncoding::kFloat16:
        CheckNearestHalf(values[i], FloatToHalf(values[i]));
        Check(decoded[i] == HalfToFloat(FloatToHalf(values[i])), "float16 decodes its halves");
        break;
      case UpdateEncoding::kInt8: {
        float scale;
        std::memcpy(&scale, encoded->data(), sizeof(scale));
        // Within one step of the value; the absolute term covers a scale that underflows.
        Check(std::fabs(d - v) <= scale * (1 + 1e-5) + 1e-30, "int8 is within one step");
        break;
      }
    }
  }
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fl::UpdateEncoding;
  fl::fuzz::Reader in(data, size);
  const uint8_t mode = in.U8();
  const uint8_t parameter = in.U8();
  const std::string_view payload = in.Rest();
  const auto encoding = static_cast<UpdateEncoding>(mode % 3);
  if ((mode & 0x80) != 0) {
    fl::fuzz::Encode(encoding, parameter, payload);
    return 0;
  }
  const int64_t n =
      (mode & 0x40) != 0 ? parameter : fl::fuzz::ValuesInBytes(encoding, payload.size());
  std::vector<float> out(static_cast<size_t>(n));
  const auto chunk = std::as_bytes(std::span(payload.data(), payload.size()));
  const absl::Status s = fl::DecodeChunk(encoding, chunk, int64_t{parameter} * 1000, out);
  if (!s.ok()) {
    fl::fuzz::CheckRefusal(s, absl::StatusCode::kInvalidArgument, "DecodeChunk refuses");
    return 0;
  }
  fl::fuzz::CheckDecoded(encoding, chunk, out);
  return 0;
}
