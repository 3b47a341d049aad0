// The built-in architectures as layer stacks (internal to the SDK; the public side is
// fl/client/builtin_models.h).
#ifndef FL_CLIENT_ML_MODELS_H_
#define FL_CLIENT_ML_MODELS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client_sdk/ml/backend.h"
#include "client_sdk/ml/layers.h"
#include "fl/client/builtin_models.h"

namespace fl::client::ml {

// The network of `arch` on `backend` (not owned; it must outlive the network), parameters zero.
// INVALID_ARGUMENT as BuiltinModelSpec.
absl::StatusOr<std::unique_ptr<Network>> MakeNetwork(const ModelArchitecture& arch,
                                                     Backend* backend);

}  // namespace fl::client::ml

#endif  // FL_CLIENT_ML_MODELS_H_
