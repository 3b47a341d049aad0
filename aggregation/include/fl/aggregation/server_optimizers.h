// Server optimizers: FedAvgM (Hsu et al. 2019) and FedAdagrad, FedAdam, FedYogi (Reddi et al.
// 2021, "Adaptive Federated Optimization"). The round's example-weighted mean of the clients'
// models gives the pseudo-gradient D = mean - x (x: the round's global model), which an optimizer
// on the server applies, coordinate by coordinate:
//   fedavgm     m = mu m + D;                                x' = x + eta m
//   fedadagrad  m = b1 m + (1 - b1) D;  v = v + D^2;           x' = x + eta m / (sqrt(v) + tau)
//   fedadam     m = b1 m + (1 - b1) D;  v = b2 v + (1 - b2) D^2;
//               x' = x + eta_t m / (sqrt(v) + tau),  eta_t = eta sqrt(1 - b2^t) / (1 - b1^t)
//   fedyogi     m as fedadam;  v = v - (1 - b2) D^2 sign(v - D^2);  x' = x + eta m / (sqrt(v) +
//   tau)
// m and v start at zero (as Flower's do); t counts the optimizer's steps (committed rounds).
// With mu = 0 and eta = 1, FedAvgM is FedAvg.
//
// The aggregator streams like FedAvg's (a float64 sum in stripes); Finish computes the next
// model and the next state in one pass. The state (m, then v, then the step) is the strategy's
// own, kept as a Model of tensors "fedopt.m/<name>", "fedopt.v/<name>" and "fedopt.step"
// (RoundAggregator::TakeState), which the engine checkpoints with each committed round and hands
// back (Strategy::AdoptState) when it is committed or a run resumes: a resumed run continues
// bit-identically. Memory at Finish: the sum (2x the model), the next model, the state before and
// after (1x each for FedAvgM, 2x each for the adaptive three).
#ifndef FL_AGGREGATION_SERVER_OPTIMIZERS_H_
#define FL_AGGREGATION_SERVER_OPTIMIZERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

struct ServerOptimizerOptions {
  std::string name = "fedadam";  // fedavgm, fedadagrad, fedadam or fedyogi
  double learning_rate = 0.1;    // eta, > 0
  double momentum = 0.9;         // FedAvgM's mu, in [0, 1)
  double beta_1 = 0.9;           // the adaptive three: in [0, 1)
  double beta_2 = 0.99;          // FedAdam, FedYogi: in [0, 1)
  double tau = 1e-3;             // the adaptivity, > 0
};

// Whether `name` is one of the four.
bool IsServerOptimizer(const std::string& name);

// The published server learning rate of `name` (Flower's defaults): FedAvgM 1, FedAdagrad 0.1,
// FedAdam 0.1, FedYogi 0.01.
double DefaultServerLearningRate(const std::string& name);

// INVALID_ARGUMENT naming the setting and its bound when one is out of range, or the name unknown.
absl::StatusOr<std::unique_ptr<Strategy>> MakeServerOptimizer(ServerOptimizerOptions options);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_SERVER_OPTIMIZERS_H_
