// Who is calling the federation service: the SHA-256 fingerprint of the client's verified,
// enrolled certificate (or, in plaintext mode, "plain:" and the name in its fl-client-name
// metadata). Every refusal is audited here, through the run's engine or, between runs, straight
// into the store.
#ifndef FL_SERVER_SERVICE_CALLER_IDENTITY_H_
#define FL_SERVER_SERVICE_CALLER_IDENTITY_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "fl/common/crypto.h"
#include "fl/server/client_limits.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "grpcpp/server_context.h"

namespace fl::server {

class CallerIdentity {
 public:
  // `verifier` is null in plaintext mode; `store` is not owned and must outlive this.
  CallerIdentity(bool insecure_plaintext, std::shared_ptr<const ClientCertificateVerifier> verifier,
                 const ClientInputLimits& limits, Store* store)
      : insecure_plaintext_(insecure_plaintext),
        verifier_(std::move(verifier)),
        limits_(limits),
        store_(store) {}

  // The caller's id. UNAUTHENTICATED without a readable certificate (or, in plaintext mode, a
  // name); PERMISSION_DENIED for a certificate that does not verify, is an admin's, or is not
  // enrolled or was revoked (each message says what to do); INVALID_ARGUMENT for a plaintext
  // name over limits.max_name_bytes. `engine` may be null (between runs). Thread-safe.
  absl::StatusOr<std::string> Identify(grpc::ServerContextBase* ctx, RoundEngine* engine);

  // Audits a refusal through `engine` (which also logs and counts it) or, when null, into the
  // store.
  void AuditRefusal(RoundEngine* engine, const std::string& client_id, const std::string& event,
                    const absl::Status& status);

 private:
  absl::StatusOr<std::string> VerifiedFingerprint(const std::string& pem, RoundEngine* engine);

  static constexpr std::chrono::seconds kVerifiedFor{60};
  static constexpr size_t kMaxVerified = 100000;
  struct Verified {
    std::string fingerprint;
    std::chrono::steady_clock::time_point checked;
  };

  const bool insecure_plaintext_;
  const std::shared_ptr<const ClientCertificateVerifier> verifier_;
  const ClientInputLimits limits_;
  Store* const store_;
  std::mutex verified_mu_;
  absl::flat_hash_map<std::string, Verified> verified_;  // by the certificate's PEM
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_CALLER_IDENTITY_H_
