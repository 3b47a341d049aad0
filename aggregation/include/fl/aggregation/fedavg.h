// FedAvg (McMahan et al. 2017): the next global model is the average of the clients' models
// weighted by their number of examples.
#ifndef FL_AGGREGATION_FEDAVG_H_
#define FL_AGGREGATION_FEDAVG_H_

#include <memory>
#include <vector>

#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

// The streaming FedAvg strategy. Its aggregator keeps the weighted sum in float64 and locks it in
// 1 MiB stripes, so clients folding different parts of the model do not wait for each other.
std::unique_ptr<Strategy> MakeFedAvg();

// The direct computation, for tests and references: sum_i w_i * models[i] / sum_i w_i.
// INVALID_ARGUMENT when the lists are empty or differ in length, when specs differ, or when a
// weight is not positive.
absl::StatusOr<Model> WeightedAverage(const std::vector<const Model*>& models,
                                      const std::vector<double>& weights);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_FEDAVG_H_
