// Secure aggregation on the wire: the fl.v1 messages to and from fl::secagg's structs, one copy
// for both ends (the server writes a stage's task and reads submissions; the SDK reads tasks and
// writes submissions; each direction of each message is here, so that the two cannot drift).
//
// Parsing refuses what the library could not use with INVALID_ARGUMENT naming the field and the
// value, e.g. "secagg.directory[2].cipher_public has 31 bytes, expected 32"; `field` is the name
// the caller gives the message ("SecAggSubmission.keys"). Nothing secret is ever put in a message
// (keys and ciphertexts are public or sealed). Free functions, thread-safe.
#ifndef FL_WIRE_SECAGG_SERDE_H_
#define FL_WIRE_SECAGG_SERDE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/v1/federation.pb.h"

namespace fl::wire {

// INVALID_ARGUMENT for what ValidateSecAggParams refuses ("secagg.params: " and its reason), an
// example_unit < 1, or DP values that are negative or not finite (noise without clipping too).
absl::StatusOr<secagg::RoundParams> ParamsFromProto(const v1::SecAggParams& in);
void ParamsToProto(const secagg::RoundParams& in, v1::SecAggParams* out);

// At most what a site's certificate and signature may take in a key advertisement.
inline constexpr size_t kMaxIdentityBytes = 16384;
inline constexpr size_t kMaxSignatureBytes = 1024;

// Stage 1: 32-byte X25519 public keys; the identity and signature no longer than the limits
// above.
void KeysToProto(const secagg::KeyAdvertisement& in, v1::SecAggKeys* out);
absl::StatusOr<secagg::KeyAdvertisement> KeysFromProto(const v1::SecAggKeys& in,
                                                       absl::string_view field = "keys");
// A stage-2 task's directory, by client id (entries in full and by digest); INVALID_ARGUMENT
// also for a client id listed twice or a digest not of 32 bytes.
void DirectoryToProto(const secagg::KeyDirectory& in, v1::SecAggTask* out);
absl::StatusOr<secagg::KeyDirectory> DirectoryFromProto(const v1::SecAggTask& task);

// Stage 2: a client's ciphertexts by recipient; INVALID_ARGUMENT for a recipient listed twice.
void SharesToProto(const secagg::EncryptedShares& in, v1::SecAggShares* out);
absl::StatusOr<secagg::EncryptedShares> SharesFromProto(const v1::SecAggShares& in,
                                                        absl::string_view field = "shares");
// A stage-3 task's bundle, by sender; INVALID_ARGUMENT for a sender listed twice or an empty
// ciphertext.
void BundleToProto(const secagg::ShareBundle& in, v1::SecAggTask* out);
absl::StatusOr<secagg::ShareBundle> BundleFromProto(const v1::SecAggTask& task);

// Stage 4: the survivor list (each id once), and the signature (no longer than
// kMaxSignatureBytes).
void SurvivorListToProto(const secagg::SurvivorList& in, v1::SecAggTask* out);
absl::StatusOr<secagg::SurvivorList> SurvivorListFromProto(const v1::SecAggTask& task);
absl::StatusOr<secagg::SurvivorSignature> SurvivorSignatureFromBytes(const std::string& in,
                                                                     int client);

// Stage 5: the request (survivors and dropped, each id once, and the signers' endorsements,
// each signer once) and the response.
void UnmaskRequestToProto(const secagg::UnmaskRequest& in, v1::SecAggTask* out);
absl::StatusOr<secagg::UnmaskRequest> UnmaskRequestFromProto(const v1::SecAggTask& task);
void UnmaskToProto(const secagg::UnmaskResponse& in, v1::SecAggUnmask* out);
// INVALID_ARGUMENT for a share whose point is 0 or outside the field, whose y does not hold
// kShamirPieces field elements, or an owner listed twice. `client` fills UnmaskResponse::client.
absl::StatusOr<secagg::UnmaskResponse> UnmaskFromProto(const v1::SecAggUnmask& in, int client,
                                                       absl::string_view field = "unmask");

}  // namespace fl::wire

#endif  // FL_WIRE_SECAGG_SERDE_H_
