// What both of RunSimulation's transports share (simulation.cc): the data and its partition, the
// engine's options, the sites' trainer options, the record of rounds and the result read back
// from the store; and the runs over each transport (federation_runs.cc).
#ifndef FL_SIMULATION_INTERNAL_SIM_SETUP_H_
#define FL_SIMULATION_INTERNAL_SIM_SETUP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "fl/simulation/simulation.h"
#include "simulation/internal/mpi_sites.h"
#include "simulation/internal/site_executor.h"
#include "simulation/internal/virtual_federation.h"

namespace fl::simulation::internal {

struct SimulationData {
  std::shared_ptr<const client::Dataset> train;
  std::shared_ptr<const client::Dataset> test;
  std::string description;           // what the data is, for the setup messages and the report
  std::optional<Partition> natural;  // the data's own split of train's rows, if it has one
  std::string partition_name;        // the partitioner used ("natural", "iid", ...)
  Partition parts;                   // row indices of train, by site
  PartitionSummary summary;          // of parts
  client::ModelArchitecture arch;
};

// Validates the options, loads the data and partitions it, telling `on_setup` (may be empty)
// each step. INVALID_ARGUMENT naming a bad option; the loader's error for data that cannot be
// read.
absl::StatusOr<SimulationData> PrepareSimulation(
    const SimulationOptions& options, const std::function<void(const std::string&)>& on_setup = {});
// PrepareSimulation for the caller's own sites (options.trainer_factory): the options checked,
// num_clients empty partitions, no data and no architecture.
absl::StatusOr<SimulationData> PrepareCallersSites(const SimulationOptions& options);
// The steps of PrepareSimulation (sim_data.cc): the data and the server's test set by
// options.data, then the training rows' split by options.partition.
absl::Status LoadSimulationData(const SimulationOptions& options, SimulationData& data);
absl::Status PartitionSimulationData(const SimulationOptions& options, SimulationData& data);
// The run's engine options (every site must be online; a round needs sample_fraction of them).
server::EngineOptions EngineOptionsFor(const SimulationOptions& options,
                                       const client::ModelArchitecture& arch);
// Site `site`'s built-in trainer: seed * 1000 + site orders its batches, on `cpu_threads`.
client::BuiltinTrainerOptions TrainerOptionsFor(const SimulationOptions& options, int32_t site,
                                                int cpu_threads);
// Sets hooks.on_round_end to append each round to `result` (under `result_mu`, with the epsilon
// read from `store` once set) and to call `on_round`; wraps hooks.evaluate (set it first) to time
// the evaluation of each round. Returns what marks the start of training: round 1's wall time
// counts from there, not from setup.
std::function<void()> MakeRoundRecorder(const SimulationOptions& options, SimulationResult& result,
                                        std::mutex& result_mu, std::atomic<server::Store*>& store,
                                        std::function<void(const SimulationRound&)> on_round,
                                        server::EngineHooks& hooks);
// Reads how the run ended: ABORTED when it did not finish, INTERNAL with the first of
// `site_errors`; otherwise fills the final accuracy, finish reason and epsilon.
absl::Status FinishResult(server::Store& store, SimulationResult& result,
                          const std::vector<std::string>& site_errors);

// The federation with each transport (see simulation.h; federation_runs.cc), on prepared data;
// options.num_clients is the number of sites the partition gave.
absl::StatusOr<SimulationResult> RunInprocSimulation(const SimulationOptions& options,
                                                     const SimulationData& data,
                                                     const SimulationCallbacks& callbacks);
// Over gRPC; with `mpi` (may be null) of more than one rank, this is rank 0 and the sites run on
// the others (grpc_simulation.cc).
absl::StatusOr<SimulationResult> RunGrpcSimulation(const SimulationOptions& options,
                                                   const SimulationData& data,
                                                   const SimulationCallbacks& callbacks,
                                                   const MpiJob* mpi);
// A rank above 0 of an MPI job: runs its slice of the sites for rank 0 until the run ends.
absl::StatusOr<SimulationResult> RunMpiWorker(const SimulationOptions& options,
                                              const SimulationData& data, const MpiJob& mpi);

// What the runs share (federation_runs.cc): a setup step for the caller to hear; the initial
// global model; the number of workers; each site's trainer; and the driving of the sites against
// `engine` (on a local pool, or by `executor` when it is not null) to the end of its run.
void SaySetup(const SimulationCallbacks& callbacks, const std::string& step);
absl::StatusOr<Model> InitialModelFor(const SimulationOptions& options, const SimulationData& data);
int WorkersFor(const SimulationOptions& options);
TrainerFactory TrainerFactoryFor(const SimulationOptions& options, const SimulationData& data);
// FLTrust's server-side training: a built-in trainer on strategy.root_examples training rows drawn
// by the seed, trained with the sites' fit settings. Empty for any other strategy.
aggregation::RootTrainer RootTrainerFor(const SimulationOptions& options,
                                        const SimulationData& data);
// `training_started` is called once every site has joined (then callbacks.on_training_start).
absl::Status DriveSites(const SimulationOptions& options, const SimulationData& data,
                        server::RoundEngine& engine, SimulatedClock& clock, const ModelSpec& spec,
                        const SimulationCallbacks& callbacks, VirtualFederationOptions sites,
                        const std::function<void()>& training_started,
                        SiteExecutor* executor = nullptr, int64_t* poisoned = nullptr);

}  // namespace fl::simulation::internal

#endif  // FL_SIMULATION_INTERNAL_SIM_SETUP_H_
