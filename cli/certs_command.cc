#include "cli/certs_command.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/command_util.h"
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
  return cmd;
}

int RunCerts(const CertsArgs& a) {
  if (a.add_site->parsed()) return IssueEach(a, IssuedRole::kSite, a.add_sites);
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
