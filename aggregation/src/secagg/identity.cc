#include "fl/aggregation/secagg/identity.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <array>
#include <climits>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/internal/openssl_ptr.h"
#include "fl/common/crypto.h"

namespace fl::secagg {
namespace {

using ::fl::internal::BioPtr;
using ::fl::internal::EvpMdCtxPtr;
using ::fl::internal::EvpPkeyPtr;
using ::fl::internal::X509Ptr;
using ::fl::internal::X509StoreCtxPtr;
using ::fl::internal::X509StorePtr;

// Drains this thread's OpenSSL error queue into one line.
std::string OpenSslErrors() {
  std::string errors;
  while (unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", buf);
  }
  return errors.empty() ? "no OpenSSL error reported" : errors;
}

absl::Status Internal(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", OpenSslErrors()));
}

absl::StatusOr<BioPtr> MemBio(std::string_view data, const char* what) {
  if (data.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is too large for a PEM"));
  }
  BioPtr bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
  if (bio == nullptr) return Internal("BIO_new_mem_buf");
  return bio;
}

// Never prompts for a passphrase: an encrypted key fails to parse instead.
int NoPassphrase(char*, int, int, void*) { return 0; }

absl::StatusOr<X509Ptr> ParseCertificate(std::string_view pem, const char* what) {
  ERR_clear_error();
  absl::StatusOr<BioPtr> bio = MemBio(pem, what);
  if (!bio.ok()) return bio.status();
  X509Ptr cert(PEM_read_bio_X509(bio->get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  return cert;
}

std::string CommonNameOf(X509* cert) {
  X509_NAME* name = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (index < 0) return "(no common name)";
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) {
    ERR_clear_error();
    return "(unreadable common name)";
  }
  std::string result(reinterpret_cast<char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return result;
}

// As fl::CertificateFingerprint, from the parsed certificate.
absl::StatusOr<std::string> FingerprintOf(X509* cert) {
  unsigned char* der = nullptr;
  const int length = i2d_X509(cert, &der);
  if (length < 0) return Internal("encoding the certificate as DER");
  std::string fingerprint =
      Sha256Hex(std::as_bytes(std::span<const unsigned char>(der, static_cast<size_t>(length))));
  OPENSSL_free(der);
  return fingerprint;
}

// The certificate alone as PEM, as PEM_write_bio_X509 (and so fl certs) writes it.
absl::StatusOr<std::string> PemOf(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return Internal("writing the certificate as PEM");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  if (size <= 0) return Internal("writing the certificate as PEM");
  return std::string(data, static_cast<size_t>(size));
}

// The digest EVP_DigestSign/Verify take for `key`: none for the EdDSA keys (they sign the
// message itself), SHA-256 otherwise.
const EVP_MD* DigestFor(EVP_PKEY* key) {
  const int type = EVP_PKEY_get_base_id(key);
  if (type == EVP_PKEY_ED25519 || type == EVP_PKEY_ED448) return nullptr;
  // Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up again at every
  // initialization, a cost on the order of the verification a site repeats for each survivor.
  static EVP_MD* const kSha256 = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
  return kSha256 != nullptr ? kSha256 : EVP_sha256();
}

// EVP wants a valid pointer even for zero bytes.
const unsigned char* DataOf(std::span<const uint8_t> bytes) {
  static constexpr unsigned char kNothing = 0;
  return bytes.empty() ? &kNothing : bytes.data();
}

class X509Signer final : public IdentitySigner {
 public:
  X509Signer(std::string cert_pem, EvpPkeyPtr key)
      : cert_pem_(std::move(cert_pem)), key_(std::move(key)) {}

  const std::string& identity() const override { return cert_pem_; }

  absl::StatusOr<Bytes> Sign(std::span<const uint8_t> message) const override {
    ERR_clear_error();
    EvpMdCtxPtr ctx(EVP_MD_CTX_new());
    if (ctx == nullptr) return Internal("EVP_MD_CTX_new");
    if (EVP_DigestSignInit(ctx.get(), nullptr, DigestFor(key_.get()), nullptr, key_.get()) != 1) {
      return Internal("initializing the signature");
    }
    size_t size = 0;
    if (EVP_DigestSign(ctx.get(), nullptr, &size, DataOf(message), message.size()) != 1) {
      return Internal("sizing the signature");
    }
    Bytes signature(size);
    if (EVP_DigestSign(ctx.get(), signature.data(), &size, DataOf(message), message.size()) != 1) {
      return Internal("signing");
    }
    signature.resize(size);  // ECDSA's DER signatures are often shorter than the maximum
    return signature;
  }

 private:
  const std::string cert_pem_;
  const EvpPkeyPtr key_;  // used read-only: OpenSSL 3 allows that from several threads at once
};

// Every certificate of `ca_pem`, in a store that trusts them.
absl::StatusOr<X509StorePtr> TrustStoreOf(std::string_view ca_pem) {
  ERR_clear_error();
  absl::StatusOr<BioPtr> bio = MemBio(ca_pem, "the CA certificate");
  if (!bio.ok()) return bio.status();
  X509StorePtr store(X509_STORE_new());
  if (store == nullptr) return Internal("X509_STORE_new");
  int count = 0;
  while (X509Ptr cert{PEM_read_bio_X509(bio->get(), nullptr, NoPassphrase, nullptr)}) {
    if (X509_STORE_add_cert(store.get(), cert.get()) != 1) {
      return Internal("adding a CA certificate to the trust store");
    }
    ++count;
  }
  // The reader skips PEM blocks of other kinds (a key, say); the loop ends at the end of the
  // input (no start line) or at a certificate block that does not parse.
  const unsigned long last = ERR_peek_last_error();
  const bool at_end =
      ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  ERR_clear_error();
  if (count == 0) {
    return absl::InvalidArgumentError(
        "the CA PEM holds no certificate; give the federation's CA certificate (ca.pem)");
  }
  if (!at_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CA PEM's certificate #", count + 1,
        " does not parse; give the federation's CA certificate(s) as fl certs wrote them"));
  }
  return store;
}

class X509Verifier final : public IdentityVerifier {
 public:
  explicit X509Verifier(X509StorePtr store) : store_(std::move(store)) {}

  absl::StatusOr<std::string> Verify(std::string_view identity, std::span<const uint8_t> message,
                                     std::span<const uint8_t> signature) const override {
    absl::StatusOr<Trusted> trusted = TrustedIdentity(identity);
    if (!trusted.ok()) return trusted.status();
    if (trusted->prepared != nullptr) {
      // The key's context, set up once: SHA-256 of the message, then the signature over it.
      std::array<unsigned char, 32> digest;
      unsigned int digest_size = 0;
      if (EVP_Digest(DataOf(message), message.size(), digest.data(), &digest_size,
                     DigestFor(trusted->key.get()), nullptr) != 1 ||
          digest_size != digest.size()) {
        return Internal("hashing the signed message");
      }
      int verified = 0;
      {
        std::lock_guard<std::mutex> lock(trusted->prepared->mu);
        verified = signature.empty()
                       ? 0
                       : EVP_PKEY_verify(trusted->prepared->ctx.get(), signature.data(),
                                         signature.size(), digest.data(), digest.size());
      }
      if (verified != 1) {
        ERR_clear_error();
        return absl::UnauthenticatedError(absl::StrCat("signature by ", trusted->common_name, " (",
                                                       trusted->fingerprint.substr(0, 16),
                                                       ") does not verify"));
      }
      return std::move(trusted->fingerprint);
    }
    ERR_clear_error();
    EvpMdCtxPtr ctx(EVP_MD_CTX_new());
    if (ctx == nullptr) return Internal("EVP_MD_CTX_new");
    EVP_PKEY* key = trusted->key.get();
    if (EVP_DigestVerifyInit(ctx.get(), nullptr, DigestFor(key), nullptr, key) != 1) {
      ERR_clear_error();
      return absl::UnauthenticatedError(absl::StrCat(
          "the key of ", trusted->common_name, " (", trusted->fingerprint.substr(0, 16),
          ") is of a type that cannot verify signatures; its site must sign with an RSA, EC or "
          "EdDSA key"));
    }
    // 1 is a valid signature; 0 a wrong one; < 0 one that does not even parse (as DER, say).
    if (signature.empty() || EVP_DigestVerify(ctx.get(), signature.data(), signature.size(),
                                              DataOf(message), message.size()) != 1) {
      ERR_clear_error();
      return absl::UnauthenticatedError(absl::StrCat("signature by ", trusted->common_name, " (",
                                                     trusted->fingerprint.substr(0, 16),
                                                     ") does not verify"));
    }
    return std::move(trusted->fingerprint);
  }

 private:
  // A certificate that chained to the store, as Verify needs it.
  // A key's verification context, initialized once (EVP_PKEY_verify_init, SHA-256): OpenSSL 3
  // looks the algorithms up again at every initialization, which cost about as much as the
  // verification a site repeats for each survivor. One caller at a time (`mu`).
  struct Prepared {
    std::mutex mu;
    std::unique_ptr<EVP_PKEY_CTX, fl::internal::OpenSslDeleter<EVP_PKEY_CTX_free>> ctx;
  };
  // Null for a key that signs the message itself (EdDSA), or when OpenSSL cannot set one up.
  static std::shared_ptr<Prepared> Prepare(EVP_PKEY* key) {
    const EVP_MD* md = DigestFor(key);
    if (md == nullptr) return nullptr;
    auto prepared = std::make_shared<Prepared>();
    prepared->ctx.reset(EVP_PKEY_CTX_new(key, nullptr));
    if (prepared->ctx == nullptr || EVP_PKEY_verify_init(prepared->ctx.get()) != 1 ||
        EVP_PKEY_CTX_set_signature_md(prepared->ctx.get(), md) != 1) {
      ERR_clear_error();
      return nullptr;
    }
    return prepared;
  }

  struct Trusted {
    std::string fingerprint;
    std::string common_name;
    EvpPkeyPtr key;
    std::shared_ptr<Prepared> prepared;
  };
  struct Entry {
    std::string fingerprint;
    std::string common_name;
    X509Ptr cert;  // for its notAfter
    EvpPkeyPtr key;
    std::shared_ptr<Prepared> prepared;
  };

  static EvpPkeyPtr Share(EVP_PKEY* key) {
    EVP_PKEY_up_ref(key);
    return EvpPkeyPtr(key);
  }

  // From the cache, or verified against the store and then cached.
  absl::StatusOr<Trusted> TrustedIdentity(std::string_view identity) const {
    std::string cache_key(identity);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = cache_.find(cache_key); it != cache_.end()) {
        // Checked again once it has expired, so that the expiry is reported as such.
        if (X509_cmp_current_time(X509_get0_notAfter(it->second.cert.get())) > 0) {
          return Trusted{it->second.fingerprint, it->second.common_name,
                         Share(it->second.key.get()), it->second.prepared};
        }
        cache_.erase(it);
      }
    }
    absl::StatusOr<X509Ptr> cert = ParseCertificate(
        identity, "the identity (a site's certificate, as its IdentitySigner::identity() gives)");
    if (!cert.ok()) return cert.status();
    std::string common_name = CommonNameOf(cert->get());
    absl::StatusOr<std::string> fingerprint = FingerprintOf(cert->get());
    if (!fingerprint.ok()) return fingerprint.status();
    if (absl::Status s = VerifyChain(cert->get(), common_name, *fingerprint); !s.ok()) return s;
    EvpPkeyPtr key(X509_get_pubkey(cert->get()));
    if (key == nullptr) {
      ERR_clear_error();
      return absl::PermissionDeniedError(absl::StrCat("the certificate of ", common_name, " (",
                                                      fingerprint->substr(0, 16),
                                                      ") holds no public key that OpenSSL reads"));
    }
    Trusted trusted{*fingerprint, common_name, Share(key.get()), Prepare(key.get())};
    // Only an identity in the form signers give (PemOf) is remembered: other spellings of the
    // same certificate (a server could make endless ones) verify, but each time in full.
    absl::StatusOr<std::string> canonical = PemOf(cert->get());
    if (!canonical.ok() || *canonical != cache_key) return trusted;
    std::lock_guard<std::mutex> lock(mu_);
    // A thread that verified the same certificate meanwhile left an equal entry: keep either.
    cache_.try_emplace(std::move(cache_key),
                       Entry{*std::move(fingerprint), std::move(common_name), *std::move(cert),
                             std::move(key), trusted.prepared});
    return trusted;
  }

  // PERMISSION_DENIED unless `cert` chains to the store, is valid now and is for TLS clients (a
  // site's certificate, extendedKeyUsage clientAuth).
  absl::Status VerifyChain(X509* cert, const std::string& common_name,
                           const std::string& fingerprint) const {
    ERR_clear_error();
    X509StoreCtxPtr ctx(X509_STORE_CTX_new());
    if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store_.get(), cert, nullptr) != 1 ||
        X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT) != 1) {
      return Internal("initializing certificate verification");
    }
    const int verified = X509_verify_cert(ctx.get());
    if (verified == 1) return absl::OkStatus();
    const int error = X509_STORE_CTX_get_error(ctx.get());
    if (verified < 0 || error == X509_V_OK) {
      // OpenSSL could not carry the check out (a public key it cannot decode, say): the
      // certificate is the sender's fault, not the verifier's.
      ERR_clear_error();
      return absl::PermissionDeniedError(absl::StrCat(
          "the certificate of ", common_name, " (", fingerprint.substr(0, 16),
          ") cannot be verified (OpenSSL could not check its signature or key); a site must sign "
          "with the client certificate its federation's CA issued it"));
    }
    ERR_clear_error();
    return absl::PermissionDeniedError(absl::StrCat(
        "the certificate of ", common_name, " (", fingerprint.substr(0, 16),
        ") is not trusted: ", X509_verify_cert_error_string(error),
        "; a site must sign with the client certificate its federation's CA issued it, and "
        "this verifier must be given that CA's certificate"));
  }

  const X509StorePtr store_;  // read-only after construction; X509_STORE locks its own lookups
  // Guards cache_. A std::mutex, which libstdc++ does not annotate for Clang's thread-safety
  // analysis (ABSL_GUARDED_BY would be a warning): fl_privacy does not link absl::Mutex.
  mutable std::mutex mu_;
  // Certificates that verified, by their PEM bytes. Only those the CA issued get in, one PEM
  // each, so it grows with the federation, not with what a server sends.
  mutable std::unordered_map<std::string, Entry> cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IdentitySigner>> MakeX509Signer(std::string cert_pem,
                                                               std::string_view key_pem) {
  absl::StatusOr<X509Ptr> cert = ParseCertificate(cert_pem, "the site's certificate");
  if (!cert.ok()) return cert.status();
  ERR_clear_error();
  absl::StatusOr<BioPtr> bio = MemBio(key_pem, "the site's key");
  if (!bio.ok()) return bio.status();
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio->get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the site's key is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)");
  }
  const std::string common_name = CommonNameOf(cert->get());
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("the site's key is not the key of its certificate (CN=", common_name,
                     "); give the key made with that certificate (the .key file beside its .pem)"));
  }
  if (EVP_PKEY_can_sign(key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the key of the certificate of ", common_name,
                                                   " (", EVP_PKEY_get0_type_name(key.get()),
                                                   ") cannot sign; give an RSA, EC or EdDSA key"));
  }
  // The certificate alone, whatever else the input held (a chain, the key itself): identity()
  // goes to every peer.
  absl::StatusOr<std::string> identity = PemOf(cert->get());
  if (!identity.ok()) return identity.status();
  return std::make_unique<X509Signer>(*std::move(identity), std::move(key));
}

absl::StatusOr<std::unique_ptr<IdentityVerifier>> MakeX509Verifier(std::string_view ca_pem) {
  absl::StatusOr<X509StorePtr> store = TrustStoreOf(ca_pem);
  if (!store.ok()) return store.status();
  return std::make_unique<X509Verifier>(*std::move(store));
}

}  // namespace fl::secagg
