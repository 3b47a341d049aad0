// FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous Networks").
//
// FedProx changes only the clients' objective: each local step minimises the loss plus
// mu/2 * ||w - w_global||^2, with mu sent in every fit task (FitTask.config["proximal_mu"], see
// strategies.h). The server's side is FedAvg's example-weighted mean, unchanged; this strategy is
// FedAvg under the name "fedprox", so that runs record which algorithm trained them.
#ifndef FL_AGGREGATION_FEDPROX_H_
#define FL_AGGREGATION_FEDPROX_H_

#include <memory>

#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

// FedAvg's aggregation (MakeFedAvg), named "fedprox".
std::unique_ptr<Strategy> MakeFedProx();

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_FEDPROX_H_
