// Launch wrappers of the CUDA backend's kernels (kernels.cu), called by cuda_backend.cc. Each one
// enqueues its work on `stream` and returns at once; a launch failure CHECK-fails with the file,
// line and CUDA error string (the Backend interface has no error channel for ops; the inputs are
// sizes the layers computed, so a failure here is a programmer error or a broken device).
// Shapes and layouts are those documented in client_sdk/ml/backend.h. Internal to the backend:
// only cuda_backend.cc and kernels.cu include this header.
#ifndef FL_CLIENT_ML_CUDA_KERNELS_H_
#define FL_CLIENT_ML_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fl::client::ml::cuda {

// Aborts with "<file>:<line>: <what> failed: <CUDA error string>" when `error` is not success.
void CheckCuda(cudaError_t error, const char* what, const char* file, int line);
#define FL_CUDA_CHECK(expr) ::fl::client::ml::cuda::CheckCuda((expr), #expr, __FILE__, __LINE__)

void LaunchFill(cudaStream_t stream, int64_t n, float value, float* dst);
void LaunchAddRowBias(cudaStream_t stream, int64_t rows, int64_t cols, const float* bias, float* y);
void LaunchColumnSums(cudaStream_t stream, int64_t rows, int64_t cols, const float* x, float beta,
                      float* out);
void LaunchAxpy(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y);
void LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* x);
// Adds sum(x[i]^2) (in double) to *result, which the caller zeroed on the same stream.
void LaunchSumSquares(cudaStream_t stream, int64_t n, const float* x, double* result);
void LaunchRelu(cudaStream_t stream, int64_t n, const float* x, float* y);
void LaunchReluBackward(cudaStream_t stream, int64_t n, const float* y, const float* grad_y,
                        float* grad_x);

// Pool geometry, as in PoolShape.
struct PoolDims {
  int64_t batch, height, width, channels;
};
void LaunchMaxPool2(cudaStream_t stream, const PoolDims& d, const float* x, float* y,
                    int32_t* argmax);
// grad_x must be zeroed by the caller on the same stream (it has batch*height*width*channels).
void LaunchMaxPool2Backward(cudaStream_t stream, int64_t out_size, const float* grad_y,
                            const int32_t* argmax, float* grad_x);

// Convolution geometry, as in ConvShape.
struct ConvDims {
  int64_t batch, height, width, channels, kernel;
};
void LaunchIm2Col(cudaStream_t stream, const ConvDims& d, const float* x, float* patches);
// Writes every element of grad_x (a gather, no zeroing needed, deterministic).
void LaunchCol2Im(cudaStream_t stream, const ConvDims& d, const float* grad_patches, float* grad_x);

// Device-side result of SoftmaxCrossEntropy; the caller zeroes it on the same stream.
struct LossAccumulator {
  double loss_sum;
  unsigned long long correct;
};
void LaunchSoftmaxCrossEntropy(cudaStream_t stream, int64_t rows, int64_t classes,
                               const int32_t* labels, float grad_scale, float* logits,
                               LossAccumulator* result);
void LaunchSoftmax(cudaStream_t stream, int64_t rows, int64_t classes, float* logits);

}  // namespace fl::client::ml::cuda

#endif  // FL_CLIENT_ML_CUDA_KERNELS_H_
