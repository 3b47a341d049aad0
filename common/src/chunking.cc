#include "fl/common/chunking.h"

#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace fl {

absl::Status ChunkAssembler::Add(int64_t offset, std::string_view data) {
  const int64_t n = static_cast<int64_t>(data.size());
  if (offset != received_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at byte offset ", offset, " is out of order: expected offset ", received_));
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat("empty chunk at offset ", offset));
  if (n > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk at offset ", offset, " holds ", n,
                                                   " bytes, more than the limit of ",
                                                   kMaxChunkBytes));
  }
  if (n % value_bytes_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at offset ", offset, " holds ", n, " bytes, not a whole number of ",
        value_bytes_ == 4 ? "float32" : absl::StrCat(value_bytes_, "-byte"), " values"));
  }
  if (offset + n > expected_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk at offset ", offset, " of ", n,
                                                   " bytes runs past the payload size of ",
                                                   expected_, " bytes"));
  }
  sha_.Update(data);
  received_ += n;
  return absl::OkStatus();
}

absl::Status ChunkAssembler::Finish(std::string_view expected_sha_hex) {
  if (received_ != expected_) {
    return absl::DataLossError(
        absl::StrCat("payload truncated: received ", received_, " of ", expected_, " bytes"));
  }
  std::string actual = sha_.FinishHex();
  if (actual != expected_sha_hex) {
    return absl::InvalidArgumentError(absl::StrCat("payload SHA-256 mismatch: sender declared ",
                                                   std::string(expected_sha_hex),
                                                   ", received bytes hash to ", actual));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(std::span<const float> values, int64_t first_index) {
  // A float is not finite when its exponent bits are all ones. Blocks of 64 are tested with one
  // branch (the loop vectorises), so a clean chunk costs a fraction of a per-value isfinite; a
  // block that fails is searched again value by value for the index to report.
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= values.size(); i += kBlock) {
    uint32_t bad = 0;
    for (size_t j = 0; j < kBlock; ++j) {
      bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(values[i + j]) & kExponent) ==
                                   kExponent);
    }
    if (bad != 0) break;
  }
  for (; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("update holds a non-finite value (", std::isnan(values[i]) ? "nan" : "inf",
                       ") at parameter ", first_index + static_cast<int64_t>(i)));
    }
  }
  return absl::OkStatus();
}

}  // namespace fl
