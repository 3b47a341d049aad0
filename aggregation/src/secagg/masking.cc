#include <openssl/sha.h>

#include <cstring>
#include <string>

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

absl::StatusOr<Key32> Derive(const Key32& own, const Key32& peer, std::string_view label,
                             const Key32& session) {
  absl::StatusOr<Key32> shared = X25519Agree(own, peer);
  if (!shared.ok()) return shared.status();
  std::string info(label);
  info.append(reinterpret_cast<const char*>(session.data()), session.size());
  absl::StatusOr<Key32> key = DeriveKey(*shared, info);
  Wipe(*shared);
  return key;
}

void PutLabel(std::string_view label, Bytes& out) {
  out.insert(out.end(), label.begin(), label.end());
}

void PutBytes(std::span<const uint8_t> bytes, Bytes& out) {
  PutInt(static_cast<int>(bytes.size()), out);
  out.insert(out.end(), bytes.begin(), bytes.end());
}

Key32 Sha256Of(const Bytes& bytes) {
  Key32 out{};
  SHA256(bytes.data(), bytes.size(), out.data());
  return out;
}

}  // namespace

absl::StatusOr<Key32> PairwiseMaskSeed(const Key32& own_mask_private, const Key32& peer_public,
                                       const Key32& session) {
  return Derive(own_mask_private, peer_public, "fl-secagg/v2 pairwise mask seed", session);
}

absl::StatusOr<Key32> ShareEncryptionKey(const Key32& own_cipher_private, const Key32& peer_public,
                                         const Key32& session) {
  return Derive(own_cipher_private, peer_public, "fl-secagg/v2 share encryption key", session);
}

Bytes ShareAad(int from, int to, const Key32& session) {
  Bytes aad;
  PutLabel("fl-secagg/v2 shares", aad);
  PutInt(from, aad);
  PutInt(to, aad);
  aad.insert(aad.end(), session.begin(), session.end());
  return aad;
}

Bytes AdvertisementMessage(std::span<const uint8_t> context, const KeyAdvertisement& keys) {
  Bytes m;
  PutLabel("fl-secagg/v2 key advertisement", m);
  PutBytes(context, m);
  PutInt(keys.client, m);
  m.insert(m.end(), keys.cipher_public.begin(), keys.cipher_public.end());
  m.insert(m.end(), keys.mask_public.begin(), keys.mask_public.end());
  return m;
}

Key32 EntryDigest(const KeyAdvertisement& keys) {
  Bytes m;
  PutLabel("fl-secagg/v2 directory entry", m);
  PutInt(keys.client, m);
  m.insert(m.end(), keys.cipher_public.begin(), keys.cipher_public.end());
  m.insert(m.end(), keys.mask_public.begin(), keys.mask_public.end());
  PutBytes(std::span(reinterpret_cast<const uint8_t*>(keys.identity.data()), keys.identity.size()),
           m);
  return Sha256Of(m);
}

Key32 SessionHash(std::span<const uint8_t> context, const SecAggParams& p,
                  const std::map<int, Key32>& digests) {
  Bytes m;
  PutLabel("fl-secagg/v2 session", m);
  PutBytes(context, m);
  for (int v : {p.num_clients, p.num_neighbors, p.threshold, p.quantization_bits, p.modulus_bits,
                static_cast<int>(p.max_weight), static_cast<int>(p.graph_seed),
                static_cast<int>(p.graph_seed >> 32)}) {
    PutInt(v, m);
  }
  for (double v : {p.clip_range, p.corrupt_fraction, p.ddg.clip_norm, p.ddg.granularity,
                   p.ddg.site_stddev, p.ddg.beta}) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    PutInt(static_cast<int>(bits), m);
    PutInt(static_cast<int>(bits >> 32), m);
  }
  PutInt(static_cast<int>(p.ddg.rotation_seed), m);
  PutInt(static_cast<int>(p.ddg.rotation_seed >> 32), m);
  PutInt(p.ddg.modulus_bits, m);
  PutInt(static_cast<int>(digests.size()), m);
  for (const auto& [id, digest] : digests) {
    PutInt(id, m);
    m.insert(m.end(), digest.begin(), digest.end());
  }
  return Sha256Of(m);
}

uint64_t SessionGraphSeed(const Key32& session) {
  Bytes m;
  PutLabel("fl-secagg/v2 graph", m);
  m.insert(m.end(), session.begin(), session.end());
  const Key32 h = Sha256Of(m);
  uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed |= uint64_t{h[i]} << (8 * i);
  return seed;
}

Bytes SurvivorMessage(const Key32& session, const std::vector<int>& survivors) {
  Bytes m;
  PutLabel("fl-secagg/v2 survivors", m);
  m.insert(m.end(), session.begin(), session.end());
  PutInt(static_cast<int>(survivors.size()), m);
  for (int v : survivors) PutInt(v, m);
  return m;
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

namespace fl::secagg {

Bytes SessionContext(int64_t run_id, int32_t round, std::string_view task_id) {
  size_t end = task_id.find('.');
  if (end != std::string_view::npos) end = task_id.find('.', end + 1);
  const std::string text = absl::StrCat("fl run ", run_id, " round ", round, " task ",
                                        std::string(task_id.substr(0, end)));
  return Bytes(text.begin(), text.end());
}

}  // namespace fl::secagg
