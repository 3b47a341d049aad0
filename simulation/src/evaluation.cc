#include "fl/simulation/evaluation.h"

#include "fl/client/softmax_trainer.h"
#include "fl/common/logging.h"

namespace fl::simulation {

server::EngineHooks::EvaluateFn SoftmaxTestSetEvaluation(
    std::shared_ptr<const client::Dataset> test) {
  return [test = std::move(test)](const Model& model) -> std::map<std::string, double> {
    absl::StatusOr<client::EvalResult> eval = client::EvaluateSoftmaxRegression(model, *test);
    if (!eval.ok()) {
      LogEvent(LogLevel::kWarn, "server_evaluation_failed", {{"error", eval.status().ToString()}});
      return {};
    }
    return {{"test_loss", eval->loss}, {"test_accuracy", eval->metrics["accuracy"]}};
  };
}

}  // namespace fl::simulation
