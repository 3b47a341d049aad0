// Server-side evaluation of the built-in softmax regression, as the simulation and `fl server
// --eval-images` plug it into the engine.
#ifndef FL_SIMULATION_EVALUATION_H_
#define FL_SIMULATION_EVALUATION_H_

#include <memory>

#include "fl/client/dataset.h"
#include "fl/server/engine.h"

namespace fl::simulation {

// An evaluation hook that scores each new global model on `test`, reporting "test_loss" and
// "test_accuracy" (nothing, and a warning in the log, when the model does not fit the data).
server::EngineHooks::EvaluateFn SoftmaxTestSetEvaluation(
    std::shared_ptr<const client::Dataset> test);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_EVALUATION_H_
