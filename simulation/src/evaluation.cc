#include "fl/simulation/evaluation.h"

#include <span>
#include <utility>
#include <vector>

#include "fl/common/logging.h"

namespace fl::simulation {

aggregation::RootTrainer BuiltinRootTrainer(client::ModelArchitecture arch,
                                            std::shared_ptr<const client::Dataset> root,
                                            server::FitSettings fit,
                                            aggregation::StrategyOptions strategy,
                                            client::BuiltinTrainerOptions options) {
  // Shared by the copies of the returned function; called once per round attempt (the engine's
  // commit), never concurrently.
  auto trainer = std::make_shared<std::unique_ptr<client::Trainer>>();
  return [arch = std::move(arch), root = std::move(root), fit = std::move(fit),
          strategy = std::move(strategy), options = std::move(options),
          trainer](const Model& global, int32_t attempt) -> absl::StatusOr<Model> {
    if (*trainer == nullptr) {
      absl::StatusOr<std::unique_ptr<client::Trainer>> made =
          client::MakeBuiltinTrainer(arch, *root, client::Dataset{}, options);
      if (!made.ok()) return made.status();
      *trainer = *std::move(made);
    }
    client::FitConfig config;
    config.round = attempt;
    config.local_epochs = fit.local_epochs;
    config.batch_size = fit.batch_size;
    config.learning_rate = fit.learning_rate;
    config.extra = strategy.ClientConfig();
    absl::StatusOr<client::FitResult> result = (*trainer)->Fit(global, config);
    if (!result.ok()) return result.status();
    return std::move(result->model);
  };
}

Model WithoutScaffoldTensors(const Model& model) {
  std::vector<TensorSpec> kept;
  std::vector<size_t> index;
  for (size_t i = 0; i < model.spec().tensors().size(); ++i) {
    const TensorSpec& t = model.spec().tensors()[i];
    if (IsScaffoldTensor(t.name)) continue;
    kept.push_back(t);
    index.push_back(i);
  }
  Model out{ModelSpec(std::move(kept))};
  for (size_t k = 0; k < index.size(); ++k) {
    std::span<const float> from = model.tensor(index[k]);
    std::copy(from.begin(), from.end(), out.tensor(k).begin());
  }
  return out;
}

server::EngineHooks::EvaluateFn BuiltinTestSetEvaluation(
    client::ModelArchitecture arch, std::shared_ptr<const client::Dataset> test,
    std::string backend) {
  return [arch = std::move(arch), test = std::move(test),
          backend = std::move(backend)](const Model& model) -> std::map<std::string, double> {
    const Model weights = WithoutScaffoldTensors(model);
    absl::StatusOr<client::EvalResult> eval =
        client::EvaluateBuiltinModel(arch, weights, *test, backend);
    if (!eval.ok()) {
      LogEvent(LogLevel::kWarn, "server_evaluation_failed", {{"error", eval.status().ToString()}});
      return {};
    }
    return {{"test_loss", eval->loss}, {"test_accuracy", eval->metrics["accuracy"]}};
  };
}

server::EngineHooks::EvaluateFn CallersEvaluation(
    std::function<absl::StatusOr<std::map<std::string, double>>(const Model&)> evaluate) {
  if (!evaluate) return {};
  return [evaluate = std::move(evaluate)](const Model& model) -> std::map<std::string, double> {
    absl::StatusOr<std::map<std::string, double>> metrics = evaluate(model);
    if (!metrics.ok()) {
      LogEvent(LogLevel::kWarn, "server_evaluation_failed",
               {{"error", metrics.status().ToString()}});
      return {};
    }
    return *std::move(metrics);
  };
}

}  // namespace fl::simulation
