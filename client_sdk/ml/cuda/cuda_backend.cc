// The "cuda" Backend: device buffers, cuBLAS for Gemm, the kernels of kernels.cu for the rest, all
// in order on one stream per backend.
#include "client_sdk/ml/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client_sdk/ml/cuda/kernels.h"

namespace fl::client::ml {
namespace {

void CheckCublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, cublasGetStatusString(status));
  std::abort();
}
#define FL_CUBLAS_CHECK(expr) CheckCublas((expr), #expr, __FILE__, __LINE__)

// cuBLAS takes int sizes; larger ones are a programmer error (backend.h allows the CHECK).
int CheckedInt(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    std::fprintf(stderr, "cuda backend: %s = %lld is outside cuBLAS's int range\n", what,
                 static_cast<long long>(v));
    std::abort();
  }
  return static_cast<int>(v);
}

std::string CudaErrorText(cudaError_t error) {
  return absl::StrCat(cudaGetErrorString(error), " (", cudaGetErrorName(error), ")");
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(int64_t floats, cudaStream_t stream) : size_(floats) {
    if (floats <= 0) return;
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    void* p = nullptr;
    FL_CUDA_CHECK(cudaMalloc(&p, bytes));
    data_ = static_cast<float*>(p);
    FL_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes, stream));
  }
  ~CudaBuffer() override {
    if (data_ == nullptr) return;
    // cudaFree waits for the device; at process exit the runtime may already be unloading.
    const cudaError_t error = cudaFree(data_);
    if (error != cudaSuccess && error != cudaErrorCudartUnloading) {
      std::fprintf(stderr, "cuda backend: cudaFree failed: %s\n", CudaErrorText(error).c_str());
    }
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  float* data() override { return data_; }
  const float* data() const override { return data_; }
  int64_t size() const override { return size_; }

 private:
  float* data_ = nullptr;
  int64_t size_;
};

class CudaBackend final : public Backend {
 public:
  // Takes ownership of the stream, the cuBLAS handle and the scratch memory.
  CudaBackend(std::string description, cudaStream_t stream, cublasHandle_t cublas,
              cuda::LossAccumulator* scratch)
      : description_(std::move(description)), stream_(stream), cublas_(cublas), scratch_(scratch) {}
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaFree(scratch_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  std::string Describe() const override { return description_; }

  std::unique_ptr<Buffer> Allocate(int64_t floats) override {
    return std::make_unique<CudaBuffer>(floats, stream_);
  }
  void Upload(const float* host, int64_t n, float* dst) override { CopyIn(host, n, dst); }
  void UploadInts(const int32_t* host, int64_t n, int32_t* dst) override { CopyIn(host, n, dst); }
  void Download(const float* src, int64_t n, float* host) override { CopyOut(src, n, host); }
  void DownloadInts(const int32_t* src, int64_t n, int32_t* host) override {
    CopyOut(src, n, host);
  }
  void Copy(const float* src, int64_t n, float* dst) override {
    if (n <= 0 || src == dst) return;
    FL_CUDA_CHECK(cudaMemcpyAsync(dst, src, Bytes(n), cudaMemcpyDeviceToDevice, stream_));
  }
  void Fill(float value, int64_t n, float* dst) override {
    if (n <= 0) return;
    if (value == 0.0f) {
      FL_CUDA_CHECK(cudaMemsetAsync(dst, 0, Bytes(n), stream_));
    } else {
      cuda::LaunchFill(stream_, n, value, dst);
    }
  }
  void Synchronize() override { FL_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B before A,
  // n and m swapped, and each matrix's row length as its leading dimension.
  void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    if (m <= 0 || n <= 0) return;
    const int mi = CheckedInt(m, "m"), ni = CheckedInt(n, "n"), ki = CheckedInt(k, "k");
    const int lda = transpose_a ? mi : ki;
    const int ldb = transpose_b ? ki : ni;
    FL_CUBLAS_CHECK(cublasSgemm(cublas_, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, ni, mi, ki, &alpha, b,
                                ldb > 0 ? ldb : 1, a, lda > 0 ? lda : 1, &beta, c, ni));
  }
  void AddRowBias(int64_t rows, int64_t cols, const float* bias, float* y) override {
    cuda::LaunchAddRowBias(stream_, rows, cols, bias, y);
  }
  void ColumnSums(int64_t rows, int64_t cols, const float* x, float beta, float* out) override {
    cuda::LaunchColumnSums(stream_, rows, cols, x, beta, out);
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    cuda::LaunchAxpy(stream_, n, alpha, x, y);
  }
  void Scale(int64_t n, float alpha, float* x) override { cuda::LaunchScale(stream_, n, alpha, x); }
  double SumSquares(int64_t n, const float* x) override {
    if (n <= 0) return 0.0;
    FL_CUDA_CHECK(cudaMemsetAsync(&scratch_->loss_sum, 0, sizeof(double), stream_));
    cuda::LaunchSumSquares(stream_, n, x, &scratch_->loss_sum);
    double result = 0.0;
    FL_CUDA_CHECK(cudaMemcpyAsync(&result, &scratch_->loss_sum, sizeof(double),
                                  cudaMemcpyDeviceToHost, stream_));
    Synchronize();
    return result;
  }

  void Relu(int64_t n, const float* x, float* y) override { cuda::LaunchRelu(stream_, n, x, y); }
  void ReluBackward(int64_t n, const float* y, const float* grad_y, float* grad_x) override {
    cuda::LaunchReluBackward(stream_, n, y, grad_y, grad_x);
  }
  void MaxPool2(const PoolShape& shape, const float* x, float* y, int32_t* argmax) override {
    CheckedInt(shape.batch * shape.height * shape.width * shape.channels, "pool input size");
    cuda::LaunchMaxPool2(stream_, PoolDims(shape), x, y, argmax);
  }
  void MaxPool2Backward(const PoolShape& shape, const float* grad_y, const int32_t* argmax,
                        float* grad_x) override {
    Fill(0.0f, shape.batch * shape.height * shape.width * shape.channels, grad_x);
    cuda::LaunchMaxPool2Backward(stream_, shape.out_size(), grad_y, argmax, grad_x);
  }

  void Im2Col(const ConvShape& shape, const float* x, float* patches) override {
    cuda::LaunchIm2Col(stream_, ConvDims(shape), x, patches);
  }
  void Col2Im(const ConvShape& shape, const float* grad_patches, float* grad_x) override {
    cuda::LaunchCol2Im(stream_, ConvDims(shape), grad_patches, grad_x);
  }

  LossStats SoftmaxCrossEntropy(int64_t rows, int64_t classes, const int32_t* labels,
                                float grad_scale, float* logits) override {
    if (rows <= 0) return {};
    FL_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, sizeof(*scratch_), stream_));
    cuda::LaunchSoftmaxCrossEntropy(stream_, rows, classes, labels, grad_scale, logits, scratch_);
    cuda::LossAccumulator result{};
    FL_CUDA_CHECK(
        cudaMemcpyAsync(&result, scratch_, sizeof(result), cudaMemcpyDeviceToHost, stream_));
    Synchronize();
    return {.loss_sum = result.loss_sum, .correct = static_cast<int64_t>(result.correct)};
  }
  void Softmax(int64_t rows, int64_t classes, float* logits) override {
    cuda::LaunchSoftmax(stream_, rows, classes, logits);
  }

 private:
  static size_t Bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
  static cuda::PoolDims PoolDims(const PoolShape& s) {
    return {s.batch, s.height, s.width, s.channels};
  }
  static cuda::ConvDims ConvDims(const ConvShape& s) {
    return {s.batch, s.height, s.width, s.channels, s.kernel};
  }
  // Pageable host memory: the call returns once `host` has been staged, so the caller may reuse
  // it at once.
  template <typename T>
  void CopyIn(const T* host, int64_t n, T* dst) {
    if (n <= 0) return;
    FL_CUDA_CHECK(cudaMemcpyAsync(dst, host, static_cast<size_t>(n) * sizeof(T),
                                  cudaMemcpyHostToDevice, stream_));
  }
  // Waits for every op before it, then for the copy.
  template <typename T>
  void CopyOut(const T* src, int64_t n, T* host) {
    if (n <= 0) return;
    FL_CUDA_CHECK(cudaMemcpyAsync(host, src, static_cast<size_t>(n) * sizeof(T),
                                  cudaMemcpyDeviceToHost, stream_));
    Synchronize();
  }

  const std::string description_;
  const cudaStream_t stream_;
  const cublasHandle_t cublas_;
  cuda::LossAccumulator* const scratch_;  // device memory for the reductions' results
};

}  // namespace

bool CudaDevicePresent(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it: the next caller asks afresh
    if (why != nullptr) {
      *why = absl::StrCat("CUDA runtime: ", CudaErrorText(error));
      // The runtime says "insufficient" also when there is no driver at all.
      if (error == cudaErrorInsufficientDriver) {
        absl::StrAppend(why, "; the NVIDIA driver (libcuda.so.1) is missing or older than CUDA ",
                        CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10, " needs");
      }
    }
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "the CUDA driver reports no device";
    return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackendImpl() {
  std::string why;
  if (!CudaDevicePresent(&why)) {
    return absl::UnavailableError(absl::StrCat("cuda backend unavailable: ", why));
  }
  auto unavailable = [](const char* step, const std::string& reason) {
    return absl::UnavailableError(absl::StrCat("cuda backend: ", step, " failed: ", reason));
  };
  cudaError_t error = cudaSetDevice(0);
  if (error != cudaSuccess) return unavailable("cudaSetDevice(0)", CudaErrorText(error));
  cudaDeviceProp prop{};
  error = cudaGetDeviceProperties(&prop, 0);
  if (error != cudaSuccess) return unavailable("cudaGetDeviceProperties", CudaErrorText(error));
  cudaStream_t stream = nullptr;
  error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) return unavailable("cudaStreamCreate", CudaErrorText(error));
  void* scratch = nullptr;
  error = cudaMalloc(&scratch, sizeof(cuda::LossAccumulator));
  if (error != cudaSuccess) {
    cudaStreamDestroy(stream);
    return unavailable("cudaMalloc", CudaErrorText(error));
  }
  cublasHandle_t cublas = nullptr;
  const cublasStatus_t status = cublasCreate(&cublas);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cudaFree(scratch);
    cudaStreamDestroy(stream);
    return unavailable("cublasCreate", cublasGetStatusString(status));
  }
  // Plain FP32 products (no TF32), so results stay within 1e-4 of the cpu backend's.
  if (cublasSetStream(cublas, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(cublas);
    cudaFree(scratch);
    cudaStreamDestroy(stream);
    return unavailable("cublasSetStream", "cannot configure the cuBLAS handle");
  }
  std::string description = absl::StrCat("cuda (", prop.name, ", sm_", prop.major, prop.minor, ", ",
                                         prop.totalGlobalMem >> 20, " MiB)");
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(
      std::move(description), stream, cublas, static_cast<cuda::LossAccumulator*>(scratch)));
}

}  // namespace fl::client::ml
