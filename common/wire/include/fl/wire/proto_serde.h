// Conversions between domain types and their fl.v1 protobuf messages, and the wire's constants:
// the one place both the server's service and the SDK's transport take them from. Only transport
// code includes this header.
#ifndef FL_WIRE_PROTO_SERDE_H_
#define FL_WIRE_PROTO_SERDE_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/common/model.h"
#include "fl/common/update_codec.h"
#include "fl/v1/federation.pb.h"
#include "grpcpp/support/status.h"

namespace fl {

// The request metadata that names a client in plaintext mode (loopback only), where there is no
// certificate to name it.
inline constexpr char kClientNameHeader[] = "fl-client-name";

void ToProto(const ModelSpec& spec, v1::ModelSpec* out);
// INVALID_ARGUMENT when the spec is not valid (see ModelSpec::Validate).
absl::StatusOr<ModelSpec> FromProto(const v1::ModelSpec& spec);

// An update payload's encoding; nullopt for ENCODING_UNSPECIFIED and values this build does not
// know (the caller names the value, Encoding_Name, in its refusal).
v1::UpdateMetadata::Encoding ToProto(PayloadEncoding encoding);
std::optional<PayloadEncoding> FromProto(v1::UpdateMetadata::Encoding encoding);
// The encoding a fit task asks for (a lossy one or float32; never masked), and back: an
// unspecified one is float32 (servers before update encodings), a masked or unknown one nothing.
inline v1::UpdateMetadata::Encoding ToProto(UpdateEncoding encoding) {
  return ToProto(ToPayloadEncoding(encoding));
}
std::optional<UpdateEncoding> FitEncodingFromProto(v1::UpdateMetadata::Encoding encoding);

// absl and gRPC status codes share their numbering; messages carry over unchanged.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace fl

#endif  // FL_WIRE_PROTO_SERDE_H_
