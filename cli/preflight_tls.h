// The network and certificate probes of `fl client --preflight` (cli/preflight.h), on OpenSSL and
// POSIX sockets directly, so that each failure can be named precisely (gRPC reports most of them
// as one UNAVAILABLE). Every error's message is the cause only, for the checklist to add the fix.
// Thread-safe (no shared state).
#ifndef FL_CLI_PREFLIGHT_TLS_H_
#define FL_CLI_PREFLIGHT_TLS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fl::cli::preflight {

// What the checklist shows of a certificate.
struct CertInfo {
  std::string subject_cn;  // "?" when it has none
  std::string issuer_cn;
  absl::Time not_before;
  absl::Time not_after;
  std::vector<std::string> names;  // subjectAltNames: DNS names and IP addresses
};

// The first certificate of the PEM file at `path`. NOT_FOUND or another ReadFile error when it
// cannot be read, INVALID_ARGUMENT when it holds no PEM certificate.
absl::StatusOr<CertInfo> ReadCertificate(const std::string& path);

// OK when the PEM private key at `key_path` is the key of the certificate at `cert_path`;
// INVALID_ARGUMENT when it is another key or holds no (unencrypted) PEM key; ReadFile's error
// when a file cannot be read.
absl::Status CheckKeyMatches(const std::string& cert_path, const std::string& key_path);

// OK when the certificate at `cert_path` chains to a certificate in the PEM file at `ca_path`
// for TLS client authentication, by OpenSSL's X509_verify_cert; the validity dates are not
// checked here. UNAUTHENTICATED with OpenSSL's reason when not; INVALID_ARGUMENT when either
// file holds no certificate.
absl::Status CheckChain(const std::string& cert_path, const std::string& ca_path);

// "host" and "port" of a gRPC target ("host:port", "[v6]:port", "dns:///host:port");
// INVALID_ARGUMENT when it has no port.
absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address);

// Resolves `host` and opens a TCP connection to `port` (each address in turn, `timeout` each),
// then closes it. Returns the numeric address connected to. NOT_FOUND when the name does not
// resolve, UNAVAILABLE (with the system's reason: refused, timed out, no route) otherwise.
absl::StatusOr<std::string> ProbeTcp(const std::string& host, const std::string& port,
                                     absl::Duration timeout);

struct TlsProbe {
  std::string host, port;
  // The name the server's certificate must be valid for (its subjectAltNames, as gRPC checks):
  // ClientOptions::server_name_override, else `host`.
  std::string expected_name;
  std::string ca_path, cert_path, key_path;
  absl::Duration timeout = absl::Seconds(10);
};

struct TlsResult {
  std::string version;  // "TLSv1.3"
  CertInfo server;      // the server's certificate
};

// A TLS handshake as the client's gRPC channel makes it: this site's certificate and key
// presented, the server's certificate verified against ca_path and matched against
// expected_name, ALPN h2. UNAUTHENTICATED when the server's certificate does not verify (message:
// OpenSSL's reason, and for a name that does not match, the names it is valid for);
// UNAVAILABLE when the connection or handshake fails otherwise (e.g. a plaintext server).
absl::StatusOr<TlsResult> ProbeTls(const TlsProbe& probe);

}  // namespace fl::cli::preflight

#endif  // FL_CLI_PREFLIGHT_TLS_H_
