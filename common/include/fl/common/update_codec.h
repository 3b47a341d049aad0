// Update encodings: how a client's update travels (issue 6). Shared by the client SDK, which
// encodes, and the server, which decodes as the chunks arrive.
//
// - kFloat32: the trained model's weights, little-endian float32 (the payload of a Model).
// - kFloat16: the CHANGE from the round's global model, IEEE 754 binary16, round to nearest even.
//   A change that is not finite in half precision (|v| >= 65520, or NaN) cannot be encoded.
// - kInt8: the CHANGE, in codec chunks of at most kInt8ValuesPerChunk values; each chunk is a
//   little-endian float32 scale s = max|v| / 127 over its values (0 when all are 0), followed by
//   one int8 q per value, q = stochastic rounding of v / s clamped to [-127, 127]; v ~ q * s.
//   E[q * s] = v (unbiased) and |q * s - v| <= s.
//
// Codec chunks are defined by value count, so sender and receiver agree on their boundaries: the
// k-th chunk holds values [k * ValuesPerChunk, min(n, (k + 1) * ValuesPerChunk)), and a full
// chunk of every encoding is exactly kMaxChunkBytes bytes. On the wire, each chunk message holds
// exactly one codec chunk (float32: any whole number of values, as before).
#ifndef FL_COMMON_UPDATE_CODEC_H_
#define FL_COMMON_UPDATE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/common/model.h"

namespace fl {

enum class UpdateEncoding { kFloat32, kFloat16, kInt8 };

// How an update's payload travels: an UpdateEncoding, or (secure aggregation) masked integers of
// 32 or 64 bits. The engine's UpdateMeta and the SDK's UpdateHeader both carry it; fl::wire
// converts it to the protocol's enum.
enum class PayloadEncoding { kFloat32, kMaskedUint32, kMaskedUint64, kFloat16, kInt8 };
// The protocol's name of `encoding`: "FLOAT32", "MASKED_UINT32", "MASKED_UINT64", "FLOAT16",
// "INT8" (what a site's refusal names).
const char* PayloadEncodingName(PayloadEncoding encoding);
constexpr PayloadEncoding ToPayloadEncoding(UpdateEncoding encoding) {
  switch (encoding) {
    case UpdateEncoding::kFloat32:
      return PayloadEncoding::kFloat32;
    case UpdateEncoding::kFloat16:
      return PayloadEncoding::kFloat16;
    case UpdateEncoding::kInt8:
      return PayloadEncoding::kInt8;
  }
  return PayloadEncoding::kFloat32;
}

// "float32", "float16", "int8".
const char* UpdateEncodingName(UpdateEncoding encoding);
// The inverse of UpdateEncodingName; INVALID_ARGUMENT naming `name` and the choices otherwise.
absl::StatusOr<UpdateEncoding> ParseUpdateEncoding(std::string_view name);

inline constexpr int64_t kInt8ScaleBytes = 4;
// Values in one full codec chunk: 262144 (float32), 524288 (float16), 1048572 (int8).
int64_t ValuesPerChunk(UpdateEncoding encoding);
// Encoded bytes of one codec chunk holding `values` values (at most ValuesPerChunk).
int64_t EncodedChunkBytes(UpdateEncoding encoding, int64_t values);
// Encoded bytes of a whole update of `num_values` values: 4n, 2n, or n + 4 * ceil(n / 1048572).
int64_t EncodedBytes(UpdateEncoding encoding, int64_t num_values);

// IEEE binary16 conversions; FloatToHalf rounds to nearest even (overflow gives infinity).
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);

// Whether every value can be encoded: INVALID_ARGUMENT naming the first parameter (counting from
// `first_index`) that is not finite, or (float16) not finite once in half precision.
absl::Status CheckEncodable(UpdateEncoding encoding, std::span<const float> values,
                            int64_t first_index);

// Encodes one codec chunk: `values` (at most ValuesPerChunk, checked by CheckEncodable) into
// `out`, of EncodedChunkBytes(encoding, values.size()) bytes (a smaller `out` is left alone).
// `rng` drives int8's stochastic rounding only. A sender that encodes chunk by chunk as it sends
// never holds the whole payload.
void EncodeChunk(UpdateEncoding encoding, std::span<const float> values, std::mt19937_64& rng,
                 std::span<std::byte> out);

// Encodes `values` (the change, for float16 and int8; the weights, for float32) as one payload:
// CheckEncodable, then EncodeChunk for each codec chunk.
absl::StatusOr<std::vector<std::byte>> EncodeUpdate(UpdateEncoding encoding,
                                                    std::span<const float> values,
                                                    std::mt19937_64& rng);

// Decodes one codec chunk, `chunk`, holding `out.size()` values whose first is parameter
// `first_index`, into `out`. INVALID_ARGUMENT when the chunk's size is not
// EncodedChunkBytes(encoding, out.size()), a half is infinite or NaN, an int8 chunk's scale is
// not finite or negative, or a quantized value is -128; each names the parameter (or chunk).
// Decoded values may still overflow when used; callers check finiteness of what they keep.
absl::Status DecodeChunk(UpdateEncoding encoding, std::span<const std::byte> chunk,
                         int64_t first_index, std::span<float> out);

}  // namespace fl

#endif  // FL_COMMON_UPDATE_CODEC_H_
