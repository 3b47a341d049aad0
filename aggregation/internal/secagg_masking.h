// Internals shared by the client and server sessions of secure aggregation: key derivation
// labels, the share plaintext, and adding a PRG mask into a vector modulo 2^m.
#ifndef FL_AGGREGATION_INTERNAL_SECAGG_MASKING_H_
#define FL_AGGREGATION_INTERNAL_SECAGG_MASKING_H_

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/shamir.h"

namespace fl::secagg::internal {

inline uint64_t ModulusMask(int modulus_bits) {
  return modulus_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << modulus_bits) - 1;
}

// HKDF(X25519(own, peer)) with the label of its use and the session's hash (SessionHash) as
// context: a key of one session means nothing in another.
absl::StatusOr<Key32> PairwiseMaskSeed(const Key32& own_mask_private, const Key32& peer_public,
                                       const Key32& session);
absl::StatusOr<Key32> ShareEncryptionKey(const Key32& own_cipher_private, const Key32& peer_public,
                                         const Key32& session);

// Associated data of the ciphertext from `from` to `to`: binds it to both ends and the session.
Bytes ShareAad(int from, int to, const Key32& session);

// The bytes signed and hashed (all integers 4 bytes little-endian, each part labelled):
// what a client signs when it advertises its keys (`context` is the session's, SessionIdentity);
Bytes AdvertisementMessage(std::span<const uint8_t> context, const KeyAdvertisement& keys);
// SHA-256 of one directory entry: its id, both public keys and its identity (signatures aside);
Key32 EntryDigest(const KeyAdvertisement& keys);
// the session: SHA-256 over the context, the public parameters and the digest of every entry of
// U1 by ascending id. Every site of U1 computes it from its directory; two sites agree on it only
// when they saw the same directory;
Key32 SessionHash(std::span<const uint8_t> context, const SecAggParams& params,
                  const std::map<int, Key32>& digests);
// the graph's seed, from the session: neither the server nor any site chooses it alone;
uint64_t SessionGraphSeed(const Key32& session);
// what a client of U3 signs to say which survivor set it unmasks for (ids ascending).
Bytes SurvivorMessage(const Key32& session, const std::vector<int>& survivors);

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
