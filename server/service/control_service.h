// The control API (proto/fl/v1/control.proto): operators holding an admin certificate submit,
// list, follow, change and stop runs on the running server. A thin, final service: it checks the
// caller's certificate (it must chain to the federation's CA and carry the admin role; anything
// else is PERMISSION_DENIED or UNAUTHENTICATED, audited as control_refused), translates, and
// calls the RunDirectory (the daemon) or the current engine. Refused in plaintext mode.
#ifndef FL_SERVER_SERVICE_CONTROL_SERVICE_H_
#define FL_SERVER_SERVICE_CONTROL_SERVICE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/common/crypto.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "fl/v1/control.grpc.pb.h"
#include "server/store/run_queue.h"

namespace fl::server {

// What the control API acts on: the server's runs beyond the store. The daemon implements it.
class RunDirectory {
 public:
  virtual ~RunDirectory() = default;
  // The current run's engine, or null between runs.
  virtual std::shared_ptr<RoundEngine> CurrentEngine() = 0;
  // Checks the run file (INVALID_ARGUMENT naming the key) and queues it; the server starts it
  // once the runs before it are over. FAILED_PRECONDITION when this server takes no submissions.
  virtual absl::StatusOr<QueuedRun> Submit(const std::string& run_toml, const std::string& name,
                                           const std::string& submitted_by) = 0;
  // Changes the active run's policies: `set` maps [run] keys (rounds, min_clients,
  // round_timeout_s, ...) to TOML values. One line per change (RoundEngine::ChangePolicies);
  // INVALID_ARGUMENT for an unknown key or a bad value, FAILED_PRECONDITION for a key a run
  // cannot change or a run that is not the active one.
  virtual absl::StatusOr<std::vector<std::string>> UpdateRun(
      int64_t run_id, const std::map<std::string, std::string>& set, const std::string& by) = 0;
  virtual RunQueue& queue() = 0;
  // The engine's time (a simulation's clock or the system's), for how long a run has been idle.
  virtual absl::Time Now() = 0;
  virtual absl::Duration stall_after() const = 0;
};

struct ControlServiceOptions {
  bool insecure_plaintext = false;
  std::shared_ptr<const ClientCertificateVerifier> verifier;  // null in plaintext
  // How often FollowRun looks for new events.
  absl::Duration follow_interval = absl::Milliseconds(200);
};

std::unique_ptr<fl::v1::Control::Service> MakeControlService(ControlServiceOptions options,
                                                             RunDirectory* runs, Store* store);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_CONTROL_SERVICE_H_
