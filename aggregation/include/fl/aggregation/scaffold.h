// SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated
// Learning"), the server's side.
//
// The global model of a SCAFFOLD run is ScaffoldSpec(weights) (fl/common/model.h): the weights x,
// then one tensor "scaffold.c.<t>" per weight tensor t holding the server's control variate c
// (zero at the start). A client's update has the same spec: its trained weights y_i, and in the
// "scaffold.c.*" tensors its delta c_i. A round with the accepted updates S gives
//   x <- x + eta_g * (sum_{i in S} n_i y_i / sum_{i in S} n_i - x)     (n_i: examples)
//   c <- c + (1 / N) * sum_{i in S} delta c_i                           (unweighted)
// where eta_g is the global step size (1: FedAvg's weighted mean) and N the number of parties in
// the federation, so a round with partial participation moves c by |S|/N of the mean delta.
// Like FedAvg the aggregator streams: one float64 accumulator (locked in 1 MiB stripes) plus one
// copy of the round's global model, whatever the number of clients.
#ifndef FL_AGGREGATION_SCAFFOLD_H_
#define FL_AGGREGATION_SCAFFOLD_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/model.h"

namespace fl::aggregation {

struct ScaffoldOptions {
  double server_learning_rate = 1.0;  // eta_g, > 0
  // N, asked once at the start of every round (e.g. the enrolled clients, which an operator may
  // change while the run goes on). Empty, or a value < 1: the number of updates the round
  // accepts (right only when every party takes part in every round). A round that accepts more
  // updates than N fails: N is then wrong, and c would overshoot.
  std::function<int64_t()> num_parties;
};

// OK when `spec` is ScaffoldSpec(w) for some weights w: first the weight tensors (none named
// "scaffold.c.*"), then "scaffold.c.<t>" of the same shape for each of them, in the same order.
// Otherwise INVALID_ARGUMENT naming the first tensor that does not mirror.
absl::Status CheckScaffoldSpec(const ModelSpec& spec);

// The global model a SCAFFOLD run starts from: `weights`, then zero control variates
// (spec ScaffoldSpec(weights.spec())).
Model WithZeroControlVariates(const Model& weights);

// The weights of a SCAFFOLD model (one CheckScaffoldSpec accepts): its first half of tensors,
// without the control variates.
Model WithoutControlVariates(const Model& scaffold_model);

// The streaming SCAFFOLD strategy ("scaffold"). Its CheckModel is CheckScaffoldSpec; a round
// begun on a model that fails it fails at Finish with that error. Finish also fails
// (FAILED_PRECONDITION) with no accepted update, more accepted updates than N, or a result that
// is not finite.
std::unique_ptr<Strategy> MakeScaffold(ScaffoldOptions options);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_SCAFFOLD_H_
