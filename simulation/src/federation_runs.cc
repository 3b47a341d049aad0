// What RunSimulation's transports share (driving virtual sites on a simulated clock, see
// simulation/internal/virtual_federation.h, so that the same seed gives the same model over
// either), and the in-process run: the real store (SQLite under work_dir/server), strategy and
// round engine in this process; no certificate, socket or serialization. The gRPC run is in
// grpc_simulation.cc.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/strategies.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/simulation/evaluation.h"
#include "simulation/internal/sim_setup.h"
#include "simulation/internal/site_identities.h"
#include "simulation/internal/virtual_federation.h"

namespace fl::simulation::internal {

void SaySetup(const SimulationCallbacks& callbacks, const std::string& step) {
  if (callbacks.on_setup) callbacks.on_setup(step);
}

absl::StatusOr<Model> InitialModelFor(const SimulationOptions& options,
                                      const SimulationData& data) {
  if (options.initial_model != nullptr) return options.initial_model->Clone();
  absl::StatusOr<Model> weights = client::InitialBuiltinModel(data.arch, options.seed);
  if (!weights.ok()) return weights.status();
  return options.strategy.name == "scaffold" ? aggregation::WithZeroControlVariates(*weights)
                                             : *std::move(weights);
}

int WorkersFor(const SimulationOptions& options) {
  return options.workers > 0 ? options.workers
                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

TrainerFactory TrainerFactoryFor(const SimulationOptions& options, const SimulationData& data) {
  if (options.trainer_factory) return options.trainer_factory;
  // Sites train at once on the pool: share the cores among the workers.
  const int cpu_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / WorkersFor(options));
  // Label flipping poisons the attacking sites' own data.
  auto flips = std::make_shared<std::vector<bool>>(
      options.attack.enabled() && options.attack.kind == "label_flip"
          ? AttackingSites(options.num_clients, options.attack.fraction, options.seed)
          : std::vector<bool>());
  return [&options, &data, cpu_threads, flips](int32_t site) {
    client::Dataset mine = data.train->Subset(data.parts[static_cast<size_t>(site)]);
    if (static_cast<size_t>(site) < flips->size() && (*flips)[static_cast<size_t>(site)]) {
      FlipLabels(mine);
    }
    return client::MakeBuiltinTrainer(data.arch, std::move(mine), client::Dataset{},
                                      TrainerOptionsFor(options, site, cpu_threads));
  };
}

aggregation::RootTrainer RootTrainerFor(const SimulationOptions& options,
                                        const SimulationData& data) {
  if (options.strategy.name != "fltrust") return {};
  // The server's root rows: a seeded sample of the training rows (they may also be some site's,
  // as a server's data would come from the same population).
  const int64_t n = data.train->num_examples();
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  std::mt19937_64 rng(options.seed ^ 0x5eed0f7ull);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(static_cast<size_t>(std::min<int64_t>(n, options.strategy.root_examples)));
  return BuiltinRootTrainer(
      data.arch, std::make_shared<const client::Dataset>(data.train->Subset(rows)), options.fit,
      options.strategy, TrainerOptionsFor(options, options.num_clients, WorkersFor(options)));
}

absl::Status DriveSites(const SimulationOptions& options, const SimulationData& data,
                        server::RoundEngine& engine, SimulatedClock& clock, const ModelSpec& spec,
                        const SimulationCallbacks& callbacks, VirtualFederationOptions sites,
                        const std::function<void()>& training_started, SiteExecutor* executor,
                        int64_t* poisoned) {
  const int32_t n = options.num_clients;
  sites.num_sites = n;
  sites.workers = options.workers;
  sites.persistent_trainers = options.strategy.name == "scaffold";
  sites.heterogeneity = options.heterogeneity;
  sites.seed = options.seed;
  sites.attack = options.attack;
  if (options.attack.enabled()) {
    const std::vector<bool> attacking = AttackingSites(n, options.attack.fraction, options.seed);
    SaySetup(callbacks,
             absl::StrCat(std::count(attacking.begin(), attacking.end(), true), " of ", n,
                          " sites attack (", options.attack.kind,
                          options.attack.scale > 0 ? absl::StrCat(", scale ", options.attack.scale)
                                                   : std::string(),
                          ")"));
  }
  SaySetup(callbacks, absl::StrCat("joining ", n, " virtual sites (", options.transport, ", ",
                                   WorkersFor(options), " workers",
                                   executor != nullptr ? " on each MPI rank" : "", ")"));
  auto on_joined = [&callbacks, &training_started, n](int32_t joined) {
    SaySetup(callbacks, joined == n ? absl::StrCat("all ", n, " sites joined; training")
                                    : absl::StrCat(joined, " sites joined"));
    if (joined < n) return;
    if (training_started) training_started();
    if (callbacks.on_training_start) callbacks.on_training_start();
  };
  absl::StatusOr<VirtualFederationStats> stats =
      executor != nullptr ? DriveVirtualSites(engine, clock, sites, spec, *executor, on_joined)
                          : RunVirtualFederation(engine, clock, sites, spec,
                                                 TrainerFactoryFor(options, data), on_joined);
  if (!stats.ok()) return stats.status();
  if (poisoned != nullptr) *poisoned = stats->poisoned;
  LogEvent(LogLevel::kInfo, "simulation_sites_done",
           {{"tasks", absl::StrCat(stats->tasks)},
            {"dropouts", absl::StrCat(stats->dropouts)},
            {"unavailable", absl::StrCat(stats->unavailable)},
            {"refused", absl::StrCat(stats->refused)},
            {"poisoned", absl::StrCat(stats->poisoned)},
            {"join_time", absl::FormatDuration(stats->join_time)},
            {"simulated_time", absl::FormatDuration(stats->simulated_time)}});
  return absl::OkStatus();
}

absl::StatusOr<SimulationResult> RunInprocSimulation(const SimulationOptions& options,
                                                     const SimulationData& data,
                                                     const SimulationCallbacks& callbacks) {
  const std::string data_dir = options.work_dir + "/server";
  server::EngineOptions engine_options = EngineOptionsFor(options, data.arch);
  engine_options.spill_dir = data_dir + "/spill";
  if (absl::Status s = MakeDirectories(engine_options.spill_dir); !s.ok()) return s;
  const int32_t n = options.num_clients;
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> strategy = aggregation::MakeStrategy(
      options.strategy, [n] { return int64_t{n}; },
      aggregation::MakeFileSpill(engine_options.spill_dir), RootTrainerFor(options, data));
  if (!strategy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("strategy: ", strategy.status().message()));
  }
  for (const auto& [key, value] : options.strategy.ClientConfig()) {
    engine_options.fit.extra[key] = value;
  }
  engine_options.strategy = options.strategy;
  engine_options.strategy->server_learning_rate =
      aggregation::EffectiveServerLearningRate(options.strategy);
  absl::StatusOr<Model> initial = InitialModelFor(options, data);
  if (!initial.ok()) return initial.status();
  if (absl::Status s = (*strategy)->CheckModel(initial->spec()); !s.ok()) return s;
  const ModelSpec spec = initial->spec();

  server::StoreOpenOptions store_options;
  store_options.durable = false;  // a simulation is rerun from its seed, not recovered
  absl::StatusOr<std::unique_ptr<server::Store>> store =
      server::Store::Open(data_dir, store_options);
  if (!store.ok()) return store.status();
  SimulationResult result;
  std::mutex result_mu;
  std::atomic<server::Store*> store_ptr{store->get()};
  server::EngineHooks hooks;
  hooks.evaluate = options.trainer_factory
                       ? CallersEvaluation(options.evaluate)
                       : BuiltinTestSetEvaluation(data.arch, data.test, options.backend);
  VirtualFederationOptions sites;
  if (options.secure_aggregation.enabled) {
    // Each site signs with a certificate of a CA made for this run, as deployed sites do.
    absl::StatusOr<std::shared_ptr<SiteIdentities>> identities = MakeInMemorySiteIdentities();
    if (!identities.ok()) return identities.status();
    hooks.secagg_verifier = (*identities)->verifier();
    sites.identities = *std::move(identities);
  }
  const std::function<void()> training_started =
      MakeRoundRecorder(options, result, result_mu, store_ptr, callbacks.on_round, hooks);
  SimulatedClock clock(absl::Now());
  absl::StatusOr<std::unique_ptr<server::RoundEngine>> engine = server::RoundEngine::Create(
      engine_options, store->get(), strategy->get(), &clock, *std::move(initial), hooks);
  if (!engine.ok()) return engine.status();
  result.run_id = (*engine)->run_id();
  result.db_path = (*store)->db_path();

  sites.client_timeout = engine_options.client_timeout;
  if (absl::Status s = DriveSites(options, data, **engine, clock, spec, callbacks, sites,
                                  training_started, nullptr, &result.poisoned_updates);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = FinishResult(**store, result, {}); !s.ok()) return s;
  return result;
}

}  // namespace fl::simulation::internal
