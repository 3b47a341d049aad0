#include "fl/common/crypto.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/internal/openssl_ptr.h"

namespace fl {
namespace {

using internal::Asn1OctetStringPtr;
using internal::BigNumPtr;
using internal::BioPtr;
using internal::EvpMdCtxPtr;
using internal::EvpPkeyPtr;
using internal::GeneralNamePtr;
using internal::GeneralNamesPtr;
using internal::X509ExtensionPtr;
using internal::X509Ptr;
using internal::X509StoreCtxPtr;
using internal::X509StorePtr;

// Drains this thread's OpenSSL error queue into one line.
std::string OpenSslErrors() {
  std::vector<std::string> errors;
  while (unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    errors.emplace_back(buf);
  }
  if (errors.empty()) return "no OpenSSL error reported";
  return absl::StrJoin(errors, "; ");
}

absl::Status OpenSslError(absl::StatusCode code, absl::string_view what) {
  return absl::Status(code, absl::StrCat(what, ": ", OpenSslErrors()));
}

absl::Status Internal(absl::string_view what) {
  return OpenSslError(absl::StatusCode::kInternal, what);
}

// For failures that leave no Status to return (the Sha256 class): a broken OpenSSL install.
void CheckOpenSsl(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fatal: OpenSSL %s failed: %s\n", what, OpenSslErrors().c_str());
  std::abort();
}

absl::StatusOr<BioPtr> MemBio(std::string_view data) {
  if (data.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError("PEM input is too large");
  }
  BioPtr bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
  if (bio == nullptr) return Internal("BIO_new_mem_buf");
  return bio;
}

// Never prompts for a passphrase: our keys are unencrypted.
int NoPassphrase(char*, int, int, void*) { return 0; }

absl::StatusOr<X509Ptr> ParseCertificate(std::string_view pem, absl::string_view what) {
  ERR_clear_error();
  absl::StatusOr<BioPtr> bio = MemBio(pem);
  if (!bio.ok()) return bio.status();
  X509Ptr cert(PEM_read_bio_X509(bio->get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, " holds no PEM certificate"));
  }
  return cert;
}

absl::StatusOr<EvpPkeyPtr> ParsePrivateKey(std::string_view pem, absl::string_view what) {
  ERR_clear_error();
  absl::StatusOr<BioPtr> bio = MemBio(pem);
  if (!bio.ok()) return bio.status();
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio->get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, " holds no PEM private key"));
  }
  return key;
}

// Reads everything written to a memory BIO.
std::string BioContents(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

absl::StatusOr<CertAndKey> ToPem(X509* cert, EVP_PKEY* key) {
  BioPtr cert_bio(BIO_new(BIO_s_mem()));
  BioPtr key_bio(BIO_new(BIO_s_mem()));
  if (cert_bio == nullptr || key_bio == nullptr) return Internal("BIO_new");
  if (PEM_write_bio_X509(cert_bio.get(), cert) != 1) return Internal("PEM_write_bio_X509");
  // PKCS#8, unencrypted ("BEGIN PRIVATE KEY"), which gRPC accepts.
  if (PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Internal("PEM_write_bio_PrivateKey");
  }
  return CertAndKey{BioContents(cert_bio.get()), BioContents(key_bio.get())};
}

std::string CommonNameOf(X509* cert) {
  X509_NAME* name = X509_get_subject_name(cert);
  int index = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (index < 0) return "";
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index));
  unsigned char* utf8 = nullptr;
  int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return "";
  std::string result(reinterpret_cast<char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return result;
}

// Whether the subject carries the admin role (OU=admin, as MakeAdminCertificate writes it).
bool IsAdminCertificate(X509* cert) {
  X509_NAME* name = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(name, NID_organizationalUnitName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, NID_organizationalUnitName, i)) {
    const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    if (std::string_view(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                         static_cast<size_t>(ASN1_STRING_length(data))) == kAdminRole) {
      return true;
    }
  }
  return false;
}

// The end of the certificate's validity, in ms since the epoch (0 when it cannot be read).
int64_t NotAfterMs(X509* cert) {
  struct tm tm = {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

std::string TimeString(const ASN1_TIME* time) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || ASN1_TIME_print(bio.get(), time) != 1) return "?";
  return BioContents(bio.get());
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509ExtensionPtr ext(X509V3_EXT_nconf_nid(nullptr, ctx, nid, value));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Internal(absl::StrCat("adding X509v3 extension ", OBJ_nid2sn(nid), "=", value));
  }
  return absl::OkStatus();
}

absl::Status AddSubjectAltNames(X509* cert, const std::vector<std::string>& names) {
  GeneralNamesPtr general_names(GENERAL_NAMES_new());
  if (general_names == nullptr) return Internal("GENERAL_NAMES_new");
  for (const std::string& name : names) {
    if (name.empty() || name.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid subjectAltName \"", name, "\""));
    }
    // a2i_IPADDRESS accepts IPv4 and IPv6 text; anything else is a DNS name.
    const bool is_ip = Asn1OctetStringPtr(a2i_IPADDRESS(name.c_str())) != nullptr;
    ERR_clear_error();
    GeneralNamePtr general_name(
        a2i_GENERAL_NAME(nullptr, nullptr, nullptr, is_ip ? GEN_IPADD : GEN_DNS, name.c_str(), 0));
    if (general_name == nullptr ||
        sk_GENERAL_NAME_push(general_names.get(), general_name.get()) <= 0) {
      return Internal(absl::StrCat("adding subjectAltName ", name));
    }
    general_name.release();  // Now owned by general_names.
  }
  const int added = X509_add1_ext_i2d(cert, NID_subject_alt_name, general_names.get(),
                                      /*crit=*/0, X509V3_ADD_DEFAULT);
  if (added != 1) return Internal("adding subjectAltName");
  return absl::OkStatus();
}

absl::StatusOr<std::string> FingerprintOf(X509* cert) {
  unsigned char* der = nullptr;
  int length = i2d_X509(cert, &der);
  if (length < 0) return Internal("i2d_X509");
  std::string fingerprint =
      Sha256Hex(std::as_bytes(std::span<const unsigned char>(der, static_cast<size_t>(length))));
  OPENSSL_free(der);
  return fingerprint;
}

enum class CertKind { kAuthority, kServer, kClient, kAdmin };

// Issues a certificate for a fresh P-256 key, or for `subject_key` (a public key from a
// certificate request; the result then has no key PEM). `issuer`/`issuer_key` are null for a
// self-signed CA.
absl::StatusOr<CertAndKey> Issue(CertKind kind, std::string_view common_name, int valid_days,
                                 const std::vector<std::string>& alt_names, X509* issuer,
                                 EVP_PKEY* issuer_key, EVP_PKEY* subject_key = nullptr) {
  if (common_name.empty() || common_name.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError("the common name is empty or too long");
  }
  if (valid_days < 1) {
    return absl::InvalidArgumentError(absl::StrCat("valid_days must be >= 1, got ", valid_days));
  }
  ERR_clear_error();
  EvpPkeyPtr generated;
  if (subject_key == nullptr) {
    generated.reset(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    if (generated == nullptr) return Internal("generating a P-256 key");
  }
  EVP_PKEY* key_ptr = subject_key != nullptr ? subject_key : generated.get();
  X509Ptr cert(X509_new());
  if (cert == nullptr) return Internal("X509_new");
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1) return Internal("X509_set_version");

  // 128 random bits, top bit cleared so that the DER INTEGER is positive; never zero.
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return Internal("RAND_bytes");
  serial[0] = static_cast<unsigned char>((serial[0] & 0x7f) | 0x01);
  BigNumPtr serial_bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  if (serial_bn == nullptr ||
      BN_to_ASN1_INTEGER(serial_bn.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return Internal("setting the serial number");
  }

  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60 * 60) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), valid_days, 0, nullptr) == nullptr) {
    return Internal("setting the validity period");
  }
  // Never past the issuing CA's own end: such a certificate would stop verifying with the CA.
  if (issuer != nullptr &&
      ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(issuer)) > 0 &&
      X509_set1_notAfter(cert.get(), X509_get0_notAfter(issuer)) != 1) {
    return Internal("capping the validity period at the CA's");
  }

  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.data()),
                                 static_cast<int>(common_name.size()), -1, 0) != 1) {
    // E.g. longer than the 64 characters RFC 5280 allows.
    return OpenSslError(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat("invalid common name \"",
                     absl::string_view(common_name.data(), common_name.size()), "\""));
  }
  if (kind == CertKind::kAdmin &&
      X509_NAME_add_entry_by_NID(subject, NID_organizationalUnitName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(kAdminRole.data()),
                                 static_cast<int>(kAdminRole.size()), -1, 0) != 1) {
    return Internal("setting the admin role");
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  EVP_PKEY* signer_key = issuer_key != nullptr ? issuer_key : key_ptr;
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(cert.get(), key_ptr) != 1) {
    return Internal("setting the issuer and public key");
  }

  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  std::vector<std::pair<int, const char*>> extensions;
  switch (kind) {
    case CertKind::kAuthority:
      extensions = {{NID_basic_constraints, "critical,CA:TRUE"},
                    {NID_key_usage, "critical,keyCertSign,cRLSign"},
                    {NID_subject_key_identifier, "hash"}};
      break;
    case CertKind::kServer:
    case CertKind::kClient:
    case CertKind::kAdmin:
      // keyEncipherment is for RSA key transport; with an EC key digitalSignature is what TLS
      // (ECDHE-ECDSA, TLS 1.3) checks.
      extensions = {{NID_basic_constraints, "critical,CA:FALSE"},
                    {NID_key_usage, "critical,digitalSignature"},
                    {NID_ext_key_usage, kind == CertKind::kServer ? "serverAuth" : "clientAuth"},
                    {NID_subject_key_identifier, "hash"},
                    {NID_authority_key_identifier, "keyid:always"}};
      break;
  }
  for (const auto& [nid, value] : extensions) {
    if (absl::Status status = AddExtension(cert.get(), &ctx, nid, value); !status.ok()) {
      return status;
    }
  }
  if (kind == CertKind::kServer) {
    if (absl::Status status = AddSubjectAltNames(cert.get(), alt_names); !status.ok()) {
      return status;
    }
  }

  if (X509_sign(cert.get(), signer_key, EVP_sha256()) <= 0) return Internal("X509_sign");
  if (subject_key != nullptr) {  // the key is the requester's: only the certificate
    BioPtr cert_bio(BIO_new(BIO_s_mem()));
    if (cert_bio == nullptr || PEM_write_bio_X509(cert_bio.get(), cert.get()) != 1) {
      return Internal("PEM_write_bio_X509");
    }
    return CertAndKey{BioContents(cert_bio.get()), ""};
  }
  return ToPem(cert.get(), key_ptr);
}

struct ParsedCa {
  X509Ptr cert;
  EvpPkeyPtr key;
};

absl::StatusOr<ParsedCa> ParseCa(const CertAndKey& ca) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(ca.cert_pem, "CA certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<EvpPkeyPtr> key = ParsePrivateKey(ca.key_pem, "CA key");
  if (!key.ok()) return key.status();
  if (X509_check_ca(cert->get()) < 1) {
    return absl::InvalidArgumentError("the CA certificate is not a CA (no CA:TRUE)");
  }
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "the CA key does not match the CA certificate");
  }
  return ParsedCa{*std::move(cert), *std::move(key)};
}

}  // namespace

struct Sha256::State {
  EvpMdCtxPtr ctx;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx.reset(EVP_MD_CTX_new());
  CheckOpenSsl(state_->ctx != nullptr, "EVP_MD_CTX_new");
  CheckOpenSsl(EVP_DigestInit_ex(state_->ctx.get(), EVP_sha256(), nullptr) == 1,
               "EVP_DigestInit_ex(SHA-256)");
}

Sha256::~Sha256() = default;

void Sha256::Update(std::span<const std::byte> data) {
  CheckOpenSsl(EVP_DigestUpdate(state_->ctx.get(), data.data(), data.size()) == 1,
               "EVP_DigestUpdate");
}

void Sha256::Update(std::string_view data) {
  Update(std::as_bytes(std::span<const char>(data.data(), data.size())));
}

std::string Sha256::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  CheckOpenSsl(EVP_DigestFinal_ex(state_->ctx.get(), digest, &size) == 1, "EVP_DigestFinal_ex");
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(size)));
}

std::string Sha256Hex(std::span<const std::byte> data) {
  Sha256 sha;
  sha.Update(data);
  return sha.FinishHex();
}

std::string Sha256Hex(std::string_view data) {
  return Sha256Hex(std::as_bytes(std::span<const char>(data.data(), data.size())));
}

absl::StatusOr<CertAndKey> MakeCertificateAuthority(std::string_view common_name, int valid_days) {
  return Issue(CertKind::kAuthority, common_name, valid_days, {}, nullptr, nullptr);
}

absl::StatusOr<CertAndKey> MakeServerCertificate(const CertAndKey& ca, std::string_view common_name,
                                                 const std::vector<std::string>& alt_names,
                                                 int valid_days) {
  absl::StatusOr<CertificateIssuer> issuer = CertificateIssuer::Load(ca);
  if (!issuer.ok()) return issuer.status();
  return issuer->IssueServer(common_name, alt_names, valid_days);
}

absl::StatusOr<CertAndKey> MakeClientCertificate(const CertAndKey& ca, std::string_view common_name,
                                                 int valid_days) {
  absl::StatusOr<CertificateIssuer> issuer = CertificateIssuer::Load(ca);
  if (!issuer.ok()) return issuer.status();
  return issuer->IssueClient(common_name, valid_days);
}

struct CertificateIssuer::State {
  ParsedCa ca;
};

CertificateIssuer::CertificateIssuer(std::unique_ptr<State> state) : state_(std::move(state)) {}
CertificateIssuer::CertificateIssuer(CertificateIssuer&&) noexcept = default;
CertificateIssuer& CertificateIssuer::operator=(CertificateIssuer&&) noexcept = default;
CertificateIssuer::~CertificateIssuer() = default;

absl::StatusOr<CertificateIssuer> CertificateIssuer::Load(const CertAndKey& ca) {
  absl::StatusOr<ParsedCa> parsed = ParseCa(ca);
  if (!parsed.ok()) return parsed.status();
  return CertificateIssuer(std::make_unique<State>(State{*std::move(parsed)}));
}

absl::StatusOr<CertAndKey> CertificateIssuer::IssueClient(std::string_view common_name,
                                                          int valid_days) const {
  return Issue(CertKind::kClient, common_name, valid_days, {}, state_->ca.cert.get(),
               state_->ca.key.get());
}

absl::StatusOr<std::string> CertificateIssuer::IssueClientForKey(std::string_view common_name,
                                                                 std::string_view public_key_pem,
                                                                 int valid_days) const {
  absl::StatusOr<BioPtr> bio = MemBio(public_key_pem);
  if (!bio.ok()) return bio.status();
  EvpPkeyPtr public_key(PEM_read_bio_PUBKEY(bio->get(), nullptr, nullptr, nullptr));
  if (public_key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("not a PEM public key");
  }
  absl::StatusOr<CertAndKey> issued =
      Issue(CertKind::kClient, common_name, valid_days, {}, state_->ca.cert.get(),
            state_->ca.key.get(), public_key.get());
  if (!issued.ok()) return issued.status();
  return std::move(issued->cert_pem);
}

absl::StatusOr<CertAndKey> CertificateIssuer::IssueAdmin(std::string_view common_name,
                                                         int valid_days) const {
  return Issue(CertKind::kAdmin, common_name, valid_days, {}, state_->ca.cert.get(),
               state_->ca.key.get());
}

absl::StatusOr<CertAndKey> CertificateIssuer::IssueServer(std::string_view common_name,
                                                          const std::vector<std::string>& alt_names,
                                                          int valid_days) const {
  // TLS clients (gRPC included) match the host against subjectAltName only, never the CN.
  std::vector<std::string> names = alt_names;
  if (names.empty()) names.emplace_back(common_name);
  return Issue(CertKind::kServer, common_name, valid_days, names, state_->ca.cert.get(),
               state_->ca.key.get());
}

absl::StatusOr<std::string> CertificateFingerprint(std::string_view cert_pem) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "input");
  if (!cert.ok()) return cert.status();
  return FingerprintOf(cert->get());
}

absl::StatusOr<int64_t> CertificateNotAfterMs(std::string_view cert_pem) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "input");
  if (!cert.ok()) return cert.status();
  return NotAfterMs(cert->get());
}

absl::StatusOr<std::string> CertificateCommonName(std::string_view cert_pem) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "input");
  if (!cert.ok()) return cert.status();
  std::string common_name = CommonNameOf(cert->get());
  if (common_name.empty()) {
    return absl::InvalidArgumentError("the certificate's subject has no common name");
  }
  return common_name;
}

namespace {

absl::StatusOr<X509StorePtr> TrustStoreOf(std::string_view ca_pem) {
  absl::StatusOr<X509Ptr> ca = ParseCertificate(ca_pem, "CA certificate");
  if (!ca.ok()) return ca.status();
  X509StorePtr store(X509_STORE_new());
  if (store == nullptr || X509_STORE_add_cert(store.get(), ca->get()) != 1) {
    return Internal("building the trust store");
  }
  return store;
}

// VerifyClientCertificate's checks of a parsed certificate against a trust store.
absl::Status VerifyAgainst(X509_STORE* store, X509* cert_ptr) {
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store, cert_ptr, nullptr) != 1 ||
      X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT) != 1) {
    return Internal("initializing certificate verification");
  }
  int verified = X509_verify_cert(ctx.get());
  if (verified == 1) return absl::OkStatus();
  int error = X509_STORE_CTX_get_error(ctx.get());
  if (verified < 0 || error == X509_V_OK) return Internal("X509_verify_cert");
  ERR_clear_error();  // The reason is in `error`; the queue may hold related noise.

  const std::string subject = absl::StrCat("subject CN=", CommonNameOf(cert_ptr));
  // The certificate the error is about: the client's (depth 0) or the CA (depth 1).
  X509* failed = X509_STORE_CTX_get_current_cert(ctx.get());
  const bool about_ca = X509_STORE_CTX_get_error_depth(ctx.get()) > 0;
  if (failed == nullptr) failed = cert_ptr;
  const std::string whose = about_ca ? "the federation's CA certificate" : "client certificate";
  switch (error) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return absl::UnauthenticatedError(
          absl::StrCat("client certificate is not signed by this federation's CA (", subject, ")"));
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return absl::UnauthenticatedError(absl::StrCat(whose, " has expired (", subject,
                                                     ", notAfter ",
                                                     TimeString(X509_get0_notAfter(failed)), ")"));
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return absl::UnauthenticatedError(absl::StrCat(whose, " is not yet valid (", subject,
                                                     ", notBefore ",
                                                     TimeString(X509_get0_notBefore(failed)), ")"));
    case X509_V_ERR_INVALID_PURPOSE:
      return absl::UnauthenticatedError(
          absl::StrCat(whose, " is not valid for TLS client authentication (", subject, ")"));
    default:
      return absl::UnauthenticatedError(absl::StrCat(
          "client certificate verification failed: ", X509_verify_cert_error_string(error), " (",
          subject, ")"));
  }
}

}  // namespace

absl::Status VerifyClientCertificate(std::string_view cert_pem, std::string_view ca_pem) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "client certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<X509StorePtr> store = TrustStoreOf(ca_pem);
  if (!store.ok()) return store.status();
  return VerifyAgainst(store->get(), cert->get());
}

absl::Status CheckServerCertificate(std::string_view cert_pem, std::string_view key_pem,
                                    std::string_view ca_pem) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "the server certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<EvpPkeyPtr> key = ParsePrivateKey(key_pem, "the server key");
  if (!key.ok()) return key.status();
  const std::string subject = absl::StrCat("CN=", CommonNameOf(cert->get()));
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the server key is not the key of the server certificate (", subject,
        "); give the key made with that certificate (fl certs writes server.pem and server.key)"));
  }
  if (X509_check_purpose(cert->get(), X509_PURPOSE_SSL_SERVER, 0) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the server certificate (", subject,
        ") is not for TLS servers (a site's certificate?); give the federation's server.pem"));
  }
  absl::StatusOr<X509StorePtr> store = TrustStoreOf(ca_pem);
  if (!store.ok()) return store.status();
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store->get(), cert->get(), nullptr) != 1) {
    return Internal("initializing certificate verification");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the server certificate (", subject,
        ") does not verify against the CA certificate: ", X509_verify_cert_error_string(error),
        "; give the CA that issued it (the same ca.pem the sites have)"));
  }
  return absl::OkStatus();
}

struct ClientCertificateVerifier::State {
  X509StorePtr store;
};

ClientCertificateVerifier::ClientCertificateVerifier(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
ClientCertificateVerifier::ClientCertificateVerifier(ClientCertificateVerifier&&) noexcept =
    default;
ClientCertificateVerifier& ClientCertificateVerifier::operator=(
    ClientCertificateVerifier&&) noexcept = default;
ClientCertificateVerifier::~ClientCertificateVerifier() = default;

absl::StatusOr<ClientCertificateVerifier> ClientCertificateVerifier::Create(
    std::string_view ca_pem) {
  absl::StatusOr<X509StorePtr> store = TrustStoreOf(ca_pem);
  if (!store.ok()) return store.status();
  return ClientCertificateVerifier(std::make_unique<State>(State{*std::move(store)}));
}

absl::StatusOr<CertificateIdentity> ClientCertificateVerifier::Verify(
    std::string_view cert_pem) const {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "client certificate");
  if (!cert.ok()) return cert.status();
  if (absl::Status s = VerifyAgainst(state_->store.get(), cert->get()); !s.ok()) return s;
  absl::StatusOr<std::string> fingerprint = FingerprintOf(cert->get());
  if (!fingerprint.ok()) return fingerprint.status();
  return CertificateIdentity{*std::move(fingerprint), CommonNameOf(cert->get()),
                             IsAdminCertificate(cert->get()), NotAfterMs(cert->get())};
}

std::string NameListSha256(const std::vector<std::string>& names) {
  auto big_endian = [](Sha256& hash, uint64_t v) {
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
    hash.Update(std::string_view(bytes, sizeof(bytes)));
  };
  Sha256 hash;
  big_endian(hash, names.size());
  for (const std::string& name : names) {
    big_endian(hash, name.size());
    hash.Update(std::string_view(name));
  }
  return hash.FinishHex();
}

absl::StatusOr<uint64_t> SecureRandomUint64() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof(v)) != 1) {
    return absl::InternalError("RAND_bytes could not give 8 random bytes");
  }
  return v;
}

}  // namespace fl
