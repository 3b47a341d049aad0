// A site's own model, not one of the SDK's built-in ones: a two-layer network in PyTorch's
// layout (fc1.weight is [hidden, in], fc2.weight is [classes, hidden]), ReLU between the layers,
// softmax cross-entropy, plain mini-batch SGD. It is what a site's engineer writes to federate a
// model of their own: implement fl::client::Trainer, and the SDK does the rest.
//
// Training is deterministic: the batch order of round r is a shuffle seeded with (seed, r), so
// the same global model and task give the same update, which lets a test recompute FedAvg.
#ifndef FL_EXAMPLES_CUSTOM_MODEL_TWO_LAYER_TRAINER_H_
#define FL_EXAMPLES_CUSTOM_MODEL_TWO_LAYER_TRAINER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "fl/client/dataset.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"

namespace custom_model {

class TwoLayerTrainer final : public fl::client::Trainer {
 public:
  // `train` and `test` have `features` columns and labels in [0, classes).
  TwoLayerTrainer(fl::client::Dataset train, fl::client::Dataset test, int64_t features,
                  int64_t hidden, int64_t classes, uint64_t seed = 0);

  // fc1.weight [hidden, features], fc1.bias [hidden], fc2.weight [classes, hidden],
  // fc2.bias [classes]: the server's initial safetensors file must have exactly these.
  fl::ModelSpec spec() const override;
  // `config.local_epochs` passes of SGD over the training rows, from `global`.
  absl::StatusOr<fl::client::FitResult> Fit(const fl::Model& global,
                                            const fl::client::FitConfig& config) override;
  // Mean cross-entropy and accuracy on the test rows.
  absl::StatusOr<fl::client::EvalResult> Evaluate(const fl::Model& model) override;

  // Small random weights (uniform in +-1/sqrt(fan_in), biases zero) from `seed`: the model a
  // federation starts from, written with fl::WriteSafetensors for `fl server --initial-model`.
  fl::Model InitialModel(uint64_t seed) const;

 private:
  fl::client::Dataset train_, test_;
  int64_t features_, hidden_, classes_;
  uint64_t seed_;
};

}  // namespace custom_model

#endif  // FL_EXAMPLES_CUSTOM_MODEL_TWO_LAYER_TRAINER_H_
