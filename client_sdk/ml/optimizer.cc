#include "client_sdk/ml/optimizer.h"

#include <cmath>

namespace fl::client::ml {

SgdOptimizer::SgdOptimizer(Backend* backend, int64_t size)
    : backend_(backend), size_(size), velocity_(backend->Allocate(size)) {}

void SgdOptimizer::Reset() { velocity_valid_ = false; }

double SgdOptimizer::Step(const SgdOptions& o, float* w, float* grad, const float* global,
                          const float* correction) {
  // The proximal term is part of FedProx's loss, so it is clipped with the loss gradient; weight
  // decay joins afterwards, inside the step (PyTorch's clip_grad_norm_ then SGD(weight_decay)).
  if (o.proximal_mu != 0.0f) {
    backend_->Axpy(size_, o.proximal_mu, w, grad);
    backend_->Axpy(size_, -o.proximal_mu, global, grad);
  }
  double norm = 0;
  if (o.clip_norm > 0.0f) {
    norm = std::sqrt(backend_->SumSquares(size_, grad));
    if (norm > o.clip_norm) backend_->Scale(size_, static_cast<float>(o.clip_norm / norm), grad);
  }
  if (o.weight_decay != 0.0f) backend_->Axpy(size_, o.weight_decay, w, grad);
  const float* step = grad;
  if (o.momentum != 0.0f) {
    // PyTorch: the first step after creation sets v = g; later ones v = momentum * v + g.
    if (velocity_valid_) {
      backend_->Scale(size_, o.momentum, velocity_->data());
      backend_->Axpy(size_, 1.0f, grad, velocity_->data());
    } else {
      backend_->Copy(grad, size_, velocity_->data());
      velocity_valid_ = true;
    }
    step = velocity_->data();
  }
  backend_->Axpy(size_, -o.learning_rate, step, w);
  if (correction != nullptr) backend_->Axpy(size_, -o.learning_rate, correction, w);
  return norm;
}

}  // namespace fl::client::ml
