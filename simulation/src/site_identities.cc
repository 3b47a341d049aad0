#include "simulation/internal/site_identities.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"

namespace fl::simulation {
namespace {

constexpr int kValidDays = 30;  // a simulation's certificates outlive no run

class InMemoryIdentities final : public SiteIdentities {
 public:
  InMemoryIdentities(CertificateIssuer issuer, std::shared_ptr<const secagg::IdentityVerifier> v)
      : issuer_(std::move(issuer)), verifier_(std::move(v)) {}

  absl::StatusOr<client::internal::SecAggIdentity> For(int32_t index,
                                                       const std::string& name) override {
    absl::StatusOr<CertAndKey> cert = issuer_.IssueClient(name, kValidDays);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::unique_ptr<secagg::IdentitySigner>> signer =
        secagg::MakeX509Signer(cert->cert_pem, cert->key_pem);
    if (!signer.ok()) return signer.status();
    return client::internal::SecAggIdentity{.signer = *std::move(signer), .verifier = verifier_};
  }
  std::shared_ptr<const secagg::IdentityVerifier> verifier() const override { return verifier_; }

 private:
  const CertificateIssuer issuer_;
  const std::shared_ptr<const secagg::IdentityVerifier> verifier_;
};

class FileIdentities final : public SiteIdentities {
 public:
  FileIdentities(std::string dir, std::shared_ptr<const secagg::IdentityVerifier> v)
      : dir_(std::move(dir)), verifier_(std::move(v)) {}

  absl::StatusOr<client::internal::SecAggIdentity> For(int32_t index,
                                                       const std::string& name) override {
    const std::string base = absl::StrCat(dir_, "/clients/site-", index);
    absl::StatusOr<std::string> cert = ReadFile(base + ".pem");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(base + ".key");
    if (!key.ok()) return key.status();
    absl::StatusOr<std::unique_ptr<secagg::IdentitySigner>> signer =
        secagg::MakeX509Signer(*std::move(cert), *key);
    if (!signer.ok()) return signer.status();
    return client::internal::SecAggIdentity{.signer = *std::move(signer), .verifier = verifier_};
  }
  std::shared_ptr<const secagg::IdentityVerifier> verifier() const override { return verifier_; }

 private:
  const std::string dir_;
  const std::shared_ptr<const secagg::IdentityVerifier> verifier_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<SiteIdentities>> MakeInMemorySiteIdentities() {
  absl::StatusOr<CertAndKey> ca = MakeCertificateAuthority("fl simulation CA", kValidDays);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<CertificateIssuer> issuer = CertificateIssuer::Load(*ca);
  if (!issuer.ok()) return issuer.status();
  absl::StatusOr<std::unique_ptr<secagg::IdentityVerifier>> verifier =
      secagg::MakeX509Verifier(ca->cert_pem);
  if (!verifier.ok()) return verifier.status();
  return std::make_shared<InMemoryIdentities>(*std::move(issuer), *std::move(verifier));
}

absl::StatusOr<std::shared_ptr<SiteIdentities>> LoadSiteIdentities(const std::string& certs_dir) {
  absl::StatusOr<std::string> ca = ReadFile(certs_dir + "/ca.pem");
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::unique_ptr<secagg::IdentityVerifier>> verifier =
      secagg::MakeX509Verifier(*ca);
  if (!verifier.ok()) return verifier.status();
  return std::make_shared<FileIdentities>(certs_dir, *std::move(verifier));
}

}  // namespace fl::simulation
