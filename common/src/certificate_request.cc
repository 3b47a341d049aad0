#include "fl/common/certificate_request.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/internal/openssl_ptr.h"

namespace fl {
namespace {

using internal::BioPtr;
using internal::EvpPkeyPtr;
using X509ReqPtr = std::unique_ptr<X509_REQ, internal::OpenSslDeleter<X509_REQ_free>>;

std::string Contents(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status Failed(const char* what) {
  ERR_clear_error();
  return absl::InternalError(absl::StrCat("OpenSSL: ", what));
}

}  // namespace

absl::StatusOr<KeyAndRequest> MakeCertificateRequest(std::string_view common_name) {
  if (common_name.empty() || common_name.size() > 64) {
    return absl::InvalidArgumentError("the site's name must be 1 to 64 characters");
  }
  EvpPkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (key == nullptr) return Failed("generating a P-256 key");
  X509ReqPtr req(X509_REQ_new());
  if (req == nullptr || X509_REQ_set_version(req.get(), 0) != 1) return Failed("X509_REQ_new");
  X509_NAME* subject = X509_REQ_get_subject_name(req.get());
  if (X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.data()),
                                 static_cast<int>(common_name.size()), -1, 0) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("invalid site name \"", std::string(common_name), "\""));
  }
  if (X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) {
    return Failed("signing the request");
  }
  BioPtr key_bio(BIO_new(BIO_s_mem())), req_bio(BIO_new(BIO_s_mem()));
  if (key_bio == nullptr || req_bio == nullptr ||
      PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1 ||
      PEM_write_bio_X509_REQ(req_bio.get(), req.get()) != 1) {
    return Failed("writing PEM");
  }
  return KeyAndRequest{Contents(key_bio.get()), Contents(req_bio.get())};
}

absl::StatusOr<SignedRequest> SignCertificateRequest(const CertificateIssuer& issuer,
                                                     std::string_view request_pem,
                                                     std::string_view common_name, int valid_days) {
  BioPtr in(BIO_new_mem_buf(request_pem.data(), static_cast<int>(request_pem.size())));
  if (in == nullptr) return Failed("BIO_new_mem_buf");
  X509ReqPtr req(PEM_read_bio_X509_REQ(in.get(), nullptr, nullptr, nullptr));
  if (req == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "not a PEM certificate request (BEGIN CERTIFICATE REQUEST); make one with fl certs "
        "request at the site");
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  char group[64] = {};
  size_t group_len = 0;
  if (key == nullptr || EVP_PKEY_get_base_id(key) != EVP_PKEY_EC ||
      EVP_PKEY_get_group_name(key, group, sizeof(group), &group_len) != 1 ||
      std::string_view(group, group_len) != "prime256v1") {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the request's key is not a P-256 (prime256v1) EC key, the only kind a site certificate "
        "is issued for; make the request with fl certs request");
  }
  if (X509_REQ_verify(req.get(), key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the request's signature does not verify: it was altered, or not made with its key");
  }
  SignedRequest out;
  out.common_name = std::string(common_name);
  if (out.common_name.empty()) {
    X509_NAME* subject = X509_REQ_get_subject_name(req.get());
    const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (index >= 0) {
      unsigned char* utf8 = nullptr;
      const int n =
          ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index)));
      if (n > 0) out.common_name.assign(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
      OPENSSL_free(utf8);
    }
    if (out.common_name.empty()) {
      return absl::InvalidArgumentError("the request names no site (no CN); give --name");
    }
  }
  for (unsigned char c : out.common_name) {
    if (c < 0x20 || c == 0x7f || c == '/') {
      return absl::InvalidArgumentError(
          "the request's site name holds a control character or '/'; give --name");
    }
  }
  BioPtr pub(BIO_new(BIO_s_mem()));
  if (pub == nullptr || PEM_write_bio_PUBKEY(pub.get(), key) != 1) return Failed("PUBKEY");
  absl::StatusOr<std::string> cert =
      issuer.IssueClientForKey(out.common_name, Contents(pub.get()), valid_days);
  if (!cert.ok()) return cert.status();
  out.cert_pem = *std::move(cert);
  return out;
}

}  // namespace fl
