// The layers of the built-in models and the sequential Network made of them, written once against
// the Backend interface (ml/backend.h) so that they run unchanged on every backend.
//
// A batch is a row-major [batch, features] matrix in backend memory; images are NHWC, so a
// [batch, height, width, channels] tensor is the same bytes as a [batch, h * w * c] matrix and
// "flatten" costs nothing. Every layer can be used on its own (tests compare each layer's forward
// and backward between backends): bind its parameters, call Forward, then Backward on the same
// batch. Layers and networks are used from one thread at a time.
#ifndef FL_CLIENT_ML_LAYERS_H_
#define FL_CLIENT_ML_LAYERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client_sdk/ml/backend.h"
#include "fl/common/model.h"

namespace fl::client::ml {

class Layer {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // Floats per example going in and coming out.
  virtual int64_t input_size() const = 0;
  virtual int64_t output_size() const = 0;
  // The layer's parameter tensors in storage order, named relative to the layer ("weight",
  // "bias"); empty for layers without parameters. Their PyTorch fan-in, for initialisation.
  virtual std::vector<TensorSpec> ParamSpecs() const { return {}; }
  virtual int64_t fan_in() const { return 0; }
  int64_t NumParams() const;

  // Points the layer at its parameters and their gradient: NumParams() floats each, backend
  // memory laid out as ParamSpecs(). Not owned; they must outlive the layer's use.
  void Bind(float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }

  // y [batch, output_size] = layer(x [batch, input_size]); x and y must not overlap. The layer
  // remembers x and y: both must stay unchanged until Backward.
  virtual void Forward(int64_t batch, const float* x, float* y) = 0;
  // Given grad_y [batch, output_size] for the last Forward's batch: overwrites the parameter
  // gradients, and writes grad_x [batch, input_size] unless it is null (the first layer).
  // grad_x must not overlap grad_y unless the layer says in place is fine (Relu).
  virtual void Backward(int64_t batch, const float* grad_y, float* grad_x) = 0;

  // Bytes of scratch memory the layer allocates for a batch beyond its output (patch matrices,
  // pooling indices), in double so that no size can overflow.
  virtual double ScratchBytes(int64_t /*batch*/) const { return 0; }
  // OK when the layer can run a batch of this many examples; INVALID_ARGUMENT naming the limit
  // otherwise (MaxPool2's int32 indices).
  virtual absl::Status CheckBatch(int64_t /*batch*/) const { return absl::OkStatus(); }

 protected:
  explicit Layer(Backend* backend) : backend_(backend) {}

  Backend* backend_;  // not owned
  float* params_ = nullptr;
  float* grads_ = nullptr;
  const float* x_ = nullptr;  // the last Forward's input
  const float* y_ = nullptr;  // and output
};

// y = x W^T + b (PyTorch's Linear); tensors "weight" [out, in] and "bias" [out].
class Dense final : public Layer {
 public:
  Dense(Backend* backend, int64_t in, int64_t out) : Layer(backend), in_(in), out_(out) {}
  int64_t input_size() const override { return in_; }
  int64_t output_size() const override { return out_; }
  std::vector<TensorSpec> ParamSpecs() const override;
  int64_t fan_in() const override { return in_; }
  void Forward(int64_t batch, const float* x, float* y) override;
  void Backward(int64_t batch, const float* grad_y, float* grad_x) override;

 private:
  int64_t in_, out_;
};

// A square-kernel convolution over NHWC images, stride 1, no padding, with bias: the output is
// [batch, h - k + 1, w - k + 1, out_channels]. Tensors "weight" [out_channels, k, k,
// in_channels] and "bias" [out_channels]. Computed as Im2Col then one Gemm; it keeps the patch
// matrix of the last batch for the backward pass.
class Conv2d final : public Layer {
 public:
  Conv2d(Backend* backend, int64_t height, int64_t width, int64_t in_channels, int64_t out_channels,
         int64_t kernel);
  int64_t input_size() const override { return height_ * width_ * in_channels_; }
  int64_t output_size() const override;
  std::vector<TensorSpec> ParamSpecs() const override;
  int64_t fan_in() const override { return kernel_ * kernel_ * in_channels_; }
  void Forward(int64_t batch, const float* x, float* y) override;
  void Backward(int64_t batch, const float* grad_y, float* grad_x) override;
  double ScratchBytes(int64_t batch) const override;  // the patch matrix and its gradient
  ConvShape Shape(int64_t batch) const;

 private:
  void Reserve(int64_t batch);
  int64_t height_, width_, in_channels_, out_channels_, kernel_;
  int64_t capacity_ = 0;  // batch size the buffers hold
  std::unique_ptr<Buffer> patches_;
  std::unique_ptr<Buffer> grad_patches_;
};

// y = max(x, 0); Backward may run in place (grad_x == grad_y).
class Relu final : public Layer {
 public:
  Relu(Backend* backend, int64_t size) : Layer(backend), size_(size) {}
  int64_t input_size() const override { return size_; }
  int64_t output_size() const override { return size_; }
  void Forward(int64_t batch, const float* x, float* y) override;
  void Backward(int64_t batch, const float* grad_y, float* grad_x) override;

 private:
  int64_t size_;
};

// 2x2 max pooling, stride 2, over NHWC images (odd trailing rows and columns dropped).
class MaxPool2 final : public Layer {
 public:
  MaxPool2(Backend* backend, int64_t height, int64_t width, int64_t channels)
      : Layer(backend), height_(height), width_(width), channels_(channels) {}
  int64_t input_size() const override { return height_ * width_ * channels_; }
  int64_t output_size() const override { return (height_ / 2) * (width_ / 2) * channels_; }
  void Forward(int64_t batch, const float* x, float* y) override;
  void Backward(int64_t batch, const float* grad_y, float* grad_x) override;
  double ScratchBytes(int64_t batch) const override;  // the int32 argmax
  // The argmax holds int32 indices into the whole batch's input: INVALID_ARGUMENT when
  // batch x height x width x channels exceeds 2^31 - 1.
  absl::Status CheckBatch(int64_t batch) const override;
  PoolShape Shape(int64_t batch) const { return {batch, height_, width_, channels_}; }

 private:
  int64_t height_, width_, channels_;
  int64_t capacity_ = 0;
  std::unique_ptr<Buffer> argmax_;
};

// A stack of layers that owns one flat parameter buffer and one flat gradient buffer, both in
// the order of spec() (the payload order of a Model), so a model moves in one Upload/Download.
// Activations are kept per layer and grow with the largest batch seen; nothing is allocated per
// batch after that.
class Network {
 public:
  struct NamedLayer {
    std::string name;  // tensor prefix: "fc1" gives "fc1.weight"; empty gives "weight"
    std::unique_ptr<Layer> layer;
  };
  // The layers must chain (each input_size the previous output_size) and the last must not need
  // its own output for Backward (the loss overwrites the logits with their gradient): Dense.
  Network(Backend* backend, std::vector<NamedLayer> layers);

  // The spec a network of these layers has, computed without allocating anything.
  static ModelSpec SpecOf(const std::vector<NamedLayer>& layers);

  // The most backend memory one batch may need (activations, gradients, scratch): 4 GiB.
  static constexpr double kMaxBatchBytes = 4.0 * (int64_t{1} << 30);
  // Bytes of backend memory a batch of `batch` examples needs: its input and labels, every
  // layer's output, the two input-gradient buffers and the layers' scratch.
  double BatchBytes(int64_t batch) const;
  // OK when a batch of `batch` examples fits in `max_bytes` and every layer accepts it;
  // otherwise INVALID_ARGUMENT naming the batch size and the bytes it needs (or the layer's
  // limit). Callers check before the first Forward of a larger batch; Forward itself does not.
  absl::Status CheckBatch(int64_t batch, double max_bytes = kMaxBatchBytes) const;

  Backend* backend() const { return backend_; }
  const ModelSpec& spec() const { return spec_; }
  int64_t num_params() const { return spec_.NumFloats(); }
  int64_t input_size() const { return layers_.front().layer->input_size(); }
  int64_t output_size() const { return layers_.back().layer->output_size(); }
  float* params() { return params_->data(); }
  float* grads() { return grads_->data(); }
  Layer& layer(size_t i) { return *layers_[i].layer; }
  size_t num_layers() const { return layers_.size(); }

  // The logits [batch, output_size] of x [batch, input_size] (backend memory), in a buffer the
  // network owns, valid and writable until the next Forward. x must stay unchanged until Backward.
  float* Forward(int64_t batch, const float* x);
  // Back-propagates grad_logits (usually the buffer Forward returned, turned into the loss
  // gradient in place) through the last Forward's batch, overwriting grads().
  void Backward(int64_t batch, const float* grad_logits);

 private:
  void Reserve(int64_t batch);

  Backend* backend_;  // not owned
  std::vector<NamedLayer> layers_;
  ModelSpec spec_;
  std::unique_ptr<Buffer> params_;
  std::unique_ptr<Buffer> grads_;
  int64_t capacity_ = 0;
  std::vector<std::unique_ptr<Buffer>> outputs_;  // one per layer
  std::unique_ptr<Buffer> grad_a_, grad_b_;       // ping-pong input gradients
};

}  // namespace fl::client::ml

#endif  // FL_CLIENT_ML_LAYERS_H_
