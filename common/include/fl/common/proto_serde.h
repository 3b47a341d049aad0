// Conversions between domain types and their fl.v1 protobuf messages. Only transport code (the
// server's service and the SDK's transport) includes this header.
#ifndef FL_COMMON_PROTO_SERDE_H_
#define FL_COMMON_PROTO_SERDE_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "fl/common/model.h"
#include "fl/v1/federation.pb.h"
#include "grpcpp/support/status.h"

namespace fl {

void ToProto(const ModelSpec& spec, v1::ModelSpec* out);
// INVALID_ARGUMENT when the spec is not valid (see ModelSpec::Validate).
absl::StatusOr<ModelSpec> FromProto(const v1::ModelSpec& spec);

// absl and gRPC status codes share their numbering; messages carry over unchanged.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace fl

#endif  // FL_COMMON_PROTO_SERDE_H_
