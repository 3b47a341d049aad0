// Simulation: a whole federation on one machine, with the real parts.
//
// RunSimulation loads the data (Fashion-MNIST, a CSV file or FedProx's Synthetic), splits it among
// the sites (IID, the non-IID partitioners of NIID-Bench, or the data's own split), and runs the
// real round engine, store (SQLite) and strategy (FedAvg, FedProx, SCAFFOLD) with virtual sites:
// each site is state while idle and runs the real SDK loop on a bounded pool of workers when the
// engine has a task for it, training a built-in model (softmax regression, an MLP or the simple
// CNN). The engine's clock is simulated, so deadlines, stragglers and dropouts act exactly and
// without waiting, and the same seed gives a bit-identical model whatever the number of workers
// and over either transport (float32 updates without DP or secure aggregation: their rounding,
// noise and masks draw from the system's CSPRNG by design): "inproc" calls the engine in this
// process; "grpc" starts the real server on a loopback port and the working sites connect with the
// SDK's gRPC transport (mutual TLS, a certificate per site). The server evaluates every new global
// model on the test set. With `privacy` on, the server clips, averages with equal weights and
// noises the updates (central DP), records the epsilon spent with every committed round, and ends
// the run before a round that would exceed the budget. With `secure_aggregation` on, every round
// runs SecAgg+ so that the server sees only the sum of the sites' changes; privacy "distributed"
// then has each site add its share of the noise.
#ifndef FL_SIMULATION_SIMULATION_H_
#define FL_SIMULATION_SIMULATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/strategies.h"
#include "fl/client/dataset.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"
#include "fl/server/engine.h"
#include "fl/simulation/attacks.h"
#include "fl/simulation/partition.h"
#include "fl/simulation/synthetic.h"

namespace fl::simulation {

// How the virtual sites differ, in simulated time. Every default: identical, reliable sites.
struct Heterogeneity {
  // Simulated compute time of one example for one local epoch on a site of normal speed.
  absl::Duration compute_per_example = absl::Microseconds(100);
  double link_mbps = 100;       // each direction, every site
  double slow_fraction = 0;     // share of the sites (fixed by the seed) that are slower ...
  double slow_factor = 4;       // ... by this factor, in compute and link
  double dropout_fraction = 0;  // chance that a sampled site drops out of a round attempt
  // Chance that a site is there in a round (drawn per site and round from the seed). A site that
  // is not may still be sampled (the driver keeps idle sites online, since every site must be
  // online for a round to start); it then neither fetches its task nor heartbeats, and the
  // server's client_timeout drops it, so the round commits with min_fit_clients or is retried.
  double availability = 1;
};

struct SimulationOptions {
  std::string work_dir = "fl-sim";  // certificates and the server's data directory go here
  // The data: "fashion-mnist" (the IDX files in dataset_dir; the server evaluates on its 10k test
  // set), "csv" (csv_path, read as `csv` says: its label column, and its key column for a
  // natural split; the server evaluates on test_csv_path, or else on a seeded test_fraction of
  // the rows held out before partitioning) or "synthetic" (FedProx's Synthetic(alpha, beta) of
  // `synthetic`, one device per site, test_fraction of each device's rows held out for the
  // server).
  std::string data = "fashion-mnist";
  std::string dataset_dir = "/usr/share/datasets/fashion-mnist";
  std::string csv_path;
  std::string test_csv_path;
  client::CsvOptions csv;
  double test_fraction = 0.2;
  SyntheticOptions synthetic;  // its num_devices and seed are num_clients and seed
  // Sites; 0: one site per key (csv) or device (synthetic: 30, the paper's) with a natural
  // split, 10 with any other.
  int32_t num_clients = 0;
  // Each client keeps at most this many examples of its partition (0: all of them).
  int64_t max_examples_per_client = 0;
  int32_t num_rounds = 10;
  double sample_fraction = 1.0;
  // Accepted updates a round needs to commit; 0: every sampled site (a round with a straggler or
  // a dropout then fails and is retried).
  int32_t min_fit_clients = 0;
  // How the training rows are split among the sites (MakePartition's names, its seed is `seed`),
  // or "natural": the data's own split (a CSV's key column, Synthetic's devices). An empty name:
  // natural when the data has a split of its own, iid otherwise.
  PartitionSpec partition = [] {
    PartitionSpec p;
    p.name = "";
    return p;
  }();
  uint64_t seed = 0;
  server::FitSettings fit = [] {
    server::FitSettings f;  // one epoch, batch 32
    f.learning_rate = 0.1f;
    return f;
  }();
  // The built-in model every client trains: "softmax", "mlp" (with `hidden`) or "simple_cnn".
  std::string model = "softmax";
  std::vector<int64_t> hidden = {200};
  // The strategy, and the clients' momentum, weight decay and proximal_mu, which the server sends
  // with every fit task.
  aggregation::StrategyOptions strategy;
  // Central differential privacy on the simulated server (mode "off" by default), validated by
  // PrivacyOptions::Validate as for `fl server`. SCAFFOLD under DP is refused.
  server::PrivacyOptions privacy;
  // Secure aggregation on the simulated server (off by default); with it, privacy.mode may be
  // "distributed" (each client adds its share of the noise) but not "central".
  server::SecureAggregationOptions secure_aggregation;
  // How the clients encode their updates (EngineOptions::update_encoding): "float32", "float16"
  // or "int8"; anything but float32 is refused with secure aggregation.
  std::string update_encoding = "float32";
  std::string backend = "auto";  // the clients' and the server evaluation's: auto, cpu or cuda
  // How the virtual sites reach the server: "inproc" (the default: the real engine, store and
  // strategies called in this process) or "grpc" (the production path: the real server on a
  // loopback port, each working site connecting with the SDK's gRPC transport).
  std::string transport = "inproc";
  int32_t workers = 0;  // threads that run sites' tasks; 0: the machine's cores
  Heterogeneity heterogeneity;
  bool tls = true;  // grpc: false for plaintext on loopback
  // Spread the sites over the ranks of an MPI job (`mpirun -n R fl sim --mpi ...` or `srun`):
  // rank 0 runs the server and the driver, every other rank runs its share of the sites, which
  // connect to rank 0 over gRPC (so transport is taken as "grpc"; with tls, rank 0 listens on
  // every address under its host name). Every rank must be given the same options; work_dir
  // must be on a file system every rank sees. Needs a build with MPI.
  bool mpi = false;
  absl::Duration round_timeout = absl::Minutes(5);
  // Sites that attack (attacks.h): a fraction of them, chosen by the seed, poison their updates
  // or their labels. Needs float32 updates in the clear: not with secure aggregation, another
  // update encoding, or MPI.
  AttackOptions attack;

  // Sites of the caller's own model (the Python SDK's fl.simulation.run). When trainer_factory is
  // set, the simulation loads no data and trains no built-in model: site i's trainer is
  // trainer_factory(i), called on the pool's worker threads, several at once (it must be
  // thread-safe), the first time the site has a task in a round (and dropped after it); the
  // server starts from initial_model (required), num_clients (>= 1) sites take part, and the
  // server evaluates each new global model with `evaluate` when it is set (its metrics join the
  // round's; "test_accuracy" becomes the result's final_test_accuracy; an error is logged and
  // leaves the round without them). `evaluate` runs on the thread that called RunSimulation,
  // between rounds. inproc only; not with MPI, label flipping (the data is the trainers'),
  // FLTrust (no root data) or SCAFFOLD (its control variates would be the trainers' to carry).
  std::function<absl::StatusOr<std::unique_ptr<client::Trainer>>(int32_t site)> trainer_factory;
  std::shared_ptr<const Model> initial_model;
  std::function<absl::StatusOr<std::map<std::string, double>>(const Model&)> evaluate;
};

// One round attempt as the simulation reports it.
struct SimulationRound {
  server::RoundSummary summary;
  // With differential privacy, for a committed round: the epsilon the run has spent up to and
  // including it (for privacy.delta), as the store records it. 0 otherwise.
  double dp_epsilon = 0;
  // Wall-clock time since the previous round attempt ended (the first: since the federation was
  // set up): training, aggregation, checkpoint and evaluation. summary.duration is the engine's
  // clock, which the in-process transport simulates.
  absl::Duration wall_time;
  // The part of wall_time the server spent evaluating the new global model on the test set.
  absl::Duration evaluate_time;
};

struct SimulationResult {
  // The MPI rank of this process (options.mpi); a rank above 0 ran sites for rank 0, which alone
  // fills the rest.
  int32_t rank = 0;
  int64_t run_id = 0;
  PartitionSummary partition;  // examples and classes per site, as trained
  std::vector<SimulationRound> rounds;
  double final_test_accuracy = 0;
  // With differential privacy: the epsilon spent by the run (that of its last committed round,
  // read from the store as `fl admin rounds` does); 0 without. With distributed DP also the
  // epsilon against the server of the site that spent most (RoundRecord::dp_epsilon_server).
  double dp_epsilon = 0;
  double dp_epsilon_server = 0;
  // Why the run finished before its last round (e.g. "privacy budget spent: round 3 would bring
  // epsilon to ..."); empty when it ran all its rounds.
  std::string finish_reason;
  // Updates that attacking sites rewrote (options.attack; label flipping poisons data, not
  // updates, and counts none).
  int64_t poisoned_updates = 0;
  std::string db_path;
  absl::Duration wall_time;
};

// What a caller hears while the simulation runs; each may be empty. Called from one thread at a
// time, never concurrently.
struct SimulationCallbacks {
  // A step of the setup as it starts ("loading Fashion-MNIST", "joining 10000 sites: 2500").
  std::function<void(const std::string& step)> on_setup;
  // The partition, once made and before any training.
  std::function<void(const PartitionSummary&)> on_partition;
  std::function<void()> on_training_start;               // every site has joined; round 1 is on
  std::function<void(const SimulationRound&)> on_round;  // each round attempt as it ends
};

// Runs the federation to the end. Returns INVALID_ARGUMENT for a bad option (naming it), ABORTED
// when the run failed (with its reason), or the first error of a client or of the server.
absl::StatusOr<SimulationResult> RunSimulation(const SimulationOptions& options,
                                               const SimulationCallbacks& callbacks);
// The partitioner a run with these options uses: options.partition.name ("column" read as
// "natural"), or, when it is empty, "natural" for data with a split of its own (synthetic, a CSV
// with a key column) and "iid" for other data.
std::string PartitionNameFor(const SimulationOptions& options);

// This process's rank in the MPI job of options.mpi (joining it), 0 without MPI: a caller that
// prints should print only on rank 0. UNIMPLEMENTED in a build without MPI.
absl::StatusOr<int32_t> SimulationRank(const SimulationOptions& options);
// The same, hearing only the rounds.
absl::StatusOr<SimulationResult> RunSimulation(
    const SimulationOptions& options, std::function<void(const SimulationRound&)> on_round = {});

}  // namespace fl::simulation

#endif  // FL_SIMULATION_SIMULATION_H_
