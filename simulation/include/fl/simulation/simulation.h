// Simulation: a whole federation on one machine, with the real parts.
//
// RunSimulation provisions a CA and certificates, starts the real aggregation server (SQLite and
// all) on a free loopback port with mutual TLS, and runs N clients that use the real SDK over
// loopback gRPC, each training a built-in model (softmax regression, an MLP or the simple CNN)
// with the chosen strategy (FedAvg, FedProx, SCAFFOLD) on its own partition of Fashion-MNIST.
// The server evaluates every new global model on the 10k test set. With `privacy` on, the server
// clips, averages with equal weights and noises the updates (central DP), records the epsilon
// spent with every committed round, and ends the run before a round that would exceed the budget.
// With `secure_aggregation` on, every round runs SecAgg+ so that the server sees only the sum of
// the clients' changes; privacy "distributed" then has each client add its share of the noise.
#ifndef FL_SIMULATION_SIMULATION_H_
#define FL_SIMULATION_SIMULATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/strategies.h"
#include "fl/server/engine.h"

namespace fl::simulation {

// How the virtual sites differ, in simulated time. Every default: identical, reliable sites.
struct Heterogeneity {
  // Simulated compute time of one example for one local epoch on a site of normal speed.
  absl::Duration compute_per_example = absl::Microseconds(100);
  double link_mbps = 100;       // each direction, every site
  double slow_fraction = 0;     // share of the sites (fixed by the seed) that are slower ...
  double slow_factor = 4;       // ... by this factor, in compute and link
  double dropout_fraction = 0;  // chance that a sampled site drops out of a round attempt
};

struct SimulationOptions {
  std::string work_dir = "fl-sim";  // certificates and the server's data directory go here
  std::string dataset_dir = "/usr/share/datasets/fashion-mnist";
  int32_t num_clients = 10;
  // Each client keeps at most this many examples of its partition (0: all of them).
  int64_t max_examples_per_client = 0;
  int32_t num_rounds = 10;
  double sample_fraction = 1.0;
  // Accepted updates a round needs to commit; 0: every sampled site (a round with a straggler or
  // a dropout then fails and is retried).
  int32_t min_fit_clients = 0;
  std::string partition = "iid";  // "iid" or "dirichlet"
  double dirichlet_beta = 0.5;
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
  // strategies called in this process, sites as state run on a pool of `workers`, a simulated
  // clock) or "grpc" (the production path: a real server on loopback, a real SDK client and a
  // thread per site over mutual TLS).
  std::string transport = "inproc";
  int32_t workers = 0;  // inproc: threads that run sites' tasks; 0: the machine's cores
  Heterogeneity heterogeneity;  // inproc only
  bool tls = true;               // grpc: false for plaintext on loopback
  absl::Duration round_timeout = absl::Minutes(5);
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
};

struct SimulationResult {
  int64_t run_id = 0;
  std::vector<SimulationRound> rounds;
  double final_test_accuracy = 0;
  // With differential privacy: the epsilon spent by the run (that of its last committed round,
  // read from the store as `fl admin rounds` does); 0 without.
  double dp_epsilon = 0;
  // Why the run finished before its last round (e.g. "privacy budget spent: round 3 would bring
  // epsilon to ..."); empty when it ran all its rounds.
  std::string finish_reason;
  std::string db_path;
  absl::Duration wall_time;
};

// Runs the federation to the end. `on_round` (may be empty) sees each round as it ends. Returns
// INVALID_ARGUMENT for a bad option (naming it), ABORTED when the run failed (with its reason), or
// the first error of a client or of the server.
absl::StatusOr<SimulationResult> RunSimulation(
    const SimulationOptions& options, std::function<void(const SimulationRound&)> on_round = {});

}  // namespace fl::simulation

#endif  // FL_SIMULATION_SIMULATION_H_
