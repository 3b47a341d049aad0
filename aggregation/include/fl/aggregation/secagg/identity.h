// A site's long-term identity in secure aggregation against a malicious server (Bonawitz et al.
// 2017, section 6): each site signs its key advertisement and the survivor set it is asked to
// unmask for, with the key of its certificate, and verifies its peers' signatures against the
// federation's certificate authority. The server relays signatures it cannot forge, so it cannot
// substitute a neighbour's keys, nor get survivor sets it showed different sites both unmasked.
//
// The guarantee is only as good as the authority: a server operator who also runs the CA can
// mint certificates for sites that do not exist (Sybils). docs/design-decisions.md says more.
//
// Production signs with the site's mutual-TLS key (ECDSA P-256 from `fl certs`, or any key type
// OpenSSL signs with) and verifies X.509 chains; both are thread-safe.
#ifndef FL_AGGREGATION_SECAGG_IDENTITY_H_
#define FL_AGGREGATION_SECAGG_IDENTITY_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/primitives.h"

namespace fl::secagg {

class IdentitySigner {
 public:
  virtual ~IdentitySigner() = default;
  // What peers verify signatures with: the site's certificate alone, PEM (as fl certs writes
  // it), whatever else MakeX509Signer's `cert_pem` held (a chain, a key).
  virtual const std::string& identity() const = 0;
  // A signature by the identity's private key over `message` (SHA-256 digest for RSA and EC
  // keys, the message itself for Ed25519 and Ed448). INTERNAL when OpenSSL fails.
  virtual absl::StatusOr<Bytes> Sign(std::span<const uint8_t> message) const = 0;
};

class IdentityVerifier {
 public:
  virtual ~IdentityVerifier() = default;
  // The identity's name, the lowercase hex SHA-256 of its certificate's DER encoding (what
  // fl::CertificateFingerprint gives, and how the server knows a site), when `identity` is a
  // certificate issued by the trusted authority and valid now, and `signature` is its key's
  // signature over `message`. PERMISSION_DENIED naming the certificate's CN and OpenSSL's reason
  // for an untrusted certificate; UNAUTHENTICATED for a signature that does not verify;
  // INVALID_ARGUMENT for an identity that is not a PEM certificate.
  virtual absl::StatusOr<std::string> Verify(std::string_view identity,
                                             std::span<const uint8_t> message,
                                             std::span<const uint8_t> signature) const = 0;
};

// From the contents of a PEM certificate (its first certificate is the site's) and its
// unencrypted PEM private key. INVALID_ARGUMENT when either does not parse, the key is not the
// certificate's, or it is of a type that cannot sign.
absl::StatusOr<std::unique_ptr<IdentitySigner>> MakeX509Signer(std::string cert_pem,
                                                               std::string_view key_pem);

// Trusts site certificates (extendedKeyUsage clientAuth) that chain to `ca_pem` (one or more PEM
// certificates, all trusted; other PEM blocks are skipped). Remembers the certificates it
// verified (by their bytes, in the form IdentitySigner::identity() gives), so that a peer's
// certificate is checked against the authority once per verifier, not once per signature; a
// remembered certificate is checked again once it has expired. No revocation (CRL) check.
// INVALID_ARGUMENT when `ca_pem` holds no certificate or a certificate block that does not parse.
absl::StatusOr<std::unique_ptr<IdentityVerifier>> MakeX509Verifier(std::string_view ca_pem);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_IDENTITY_H_
