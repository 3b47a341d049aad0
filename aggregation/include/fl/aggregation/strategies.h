// The strategies a server runs by name, with the values that configure them: what the server
// aggregates with, and what it tells the clients to train with.
//
//   "fedavg"   FedAvg's example-weighted mean (fedavg.h).
//   "fedprox"  FedAvg on the server; the clients add the proximal term mu/2 ||w - w_global||^2
//              (fedprox.h).
//   "scaffold" SCAFFOLD's control variates, carried in the model (scaffold.h).
//   "fedavgm", "fedadagrad", "fedadam", "fedyogi"
//              a server optimizer applied to the mean's change (server_optimizers.h).
//   "fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan"
//              robust aggregation over the updates kept apart (robust.h).
//   "qfedavg"  q-FedAvg's fair weighting by each site's loss (qfedavg.h).
//   "fltrust"  FLTrust's trust in each site's change by its agreement with the server's own,
//              trained on a root dataset (fltrust.h); needs a RootTrainer.
//
// Any of them may be wrapped (wrappers.h): norm_bound > 0 clips each update's change first;
// accept_failures = false fails a round in which a sampled site failed.
#ifndef FL_AGGREGATION_STRATEGIES_H_
#define FL_AGGREGATION_STRATEGIES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/fltrust.h"
#include "fl/aggregation/spill.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

struct StrategyOptions {
  std::string name = "fedavg";  // see StrategyNames()
  // FedProx's proximal coefficient mu; must be > 0 for "fedprox", unused otherwise.
  double proximal_mu = 0.01;
  // The clients' SGD, sent with every fit task: heavy-ball momentum in [0, 1), L2 weight decay
  // >= 0, and the L2 norm each batch's gradient is clipped to (0: no clipping).
  double momentum = 0.0;
  double weight_decay = 0.0;
  double clip_norm = 0.0;
  // The server's step size: SCAFFOLD's eta_g (1 is the weighted mean of the clients' models), a
  // server optimizer's eta; 0: the strategy's published default (SCAFFOLD and FedAvgM 1,
  // FedAdagrad and FedAdam 0.1, FedYogi 0.01).
  double server_learning_rate = 0.0;
  // SCAFFOLD: the number of parties N in the control variate's update (0: the enrolled clients).
  int64_t num_parties = 0;
  // Server optimizers (server_optimizers.h): FedAvgM's momentum; the adaptive ones' beta_1,
  // beta_2 (FedAdam, FedYogi) and adaptivity tau (Reddi et al. 2021's recommended values).
  double server_momentum = 0.9;
  double beta_1 = 0.9;
  double beta_2 = 0.99;
  double tau = 1e-3;
  // Robust aggregation (robust.h): the trimmed mean's cut at each end, the number of attacking
  // sites f that Krum, Multi-Krum and Bulyan withstand, and the models Multi-Krum averages (0:
  // K - f).
  double trim_beta = 0.2;
  int32_t num_malicious = 0;
  int32_t num_to_keep = 0;
  // q-FedAvg (qfedavg.h): the fairness exponent q, and the learning rate whose inverse is its
  // Lipschitz estimate L (set it to the clients' learning rate).
  double q = 0.2;
  double qffl_learning_rate = 0.1;
  // FLTrust in simulation: the training rows (drawn by the seed) the server keeps as its root
  // dataset (the paper's 100).
  int32_t root_examples = 100;
  // Wrappers (wrappers.h) around the strategy named: the L2 norm each update's change is clipped
  // to before it is aggregated (0: none), and whether a round commits although some sampled sites
  // failed (Flower's accept_failures; false fails the attempt, naming them).
  double norm_bound = 0;
  bool accept_failures = true;

  // OK, or INVALID_ARGUMENT naming the value and its bound, e.g. "proximal_mu must be > 0 for
  // strategy 'fedprox', got 0".
  absl::Status Validate() const;

  // The values every fit task carries in FitTask.config: "momentum", "weight_decay",
  // "clip_norm", for "fedprox" "proximal_mu", for "qfedavg" "report_initial_loss" = 1.
  std::map<std::string, double> ClientConfig() const;
};

// The server learning rate `options` runs with: its own when > 0, else the strategy's published
// default (SCAFFOLD 1, a server optimizer's DefaultServerLearningRate); 0 for a strategy that
// takes none. What a run records, so that it keeps its rate whatever later defaults say.
double EffectiveServerLearningRate(const StrategyOptions& options);

// The names MakeStrategy knows, for messages: "fedavg, fedprox, scaffold, fedavgm, ...".
const char* StrategyNames();

// The strategy `options` names. `enrolled_clients` gives SCAFFOLD's N when num_parties is 0 (it
// is asked at the start of every round; may be empty, see ScaffoldOptions::num_parties). `spill`
// keeps the updates of a robust strategy apart (null: files in the system's temporary
// directory). `root` trains FLTrust's server model on its root dataset. INVALID_ARGUMENT when
// Validate fails, the name is unknown, or "fltrust" has no `root`.
absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(
    const StrategyOptions& options, std::function<int64_t()> enrolled_clients = {},
    std::shared_ptr<SpillSpace> spill = nullptr, RootTrainer root = {});

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_STRATEGIES_H_
