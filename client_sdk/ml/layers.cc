#include "client_sdk/ml/layers.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fl::client::ml {

int64_t Layer::NumParams() const {
  int64_t n = 0;
  for (const TensorSpec& t : ParamSpecs()) n += t.NumElements();
  return n;
}

// --- Dense ---

std::vector<TensorSpec> Dense::ParamSpecs() const {
  return {TensorSpec{"weight", {out_, in_}}, TensorSpec{"bias", {out_}}};
}

void Dense::Forward(int64_t batch, const float* x, float* y) {
  x_ = x;
  y_ = y;
  backend_->Gemm(false, true, batch, out_, in_, 1.0f, x, params_, 0.0f, y);
  backend_->AddRowBias(batch, out_, params_ + out_ * in_, y);
}

void Dense::Backward(int64_t batch, const float* grad_y, float* grad_x) {
  // dW [out, in] = grad_y^T x; db = column sums of grad_y; dx = grad_y W.
  backend_->Gemm(true, false, out_, in_, batch, 1.0f, grad_y, x_, 0.0f, grads_);
  backend_->ColumnSums(batch, out_, grad_y, 0.0f, grads_ + out_ * in_);
  if (grad_x != nullptr) {
    backend_->Gemm(false, false, batch, in_, out_, 1.0f, grad_y, params_, 0.0f, grad_x);
  }
}

// --- Conv2d ---

Conv2d::Conv2d(Backend* backend, int64_t height, int64_t width, int64_t in_channels,
               int64_t out_channels, int64_t kernel)
    : Layer(backend),
      height_(height),
      width_(width),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel) {
  assert(kernel >= 1 && kernel <= height && kernel <= width);
}

ConvShape Conv2d::Shape(int64_t batch) const {
  return ConvShape{batch, height_, width_, in_channels_, kernel_};
}

int64_t Conv2d::output_size() const {
  const ConvShape s = Shape(1);
  return s.out_height() * s.out_width() * out_channels_;
}

std::vector<TensorSpec> Conv2d::ParamSpecs() const {
  return {TensorSpec{"weight", {out_channels_, kernel_, kernel_, in_channels_}},
          TensorSpec{"bias", {out_channels_}}};
}

void Conv2d::Reserve(int64_t batch) {
  if (batch <= capacity_) return;
  const ConvShape s = Shape(batch);
  patches_ = backend_->Allocate(s.patches() * s.patch_size());
  grad_patches_.reset();  // allocated by the first Backward: evaluation never needs it
  capacity_ = batch;
}

void Conv2d::Forward(int64_t batch, const float* x, float* y) {
  Reserve(batch);
  x_ = x;
  y_ = y;
  const ConvShape s = Shape(batch);
  // y [patches, out_channels] (which is NHWC) = patches [patches, k*k*c] W^T + b.
  backend_->Im2Col(s, x, patches_->data());
  backend_->Gemm(false, true, s.patches(), out_channels_, s.patch_size(), 1.0f, patches_->data(),
                 params_, 0.0f, y);
  backend_->AddRowBias(s.patches(), out_channels_, params_ + out_channels_ * s.patch_size(), y);
}

void Conv2d::Backward(int64_t batch, const float* grad_y, float* grad_x) {
  const ConvShape s = Shape(batch);
  const int64_t p = s.patches(), k = s.patch_size();
  backend_->Gemm(true, false, out_channels_, k, p, 1.0f, grad_y, patches_->data(), 0.0f, grads_);
  backend_->ColumnSums(p, out_channels_, grad_y, 0.0f, grads_ + out_channels_ * k);
  if (grad_x == nullptr) return;
  if (grad_patches_ == nullptr) grad_patches_ = backend_->Allocate(capacity_ * (p / batch) * k);
  backend_->Gemm(false, false, p, k, out_channels_, 1.0f, grad_y, params_, 0.0f,
                 grad_patches_->data());
  backend_->Col2Im(s, grad_patches_->data(), grad_x);
}

double Conv2d::ScratchBytes(int64_t batch) const {
  const ConvShape s = Shape(1);
  return 2.0 * static_cast<double>(batch) * static_cast<double>(s.patches()) *
         static_cast<double>(s.patch_size()) * sizeof(float);
}

// --- Relu ---

void Relu::Forward(int64_t batch, const float* x, float* y) {
  x_ = x;
  y_ = y;
  backend_->Relu(batch * size_, x, y);
}

void Relu::Backward(int64_t batch, const float* grad_y, float* grad_x) {
  if (grad_x != nullptr) backend_->ReluBackward(batch * size_, y_, grad_y, grad_x);
}

// --- MaxPool2 ---

void MaxPool2::Forward(int64_t batch, const float* x, float* y) {
  if (batch > capacity_) {
    argmax_ = backend_->AllocateInts(batch * output_size());
    capacity_ = batch;
  }
  x_ = x;
  y_ = y;
  backend_->MaxPool2(Shape(batch), x, y, argmax_->ints());
}

double MaxPool2::ScratchBytes(int64_t batch) const {
  return static_cast<double>(batch) * static_cast<double>(output_size()) * sizeof(int32_t);
}

absl::Status MaxPool2::CheckBatch(int64_t batch) const {
  constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  const int64_t per_image = input_size();
  if (batch > kMaxIndex / per_image) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max pooling indexes the whole batch with int32: a batch of ", batch, " images of ",
        height_, "x", width_, "x", channels_, " is over 2^31 - 1 values; use at most ",
        kMaxIndex / per_image, " examples per batch"));
  }
  return absl::OkStatus();
}

void MaxPool2::Backward(int64_t batch, const float* grad_y, float* grad_x) {
  if (grad_x != nullptr) backend_->MaxPool2Backward(Shape(batch), grad_y, argmax_->ints(), grad_x);
}

// --- Network ---

ModelSpec Network::SpecOf(const std::vector<NamedLayer>& layers) {
  std::vector<TensorSpec> tensors;
  for (size_t i = 0; i < layers.size(); ++i) {
    assert(i == 0 || layers[i].layer->input_size() == layers[i - 1].layer->output_size());
    for (TensorSpec t : layers[i].layer->ParamSpecs()) {
      if (!layers[i].name.empty()) t.name = layers[i].name + "." + t.name;
      tensors.push_back(std::move(t));
    }
  }
  return ModelSpec(std::move(tensors));
}

Network::Network(Backend* backend, std::vector<NamedLayer> layers)
    : backend_(backend), layers_(std::move(layers)) {
  assert(!layers_.empty());
  spec_ = SpecOf(layers_);
  params_ = backend_->Allocate(spec_.NumFloats());
  grads_ = backend_->Allocate(spec_.NumFloats());
  int64_t offset = 0;
  for (NamedLayer& l : layers_) {
    l.layer->Bind(params_->data() + offset, grads_->data() + offset);
    offset += l.layer->NumParams();
  }
  outputs_.resize(layers_.size());
}

double Network::BatchBytes(int64_t batch) const {
  const double b = static_cast<double>(batch);
  double floats = b * static_cast<double>(input_size());  // the caller's input
  int64_t widest = 0;
  double scratch = 0;
  for (const NamedLayer& l : layers_) {
    floats += b * static_cast<double>(l.layer->output_size());
    widest = std::max(widest, l.layer->input_size());
    scratch += l.layer->ScratchBytes(batch);
  }
  floats += 2.0 * b * static_cast<double>(widest);
  return floats * sizeof(float) + b * sizeof(int32_t) + scratch;
}

absl::Status Network::CheckBatch(int64_t batch, double max_bytes) const {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch size must be at least 1, not ", batch));
  }
  for (const NamedLayer& l : layers_) {
    if (absl::Status s = l.layer->CheckBatch(batch); !s.ok()) return s;
  }
  const double bytes = BatchBytes(batch);
  if (bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a batch of %d examples needs %.0f bytes of activations and scratch, more than the cap of "
        "%.0f bytes; use a smaller batch size",
        batch, bytes, max_bytes));
  }
  return absl::OkStatus();
}

void Network::Reserve(int64_t batch) {
  if (batch <= capacity_) return;
  int64_t widest = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    outputs_[i] = backend_->Allocate(batch * layers_[i].layer->output_size());
    widest = std::max(widest, layers_[i].layer->input_size());
  }
  grad_a_ = backend_->Allocate(batch * widest);
  grad_b_ = backend_->Allocate(batch * widest);
  capacity_ = batch;
}

float* Network::Forward(int64_t batch, const float* x) {
  Reserve(batch);
  const float* in = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i].layer->Forward(batch, in, outputs_[i]->data());
    in = outputs_[i]->data();
  }
  return outputs_.back()->data();
}

void Network::Backward(int64_t batch, const float* grad_logits) {
  const float* grad_y = grad_logits;
  for (size_t i = layers_.size(); i-- > 0;) {
    float* grad_x = nullptr;
    if (i > 0) grad_x = grad_y == grad_a_->data() ? grad_b_->data() : grad_a_->data();
    layers_[i].layer->Backward(batch, grad_y, grad_x);
    grad_y = grad_x;
  }
}

}  // namespace fl::client::ml
