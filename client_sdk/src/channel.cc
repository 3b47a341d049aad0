// The client's gRPC channel (shared by Client::Create and CheckAdmission), and CheckAdmission.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client_sdk/src/grpc_wire.h"
#include "fl/client/admission.h"
#include "fl/client/dataset.h"
#include "fl/common/address.h"
#include "fl/common/chunking.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/v1/federation.grpc.pb.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"

namespace fl::client {
namespace internal {

// The largest message a site takes from the server. A model chunk is at most kMaxChunkBytes;
// the largest task is a secure round's unmask request, which carries T signers' certificates and
// signatures (about 0.9 KB each, T = floor((n + gamma n) / 2) + 1): 16 MiB holds about 18,000 of
// them, rounds of about 27,000 sampled sites at gamma 1/3.
constexpr int kMaxReceiveBytes = 16 << 20;

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(ClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A half-open connection (a server host that vanished) fails calls within ~40 s instead of
  // hanging a download or upload forever.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  if (options.insecure_plaintext) {
    if (!IsLoopbackAddress(options.server_address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plaintext is allowed only to a loopback address, not to ", options.server_address));
    }
    if (options.name.empty()) options.name = "site";
    creds = grpc::InsecureChannelCredentials();
  } else {
    if (options.ca_cert_path.empty() || options.cert_path.empty() || options.key_path.empty()) {
      return absl::InvalidArgumentError(
          "mutual TLS needs the federation CA certificate, this site's certificate and its key");
    }
    grpc::SslCredentialsOptions ssl;
    for (auto [path, out] : {std::pair{&options.ca_cert_path, &ssl.pem_root_certs},
                             std::pair{&options.cert_path, &ssl.pem_cert_chain},
                             std::pair{&options.key_path, &ssl.pem_private_key}}) {
      absl::StatusOr<std::string> text = ReadFile(*path);
      if (!text.ok()) return text.status();
      *out = *std::move(text);
    }
    if (options.name.empty()) {
      absl::StatusOr<std::string> cn = CertificateCommonName(ssl.pem_cert_chain);
      if (!cn.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(options.cert_path, ": ", cn.status().message()));
      }
      options.name = *cn;
    }
    creds = grpc::SslCredentials(ssl);
    if (!options.server_name_override.empty()) {
      args.SetSslTargetNameOverride(options.server_name_override);
    }
  }
  return grpc::CreateCustomChannel(options.server_address, creds, args);
}

}  // namespace internal

namespace internal {

void DescribeSite(const ClientOptions& options, const Trainer* trainer, fl::v1::JoinRequest& req) {
  if (trainer != nullptr) ToProto(trainer->spec(), req.mutable_model_spec());
  if (options.feature_columns.empty()) return;
  for (const std::string& column : options.feature_columns) req.add_feature_columns(column);
  req.set_feature_schema_sha256(FeatureSchemaSha256(options.feature_columns));
}

}  // namespace internal

absl::StatusOr<Admission> CheckAdmission(ClientOptions options, const Trainer* trainer,
                                         absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = internal::MakeChannel(options);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<fl::v1::Federation::Stub> stub = fl::v1::Federation::NewStub(*channel);
  grpc::ClientContext ctx;
  if (options.insecure_plaintext) ctx.AddMetadata(kClientNameHeader, options.name);
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  fl::v1::JoinRequest req;
  req.set_client_name(options.name);
  req.set_sdk_version("0.1.0");
  req.set_dry_run(true);
  internal::DescribeSite(options, trainer, req);
  fl::v1::JoinReply reply;
  if (absl::Status s = FromGrpcStatus(stub->Join(&ctx, req, &reply)); !s.ok()) return s;
  return Admission{.client_id = reply.client_id(), .run_id = reply.run_id()};
}

}  // namespace fl::client
