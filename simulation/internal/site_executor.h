// Where virtual sites run (simulation/internal/virtual_federation.h): the driver decides what each
// site does and when its messages reach the engine; a SiteExecutor runs the sites' SDK loops and
// holds what they recorded until then. The local executor runs sites on a pool of threads in this
// process; the MPI executor (mpi_sites.h) sends each site's work to the rank that owns it, which
// runs it on a local executor of its own.
//
// Not thread-safe: the driver calls one method at a time.
#ifndef FL_SIMULATION_INTERNAL_SITE_EXECUTOR_H_
#define FL_SIMULATION_INTERNAL_SITE_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client_sdk/internal/transport.h"
#include "fl/client/trainer.h"
#include "fl/simulation/attacks.h"
#include "simulation/internal/site_identities.h"

namespace fl::simulation {

// Makes site `index`'s trainer (called on a worker thread; must be thread-safe).
using TrainerFactory =
    std::function<absl::StatusOr<std::unique_ptr<client::Trainer>>(int32_t index)>;
// Makes site `index`'s transport to the engine (called on a worker thread; must be thread-safe).
using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<client::Transport>>(int32_t index)>;

// One task of one site.
struct SiteWork {
  int32_t site = 0;
  client::ClientTask task;  // as the engine hands it to the site
  // > 0: the site fetches its task itself, polling this run over its transport, before running
  // it (work that rank 0 hands to another rank, whose `task` it does not send).
  int64_t poll_run_id = 0;
  // Filled by SiteExecutor::Run:
  absl::Status error;        // the trainer's or transport's factory failed
  int64_t num_examples = 0;  // what the site trained or evaluated on
  int64_t bytes_up = 0;      // what the site recorded to send
  // Filled by the driver:
  absl::Time finish;  // simulated time at which its messages reach the engine
  bool dropout = false;
};

class SiteExecutor {
 public:
  virtual ~SiteExecutor() = default;
  // Joins `sites` with `join` (its client_name set per site), calling `on_joined` with the
  // number joined so far now and then. The first refusal or factory error.
  virtual absl::Status Join(const std::vector<int32_t>& sites, const client::JoinRequestInfo& join,
                            const std::function<void(int32_t joined)>& on_joined) = 0;
  // Runs each work item's task in its site's SDK loop, recording what the site sends.
  virtual void Run(std::vector<SiteWork>& wave) = 0;
  // Sends what `site` recorded, in order; returns how many messages the engine refused.
  virtual int Deliver(int32_t site) = 0;
  // Forgets what `site` recorded (it dropped out).
  virtual void Discard(int32_t site) = 0;
  // Hands `poison` the float32 models that the wave's sites recorded to send (an attack rewrites
  // them in place before they are delivered). UNIMPLEMENTED where the updates are not here (MPI).
  using PoisonFn = std::function<void(std::vector<RoundUpdate>& updates)>;
  virtual absl::Status Poison(const std::vector<SiteWork>& wave, const PoisonFn& poison) {
    return absl::UnimplementedError("this site executor cannot simulate attacks");
  }
  // The site is idle again: drops its SDK client unless `keep_client` (inside a
  // secure-aggregation round, its session), and its trainer unless trainers persist.
  virtual void Release(int32_t site, bool keep_client) = 0;
};

struct LocalSiteOptions {
  int workers = 1;
  std::string name_prefix = "site-";
  bool persistent_trainers = false;  // SCAFFOLD: c_i lives in the trainer
  // Sites (the first this many to connect) that keep their transport from their join on, as a
  // real site keeps its channel: over gRPC this saves a TLS handshake per task, at the memory of
  // an open connection per site. 0: a new transport for every join and task.
  int64_t open_transports = 0;
  // Keep each site's downloaded model and float32 update until delivery, for Poison (attacks).
  bool record_models = false;
  // The sites' secure-aggregation identities (site_identities.h); null: none (plaintext).
  std::shared_ptr<SiteIdentities> identities;
};

// Runs sites in this process on `options.workers` threads.
std::unique_ptr<SiteExecutor> MakeLocalSiteExecutor(const LocalSiteOptions& options,
                                                    TrainerFactory make_trainer,
                                                    TransportFactory make_transport);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_INTERNAL_SITE_EXECUTOR_H_
