// Internals shared by the client and server sessions of secure aggregation: key derivation
// labels, the share plaintext, and adding a PRG mask into a vector modulo 2^m.
#ifndef FL_AGGREGATION_INTERNAL_SECAGG_MASKING_H_
#define FL_AGGREGATION_INTERNAL_SECAGG_MASKING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/shamir.h"

namespace fl::secagg::internal {

inline uint64_t ModulusMask(int modulus_bits) {
  return modulus_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << modulus_bits) - 1;
}

// HKDF(X25519(own, peer)) with the label of its use.
absl::StatusOr<Key32> PairwiseMaskSeed(const Key32& own_mask_private, const Key32& peer_public);
absl::StatusOr<Key32> ShareEncryptionKey(const Key32& own_cipher_private, const Key32& peer_public);

// Associated data of the ciphertext from `from` to `to`: binds it to both ends.
Bytes ShareAad(int from, int to);

// The plaintext of one encrypted pair of shares.
struct SharePlaintext {
  int from = -1;
  int to = -1;
  ShamirShare mask_key_share;
  ShamirShare self_seed_share;
};
Bytes SerializeSharePlaintext(const SharePlaintext& p);
absl::StatusOr<SharePlaintext> ParseSharePlaintext(std::span<const uint8_t> in);

// Adds (sign = +1) or subtracts (sign = -1) PRG(seed) into `acc` modulo 2^modulus_bits; 32-bit
// words for modulus 2^32, 64-bit words for 2^64. Keeps its scratch buffer between calls.
class MaskAdder {
 public:
  explicit MaskAdder(int modulus_bits) : modulus_bits_(modulus_bits) {}
  absl::Status Add(const Key32& seed, int sign, std::span<uint64_t> acc);

 private:
  int modulus_bits_;
  std::vector<uint32_t> words32_;
  std::vector<uint64_t> words64_;
};

}  // namespace fl::secagg::internal

#endif  // FL_AGGREGATION_INTERNAL_SECAGG_MASKING_H_
