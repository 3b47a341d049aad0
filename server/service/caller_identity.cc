#include "server/service/caller_identity.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/wire/proto_serde.h"

namespace fl::server {

// The caller's identity: the fingerprint of its verified, enrolled certificate (or, in
// plaintext mode, the name it sends). Refusals are audited here.
absl::StatusOr<std::string> CallerIdentity::Identify(grpc::ServerContextBase* ctx,
                                                     RoundEngine* engine) {
  if (insecure_plaintext_) {
    auto it = ctx->client_metadata().find(kClientNameHeader);
    if (it == ctx->client_metadata().end() || it->second.empty()) {
      return absl::UnauthenticatedError(
          "plaintext mode: send the client's name in the fl-client-name metadata");
    }
    if (static_cast<int64_t>(it->second.size()) > limits_.max_name_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plaintext mode: the fl-client-name metadata is ", it->second.size(),
          " bytes; the server takes at most ", limits_.max_name_bytes, " (limits.max_name_bytes)"));
    }
    return absl::StrCat("plain:", std::string(it->second.data(), it->second.size()));
  }
  std::vector<grpc::string_ref> certs = ctx->auth_context()->FindPropertyValues("x509_pem_cert");
  if (certs.empty()) {
    absl::Status s = absl::UnauthenticatedError("no client certificate was presented");
    AuditRefusal(engine, "", "client_refused", s);
    return s;
  }
  std::string pem(certs.front().data(), certs.front().size());
  absl::StatusOr<std::string> fingerprint = VerifiedFingerprint(pem, engine);
  if (!fingerprint.ok()) return fingerprint.status();
  absl::StatusOr<bool> enrolled = store_->IsEnrolled(*fingerprint);
  if (!enrolled.ok()) return enrolled.status();
  if (!*enrolled) {
    absl::StatusOr<std::string> cn = CertificateCommonName(pem);
    absl::StatusOr<std::optional<ClientRecord>> record = store_->Client(*fingerprint);
    const bool revoked = record.ok() && record->has_value() && (*record)->revoked_at_ms != 0;
    absl::StatusOr<CertificateIdentity> identity = verifier_->Verify(pem);
    if (!revoked && identity.ok() && identity->admin) {
      absl::Status s = absl::PermissionDeniedError(absl::StrCat(
          "certificate CN=", identity->common_name,
          " is an admin certificate, for the control API (fl run); a site joins with its own "
          "(fl certs add-site NAME)"));
      AuditRefusal(engine, *fingerprint, "client_refused", s);
      return s;
    }
    absl::Status s = absl::PermissionDeniedError(absl::StrCat(
        "client certificate ", fingerprint->substr(0, 16), " (CN=", cn.ok() ? *cn : "?", ") ",
        revoked ? absl::StrCat("was revoked at ",
                               absl::FormatTime("%Y-%m-%d %H:%M:%SZ",
                                                absl::FromUnixMillis((*record)->revoked_at_ms),
                                                absl::UTCTimeZone()),
                               "; ask the federation's operator to enroll it again "
                               "(fl admin enroll) if that was a mistake")
                : "is not enrolled in this federation; ask the federation's operator to "
                  "enroll it (fl admin enroll)"));
    AuditRefusal(engine, *fingerprint, "client_refused", s);
    if (engine != nullptr) engine->ForgetClient(*fingerprint, "revoked or not enrolled");
    return s;
  }
  return *fingerprint;
}

// The fingerprint of a certificate that verifies against the federation's CA. Parsing and
// verifying it on every call cost 30 % of the server's CPU in short rounds (10 sites, 100k
// parameters: bench/flower_compare), so a certificate that verified is trusted by its exact
// PEM for kVerifiedFor, then checked again (a certificate that expires is refused within that
// long). Refusals are never cached, and enrollment is looked up on every call by the caller,
// so a revoked site is refused at once. Refusals are audited here.
absl::StatusOr<std::string> CallerIdentity::VerifiedFingerprint(const std::string& pem,
                                                                RoundEngine* engine) {
  // A monotonic clock: a wall clock stepped back would stretch the trust.
  const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(verified_mu_);
    auto it = verified_.find(pem);
    if (it != verified_.end() && now - it->second.checked < kVerifiedFor) {
      return it->second.fingerprint;
    }
  }
  absl::StatusOr<CertificateIdentity> identity = verifier_->Verify(pem);
  if (!identity.ok()) {
    absl::StatusOr<std::string> fingerprint = CertificateFingerprint(pem);
    if (!fingerprint.ok()) {
      absl::Status s = absl::UnauthenticatedError(
          absl::StrCat("unreadable client certificate: ", fingerprint.status().message()));
      AuditRefusal(engine, "", "client_refused", s);
      return s;
    }
    AuditRefusal(engine, *fingerprint, "client_refused", identity.status());
    return identity.status();
  }
  std::lock_guard<std::mutex> lock(verified_mu_);
  // Bounded: a federation has far fewer certificates; past the bound, start over.
  if (verified_.size() >= kMaxVerified) verified_.clear();
  verified_[pem] = {identity->fingerprint, now};
  return std::move(identity->fingerprint);
}

// Audits a refusal through the engine (which also logs it and counts it), or straight into the
// store while the server has no run.
void CallerIdentity::AuditRefusal(RoundEngine* engine, const std::string& client_id,
                                  const std::string& event, const absl::Status& status) {
  if (engine != nullptr) {
    engine->AuditRefusal(client_id, event, status);
    return;
  }
  AuditRecord record;
  record.at_ms = absl::ToUnixMillis(absl::Now());
  record.client_id = client_id;
  record.event = event;
  record.detail = std::string(status.message());
  (void)store_->Audit(record);
}

}  // namespace fl::server
