// Cryptographic primitives of secure aggregation, on OpenSSL 3's EVP API: X25519 key pairs and
// agreement, HKDF-SHA256, AES-256-GCM authenticated encryption, and AES-256-CTR as the
// pseudo-random generator that expands a 32-byte seed into mask words.
//
// Secret randomness comes from a RandomSource: the operating system's (RAND_bytes) in
// production, a seeded deterministic one in tests. Every function returns a Status naming what
// failed instead of throwing. All free functions are thread-safe; a RandomSource is not unless
// its factory says so.
#ifndef FL_AGGREGATION_SECAGG_PRIMITIVES_H_
#define FL_AGGREGATION_SECAGG_PRIMITIVES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::secagg {

using Bytes = std::vector<uint8_t>;
using Key32 = std::array<uint8_t, 32>;

// A source of secret random bytes.
class RandomSource {
 public:
  virtual ~RandomSource() = default;
  // Fills `out` entirely. INTERNAL when the source fails (e.g. RAND_bytes has no entropy).
  virtual absl::Status Fill(std::span<uint8_t> out) = 0;
};

// RAND_bytes (OpenSSL's CSPRNG, seeded by the OS). Thread-safe.
std::unique_ptr<RandomSource> MakeOsRandomSource();

// AES-256-CTR keyed by SHA-256("fl-secagg-test" || seed): the same seed gives the same bytes, so
// tests can be exact. Not for production secrets (the seed is small and known). Not thread-safe.
std::unique_ptr<RandomSource> MakeDeterministicRandomSource(uint64_t seed);

// An X25519 key pair, raw 32-byte little-endian encodings (RFC 7748).
struct X25519KeyPair {
  Key32 private_key;
  Key32 public_key;
};

// A fresh key pair from `rng`. INTERNAL when the source or OpenSSL fails.
absl::StatusOr<X25519KeyPair> GenerateX25519KeyPair(RandomSource& rng);

// The public key of a raw private key (OpenSSL clamps the scalar as RFC 7748 says).
absl::StatusOr<Key32> X25519PublicFromPrivate(const Key32& private_key);

// Overwrites `secret` with zeros in a way the compiler may not drop (OPENSSL_cleanse): for key
// material no longer needed, so that it does not linger in freed memory or a core dump.
void Wipe(std::span<uint8_t> secret);
inline void Wipe(Key32& key) { Wipe(std::span<uint8_t>(key)); }

// The raw 32-byte shared secret X25519(private_key, peer_public). INVALID_ARGUMENT when the
// peer's key is a low-order point (the shared secret would be all zeros).
absl::StatusOr<Key32> X25519Agree(const Key32& private_key, const Key32& peer_public);

// HKDF-SHA256 (RFC 5869): `length` bytes (1..8160) from `ikm`, `salt` and `info`.
absl::StatusOr<Bytes> HkdfSha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt,
                                 std::span<const uint8_t> info, size_t length);

// HKDF-SHA256 to a 32-byte key with an empty salt and `info` as the context label.
absl::StatusOr<Key32> DeriveKey(const Key32& shared_secret, std::string_view info);

// What AES-256-GCM adds to a plaintext: the nonce in front, the tag behind.
inline constexpr size_t kAesGcmNonceBytes = 12;
inline constexpr size_t kAesGcmTagBytes = 16;

// AES-256-GCM with a random 96-bit nonce from `rng`. Returns nonce (12) || ciphertext || tag (16).
// `aad` is authenticated but not encrypted.
absl::StatusOr<Bytes> AesGcmEncrypt(const Key32& key, std::span<const uint8_t> plaintext,
                                    std::span<const uint8_t> aad, RandomSource& rng);

// Opens what AesGcmEncrypt sealed. INVALID_ARGUMENT when the input is shorter than nonce plus
// tag; DATA_LOSS ("authentication failed") when the key, the aad, the nonce, the ciphertext or
// the tag differ from the sealed ones.
absl::StatusOr<Bytes> AesGcmDecrypt(const Key32& key, std::span<const uint8_t> sealed,
                                    std::span<const uint8_t> aad);

// The pseudo-random generator of masks: AES-256-CTR keyed by `seed`, zero IV, over a zero
// stream, read as little-endian words. Fills `out` entirely.
absl::Status PrgExpand32(const Key32& seed, std::span<uint32_t> out);
absl::Status PrgExpand64(const Key32& seed, std::span<uint64_t> out);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_PRIMITIVES_H_
