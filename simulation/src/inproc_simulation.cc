// RunSimulation with the in-process transport: the real store (SQLite under work_dir/server),
// strategy and round engine on a simulated clock, and the sites as virtual sites
// (simulation/internal/virtual_federation.h). No certificate, socket or serialization.
#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/strategies.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/simulation/evaluation.h"
#include "simulation/internal/sim_setup.h"
#include "simulation/internal/virtual_federation.h"

namespace fl::simulation::internal {

absl::StatusOr<SimulationResult> RunInprocSimulation(
    const SimulationOptions& options, const SimulationData& data,
    std::function<void(const SimulationRound&)> on_round) {
  const std::string data_dir = options.work_dir + "/server";
  server::EngineOptions engine_options = EngineOptionsFor(options, data.arch);
  engine_options.spill_dir = data_dir + "/spill";
  if (absl::Status s = MakeDirectories(engine_options.spill_dir); !s.ok()) return s;
  const int32_t n = options.num_clients;
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> strategy =
      aggregation::MakeStrategy(options.strategy, [n] { return int64_t{n}; });
  if (!strategy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("strategy: ", strategy.status().message()));
  }
  for (const auto& [key, value] : options.strategy.ClientConfig()) {
    engine_options.fit.extra[key] = value;
  }
  const bool scaffold = options.strategy.name == "scaffold";
  absl::StatusOr<Model> weights = client::InitialBuiltinModel(data.arch, options.seed);
  if (!weights.ok()) return weights.status();
  Model initial = scaffold ? aggregation::WithZeroControlVariates(*weights) : *std::move(weights);
  if (absl::Status s = (*strategy)->CheckModel(initial.spec()); !s.ok()) return s;
  const ModelSpec spec = initial.spec();

  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::Open(data_dir);
  if (!store.ok()) return store.status();
  SimulationResult result;
  std::mutex result_mu;
  std::atomic<server::Store*> store_ptr{store->get()};
  server::EngineHooks hooks;
  hooks.evaluate = BuiltinTestSetEvaluation(data.arch, data.test, options.backend);
  MakeRoundRecorder(options, result, result_mu, store_ptr, std::move(on_round), hooks);
  SimulatedClock clock(absl::Now());
  absl::StatusOr<std::unique_ptr<server::RoundEngine>> engine = server::RoundEngine::Create(
      engine_options, store->get(), strategy->get(), &clock, std::move(initial), hooks);
  if (!engine.ok()) return engine.status();
  result.run_id = (*engine)->run_id();
  result.db_path = (*store)->db_path();

  VirtualFederationOptions sites;
  sites.num_sites = n;
  sites.workers = options.workers;
  sites.persistent_trainers = scaffold;
  sites.heterogeneity = options.heterogeneity;
  sites.seed = options.seed;
  sites.client_timeout = engine_options.client_timeout;
  const int workers = options.workers > 0
                          ? options.workers
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Sites train at once on the pool: share the cores among the workers.
  const int cpu_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / workers);
  auto make_trainer = [&](int32_t site) {
    return client::MakeBuiltinTrainer(data.arch,
                                      data.train->Subset(data.parts[static_cast<size_t>(site)]),
                                      client::Dataset{},
                                      TrainerOptionsFor(options, site, cpu_threads));
  };
  LogEvent(LogLevel::kInfo, "simulation_joining",
           {{"sites", absl::StrCat(n)},
            {"transport", "inproc"},
            {"workers", absl::StrCat(workers)}});
  absl::StatusOr<VirtualFederationStats> stats = RunVirtualFederation(
      **engine, clock, sites, spec, make_trainer, [](int32_t joined) {
        LogEvent(LogLevel::kInfo, "simulation_joined", {{"sites", absl::StrCat(joined)}});
      });
  if (!stats.ok()) return stats.status();
  LogEvent(LogLevel::kInfo, "simulation_sites_done",
           {{"tasks", absl::StrCat(stats->tasks)},
            {"dropouts", absl::StrCat(stats->dropouts)},
            {"refused", absl::StrCat(stats->refused)},
            {"join_time", absl::FormatDuration(stats->join_time)},
            {"simulated_time", absl::FormatDuration(stats->simulated_time)}});
  if (absl::Status s = FinishResult(**store, result, {}); !s.ok()) return s;
  return result;
}

}  // namespace fl::simulation::internal
