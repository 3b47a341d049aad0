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

absl::StatusOr<Key32> ShamirReconstructChecked(std::span<const ShamirShare> shares, int threshold,
                                               const std::function<bool(const Key32&)>& verify) {
  if (threshold < 1 || shares.size() < static_cast<size_t>(threshold)) {
    return ShamirReconstruct(shares, threshold);  // its refusal
  }
  const size_t t = static_cast<size_t>(threshold);
  const size_t windows = shares.size() - t + 1;
  std::vector<size_t> starts = {0};
  if (windows > 1) starts.push_back(windows - 1);
  for (size_t i = 1; i + 1 < windows; ++i) starts.push_back(i);
  std::vector<uint64_t> weight(t), basis(t), prefix(t + 1);
  for (size_t start : starts) {
    const std::span<const ShamirShare> used = shares.subspan(start, t);
    absl::StatusOr<Key32> secret = ShamirReconstruct(used, threshold);
    if (!secret.ok()) continue;  // a piece out of range: these shares do not belong together
    if (verify) {
      if (verify(*secret)) return secret;
      continue;
    }
    // Count the shares on the polynomial P through `used`: P(x) = sum_i y_i w_i prod_{j != i}
    // (x - x_j), w_i = 1 / prod_{j != i} (x_i - x_j); the products by prefix and suffix.
    for (size_t i = 0; i < t; ++i) {
      uint64_t den = 1;
      for (size_t j = 0; j < t; ++j) {
        if (j != i) den = Mul(den, Sub(used[i].x, used[j].x));
      }
      weight[i] = Inv(den);
    }
    size_t agree = t;  // the shares of `used` lie on P
    for (size_t k = 0; k < shares.size(); ++k) {
      if (k >= start && k < start + t) continue;
      const uint64_t x = shares[k].x;
      if (x == 0 || x >= kShamirPrime) continue;
      prefix[0] = 1;
      for (size_t j = 0; j < t; ++j) prefix[j + 1] = Mul(prefix[j], Sub(x, used[j].x));
      uint64_t suffix = 1;
      for (size_t i = t; i-- > 0;) {
        basis[i] = Mul(Mul(prefix[i], suffix), weight[i]);
        suffix = Mul(suffix, Sub(x, used[i].x));
      }
      bool on = true;
      for (int piece = 0; piece < kShamirPieces && on; ++piece) {
        uint64_t y = 0;
        for (size_t i = 0; i < t; ++i) y = Add(y, Mul(basis[i], used[i].y[piece]));
        on = y == shares[k].y[piece];
      }
      agree += on ? 1 : 0;
    }
    if (2 * agree >= shares.size() + t) return secret;
  }
  return absl::DataLossError(absl::StrCat("no ", threshold, " of the ", shares.size(),
                                          " Shamir shares reconstruct a secret the others confirm",
                                          verify ? " and the check accepts" : "",
                                          " (some shares are wrong)"));
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
