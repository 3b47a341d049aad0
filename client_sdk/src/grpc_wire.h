// What the SDK's gRPC files share (channel.cc, grpc_transport.cc): the channel to the server and
// the Join request's description of the site. Private to the SDK.
#ifndef FL_CLIENT_SRC_GRPC_WIRE_H_
#define FL_CLIENT_SRC_GRPC_WIRE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client_sdk/internal/transport.h"
#include "fl/client/client.h"
#include "fl/v1/federation.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace fl::client::internal {

// The channel to options.server_address: mutual TLS with the site's files (or plaintext to a
// loopback address only), the SDK's reconnect backoff and keepalive. Fills an empty
// options.name (the certificate's common name, "site" in plaintext). INVALID_ARGUMENT for
// missing TLS paths, plaintext to another host or a certificate without a common name; a
// ReadFile error for a file that cannot be read. (channel.cc)
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(ClientOptions& options);

// What a Join says about the site, for the server's admission checks: the trainer's model spec
// (none when `trainer` is null) and options.feature_columns with their SHA-256.
void DescribeSite(const ClientOptions& options, const Trainer* trainer, fl::v1::JoinRequest& req);

// A polled task as the loop sees it (grpc_transport.cc). What cannot be read (a malformed model
// spec or secure-aggregation field) is kept as the field's error for the stage that needs it.
ClientTask TaskFromProto(const fl::v1::Task& in);

}  // namespace fl::client::internal

#endif  // FL_CLIENT_SRC_GRPC_WIRE_H_
