// The built-in softmax-regression trainer on the CPU (Eigen).
//
// Model: logits = x W^T + b, with W of shape [num_classes, num_features] (tensor "weight") and b
// of shape [num_classes] (tensor "bias"); cross-entropy loss; mini-batch SGD with the batches
// drawn from a shuffle seeded by `seed` and the round number, so a run is reproducible.
#ifndef FL_CLIENT_SOFTMAX_TRAINER_H_
#define FL_CLIENT_SOFTMAX_TRAINER_H_

#include <cstdint>
#include <memory>

#include "fl/client/dataset.h"
#include "fl/client/trainer.h"

namespace fl::client {

ModelSpec SoftmaxRegressionSpec(int64_t num_features, int32_t num_classes);

struct SoftmaxTrainerOptions {
  uint64_t seed = 0;
  float weight_decay = 0.0f;
};

// `train` is what Fit trains on; `test` what Evaluate measures (may be empty: Evaluate then
// returns FAILED_PRECONDITION).
std::unique_ptr<Trainer> MakeSoftmaxRegressionTrainer(Dataset train, Dataset test,
                                                      SoftmaxTrainerOptions options = {});

// Mean cross-entropy and accuracy of a softmax-regression model on `data`; metrics holds
// "accuracy". INVALID_ARGUMENT when the model's spec does not match the data.
absl::StatusOr<EvalResult> EvaluateSoftmaxRegression(const Model& model, const Dataset& data);

}  // namespace fl::client

#endif  // FL_CLIENT_SOFTMAX_TRAINER_H_
