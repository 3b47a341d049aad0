// The SDK's conversions between the fl.v1 secure-aggregation messages and fl::secagg's structs
// (the client side of the wire; the server has its own serde in server/service/).
//
// Parsing refuses what the library could not use with INVALID_ARGUMENT naming the field and the
// value, e.g. "secagg.directory[2].cipher_public has 31 bytes, expected 32"; nothing secret is
// ever put in a message (keys and ciphertexts are public or sealed). Free functions, thread-safe.
#ifndef FL_CLIENT_SRC_SECAGG_SERDE_H_
#define FL_CLIENT_SRC_SECAGG_SERDE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client_sdk/internal/transport.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/v1/federation.pb.h"

namespace fl::client::internal {

// A round's parameters as the server sends them (client_sdk/internal/transport.h).
using SecAggRoundParams = ::fl::client::SecAggRoundParams;

// INVALID_ARGUMENT for what ValidateSecAggParams refuses ("secagg.params: " and its reason), an
// example_unit < 1, or DP values that are negative or not finite (noise without clipping too).
absl::StatusOr<SecAggRoundParams> ParamsFromProto(const v1::SecAggParams& in);
void ParamsToProto(const SecAggRoundParams& in, v1::SecAggParams* out);

// Keys: 32-byte X25519 public keys. `field` names the message in errors ("keys",
// "secagg.directory[3]").
void KeysToProto(const secagg::KeyAdvertisement& in, v1::SecAggKeys* out);
absl::StatusOr<secagg::KeyAdvertisement> KeysFromProto(const v1::SecAggKeys& in,
                                                       absl::string_view field = "keys");
// A task's directory, by client id; INVALID_ARGUMENT also for a client id listed twice.
absl::StatusOr<secagg::KeyDirectory> DirectoryFromProto(const v1::SecAggTask& task);

// Stage 2: the client's ciphertexts by recipient.
void SharesToProto(const secagg::EncryptedShares& in, v1::SecAggShares* out);
// A task's bundle, by sender; INVALID_ARGUMENT for a sender listed twice or an empty ciphertext.
absl::StatusOr<secagg::ShareBundle> BundleFromProto(const v1::SecAggTask& task);

// Stage 4: the request (survivors and dropped, each id once) and the response.
absl::StatusOr<secagg::UnmaskRequest> UnmaskRequestFromProto(const v1::SecAggTask& task);
void UnmaskToProto(const secagg::UnmaskResponse& in, v1::SecAggUnmask* out);
// The inverse of UnmaskToProto (the client never receives one; it fixes the format for tests
// and for the server's serde to mirror): INVALID_ARGUMENT for a share whose point is 0 or
// outside the field, whose y does not hold kShamirPieces field elements, or an owner twice.
absl::StatusOr<secagg::UnmaskResponse> UnmaskFromProto(const v1::SecAggUnmask& in, int client);

}  // namespace fl::client::internal

#endif  // FL_CLIENT_SRC_SECAGG_SERDE_H_
