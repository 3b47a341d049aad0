// Virtual sites: a whole federation's sites as state, not threads, driven against the real round
// engine on a simulated clock.
//
// The driver stands in for the sites' long polls: it asks the engine which sites it waits on and
// hands them their tasks; everything a site sends or fetches (join, download, update,
// secure-aggregation messages, evaluation) goes through its transport, in process or over gRPC.
//
// A virtual site is its id and name while idle (the engine and the store know it as a joined
// client); only when the engine has a task for it does it get a trainer (from the factory) and
// an SDK client over the in-process transport, and run on a bounded pool of workers. The
// driver works in waves: it asks the engine which sites it waits on (PendingClients), polls
// those, runs their tasks at once on the pool (the real SDK loop: limits, download, Trainer::Fit,
// encoding, secure-aggregation stages, evaluation), and records what each would send. It then
// replays the recordings in the order of their simulated finish times (ties by site index), moving
// the simulated clock there first, so that deadlines, stragglers and heartbeats act exactly as in
// production, and the server folds updates in an order that does not depend on the number of
// workers: the same seed gives a bit-identical model with 1 worker or 16.
//
// Simulated time: a site's task takes compute_per_example x examples x epochs (x slow_factor for
// a slow site) plus the model's bytes down and up at link_mbps. Busy sites heartbeat every
// heartbeat_interval of simulated time; idle sites are kept online; a site that drops out of a
// round goes silent until that round attempt ends, and the engine's client_timeout and round
// deadline deal with it as they would with a real one.
#ifndef FL_SIMULATION_INTERNAL_VIRTUAL_FEDERATION_H_
#define FL_SIMULATION_INTERNAL_VIRTUAL_FEDERATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client_sdk/internal/transport.h"
#include "fl/client/trainer.h"
#include "fl/server/engine.h"
#include "fl/simulation/attacks.h"
#include "fl/simulation/simulation.h"
#include "simulation/internal/site_executor.h"

namespace fl::simulation {

// The engine's clock in an in-process simulation: time moves only when the driver moves it.
class SimulatedClock final : public server::Clock {
 public:
  explicit SimulatedClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}
  absl::Time Now() override { return absl::FromUnixNanos(now_ns_.load()); }
  // Moves the clock forward to `t` (never back).
  void AdvanceTo(absl::Time t) {
    const int64_t ns = absl::ToUnixNanos(t);
    int64_t cur = now_ns_.load();
    while (ns > cur && !now_ns_.compare_exchange_weak(cur, ns)) {
    }
  }

 private:
  std::atomic<int64_t> now_ns_;
};

struct VirtualFederationOptions {
  int32_t num_sites = 10;
  int32_t workers = 0;  // 0: the machine's cores
  // Keep each site's trainer between its tasks (SCAFFOLD's c_i lives there); otherwise a site's
  // trainer exists only while it works, and a site costs nothing but its id while idle.
  bool persistent_trainers = false;
  Heterogeneity heterogeneity;
  uint64_t seed = 0;
  absl::Duration heartbeat_interval = absl::Seconds(10);
  // The engine's client_timeout: idle sites are kept online well within it.
  absl::Duration client_timeout = absl::Seconds(90);
  std::string name_prefix = "site-";
  // How site `index` (named name_prefix + index) reaches the engine while it joins and while it
  // works, and the id the engine knows it by. Empty: the in-process transport, and
  // VirtualSiteId(name). Called from worker threads: must be thread-safe.
  TransportFactory make_transport;
  int64_t open_transports = 0;  // LocalSiteOptions::open_transports
  std::function<std::string(int32_t index)> site_id;
  // Sites that attack (fl/simulation/attacks.h): AttackingSites(num_sites, fraction, seed) of
  // them; their updates are rewritten between their training and their delivery.
  AttackOptions attack;
  // The sites' secure-aggregation identities (LocalSiteOptions::identities).
  std::shared_ptr<SiteIdentities> identities;
};

struct VirtualFederationStats {
  int64_t tasks = 0;         // tasks run by sites
  int64_t dropouts = 0;      // site rounds lost to dropout_fraction
  int64_t unavailable = 0;   // sampled sites not there in their round (availability)
  int64_t refused = 0;       // messages the engine refused (stale after a deadline, ...)
  int64_t poisoned = 0;      // updates an attack rewrote
  absl::Duration join_time;  // joining every site
  absl::Duration simulated_time;
};

// The id a virtual site has in the engine and the store: the SHA-256 of its name, as hex (the
// shape of a certificate fingerprint).
std::string VirtualSiteId(const std::string& name);

// Joins the sites (with `spec` as their trainers' model) and drives `engine`, whose clock must be
// `clock`, until its run is finished. `on_joined` (may be empty) hears how many sites have joined
// now and then during setup. INVALID_ARGUMENT for bad options, the engine's refusal of a join,
// or the first error of a trainer factory.
absl::StatusOr<VirtualFederationStats> RunVirtualFederation(
    server::RoundEngine& engine, SimulatedClock& clock, const VirtualFederationOptions& options,
    const ModelSpec& spec, const TrainerFactory& make_trainer,
    const std::function<void(int32_t joined)>& on_joined = {});

// The same with the sites run by `executor` (which then makes their trainers and transports;
// options.workers, make_transport and persistent_trainers are its business).
absl::StatusOr<VirtualFederationStats> DriveVirtualSites(
    server::RoundEngine& engine, SimulatedClock& clock, const VirtualFederationOptions& options,
    const ModelSpec& spec, SiteExecutor& executor,
    const std::function<void(int32_t joined)>& on_joined = {});

}  // namespace fl::simulation

#endif  // FL_SIMULATION_INTERNAL_VIRTUAL_FEDERATION_H_
