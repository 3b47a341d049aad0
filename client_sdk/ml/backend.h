// The kernels the built-in models are made of, behind one interface with two implementations:
// `cpu` (Eigen and OpenMP, every core) and `cuda` (cuBLAS for the matrix products, small kernels
// for the rest). The layers and the optimizer in ml/ are written once against this interface; the
// CPU backend is the oracle every CUDA test compares against.
//
// Conventions, the same on every backend:
// - Every pointer an op takes is memory of that backend (host memory for `cpu`, device memory
//   for `cuda`), obtained from Allocate; only Upload and Download touch host memory.
// - Matrices are row-major float32. Images are NHWC: [batch, height, width, channels].
// - Ops are asynchronous with respect to the host where the backend allows it; Download and the
//   ops that return a host value (SumSquares, SoftmaxCrossEntropy) wait for the work before them.
// - Sizes are int64_t; a backend may refuse (CHECK-fail) sizes its library cannot address.
#ifndef FL_CLIENT_ML_BACKEND_H_
#define FL_CLIENT_ML_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fl::client::ml {

// A block of backend memory, zero-filled when allocated, freed when destroyed.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual float* data() = 0;
  virtual const float* data() const = 0;
  // Size in floats (int32 buffers use the same 4-byte slots, see Backend::AllocateInts).
  virtual int64_t size() const = 0;
  int32_t* ints() { return reinterpret_cast<int32_t*>(data()); }
  const int32_t* ints() const { return reinterpret_cast<const int32_t*>(data()); }
};

// The geometry of a 2-D convolution over NHWC images, stride 1, no padding, square kernel.
struct ConvShape {
  int64_t batch = 0;
  int64_t height = 0;    // input
  int64_t width = 0;     // input
  int64_t channels = 0;  // input
  int64_t kernel = 0;
  int64_t out_height() const { return height - kernel + 1; }
  int64_t out_width() const { return width - kernel + 1; }
  // Columns of the patch matrix: one patch is kernel x kernel x channels, in (ky, kx, c) order.
  int64_t patch_size() const { return kernel * kernel * channels; }
  // Rows of the patch matrix: one per output pixel of every image.
  int64_t patches() const { return batch * out_height() * out_width(); }
};

// The geometry of a 2x2, stride-2 max pooling over NHWC images (odd trailing rows and columns
// are dropped, as PyTorch does).
struct PoolShape {
  int64_t batch = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  int64_t out_height() const { return height / 2; }
  int64_t out_width() const { return width / 2; }
  int64_t out_size() const { return batch * out_height() * out_width() * channels; }
};

// What SoftmaxCrossEntropy measured on a batch.
struct LossStats {
  double loss_sum = 0;  // summed cross-entropy over the rows
  int64_t correct = 0;  // rows whose largest logit is at the label
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;  // "cpu" or "cuda"
  // A description for logs, e.g. "cpu (Eigen, 2 threads)" or "cuda (NVIDIA H200)".
  virtual std::string Describe() const = 0;

  // --- memory ---
  // Whether buffers are this process's host memory, so that kernels may read host arrays as
  // they are (the CPU backend): evaluation then reads the dataset in place instead of copying it.
  virtual bool host_memory() const { return false; }
  virtual std::unique_ptr<Buffer> Allocate(int64_t floats) = 0;
  std::unique_ptr<Buffer> AllocateInts(int64_t n) { return Allocate(n); }
  virtual void Upload(const float* host, int64_t n, float* dst) = 0;
  virtual void UploadInts(const int32_t* host, int64_t n, int32_t* dst) = 0;
  virtual void Download(const float* src, int64_t n, float* host) = 0;
  virtual void DownloadInts(const int32_t* src, int64_t n, int32_t* host) = 0;
  virtual void Copy(const float* src, int64_t n, float* dst) = 0;
  virtual void Fill(float value, int64_t n, float* dst) = 0;
  // Waits until every op issued so far has finished.
  virtual void Synchronize() = 0;

  // --- dense algebra ---
  // c = alpha * op(a) * op(b) + beta * c, where op(a) is m x k, op(b) is k x n and c is m x n;
  // op transposes when the flag is set (then a is stored k x m, or b n x k). Row-major.
  virtual void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, const float* b, float beta, float* c) = 0;
  // y[r][j] += bias[j] for every row r of the rows x cols matrix y.
  virtual void AddRowBias(int64_t rows, int64_t cols, const float* bias, float* y) = 0;
  // out[j] = beta * out[j] + sum over rows r of x[r][j].
  virtual void ColumnSums(int64_t rows, int64_t cols, const float* x, float beta, float* out) = 0;
  // y += alpha * x.
  virtual void Axpy(int64_t n, float alpha, const float* x, float* y) = 0;
  // x *= alpha.
  virtual void Scale(int64_t n, float alpha, float* x) = 0;
  // sum of x[i]^2, accumulated in double; waits for the result.
  virtual double SumSquares(int64_t n, const float* x) = 0;

  // --- activations and pooling ---
  // y = max(x, 0); in place is allowed.
  virtual void Relu(int64_t n, const float* x, float* y) = 0;
  // grad_x = grad_y where y > 0, else 0; `y` is the forward output. In place is allowed.
  virtual void ReluBackward(int64_t n, const float* y, const float* grad_y, float* grad_x) = 0;
  // Max over each 2x2 window; `argmax` (an int buffer of shape.out_size()) records, for each
  // output, the flat index into x of the winner (the first of equal values) for the backward pass.
  virtual void MaxPool2(const PoolShape& shape, const float* x, float* y, int32_t* argmax) = 0;
  // grad_x = 0 everywhere except grad_x[argmax[i]] += grad_y[i].
  virtual void MaxPool2Backward(const PoolShape& shape, const float* grad_y, const int32_t* argmax,
                                float* grad_x) = 0;

  // --- convolution via patch matrices ---
  // patches[p][(ky*kernel + kx)*channels + c] = x[n][oy+ky][ox+kx][c], p = (n*out_h + oy)*out_w +
  // ox.
  virtual void Im2Col(const ConvShape& shape, const float* x, float* patches) = 0;
  // The adjoint of Im2Col: grad_x = 0, then every patch entry is added back to its pixel.
  virtual void Col2Im(const ConvShape& shape, const float* grad_patches, float* grad_x) = 0;

  // --- loss ---
  // Replaces each row of the rows x classes `logits` with softmax(row) - onehot(label), scaled by
  // `grad_scale` (1/batch for a mean loss): the gradient of the loss with respect to the logits.
  // Returns the summed cross-entropy and the number correct; waits for the result.
  virtual LossStats SoftmaxCrossEntropy(int64_t rows, int64_t classes, const int32_t* labels,
                                        float grad_scale, float* logits) = 0;
  // Softmax probabilities in place (for prediction); no gradient.
  virtual void Softmax(int64_t rows, int64_t classes, float* logits) = 0;
};

// "cpu" with `threads` worker threads (0: every core).
std::unique_ptr<Backend> MakeCpuBackend(int threads = 0);

// Whether this build has the CUDA backend and a CUDA device is present; when not, `why` (if
// given) says which of the two is missing.
bool CudaAvailable(std::string* why = nullptr);

// "cuda" on device 0; UNAVAILABLE, saying why, when CudaAvailable() is false.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend();

// "cpu", "cuda" or "auto" (CUDA when available, the CPU otherwise). INVALID_ARGUMENT for any
// other name, UNAVAILABLE for "cuda" without CUDA.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name, int cpu_threads = 0);

}  // namespace fl::client::ml

#endif  // FL_CLIENT_ML_BACKEND_H_
