// `fl certs`: a federation's certificates. Without a subcommand it creates the CA, the server's
// certificate and one per site (fl/common/provision.h); `--admin NAME` issues an operator's
// certificate for the control API (`fl run`), from the CA already in --out when there is one;
// `fl certs add-site NAME...` issues more sites from an existing CA; `fl certs renew` replaces a
// site's, an admin's or the server's certificate (the old files kept as *.old); `fl certs
// request NAME` (at a site) makes a key that stays there and a request, which `fl certs sign`
// (at the operator) turns into the site's certificate. cli/main.cc
// registers it. Thread-compatible: one command per process.
#ifndef FL_CLI_CERTS_COMMAND_H_
#define FL_CLI_CERTS_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace fl::cli {

struct CertsArgs {
  std::string out_dir = "fl-certs";
  std::string federation = "fl-federation";
  std::vector<std::string> clients;
  int num_clients = 0;
  std::vector<std::string> server_names = {"localhost", "127.0.0.1", "::1"};
  std::vector<std::string> admins;  // --admin NAME (repeatable)
  int valid_days = 365;
  std::vector<std::string> add_sites;  // `add-site NAME...`
  CLI::App* add_site = nullptr;
  std::string renew_name;  // `renew NAME [--admin] | --server`
  bool renew_admin = false, renew_server = false;
  CLI::App* renew = nullptr;
  std::string request_name;  // `request NAME`: at the site
  CLI::App* request = nullptr;
  std::string sign_file, sign_name;  // `sign FILE [--name] [--replace]`: at the operator
  bool sign_replace = false;
  CLI::App* sign = nullptr;
};

CLI::App* AddCertsCommand(CLI::App& app, CertsArgs& a);

// Writes the files and prints one line per certificate. Exit code 0, or 1 with a one-line error
// naming the file and the fix (an existing CA never replaced, an existing name never reused).
int RunCerts(const CertsArgs& a);

}  // namespace fl::cli

#endif  // FL_CLI_CERTS_COMMAND_H_
