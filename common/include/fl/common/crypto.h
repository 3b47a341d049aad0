// OpenSSL wrappers: SHA-256 and the X.509 material of a federation (CA, server and client
// certificates), and the checks the server makes on a client's certificate.
//
// Every function returns a Status naming what failed (with OpenSSL's error text) instead of
// throwing. Keys are ECDSA P-256. All functions are thread-safe.
#ifndef FL_COMMON_CRYPTO_H_
#define FL_COMMON_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl {

// Incremental SHA-256. Not thread-safe; one object per stream.
// Hex SHA-256 of a list of names in order: the number of names as an 8-byte big-endian integer,
// then for each name its byte length (8-byte big-endian) and its bytes, so that no two lists
// share an encoding. What sites send as their feature schema (fl::client::FeatureSchemaSha256)
// and the server recomputes to check it.
std::string NameListSha256(const std::vector<std::string>& names);

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::span<const std::byte> data);
  void Update(std::string_view data);
  // Lowercase hex digest (64 characters). The object must not be used afterwards.
  std::string FinishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string Sha256Hex(std::span<const std::byte> data);
std::string Sha256Hex(std::string_view data);

// A PEM certificate and its PEM private key.
struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

// A self-signed CA certificate (CA:TRUE, keyCertSign) with the given common name, valid for
// `valid_days`.
//
// For all three Make* functions: validity starts one hour in the past (clock skew); the serial is
// 128 random bits; the key PEM is unencrypted PKCS#8. INVALID_ARGUMENT for an empty or over-long
// (> 64 characters) common name, `valid_days` < 1, or a `ca` whose PEMs do not parse, whose
// certificate is not a CA, or whose key does not match its certificate.
absl::StatusOr<CertAndKey> MakeCertificateAuthority(std::string_view common_name, int valid_days);

// A server certificate signed by `ca`, with the given common name and subjectAltNames
// (each either a DNS name or an IPv4/IPv6 address), extendedKeyUsage serverAuth. TLS clients
// (gRPC included) match the target host against the subjectAltNames only, never the common name;
// when `alt_names` is empty the common name is used as the single DNS name.
absl::StatusOr<CertAndKey> MakeServerCertificate(const CertAndKey& ca, std::string_view common_name,
                                                 const std::vector<std::string>& alt_names,
                                                 int valid_days);

// A client certificate signed by `ca` with the given common name (the site's name),
// extendedKeyUsage clientAuth.
absl::StatusOr<CertAndKey> MakeClientCertificate(const CertAndKey& ca, std::string_view common_name,
                                                 int valid_days);

// Lowercase hex SHA-256 of the certificate's DER encoding: a client's identity.
// INVALID_ARGUMENT when `cert_pem` holds no certificate.
absl::StatusOr<std::string> CertificateFingerprint(std::string_view cert_pem);

// The end of the certificate's validity, in ms since the epoch. INVALID_ARGUMENT when `cert_pem`
// holds no certificate.
absl::StatusOr<int64_t> CertificateNotAfterMs(std::string_view cert_pem);

// The subject's common name. INVALID_ARGUMENT when `cert_pem` holds no certificate or the subject
// has no common name.
absl::StatusOr<std::string> CertificateCommonName(std::string_view cert_pem);

// Verifies that `cert_pem` chains to `ca_pem`, is within its validity period, and is usable for
// client authentication. UNAUTHENTICATED with the reason (e.g. "certificate is not signed by this
// federation's CA", "certificate has expired") when not; INVALID_ARGUMENT when either PEM holds no
// certificate.
absl::Status VerifyClientCertificate(std::string_view cert_pem, std::string_view ca_pem);

// What a server checks of its own certificate before it listens: `key_pem` is the private key
// of `cert_pem`, the certificate is for TLS servers (a site's certificate is not), and it chains
// to `ca_pem`. INVALID_ARGUMENT naming which, and what to give instead: otherwise gRPC fails
// later with "cannot listen" on the server and "empty address list" on the clients.
absl::Status CheckServerCertificate(std::string_view cert_pem, std::string_view key_pem,
                                    std::string_view ca_pem);

// 64 bits from OpenSSL's CSPRNG (RAND_bytes). INTERNAL when it cannot give them.
absl::StatusOr<uint64_t> SecureRandomUint64();

// A federation CA parsed once, to issue many certificates: under OpenSSL 3 decoding the CA's
// PEM key costs more than making and signing a certificate, which made provisioning thousands of
// sites (or a simulation's virtual sites) slow. Same certificates and errors as the Make*
// functions above. Thread-safe; movable, not copyable.
class CertificateIssuer {
 public:
  // INVALID_ARGUMENT when `ca`'s PEMs do not parse, its certificate is not a CA, or its key does
  // not match its certificate.
  static absl::StatusOr<CertificateIssuer> Load(const CertAndKey& ca);
  CertificateIssuer(CertificateIssuer&&) noexcept;
  CertificateIssuer& operator=(CertificateIssuer&&) noexcept;
  ~CertificateIssuer();

  absl::StatusOr<CertAndKey> IssueClient(std::string_view common_name, int valid_days) const;
  // A site's certificate (as IssueClient) for a key the site made and keeps: its PEM public key
  // (from a certificate request, fl certs sign). Returns the certificate PEM only.
  absl::StatusOr<std::string> IssueClientForKey(std::string_view common_name,
                                                std::string_view public_key_pem,
                                                int valid_days) const;
  // An operator's certificate for the server's control API: a client certificate (clientAuth)
  // whose subject carries the admin role, OU=kAdminRole.
  absl::StatusOr<CertAndKey> IssueAdmin(std::string_view common_name, int valid_days) const;
  absl::StatusOr<CertAndKey> IssueServer(std::string_view common_name,
                                         const std::vector<std::string>& alt_names,
                                         int valid_days) const;

 private:
  struct State;
  explicit CertificateIssuer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The subject's organizational unit that makes a certificate an admin's (CertificateIssuer::
// IssueAdmin), which only the holder of the federation CA's key can issue.
inline constexpr std::string_view kAdminRole = "admin";

// Who a verified client certificate names.
struct CertificateIdentity {
  std::string fingerprint;   // as CertificateFingerprint
  std::string common_name;   // empty when the subject has none
  bool admin = false;        // the subject carries OU=kAdminRole
  int64_t not_after_ms = 0;  // the end of its validity (ms since the epoch)
};

// VerifyClientCertificate against one CA parsed once, returning the certificate's identity from
// the same parse: what the server does for every site that connects (and for every certificate
// it enrolls at start). Thread-safe; movable, not copyable.
class ClientCertificateVerifier {
 public:
  // INVALID_ARGUMENT when `ca_pem` holds no certificate.
  static absl::StatusOr<ClientCertificateVerifier> Create(std::string_view ca_pem);
  ClientCertificateVerifier(ClientCertificateVerifier&&) noexcept;
  ClientCertificateVerifier& operator=(ClientCertificateVerifier&&) noexcept;
  ~ClientCertificateVerifier();

  // The errors of VerifyClientCertificate.
  absl::StatusOr<CertificateIdentity> Verify(std::string_view cert_pem) const;

 private:
  struct State;
  explicit ClientCertificateVerifier(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fl

#endif  // FL_COMMON_CRYPTO_H_
