// Shamir t-of-n secret sharing of 32-byte secrets.
//
// Field: GF(p), p = 2^61 - 1 (a Mersenne prime: reduction is a shift and an add, products fit in
// 128 bits). A 32-byte secret is cut into five pieces of 7, 7, 7, 7 and 4 bytes (each < 2^56 < p)
// and each piece is shared with its own random polynomial of degree t - 1, so a share is five
// field elements at the holder's point x (1 <= x < p). Any t shares give the secret back; fewer
// reveal nothing about it (each piece is information-theoretically hidden).
//
// Thread-safe (no shared state); randomness comes from the caller's RandomSource.
#ifndef FL_AGGREGATION_SECAGG_SHAMIR_H_
#define FL_AGGREGATION_SECAGG_SHAMIR_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/primitives.h"

namespace fl::secagg {

inline constexpr uint64_t kShamirPrime = (uint64_t{1} << 61) - 1;
inline constexpr int kShamirPieces = 5;

struct ShamirShare {
  uint64_t x = 0;                           // the evaluation point, 1 <= x < p
  std::array<uint64_t, kShamirPieces> y{};  // one field element per piece
  bool operator==(const ShamirShare&) const = default;
};

// Shares `secret` at the points `xs` (distinct, in [1, p)) so that any `threshold` of them
// reconstruct it. INVALID_ARGUMENT when threshold < 1, threshold > xs.size(), or a point is 0,
// >= p, or repeated.
absl::StatusOr<std::vector<ShamirShare>> ShamirSplit(const Key32& secret, int threshold,
                                                     std::span<const uint64_t> xs,
                                                     RandomSource& rng);

// The secret from at least `threshold` shares (extra shares are ignored: the first `threshold`
// are used). INVALID_ARGUMENT when fewer than `threshold` shares are given, two share the same
// point, a point or value is outside the field, or the result is not a valid secret (a piece
// out of range: shares that do not belong together).
absl::StatusOr<Key32> ShamirReconstruct(std::span<const ShamirShare> shares, int threshold);

// Serialization: x then the five values, 8 bytes little-endian each (48 bytes).
inline constexpr size_t kShamirShareBytes = 8 * (1 + kShamirPieces);
void AppendShare(const ShamirShare& share, Bytes& out);
absl::StatusOr<ShamirShare> ParseShare(std::span<const uint8_t> in);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_SHAMIR_H_
