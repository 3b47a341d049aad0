#include "fl/common/provision.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"

namespace fl {
namespace {

absl::Status WritePair(const CertAndKey& pair, const std::string& cert_path,
                       const std::string& key_path, Durability durability) {
  if (absl::Status s = WriteFileAtomic(key_path, pair.key_pem, 0600, durability); !s.ok()) {
    return s;
  }
  return WriteFileAtomic(cert_path, pair.cert_pem, 0644, durability);
}

}  // namespace

absl::StatusOr<ProvisionedFiles> ProvisionFederation(const ProvisionOptions& options) {
  for (const std::string& name : options.client_names) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("client name '", name, "' is not a plain file name"));
    }
  }
  ProvisionedFiles files;
  files.ca_cert = options.out_dir + "/ca.pem";
  files.ca_key = options.out_dir + "/ca.key";
  files.server_cert = options.out_dir + "/server.pem";
  files.server_key = options.out_dir + "/server.key";
  if (std::filesystem::exists(files.ca_key)) {
    return absl::AlreadyExistsError(absl::StrCat(
        files.ca_key, " exists: refusing to replace a federation's CA; use a new directory"));
  }
  if (absl::Status s = MakeDirectories(options.out_dir + "/clients"); !s.ok()) return s;
  absl::StatusOr<CertAndKey> ca =
      MakeCertificateAuthority(options.federation_name + " CA", options.valid_days);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<CertificateIssuer> issuer = CertificateIssuer::Load(*ca);
  if (!issuer.ok()) return issuer.status();
  absl::StatusOr<CertAndKey> server = issuer->IssueServer(options.federation_name + " server",
                                                          options.server_names, options.valid_days);
  if (!server.ok()) return server.status();
  if (absl::Status s = WritePair(*ca, files.ca_cert, files.ca_key, options.durability); !s.ok())
    return s;
  if (absl::Status s = WritePair(*server, files.server_cert, files.server_key, options.durability);
      !s.ok()) {
    return s;
  }
  for (const std::string& name : options.client_names) {
    absl::StatusOr<CertAndKey> client = issuer->IssueClient(name, options.valid_days);
    if (!client.ok()) return client.status();
    absl::StatusOr<std::string> fingerprint = CertificateFingerprint(client->cert_pem);
    if (!fingerprint.ok()) return fingerprint.status();
    files.client_fingerprints.push_back(*std::move(fingerprint));
    files.client_certs.push_back(options.out_dir + "/clients/" + name + ".pem");
    files.client_keys.push_back(options.out_dir + "/clients/" + name + ".key");
    if (absl::Status s = WritePair(*client, files.client_certs.back(), files.client_keys.back(),
                                   options.durability);
        !s.ok()) {
      return s;
    }
  }
  return files;
}

}  // namespace fl
