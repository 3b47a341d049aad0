// Certificate requests, so that a site's private key never leaves the site: the site makes its
// key and a request (fl certs request), the operator signs the request with the federation's CA
// (fl certs sign), and only the request and the certificate travel.
#ifndef FL_COMMON_CERTIFICATE_REQUEST_H_
#define FL_COMMON_CERTIFICATE_REQUEST_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fl/common/crypto.h"

namespace fl {

struct KeyAndRequest {
  std::string key_pem;      // PKCS#8, unencrypted: stays at the site
  std::string request_pem;  // PKCS#10, self-signed with the key, subject CN=<name>
};

// A fresh P-256 key and a request for a site certificate named `common_name`.
// INVALID_ARGUMENT for an empty or over-long (> 64 characters) name.
absl::StatusOr<KeyAndRequest> MakeCertificateRequest(std::string_view common_name);

struct SignedRequest {
  std::string cert_pem;
  std::string common_name;  // the request's, or the name given to SignCertificateRequest
};

// Checks the request's signature (it proves the requester holds the key) and issues a site
// certificate (clientAuth) for its key from `issuer`. Only the key and the common name are
// taken from the request (`common_name` overrides the latter when not empty): whatever else it
// asks for (an admin role, extensions, other names) is ignored. INVALID_ARGUMENT naming the
// problem for a request that does not parse, whose signature does not verify, or that has no
// common name.
absl::StatusOr<SignedRequest> SignCertificateRequest(const CertificateIssuer& issuer,
                                                     std::string_view request_pem,
                                                     std::string_view common_name, int valid_days);

}  // namespace fl

#endif  // FL_COMMON_CERTIFICATE_REQUEST_H_
