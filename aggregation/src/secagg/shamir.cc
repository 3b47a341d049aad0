#include "fl/aggregation/secagg/shamir.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"

namespace fl::secagg {
namespace {

constexpr size_t kPieceBytes[kShamirPieces] = {7, 7, 7, 7, 4};

uint64_t Reduce(unsigned __int128 v) {
  // v < 2^122: fold twice.
  uint64_t lo = static_cast<uint64_t>(v & kShamirPrime);
  uint64_t hi = static_cast<uint64_t>(v >> 61);
  uint64_t r = lo + (hi & kShamirPrime) + (hi >> 61);
  r = (r & kShamirPrime) + (r >> 61);
  return r >= kShamirPrime ? r - kShamirPrime : r;
}
uint64_t Add(uint64_t a, uint64_t b) {
  uint64_t r = a + b;
  return r >= kShamirPrime ? r - kShamirPrime : r;
}
uint64_t Sub(uint64_t a, uint64_t b) { return a >= b ? a - b : a + kShamirPrime - b; }
uint64_t Mul(uint64_t a, uint64_t b) { return Reduce(static_cast<unsigned __int128>(a) * b); }
uint64_t Pow(uint64_t a, uint64_t e) {
  uint64_t r = 1;
  while (e) {
    if (e & 1) r = Mul(r, a);
    a = Mul(a, a);
    e >>= 1;
  }
  return r;
}
uint64_t Inv(uint64_t a) { return Pow(a, kShamirPrime - 2); }

absl::StatusOr<uint64_t> RandomFieldElement(RandomSource& rng) {
  while (true) {  // rejection sampling: uniform in [0, p)
    uint64_t v = 0;
    if (absl::Status s = rng.Fill(std::span(reinterpret_cast<uint8_t*>(&v), sizeof(v))); !s.ok()) {
      return s;
    }
    v &= kShamirPrime;
    if (v < kShamirPrime) return v;
  }
}

}  // namespace

absl::StatusOr<std::vector<ShamirShare>> ShamirSplit(const Key32& secret, int threshold,
                                                     std::span<const uint64_t> xs,
                                                     RandomSource& rng) {
  if (threshold < 1 || static_cast<size_t>(threshold) > xs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Shamir threshold ", threshold, " must be in [1, number of shares = ", xs.size(), "]"));
  }
  std::set<uint64_t> seen;
  for (uint64_t x : xs) {
    if (x == 0 || x >= kShamirPrime) {
      return absl::InvalidArgumentError(absl::StrCat("Shamir point ", x, " is not in [1, p)"));
    }
    if (!seen.insert(x).second) {
      return absl::InvalidArgumentError(absl::StrCat("Shamir point ", x, " is repeated"));
    }
  }
  std::vector<ShamirShare> shares(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) shares[i].x = xs[i];
  size_t offset = 0;
  std::vector<uint64_t> coeffs(threshold);
  for (int piece = 0; piece < kShamirPieces; ++piece) {
    uint64_t value = 0;
    std::memcpy(&value, secret.data() + offset, kPieceBytes[piece]);
    offset += kPieceBytes[piece];
    coeffs[0] = value;
    for (int j = 1; j < threshold; ++j) {
      absl::StatusOr<uint64_t> c = RandomFieldElement(rng);
      if (!c.ok()) return c.status();
      coeffs[j] = *c;
    }
    for (ShamirShare& share : shares) {  // Horner
      uint64_t y = 0;
      for (int j = threshold - 1; j >= 0; --j) y = Add(Mul(y, share.x), coeffs[j]);
      share.y[piece] = y;
    }
  }
  return shares;
}

absl::StatusOr<Key32> ShamirReconstruct(std::span<const ShamirShare> shares, int threshold) {
  if (threshold < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Shamir threshold ", threshold, " < 1"));
  }
  if (shares.size() < static_cast<size_t>(threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Shamir reconstruction needs ", threshold, " shares, got ", shares.size()));
  }
  const std::span<const ShamirShare> used = shares.first(threshold);
  std::set<uint64_t> seen;
  for (const ShamirShare& s : used) {
    if (s.x == 0 || s.x >= kShamirPrime) {
      return absl::InvalidArgumentError(absl::StrCat("Shamir point ", s.x, " is not in [1, p)"));
    }
    if (!seen.insert(s.x).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two Shamir shares have the same point x = ", s.x));
    }
    for (uint64_t y : s.y) {
      if (y >= kShamirPrime) {
        return absl::InvalidArgumentError("Shamir share value is outside the field");
      }
    }
  }
  // Lagrange coefficients at 0: l_i = prod_{j != i} x_j / (x_j - x_i).
  std::vector<uint64_t> lagrange(used.size());
  for (size_t i = 0; i < used.size(); ++i) {
    uint64_t num = 1, den = 1;
    for (size_t j = 0; j < used.size(); ++j) {
      if (j == i) continue;
      num = Mul(num, used[j].x);
      den = Mul(den, Sub(used[j].x, used[i].x));
    }
    lagrange[i] = Mul(num, Inv(den));
  }
  Key32 secret{};
  size_t offset = 0;
  for (int piece = 0; piece < kShamirPieces; ++piece) {
    uint64_t value = 0;
    for (size_t i = 0; i < used.size(); ++i) value = Add(value, Mul(lagrange[i], used[i].y[piece]));
    if (value >> (8 * kPieceBytes[piece]) != 0) {
      return absl::InvalidArgumentError(
          "Shamir shares do not reconstruct a valid secret (they do not belong together)");
    }
    std::memcpy(secret.data() + offset, &value, kPieceBytes[piece]);
    offset += kPieceBytes[piece];
  }
  return secret;
}

void AppendShare(const ShamirShare& share, Bytes& out) {
  auto put = [&out](uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(share.x);
  for (uint64_t y : share.y) put(y);
}

absl::StatusOr<ShamirShare> ParseShare(std::span<const uint8_t> in) {
  if (in.size() != kShamirShareBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Shamir share is ", kShamirShareBytes, " bytes, got ", in.size()));
  }
  auto get = [&in](size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{in[at + i]} << (8 * i);
    return v;
  };
  ShamirShare share;
  share.x = get(0);
  for (int p = 0; p < kShamirPieces; ++p) share.y[p] = get(8 * (p + 1));
  return share;
}

}  // namespace fl::secagg
