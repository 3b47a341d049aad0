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

absl::Status CheckPlainName(const std::string& kind, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " name '", name, "' is not a plain file name"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CertificateIssuer> LoadFederationIssuer(const std::string& out_dir) {
  CertAndKey ca;
  for (auto [path, out] : {std::pair{out_dir + "/ca.pem", &ca.cert_pem},
                           std::pair{out_dir + "/ca.key", &ca.key_pem}}) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat(text.status().message(),
                                       "; give --out the directory that `fl certs` made (it "
                                       "holds the federation's ca.pem and ca.key)"));
    }
    *out = *std::move(text);
  }
  return CertificateIssuer::Load(ca);
}

absl::StatusOr<IssuedFiles> IssueFromFederation(const std::string& out_dir, IssuedRole role,
                                                const std::string& name, int valid_days) {
  const bool admin = role == IssuedRole::kAdmin;
  if (absl::Status s = CheckPlainName(admin ? "admin" : "site", name); !s.ok()) return s;
  absl::StatusOr<CertificateIssuer> issuer = LoadFederationIssuer(out_dir);
  if (!issuer.ok()) return issuer.status();
  const std::string dir = out_dir + (admin ? "/admins" : "/clients");
  IssuedFiles files{dir + "/" + name + ".pem", dir + "/" + name + ".key", ""};
  for (const std::string& path : {files.cert, files.key}) {
    if (std::filesystem::exists(path)) {
      return absl::AlreadyExistsError(absl::StrCat(
          path,
          " exists: refusing to replace it; choose another name (or revoke the old one "
          "and remove its files first)"));
    }
  }
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  absl::StatusOr<CertAndKey> pair =
      admin ? issuer->IssueAdmin(name, valid_days) : issuer->IssueClient(name, valid_days);
  if (!pair.ok()) return pair.status();
  absl::StatusOr<std::string> fingerprint = CertificateFingerprint(pair->cert_pem);
  if (!fingerprint.ok()) return fingerprint.status();
  files.fingerprint = *std::move(fingerprint);
  if (absl::Status s = WritePair(*pair, files.cert, files.key, Durability::kSynced); !s.ok()) {
    return s;
  }
  return files;
}

absl::StatusOr<IssuedFiles> RenewFromFederation(const std::string& out_dir, IssuedRole role,
                                                const std::string& name, int valid_days,
                                                const std::vector<std::string>& server_names) {
  const bool server = !server_names.empty();
  const bool admin = role == IssuedRole::kAdmin;
  if (!server) {
    if (absl::Status s = CheckPlainName(admin ? "admin" : "site", name); !s.ok()) return s;
  }
  const std::string base =
      server ? out_dir + "/server" : out_dir + (admin ? "/admins/" : "/clients/") + name;
  IssuedFiles files{base + ".pem", base + ".key", ""};
  if (!std::filesystem::exists(files.cert)) {
    return absl::NotFoundError(
        absl::StrCat("no certificate to renew at ", files.cert,
                     server ? "" : "; fl certs add-site (or --admin) issues a first one"));
  }
  if (!std::filesystem::exists(files.key)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "there is no ", files.key,
        ": this site made its own key (fl certs request); ask it for "
        "a new request and sign it with fl certs sign --replace, so that its key stays there"));
  }
  for (const std::string& path : {files.cert, files.key}) {
    if (std::filesystem::exists(path + ".old") || std::filesystem::exists(path + ".new")) {
      return absl::FailedPreconditionError(absl::StrCat(
          path,
          ".old or .new exists (an earlier renewal's): move it away once that renewal is "
          "no longer needed, then renew again"));
    }
  }
  absl::StatusOr<CertificateIssuer> issuer = LoadFederationIssuer(out_dir);
  if (!issuer.ok()) return issuer.status();
  absl::StatusOr<CertAndKey> pair = server  ? issuer->IssueServer(name, server_names, valid_days)
                                    : admin ? issuer->IssueAdmin(name, valid_days)
                                            : issuer->IssueClient(name, valid_days);
  if (!pair.ok()) return pair.status();
  absl::StatusOr<std::string> fingerprint = CertificateFingerprint(pair->cert_pem);
  if (!fingerprint.ok()) return fingerprint.status();
  files.fingerprint = *std::move(fingerprint);
  // The new pair is written whole beside the old (*.new), then each old file moves to *.old and
  // each new one into place: a crash leaves every file, named for what it is.
  std::error_code ec;
  if (absl::Status s =
          WritePair(*pair, files.cert + ".new", files.key + ".new", Durability::kSynced);
      !s.ok()) {
    return s;
  }
  for (const std::string& path : {files.cert, files.key}) {
    std::filesystem::rename(path, path + ".old", ec);
    if (!ec) std::filesystem::rename(path + ".new", path, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("renewing ", path, ": ", ec.message(),
                                              " (the new file is ", path, ".new, the old ", path,
                                              ".old)"));
    }
  }
  if (absl::Status s = SyncDirectory(std::filesystem::path(files.cert).parent_path().string());
      !s.ok()) {
    return s;
  }
  return files;
}

absl::StatusOr<ProvisionedFiles> ProvisionFederation(const ProvisionOptions& options) {
  for (const std::string& name : options.client_names) {
    if (absl::Status s = CheckPlainName("client", name); !s.ok()) return s;
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
