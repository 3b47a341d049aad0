// `fl run`: the control API of a running server (proto/fl/v1/control.proto) from an operator's
// admin certificate (`fl certs --admin NAME`): submit a run file, list the runs, show one,
// follow its events, change its policies, stop it. Runs are named by their run id; a run still
// queued by "q" and its queue id (e.g. q3). cli/main.cc registers it. Thread-compatible: one
// command per process.
#ifndef FL_CLI_RUN_COMMAND_H_
#define FL_CLI_RUN_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace fl::cli {

struct RunArgs {
  std::string server = "127.0.0.1:7443";
  std::string ca = "fl-certs/ca.pem";
  std::string cert, key;    // the admin's certificate and key
  std::string server_name;  // TLS name to expect (default: the host of --server)
  double timeout_s = 10;
  std::string format = "table";  // list/status: table or json
  std::string file;              // submit
  std::string name;              // submit
  std::string run;               // status, stop, logs: "12" or "q3"
  bool follow = false;           // logs
  bool fail = false;             // stop
  std::string reason;            // stop
  std::vector<std::string> set;  // update: key=value
  CLI::App *submit = nullptr, *list = nullptr, *status = nullptr, *stop = nullptr, *logs = nullptr,
           *update = nullptr;
};

CLI::App* AddRunCommand(CLI::App& app, RunArgs& a);

// Exit code 0, or 1 with a one-line error: the server's refusal (e.g. PERMISSION_DENIED for a
// site's certificate), or for a server that cannot be reached, the likely cause from a TLS probe
// (wrong CA, a name the server's certificate is not valid for, nothing listening).
int RunRun(RunArgs& a);

}  // namespace fl::cli

#endif  // FL_CLI_RUN_COMMAND_H_
