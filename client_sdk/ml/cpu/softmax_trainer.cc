// Softmax regression, kept as its own entry point for existing callers: it is the built-in
// trainer (ml/builtin_trainer.cc) on the cpu backend with ModelKind::kSoftmaxRegression.
#include "fl/client/softmax_trainer.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client_sdk/ml/backend.h"
#include "client_sdk/ml/builtin_trainer.h"
#include "fl/client/builtin_models.h"

namespace fl::client {

ModelSpec SoftmaxRegressionSpec(int64_t num_features, int32_t num_classes) {
  return ModelSpec(
      {TensorSpec{"weight", {num_classes, num_features}}, TensorSpec{"bias", {num_classes}}});
}

std::unique_ptr<Trainer> MakeSoftmaxRegressionTrainer(Dataset train, Dataset test,
                                                      SoftmaxTrainerOptions options) {
  // A site without training data can still evaluate; its spec then comes from the test set.
  const Dataset& d = train.num_features > 0 ? train : test;
  ModelArchitecture arch;
  arch.kind = ModelKind::kSoftmaxRegression;
  arch.num_features = d.num_features;
  arch.num_classes = d.num_classes;
  BuiltinTrainerOptions builtin;
  builtin.backend = "cpu";
  builtin.seed = options.seed;
  builtin.weight_decay = options.weight_decay;
  return MakeBuiltinTrainerUnchecked(arch, std::move(train), std::move(test), std::move(builtin),
                                     ml::MakeCpuBackend());
}

absl::StatusOr<EvalResult> EvaluateSoftmaxRegression(const Model& model, const Dataset& data) {
  if (data.num_examples() == 0) {
    return absl::FailedPreconditionError("no examples to evaluate on");
  }
  // The model may know more classes than the data shows (a test set can lack the last class);
  // it must have the data's features and at least its classes.
  const std::vector<TensorSpec>& t = model.spec().tensors();
  const bool matches = t.size() == 2 && t[0].shape.size() == 2 &&
                       model.spec() == SoftmaxRegressionSpec(data.num_features,
                                                             static_cast<int32_t>(t[0].shape[0])) &&
                       t[0].shape[0] >= data.num_classes;
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model spec ", model.spec().ToJson(), " does not match the softmax-regression spec ",
        SoftmaxRegressionSpec(data.num_features, data.num_classes).ToJson(),
        " of the evaluation data"));
  }
  ModelArchitecture arch;
  arch.kind = ModelKind::kSoftmaxRegression;
  arch.num_features = data.num_features;
  arch.num_classes = static_cast<int32_t>(t[0].shape[0]);
  return EvaluateBuiltinModel(arch, model, data, "cpu");
}

}  // namespace fl::client
