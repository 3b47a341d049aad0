#include "absl/strings/str_cat.h"
#include "aggregation/internal/secagg_masking.h"

namespace fl::secagg::internal {
namespace {

void PutInt(int v, Bytes& out) {
  const uint32_t u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}
int GetInt(std::span<const uint8_t> in, size_t at) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= uint32_t{in[at + i]} << (8 * i);
  return static_cast<int>(u);
}

absl::StatusOr<Key32> Derive(const Key32& own, const Key32& peer, std::string_view label) {
  absl::StatusOr<Key32> shared = X25519Agree(own, peer);
  if (!shared.ok()) return shared.status();
  absl::StatusOr<Key32> key = DeriveKey(*shared, label);
  Wipe(*shared);
  return key;
}

}  // namespace

absl::StatusOr<Key32> PairwiseMaskSeed(const Key32& own_mask_private, const Key32& peer_public) {
  return Derive(own_mask_private, peer_public, "fl-secagg/v1 pairwise mask seed");
}

absl::StatusOr<Key32> ShareEncryptionKey(const Key32& own_cipher_private,
                                         const Key32& peer_public) {
  return Derive(own_cipher_private, peer_public, "fl-secagg/v1 share encryption key");
}

Bytes ShareAad(int from, int to) {
  Bytes aad = {'f', 'l', '-', 's', 'e', 'c', 'a', 'g', 'g', '/',
               'v', '1', ' ', 's', 'h', 'a', 'r', 'e', 's'};
  PutInt(from, aad);
  PutInt(to, aad);
  return aad;
}

Bytes SerializeSharePlaintext(const SharePlaintext& p) {
  Bytes out;
  out.reserve(8 + 2 * kShamirShareBytes);
  PutInt(p.from, out);
  PutInt(p.to, out);
  AppendShare(p.mask_key_share, out);
  AppendShare(p.self_seed_share, out);
  return out;
}

absl::StatusOr<SharePlaintext> ParseSharePlaintext(std::span<const uint8_t> in) {
  if (in.size() != 8 + 2 * kShamirShareBytes) {
    return absl::InvalidArgumentError(absl::StrCat("share plaintext of ", in.size(),
                                                   " bytes, expected ", 8 + 2 * kShamirShareBytes));
  }
  SharePlaintext p;
  p.from = GetInt(in, 0);
  p.to = GetInt(in, 4);
  absl::StatusOr<ShamirShare> a = ParseShare(in.subspan(8, kShamirShareBytes));
  absl::StatusOr<ShamirShare> b = ParseShare(in.subspan(8 + kShamirShareBytes, kShamirShareBytes));
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  p.mask_key_share = *a;
  p.self_seed_share = *b;
  return p;
}

absl::Status MaskAdder::Add(const Key32& seed, int sign, std::span<uint64_t> acc) {
  const uint64_t mask = ModulusMask(modulus_bits_);
  if (modulus_bits_ <= 32) {
    words32_.resize(acc.size());
    if (absl::Status s = PrgExpand32(seed, words32_); !s.ok()) return s;
    if (sign > 0) {
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = (acc[i] + words32_[i]) & mask;
    } else {
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = (acc[i] - words32_[i]) & mask;
    }
  } else {
    words64_.resize(acc.size());
    if (absl::Status s = PrgExpand64(seed, words64_); !s.ok()) return s;
    if (sign > 0) {
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = (acc[i] + words64_[i]) & mask;
    } else {
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = (acc[i] - words64_[i]) & mask;
    }
  }
  return absl::OkStatus();
}

}  // namespace fl::secagg::internal
