// `fl admin`: the operator's reports, enrollment, revocation and model export on a server's
// data directory (cli/main.cc registers it). Thread-compatible: one command per process.
#ifndef FL_CLI_ADMIN_COMMAND_H_
#define FL_CLI_ADMIN_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace fl::cli {

// `fl admin`: reports and client administration on a server's data directory, also while the
// server runs. Reports open the store read-only; enroll and revoke open it for writing (beside the
// server, so they leave its in-progress checkpoint files alone).
struct AdminArgs {
  std::string data_dir = "fl-data";
  std::string format = "table";
  std::string out;
  int64_t run_id = 0;  // 0: the newest run
  int limit = 50;
  std::string cert, ca, name;  // enroll
  std::string client;          // revoke
  int32_t round = -1;          // export: -1 the last committed round, 0 the initial model
  bool with_server_state = false;
  bool reset = false;  // columns
  bool fail = false;   // end-run
  std::string reason;  // end-run
  CLI::App* status = nullptr;
  CLI::App* rounds = nullptr;
  CLI::App* clients = nullptr;
  CLI::App* audit = nullptr;
  CLI::App* enroll = nullptr;
  CLI::App* revoke = nullptr;
  CLI::App* export_model = nullptr;
  CLI::App* columns = nullptr;
  CLI::App* end_run = nullptr;
  CLI::App* backup = nullptr;
  CLI::App* evals = nullptr;
  CLI::App* revoke_admin = nullptr;
};

// Adds `fl admin` and its subcommands to `app`, filling `a` when parsed.
CLI::App* AddAdminCommand(CLI::App& app, AdminArgs& a);

// Runs the parsed subcommand; the process's exit code (0, or 1 with the error on stderr).
int RunAdmin(const AdminArgs& a);

}  // namespace fl::cli

#endif  // FL_CLI_ADMIN_COMMAND_H_
