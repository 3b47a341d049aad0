// The built-in trainer without the up-front checks of MakeBuiltinTrainer, for wrappers whose
// factory cannot fail (MakeSoftmaxRegressionTrainer): it checks the data and the model at every
// Fit and Evaluate instead, and refuses with the same statuses.
#ifndef FL_CLIENT_ML_BUILTIN_TRAINER_H_
#define FL_CLIENT_ML_BUILTIN_TRAINER_H_

#include <memory>

#include "client_sdk/ml/backend.h"
#include "fl/client/builtin_models.h"

namespace fl::client {

std::unique_ptr<Trainer> MakeBuiltinTrainerUnchecked(const ModelArchitecture& arch, Dataset train,
                                                     Dataset test, BuiltinTrainerOptions options,
                                                     std::unique_ptr<ml::Backend> backend);

}  // namespace fl::client

#endif  // FL_CLIENT_ML_BUILTIN_TRAINER_H_
