// Provisioning: the files an operator creates once for a federation and hands out, like NVFlare's
// startup kits. Layout under the output directory:
//   ca.pem, ca.key                  the federation CA (keep ca.key offline)
//   server.pem, server.key          the aggregation server's certificate
//   clients/<name>.pem, <name>.key  one certificate per site
//   admins/<name>.pem, <name>.key   one per operator of the control API (fl certs --admin)
// Keys are written with mode 0600, certificates 0644, each atomically.
#ifndef FL_COMMON_PROVISION_H_
#define FL_COMMON_PROVISION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"

namespace fl {

struct ProvisionOptions {
  std::string out_dir;
  std::string federation_name = "fl-federation";
  // Names (DNS) and addresses (IP) the server certificate is valid for.
  std::vector<std::string> server_names = {"localhost", "127.0.0.1", "::1"};
  std::vector<std::string> client_names;  // e.g. {"hospital-a", "hospital-b"}
  int valid_days = 365;
  // kSynced for an operator's federation; kUnsynced for throwaway certificates (a simulation's
  // thousands of virtual sites), where the fsyncs would cost seconds.
  Durability durability = Durability::kSynced;
};

struct ProvisionedFiles {
  std::string ca_cert, ca_key, server_cert, server_key;
  std::vector<std::string> client_certs, client_keys;  // in client_names order
  std::vector<std::string> client_fingerprints;        // each CertificateFingerprint
};

// Creates the CA, the server certificate and the client certificates. Refuses (ALREADY_EXISTS) to
// overwrite an existing ca.key, so that a federation's CA is never replaced by accident;
// INVALID_ARGUMENT for a client name that is empty or not a plain file name.
absl::StatusOr<ProvisionedFiles> ProvisionFederation(const ProvisionOptions& options);

// The CA of an existing federation (ca.pem and ca.key in `out_dir`), to issue from. NOT_FOUND
// naming the file and what --out must be when one is missing.
absl::StatusOr<CertificateIssuer> LoadFederationIssuer(const std::string& out_dir);

// One more certificate from an existing federation's CA (ca.pem and ca.key in `out_dir`).
enum class IssuedRole { kSite, kAdmin };
struct IssuedFiles {
  std::string cert, key;  // clients/<name>.pem/.key for a site, admins/<name>.pem/.key for an admin
  std::string fingerprint;
};
// Refuses (ALREADY_EXISTS) to replace a certificate or key of the same name; NOT_FOUND naming
// the file when the CA is missing; INVALID_ARGUMENT for a name that is not a plain file name.
absl::StatusOr<IssuedFiles> IssueFromFederation(const std::string& out_dir, IssuedRole role,
                                                const std::string& name, int valid_days);

// A new key and certificate in place of an existing one, from the CA in `out_dir`: a site's
// (clients/<name>), an admin's (admins/<name>) or, with `server_names` non-empty, the server's
// (server.pem, valid for those names; `name` is then its common name). The old files are kept
// beside, renamed *.old. NOT_FOUND when there is no certificate of that name to renew.
absl::StatusOr<IssuedFiles> RenewFromFederation(const std::string& out_dir, IssuedRole role,
                                                const std::string& name, int valid_days,
                                                const std::vector<std::string>& server_names = {});

}  // namespace fl

#endif  // FL_COMMON_PROVISION_H_
