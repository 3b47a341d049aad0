// The built-in models and their trainer: softmax (and, with two classes, logistic) regression,
// a multi-layer perceptron and NIID-Bench's "simple CNN", trained with mini-batch SGD (momentum,
// weight decay), FedProx's proximal term, SCAFFOLD's control variates and gradient-norm
// clipping, on the `cuda` backend when a device is present and the `cpu` backend (Eigen, every
// core) otherwise.
#ifndef FL_CLIENT_BUILTIN_MODELS_H_
#define FL_CLIENT_BUILTIN_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/client/dataset.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"

namespace fl::client {

enum class ModelKind {
  kSoftmaxRegression,  // logits = x W^T + b; tensors "weight" [classes, features], "bias"
  kMlp,                // Linear-ReLU per hidden layer, then Linear; tensors "fc1.weight", ...
  kSimpleCnn,          // Conv(5x5, 6) ReLU MaxPool2, Conv(5x5, 16) ReLU MaxPool2, 120-84-classes
};

// "softmax" (also "logistic"), "mlp", "simple_cnn"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<ModelKind> ParseModelKind(std::string_view name);
std::string_view ModelKindName(ModelKind kind);

struct ModelArchitecture {
  ModelKind kind = ModelKind::kSoftmaxRegression;
  int64_t num_features = 0;  // for the CNN: image_height * image_width * image_channels
  int32_t num_classes = 0;
  std::vector<int64_t> hidden = {200};  // MLP hidden layer widths
  // CNN input geometry; the features of one row are the image in (row, column, channel) order.
  int64_t image_height = 28;
  int64_t image_width = 28;
  int64_t image_channels = 1;
};

// The architecture's tensors, or INVALID_ARGUMENT saying what does not fit (e.g. a CNN whose
// image is too small for two 5x5 convolutions, or features != height * width * channels).
absl::StatusOr<ModelSpec> BuiltinModelSpec(const ModelArchitecture& arch);

// Initial weights as PyTorch initialises these layers (uniform in +-1/sqrt(fan_in) for weights
// and biases), from a seeded generator: the same seed gives the same model on every machine.
// Softmax regression starts at zero.
absl::StatusOr<Model> InitialBuiltinModel(const ModelArchitecture& arch, uint64_t seed);

// FitConfig::extra key in which the server names the last round in which this client's update was
// accepted and that round committed (0: none in this run); see BuiltinTrainerOptions::scaffold.
inline constexpr std::string_view kScaffoldCommittedRoundKey = "scaffold_committed_round";

// How a built-in trainer trains. Values the server sends in FitConfig::extra override these for
// one round: "momentum", "weight_decay", "proximal_mu", "clip_norm".
struct BuiltinTrainerOptions {
  std::string backend = "auto";  // "auto", "cpu" or "cuda"
  int cpu_threads = 0;           // 0: every core
  uint64_t seed = 0;             // batch order; (seed, round) gives the same batches everywhere
  float momentum = 0.0f;         // heavy-ball momentum, PyTorch's convention
  float weight_decay = 0.0f;     // L2 coefficient added to the gradient
  float proximal_mu = 0.0f;      // FedProx: + mu/2 ||w - w_global||^2 on every batch
  float clip_norm = 0.0f;        // clip each batch's gradient to this L2 norm (0: off)
  // Fit and Evaluate refuse (INVALID_ARGUMENT, naming the batch size and the bytes needed) a
  // batch whose activations, gradients and scratch would need more backend memory than this.
  int64_t max_batch_bytes = int64_t{4} << 30;  // 4 GiB
  // SCAFFOLD: the global model then carries the server's control variate c as extra tensors
  // named "scaffold.c.<tensor>" (fl::ScaffoldSpec in fl/common/model.h); every local step is
  // corrected by (c - c_i), and the update carries delta c_i = c_i+ - c_i in those same tensors
  // (option II of the paper: c_i+ = c_i - c + (w_global - w_local) / (K lr)). c_i is kept in
  // memory across rounds; a Fit's c_i+ becomes c_i only once a later fit task's
  // kScaffoldCommittedRoundKey names that Fit's round, so a retried or refused update never moves
  // it and two Fits of one round send the same update. Without that key (a driver without the
  // server) the previous round's Fit counts.
  bool scaffold = false;
};

// A trainer of `arch` on `train`; Evaluate measures `test` (may be empty: Evaluate then returns
// FAILED_PRECONDITION). INVALID_ARGUMENT when the data does not fit the architecture (feature
// count, labels outside [0, num_classes)), UNAVAILABLE when backend "cuda" has no device.
absl::StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainer(const ModelArchitecture& arch,
                                                            Dataset train, Dataset test,
                                                            BuiltinTrainerOptions options = {});

// Mean loss and accuracy of `model` (of `arch`) on `data`, on the given backend.
absl::StatusOr<EvalResult> EvaluateBuiltinModel(const ModelArchitecture& arch, const Model& model,
                                                const Dataset& data, std::string_view backend = "auto");

// Whether a CUDA device can be used by this build; when not, `why` says why.
bool CudaBackendAvailable(std::string* why = nullptr);

}  // namespace fl::client

#endif  // FL_CLIENT_BUILTIN_MODELS_H_
