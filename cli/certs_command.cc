#include "cli/certs_command.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_util.h"
#include "cli/preflight_tls.h"
#include "fl/common/certificate_request.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/common/provision.h"

namespace fl::cli {
namespace {

// Issues each name from the CA in `out_dir`, printing where each went and what to do next.
int IssueEach(const CertsArgs& a, IssuedRole role, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    absl::StatusOr<IssuedFiles> files = IssueFromFederation(a.out_dir, role, name, a.valid_days);
    if (!files.ok()) return Fail(files.status());
    if (role == IssuedRole::kAdmin) {
      std::printf("admin  %-12s %s, key %s (for fl run --cert/--key)\n", name.c_str(),
                  files->cert.c_str(), files->key.c_str());
    } else {
      std::printf(
          "client %-12s %s, key %s\n  enroll it: fl admin --data-dir DIR enroll %s --ca "
          "%s/ca.pem\n",
          name.c_str(), files->cert.c_str(), files->key.c_str(), files->cert.c_str(),
          a.out_dir.c_str());
    }
  }
  return 0;
}

}  // namespace

CLI::App* AddCertsCommand(CLI::App& app, CertsArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "certs",
      "Create a federation CA, the server certificate and one certificate per site; --admin "
      "issues operators' certificates, add-site more sites, from the CA already in --out");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--out", a.out_dir, "Output directory")->capture_default_str();
  cmd->add_option("--federation", a.federation, "Federation name")->capture_default_str();
  cmd->add_option("--client", a.clients, "A site's name (repeat for each site)");
  cmd->add_option("--clients", a.num_clients, "Also make N sites named site-0..N-1");
  cmd->add_option("--server-name", a.server_names,
                  "Host names and IP addresses the server certificate is valid for")
      ->capture_default_str();
  cmd->add_option("--admin", a.admins,
                  "An operator's certificate for the control API (fl run), written to "
                  "admins/NAME.pem; repeatable. With a CA already in --out, only these are made");
  cmd->add_option("--valid-days", a.valid_days)->capture_default_str();
  a.add_site =
      cmd->add_subcommand("add-site", "Issue more sites' certificates from the CA in --out");
  a.add_site->add_option("name", a.add_sites, "Site names")->required();
  a.add_site->add_option("--out", a.out_dir, "The directory fl certs made")->capture_default_str();
  a.add_site->add_option("--valid-days", a.valid_days)->capture_default_str();
  a.renew = cmd->add_subcommand(
      "renew",
      "A new key and certificate for a site (or --admin NAME, or --server) from the CA "
      "in --out; the old files are kept as *.old");
  a.renew->add_option("name", a.renew_name, "The site's (or admin's) name");
  a.renew->add_flag("--admin", a.renew_admin, "NAME is an admin");
  a.renew->add_flag("--server", a.renew_server,
                    "The server's certificate, for the same host names and addresses");
  a.renew->add_option("--out", a.out_dir, "The directory fl certs made")->capture_default_str();
  a.renew->add_option("--valid-days", a.valid_days)->capture_default_str();
  a.request = cmd->add_subcommand(
      "request",
      "At a site: make this site's key (it stays here) and a certificate request to "
      "send to the federation's operator");
  a.request->add_option("name", a.request_name, "The site's name")->required();
  a.request->add_option("--out", a.out_dir, "Where to write NAME.key and NAME.csr")
      ->capture_default_str();
  a.sign = cmd->add_subcommand(
      "sign",
      "At the operator: sign a site's certificate request with the CA in --out, writing "
      "clients/NAME.pem (no private key travels)");
  a.sign->add_option("request", a.sign_file, "The site's NAME.csr")->required();
  a.sign->add_option("--name", a.sign_name, "The site's name (default: the request's)");
  a.sign->add_flag("--replace", a.sign_replace,
                   "The site's certificate exists (a renewal): keep it as NAME.pem.old");
  a.sign->add_option("--out", a.out_dir, "The directory fl certs made")->capture_default_str();
  a.sign->add_option("--valid-days", a.valid_days)->capture_default_str();
  return cmd;
}

int RunRenew(const CertsArgs& a) {
  if (a.renew_server == !a.renew_name.empty()) {
    return Fail(absl::InvalidArgumentError(
        "fl certs renew takes a site's name (with --admin, an admin's) or --server"));
  }
  std::vector<std::string> names;
  std::string common_name = a.renew_name;
  if (a.renew_server) {
    absl::StatusOr<preflight::CertInfo> old = preflight::ReadCertificate(a.out_dir + "/server.pem");
    if (!old.ok()) return Fail(old.status());
    names = old->names;
    common_name = old->subject_cn;
    if (names.empty()) names.push_back(common_name);
  }
  const IssuedRole role = a.renew_admin ? IssuedRole::kAdmin : IssuedRole::kSite;
  absl::StatusOr<IssuedFiles> files =
      RenewFromFederation(a.out_dir, role, common_name, a.valid_days, names);
  if (!files.ok()) return Fail(files.status());
  std::printf("renewed %s: %s, key %s (the old ones are %s.old, %s.old)\n",
              a.renew_server ? "the server's certificate" : common_name.c_str(),
              files->cert.c_str(), files->key.c_str(), files->cert.c_str(), files->key.c_str());
  if (a.renew_server) {
    std::printf("  valid for %s; restart the server with it\n", absl::StrJoin(names, ", ").c_str());
  } else if (!a.renew_admin) {
    std::string old_fingerprint = "<the old fingerprint>";
    if (absl::StatusOr<std::string> pem = ReadFile(files->cert + ".old"); pem.ok()) {
      old_fingerprint = CertificateFingerprint(*pem).value_or(old_fingerprint);
    }
    std::printf(
        "  enroll it: fl admin --data-dir DIR enroll %s --ca %s/ca.pem\n"
        "  once the site uses it, revoke the old one: fl admin --data-dir DIR revoke %s\n",
        files->cert.c_str(), a.out_dir.c_str(), old_fingerprint.c_str());
  }
  return 0;
}

int RunRequest(const CertsArgs& a) {
  const std::string key = a.out_dir + "/" + a.request_name + ".key";
  const std::string csr = a.out_dir + "/" + a.request_name + ".csr";
  for (const std::string& path : {key, csr}) {
    if (std::filesystem::exists(path)) {
      return Fail(absl::AlreadyExistsError(
          absl::StrCat(path, " exists: refusing to replace a site's key; choose another --out")));
    }
  }
  absl::StatusOr<KeyAndRequest> made = MakeCertificateRequest(a.request_name);
  if (!made.ok()) return Fail(made.status());
  if (absl::Status s = MakeDirectories(a.out_dir); !s.ok()) return Fail(s);
  if (absl::Status s = WriteFileAtomic(key, made->key_pem, 0600); !s.ok()) return Fail(s);
  if (absl::Status s = WriteFileAtomic(csr, made->request_pem, 0644); !s.ok()) return Fail(s);
  std::printf(
      "key %s (keep it here) and request %s: send the request to the federation's "
      "operator (fl certs sign %s.csr), who sends back %s.pem\n",
      key.c_str(), csr.c_str(), a.request_name.c_str(), a.request_name.c_str());
  return 0;
}

int RunSign(const CertsArgs& a) {
  absl::StatusOr<std::string> request = ReadFile(a.sign_file);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<CertificateIssuer> issuer = LoadFederationIssuer(a.out_dir);
  if (!issuer.ok()) return Fail(issuer.status());
  absl::StatusOr<SignedRequest> signed_request =
      SignCertificateRequest(*issuer, *request, a.sign_name, a.valid_days);
  if (!signed_request.ok()) {
    return Fail(absl::Status(signed_request.status().code(),
                             absl::StrCat(a.sign_file, ": ", signed_request.status().message())));
  }
  const std::string& name = signed_request->common_name;
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("the request's name '", name, "' is not a plain file name; give --name")));
  }
  const std::string cert = a.out_dir + "/clients/" + name + ".pem";
  if (std::filesystem::exists(cert)) {
    if (!a.sign_replace) {
      return Fail(absl::AlreadyExistsError(absl::StrCat(
          cert,
          " exists: refusing to replace it (--replace keeps it as .old; or another --name)")));
    }
    if (std::filesystem::exists(cert + ".old")) {
      return Fail(absl::FailedPreconditionError(
          absl::StrCat(cert, ".old exists (an earlier renewal's): move it away first")));
    }
    std::error_code ec;
    std::filesystem::rename(cert, cert + ".old", ec);
    if (ec) {
      return Fail(absl::InternalError(absl::StrCat("cannot keep ", cert, ": ", ec.message())));
    }
  }
  if (absl::Status s = MakeDirectories(a.out_dir + "/clients"); !s.ok()) return Fail(s);
  if (absl::Status s = WriteFileAtomic(cert, signed_request->cert_pem, 0644); !s.ok()) {
    return Fail(s);
  }
  std::printf(
      "signed %s: %s (send it to the site; its key never left it)\n  fingerprint %s\n  enroll "
      "it: fl admin --data-dir DIR enroll %s --ca %s/ca.pem\n",
      name.c_str(), cert.c_str(),
      CertificateFingerprint(signed_request->cert_pem).value_or("?").c_str(), cert.c_str(),
      a.out_dir.c_str());
  return 0;
}

int RunCerts(const CertsArgs& a) {
  if (a.request->parsed()) return RunRequest(a);
  if (a.sign->parsed()) return RunSign(a);
  if (a.add_site->parsed()) return IssueEach(a, IssuedRole::kSite, a.add_sites);
  if (a.renew->parsed()) return RunRenew(a);
  const bool existing = std::filesystem::exists(a.out_dir + "/ca.key");
  if (existing && !a.admins.empty() && a.clients.empty() && a.num_clients == 0) {
    return IssueEach(a, IssuedRole::kAdmin, a.admins);
  }
  ProvisionOptions options;
  options.out_dir = a.out_dir;
  options.federation_name = a.federation;
  options.server_names = a.server_names;
  options.client_names = a.clients;
  for (int i = 0; i < a.num_clients; ++i) options.client_names.push_back(absl::StrCat("site-", i));
  options.valid_days = a.valid_days;
  absl::StatusOr<ProvisionedFiles> files = ProvisionFederation(options);
  if (!files.ok()) {
    if (existing && absl::IsAlreadyExists(files.status())) {
      return Fail(absl::AlreadyExistsError(absl::StrCat(
          files.status().message(), "; to add sites to it: fl certs add-site NAME --out ",
          a.out_dir, "; operators: fl certs --admin NAME --out ", a.out_dir)));
    }
    return Fail(files.status());
  }
  std::printf("federation CA:      %s (keep %s offline)\n", files->ca_cert.c_str(),
              files->ca_key.c_str());
  std::printf("server certificate: %s, key %s\n", files->server_cert.c_str(),
              files->server_key.c_str());
  for (size_t i = 0; i < files->client_certs.size(); ++i) {
    std::printf("client %-12s %s, key %s\n", options.client_names[i].c_str(),
                files->client_certs[i].c_str(), files->client_keys[i].c_str());
  }
  return IssueEach(a, IssuedRole::kAdmin, a.admins);
}

}  // namespace fl::cli
