// Payload chunking: how a model's bytes are cut into wire chunks and checked when reassembled.
//
// A payload is the little-endian float32 bytes of a Model. Senders cut it into chunks of at most
// kMaxChunkBytes at increasing offsets; receivers feed the chunks to a ChunkAssembler, which
// refuses anything out of order, oversized, misaligned or past the end, and checks the whole
// payload's SHA-256 at the end. No one ever needs the whole payload in one message.
#ifndef FL_COMMON_CHUNKING_H_
#define FL_COMMON_CHUNKING_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "fl/common/crypto.h"
#include "fl/common/model.h"

namespace fl {

class ChunkAssembler {
 public:
  // `value_bytes`: the size of one value of the payload's encoding (4 for float32, 2 for float16,
  // 1 for int8's codec chunks); every chunk must hold whole values.
  explicit ChunkAssembler(int64_t expected_bytes, int64_t value_bytes = sizeof(float))
      : expected_(expected_bytes), value_bytes_(value_bytes) {}

  // Accepts the next chunk. INVALID_ARGUMENT, naming the offsets and sizes, when `offset` is not
  // the number of bytes received so far, the chunk is empty, larger than kMaxChunkBytes, not a
  // whole number of values, or runs past the expected size.
  absl::Status Add(int64_t offset, std::string_view data);

  int64_t received() const { return received_; }
  int64_t expected() const { return expected_; }
  bool complete() const { return received_ == expected_; }

  // DATA_LOSS "payload truncated: received X of Y bytes" when chunks are missing;
  // INVALID_ARGUMENT "payload SHA-256 mismatch" when the digest differs from `expected_sha_hex`.
  // Call once.
  absl::Status Finish(std::string_view expected_sha_hex);

 private:
  int64_t expected_;
  int64_t value_bytes_;
  int64_t received_ = 0;
  Sha256 sha_;
};

// Calls fn(offset, bytes) for consecutive slices of `payload` of at most `chunk_bytes` bytes
// (a multiple of 4). Stops at and returns the first non-OK status fn returns.
template <typename Fn>
absl::Status ForEachChunk(std::span<const std::byte> payload, int64_t chunk_bytes, Fn&& fn) {
  for (int64_t offset = 0; offset < static_cast<int64_t>(payload.size()); offset += chunk_bytes) {
    int64_t n = std::min<int64_t>(chunk_bytes, static_cast<int64_t>(payload.size()) - offset);
    if (absl::Status s = fn(offset, payload.subspan(offset, n)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT "update holds a non-finite value (nan) at parameter N" for the first NaN or
// infinity; N counts from `first_index`.
absl::Status CheckFinite(std::span<const float> values, int64_t first_index);

}  // namespace fl

#endif  // FL_COMMON_CHUNKING_H_
