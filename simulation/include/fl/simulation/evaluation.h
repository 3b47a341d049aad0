// Server-side uses of the built-in models, as the simulation and `fl server` plug them into the
// engine: evaluation on a test set (`--eval-images`), and FLTrust's training on a root dataset
// (`--root-images`).
#ifndef FL_SIMULATION_EVALUATION_H_
#define FL_SIMULATION_EVALUATION_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "fl/aggregation/fltrust.h"
#include "fl/aggregation/strategies.h"
#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"
#include "fl/common/model.h"
#include "fl/server/engine.h"

namespace fl::simulation {

// An evaluation hook that scores each new global model of `arch` on `test` (with
// EvaluateBuiltinModel on `backend`), reporting "test_loss" and "test_accuracy". SCAFFOLD's
// control variates ("scaffold.c.*" tensors) are not part of the network and are left out.
// Reports nothing, and a warning in the log, when the model does not fit the data.
server::EngineHooks::EvaluateFn BuiltinTestSetEvaluation(
    client::ModelArchitecture arch, std::shared_ptr<const client::Dataset> test,
    std::string backend = "auto");

// The server's evaluation of the caller's own model (SimulationOptions::evaluate): its metrics,
// or none when `evaluate` is empty; an error is logged (server_evaluation_failed) and the round
// goes on without metrics.
server::EngineHooks::EvaluateFn CallersEvaluation(
    std::function<absl::StatusOr<std::map<std::string, double>>(const Model&)> evaluate);

// FLTrust's root training (fl/aggregation/fltrust.h) with a built-in model: a trainer of `arch`
// made on first use over `root` (with `options`), fit each round attempt with `fit`'s epochs,
// batch size and learning rate and `strategy`'s client values, as a site would be.
aggregation::RootTrainer BuiltinRootTrainer(client::ModelArchitecture arch,
                                            std::shared_ptr<const client::Dataset> root,
                                            server::FitSettings fit,
                                            aggregation::StrategyOptions strategy,
                                            client::BuiltinTrainerOptions options);

// A copy of `model` without its SCAFFOLD control variates (the same model when it has none).
Model WithoutScaffoldTensors(const Model& model);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_EVALUATION_H_
