// Mini-batch SGD over a network's flat parameter and gradient buffers, with the rules NIID-Bench
// trains its clients with (see reference/papers.md): weight decay, FedProx's proximal term,
// gradient-norm clipping, PyTorch's heavy-ball momentum and SCAFFOLD's correction.
//
// One step, on backend memory:
//   g = grad + proximal_mu * (w - w_global)   (the gradient of FedProx's loss)
//   if clip_norm > 0 and ||g|| > clip_norm: g *= clip_norm / ||g||   (global L2 norm)
//   g += weight_decay * w   (after clipping, as PyTorch's clip_grad_norm_ then SGD's step)
//   v = momentum * v + g   (v = g when momentum is 0)
//   w -= lr * v
//   w -= lr * (c - c_i)    (SCAFFOLD, outside the momentum, when a correction is set)
// Not thread-safe; one optimizer per network.
#ifndef FL_CLIENT_ML_OPTIMIZER_H_
#define FL_CLIENT_ML_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "client_sdk/ml/backend.h"

namespace fl::client::ml {

struct SgdOptions {
  float learning_rate = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float proximal_mu = 0.0f;
  float clip_norm = 0.0f;  // 0: no clipping
};

class SgdOptimizer {
 public:
  // Over `size` parameters on `backend` (not owned).
  SgdOptimizer(Backend* backend, int64_t size);

  // Starts a new round: zeroes the momentum buffer (NIID-Bench makes a new optimizer per round).
  void Reset();

  // One step on w given its gradient `grad` (overwritten with g). `global` (the round's starting
  // weights) is read when proximal_mu > 0; `correction` (c - c_i) is applied when not null. All
  // pointers are backend memory of `size` floats. Returns ||grad + proximal term|| before
  // clipping (weight decay not included) when clip_norm > 0 (measuring it waits for the
  // device), 0 otherwise.
  double Step(const SgdOptions& options, float* w, float* grad, const float* global,
              const float* correction);

 private:
  Backend* backend_;
  int64_t size_;
  std::unique_ptr<Buffer> velocity_;
  bool velocity_valid_ = false;  // false until the first step with momentum after Reset
};

}  // namespace fl::client::ml

#endif  // FL_CLIENT_ML_OPTIMIZER_H_
