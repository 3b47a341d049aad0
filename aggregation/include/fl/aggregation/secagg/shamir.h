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
#include <functional>
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

// The secret from `shares` of which some may be wrong (in the field, but not on the dealer's
// polynomial). Tries t-subsets of consecutive shares, the first t, then the last t, then the
// windows between (at most shares.size() - t + 1 reconstructions), and returns the first secret
// that `verify` accepts when it is given (e.g. "its public key is the advertised one"), or else
// whose polynomial passes through at least (shares.size() + threshold) / 2 of all the shares
// (the unique-decoding bound: with more wrong shares no answer is certain). With exactly
// `threshold` shares and no `verify` this is ShamirReconstruct. INVALID_ARGUMENT as
// ShamirReconstruct for too few shares; DATA_LOSS naming how many shares there were when no
// subset qualifies.
absl::StatusOr<Key32> ShamirReconstructChecked(
    std::span<const ShamirShare> shares, int threshold,
    const std::function<bool(const Key32&)>& verify = nullptr);

// Serialization: x then the five values, 8 bytes little-endian each (48 bytes).
inline constexpr size_t kShamirShareBytes = 8 * (1 + kShamirPieces);
void AppendShare(const ShamirShare& share, Bytes& out);
absl::StatusOr<ShamirShare> ParseShare(std::span<const uint8_t> in);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_SHAMIR_H_
