// The CUDA backend's kernels: element-wise ops and reductions with grid-stride loops, pooling and
// patch matrices one thread per output element, softmax one warp per row.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "client_sdk/ml/cuda/kernels.h"

namespace fl::client::ml::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// Blocks for a grid-stride loop over n elements (at least one, at most 2^20).
unsigned int BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

void CheckLaunch(const char* kernel, const char* file, int line) {
  CheckCuda(cudaGetLastError(), kernel, file, line);
}
#define FL_CHECK_LAUNCH(name) CheckLaunch(name, __FILE__, __LINE__)

__device__ int64_t GlobalIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void FillKernel(int64_t n, float value, float* dst) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) dst[i] = value;
}

__global__ void AddRowBiasKernel(int64_t rows, int64_t cols, const float* bias, float* y) {
  const int64_t n = rows * cols;
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) y[i] += bias[i % cols];
}

// Block (32, 32): threadIdx.x picks a column of the block's 32-column tile, threadIdx.y a stride
// of rows; the 32 partial sums of a column are then reduced in shared memory.
__global__ void ColumnSumsKernel(int64_t rows, int64_t cols, const float* x, float beta,
                                 float* out) {
  __shared__ float partial[kWarp][kWarp + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kWarp) sum += x[r * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kWarp / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride) {
      partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + stride][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < cols) {
    // beta == 0 overwrites, so an uninitialised `out` (even NaN) does not leak through.
    out[col] = (beta == 0.0f ? 0.0f : beta * out[col]) + partial[0][threadIdx.x];
  }
}

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) y[i] += alpha * x[i];
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) x[i] *= alpha;
}

__device__ double WarpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

__global__ void SumSquaresKernel(int64_t n, const float* x, double* result) {
  __shared__ double warp_sums[kThreads / kWarp];
  double sum = 0.0;
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    sum += v * v;
  }
  sum = WarpSum(sum);
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < kThreads / kWarp ? warp_sums[lane] : 0.0;
    sum = WarpSum(sum);
    if (lane == 0) atomicAdd(result, sum);
  }
}

__global__ void ReluKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) y[i] = fmaxf(x[i], 0.0f);
}

__global__ void ReluBackwardKernel(int64_t n, const float* y, const float* grad_y, float* grad_x) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    grad_x[i] = y[i] > 0.0f ? grad_y[i] : 0.0f;
  }
}

__global__ void MaxPool2Kernel(PoolDims d, const float* x, float* y, int32_t* argmax) {
  const int64_t out_h = d.height / 2;
  const int64_t out_w = d.width / 2;
  const int64_t n_out = d.batch * out_h * out_w * d.channels;
  for (int64_t i = GlobalIndex(); i < n_out; i += GridStride()) {
    const int64_t c = i % d.channels;
    const int64_t ox = (i / d.channels) % out_w;
    const int64_t oy = (i / (d.channels * out_w)) % out_h;
    const int64_t n = i / (d.channels * out_w * out_h);
    // The window in (dy, dx) order; strict > keeps the first of equal values.
    int64_t best = ((n * d.height + 2 * oy) * d.width + 2 * ox) * d.channels + c;
    float best_value = x[best];
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx) {
        const int64_t at = ((n * d.height + 2 * oy + dy) * d.width + 2 * ox + dx) * d.channels + c;
        if (x[at] > best_value) {
          best_value = x[at];
          best = at;
        }
      }
    }
    y[i] = best_value;
    argmax[i] = static_cast<int32_t>(best);
  }
}

__global__ void MaxPool2BackwardKernel(int64_t out_size, const float* grad_y, const int32_t* argmax,
                                       float* grad_x) {
  // Windows do not overlap, but atomicAdd keeps the sum right for any argmax.
  for (int64_t i = GlobalIndex(); i < out_size; i += GridStride()) {
    atomicAdd(&grad_x[argmax[i]], grad_y[i]);
  }
}

__global__ void Im2ColKernel(ConvDims d, const float* x, float* patches) {
  const int64_t out_h = d.height - d.kernel + 1;
  const int64_t out_w = d.width - d.kernel + 1;
  const int64_t patch = d.kernel * d.kernel * d.channels;
  const int64_t total = d.batch * out_h * out_w * patch;
  for (int64_t i = GlobalIndex(); i < total; i += GridStride()) {
    const int64_t q = i % patch;
    const int64_t p = i / patch;
    const int64_t c = q % d.channels;
    const int64_t kx = (q / d.channels) % d.kernel;
    const int64_t ky = q / (d.channels * d.kernel);
    const int64_t ox = p % out_w;
    const int64_t oy = (p / out_w) % out_h;
    const int64_t n = p / (out_w * out_h);
    patches[i] = x[((n * d.height + oy + ky) * d.width + ox + kx) * d.channels + c];
  }
}

// One thread per input pixel and channel sums the patch entries that copied it.
__global__ void Col2ImKernel(ConvDims d, const float* grad_patches, float* grad_x) {
  const int64_t out_h = d.height - d.kernel + 1;
  const int64_t out_w = d.width - d.kernel + 1;
  const int64_t patch = d.kernel * d.kernel * d.channels;
  const int64_t total = d.batch * d.height * d.width * d.channels;
  for (int64_t i = GlobalIndex(); i < total; i += GridStride()) {
    const int64_t c = i % d.channels;
    const int64_t px = (i / d.channels) % d.width;
    const int64_t py = (i / (d.channels * d.width)) % d.height;
    const int64_t n = i / (d.channels * d.width * d.height);
    const int64_t ky_lo = py - out_h + 1 > 0 ? py - out_h + 1 : 0;
    const int64_t ky_hi = py < d.kernel - 1 ? py : d.kernel - 1;
    const int64_t kx_lo = px - out_w + 1 > 0 ? px - out_w + 1 : 0;
    const int64_t kx_hi = px < d.kernel - 1 ? px : d.kernel - 1;
    float sum = 0.0f;
    for (int64_t ky = ky_lo; ky <= ky_hi; ++ky) {
      for (int64_t kx = kx_lo; kx <= kx_hi; ++kx) {
        const int64_t p = (n * out_h + (py - ky)) * out_w + (px - kx);
        sum += grad_patches[p * patch + (ky * d.kernel + kx) * d.channels + c];
      }
    }
    grad_x[i] = sum;
  }
}

__device__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ float WarpSumF(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// The first index holding the row's largest value, across the warp (ties: the smaller index).
__device__ int64_t WarpArgmax(float value, int64_t index) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(0xffffffffu, value, offset);
    const int64_t other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other_value > value || (other_value == value && other_index < index)) {
      value = other_value;
      index = other_index;
    }
  }
  return index;
}

// One warp per row: max, argmax, sum of exponentials, then the gradient in place.
__global__ void SoftmaxCrossEntropyKernel(int64_t rows, int64_t classes, const int32_t* labels,
                                          float grad_scale, float* logits,
                                          LossAccumulator* result) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;  // whole warps leave together
  float* z = logits + row * classes;
  float max_value = -INFINITY;
  int64_t max_index = classes;
  for (int64_t j = lane; j < classes; j += kWarp) {
    if (z[j] > max_value) {
      max_value = z[j];
      max_index = j;
    }
  }
  max_index = WarpArgmax(max_value, max_index);
  max_value = WarpMax(max_value);
  float sum = 0.0f;
  for (int64_t j = lane; j < classes; j += kWarp) sum += expf(z[j] - max_value);
  sum = WarpSumF(sum);
  const int32_t label = labels[row];
  const bool valid = label >= 0 && label < classes;
  const float label_logit = valid ? z[label] : NAN;  // read before the row is overwritten
  __syncwarp();
  for (int64_t j = lane; j < classes; j += kWarp) {
    const float p = expf(z[j] - max_value) / sum;
    z[j] = (p - (j == label ? 1.0f : 0.0f)) * grad_scale;
  }
  if (lane == 0) {
    // -log softmax(z)[label] = log(sum) - (z[label] - max)
    atomicAdd(&result->loss_sum,
              static_cast<double>(logf(sum)) - (static_cast<double>(label_logit) - max_value));
    if (valid && max_index == label) atomicAdd(&result->correct, 1ull);
  }
}

__global__ void SoftmaxKernel(int64_t rows, int64_t classes, float* logits) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  float* z = logits + row * classes;
  float max_value = -INFINITY;
  for (int64_t j = lane; j < classes; j += kWarp) max_value = fmaxf(max_value, z[j]);
  max_value = WarpMax(max_value);
  float sum = 0.0f;
  for (int64_t j = lane; j < classes; j += kWarp) sum += expf(z[j] - max_value);
  sum = WarpSumF(sum);
  for (int64_t j = lane; j < classes; j += kWarp) z[j] = expf(z[j] - max_value) / sum;
}

unsigned int BlocksForRows(int64_t rows) {
  constexpr int64_t kRowsPerBlock = kThreads / kWarp;
  return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void CheckCuda(cudaError_t error, const char* what, const char* file, int line) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, what, cudaGetErrorString(error),
               cudaGetErrorName(error));
  std::abort();
}

void LaunchFill(cudaStream_t stream, int64_t n, float value, float* dst) {
  if (n <= 0) return;
  FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, value, dst);
  FL_CHECK_LAUNCH("FillKernel");
}

void LaunchAddRowBias(cudaStream_t stream, int64_t rows, int64_t cols, const float* bias,
                      float* y) {
  if (rows <= 0 || cols <= 0) return;
  AddRowBiasKernel<<<BlocksFor(rows * cols), kThreads, 0, stream>>>(rows, cols, bias, y);
  FL_CHECK_LAUNCH("AddRowBiasKernel");
}

void LaunchColumnSums(cudaStream_t stream, int64_t rows, int64_t cols, const float* x, float beta,
                      float* out) {
  if (cols <= 0) return;
  const auto blocks = static_cast<unsigned int>((cols + kWarp - 1) / kWarp);
  ColumnSumsKernel<<<blocks, dim3(kWarp, kWarp), 0, stream>>>(rows, cols, x, beta, out);
  FL_CHECK_LAUNCH("ColumnSumsKernel");
}

void LaunchAxpy(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y) {
  if (n <= 0) return;
  AxpyKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, alpha, x, y);
  FL_CHECK_LAUNCH("AxpyKernel");
}

void LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* x) {
  if (n <= 0) return;
  ScaleKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, alpha, x);
  FL_CHECK_LAUNCH("ScaleKernel");
}

void LaunchSumSquares(cudaStream_t stream, int64_t n, const float* x, double* result) {
  if (n <= 0) return;
  const unsigned int blocks = std::min<unsigned int>(BlocksFor(n), 4096);
  SumSquaresKernel<<<blocks, kThreads, 0, stream>>>(n, x, result);
  FL_CHECK_LAUNCH("SumSquaresKernel");
}

void LaunchRelu(cudaStream_t stream, int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  ReluKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, x, y);
  FL_CHECK_LAUNCH("ReluKernel");
}

void LaunchReluBackward(cudaStream_t stream, int64_t n, const float* y, const float* grad_y,
                        float* grad_x) {
  if (n <= 0) return;
  ReluBackwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, y, grad_y, grad_x);
  FL_CHECK_LAUNCH("ReluBackwardKernel");
}

void LaunchMaxPool2(cudaStream_t stream, const PoolDims& d, const float* x, float* y,
                    int32_t* argmax) {
  const int64_t n_out = d.batch * (d.height / 2) * (d.width / 2) * d.channels;
  if (n_out <= 0) return;
  MaxPool2Kernel<<<BlocksFor(n_out), kThreads, 0, stream>>>(d, x, y, argmax);
  FL_CHECK_LAUNCH("MaxPool2Kernel");
}

void LaunchMaxPool2Backward(cudaStream_t stream, int64_t out_size, const float* grad_y,
                            const int32_t* argmax, float* grad_x) {
  if (out_size <= 0) return;
  MaxPool2BackwardKernel<<<BlocksFor(out_size), kThreads, 0, stream>>>(out_size, grad_y, argmax,
                                                                       grad_x);
  FL_CHECK_LAUNCH("MaxPool2BackwardKernel");
}

void LaunchIm2Col(cudaStream_t stream, const ConvDims& d, const float* x, float* patches) {
  const int64_t total = d.batch * (d.height - d.kernel + 1) * (d.width - d.kernel + 1) * d.kernel *
                        d.kernel * d.channels;
  if (total <= 0) return;
  Im2ColKernel<<<BlocksFor(total), kThreads, 0, stream>>>(d, x, patches);
  FL_CHECK_LAUNCH("Im2ColKernel");
}

void LaunchCol2Im(cudaStream_t stream, const ConvDims& d, const float* grad_patches,
                  float* grad_x) {
  const int64_t total = d.batch * d.height * d.width * d.channels;
  if (total <= 0) return;
  Col2ImKernel<<<BlocksFor(total), kThreads, 0, stream>>>(d, grad_patches, grad_x);
  FL_CHECK_LAUNCH("Col2ImKernel");
}

void LaunchSoftmaxCrossEntropy(cudaStream_t stream, int64_t rows, int64_t classes,
                               const int32_t* labels, float grad_scale, float* logits,
                               LossAccumulator* result) {
  if (rows <= 0 || classes <= 0) return;
  SoftmaxCrossEntropyKernel<<<BlocksForRows(rows), kThreads, 0, stream>>>(
      rows, classes, labels, grad_scale, logits, result);
  FL_CHECK_LAUNCH("SoftmaxCrossEntropyKernel");
}

void LaunchSoftmax(cudaStream_t stream, int64_t rows, int64_t classes, float* logits) {
  if (rows <= 0 || classes <= 0) return;
  SoftmaxKernel<<<BlocksForRows(rows), kThreads, 0, stream>>>(rows, classes, logits);
  FL_CHECK_LAUNCH("SoftmaxKernel");
}

}  // namespace fl::client::ml::cuda
