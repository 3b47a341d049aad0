// `fl client`'s process: a site's client that stays up and serves run after run, like Flower's
// SuperNode or a FLARE client, or with `once` takes part in one run and exits.
//
// Serving (the default): it builds the trainer from the configuration (nothing connects when the
// configuration or data is wrong), then joins the server and works in its run. When the run ends
// (the server's DONE) it logs run_ended and waits for the next one: it asks the server again with
// a backoff from 1 s up to `next_run_poll` (logging waiting_for_next_run each time) and starts
// working as soon as the server offers a run that is not over: a new run of the same server, or
// a restarted server with a new data directory. A run that is over, whatever its id, is never
// worked in twice. A server that is down is retried forever with capped backoff, each retry
// logged (client_retry; server_unreachable after each reconnect_timeout). Only a refusal by the
// server (UNAUTHENTICATED, PERMISSION_DENIED: not enrolled, revoked, another CA) or a signal ends
// it.
//
// Once: the first run's end ends the process; its exit code says how (cli/exit_codes.h).
//
// SIGTERM or SIGINT (Stop) ends it cleanly at any point, mid-run too (the call in flight is
// cancelled; an update is not sent), with kExitOk and a client_stopped log line.
#ifndef FL_CLI_CLIENT_DAEMON_H_
#define FL_CLI_CLIENT_DAEMON_H_

#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cli/client_config.h"
#include "fl/client/client.h"

namespace fl::cli {

class SiteDaemon {
 public:
  explicit SiteDaemon(ClientConfig config) : config_(std::move(config)) {}

  // Runs the site as described above until it ends and returns the process's exit code
  // (exit_codes.h), having printed a one-line error naming the cause and the fix for every code
  // but kExitOk: kExitConfig (BuildSiteTrainer's and Client::Create's errors), kExitRefused,
  // and with once kExitRunFailed, kExitUnreachable or kExitError. Call once.
  int Run();

  // Makes Run return kExitOk soon, from any thread and at any point, before Run too. `signal` is
  // logged (0: none).
  void Stop(int signal);

 private:
  // Sleeps `d` unless Stop is called; false when stopped.
  bool SleepUnlessStopped(absl::Duration d);
  bool stopping();
  int Stopped();
  // Serves runs with `client` until an exit code is due.
  int Serve(fl::client::Client& client);

  const ClientConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                 // guarded by mu_
  int signal_ = 0;                        // guarded by mu_
  fl::client::Client* client_ = nullptr;  // guarded by mu_; not owned (Run's)
};

}  // namespace fl::cli

#endif  // FL_CLI_CLIENT_DAEMON_H_
