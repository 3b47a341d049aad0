// The `cpu` backend: Eigen for the matrix products (split across OpenMP threads by blocks of
// rows), kernels of our own for the shapes of the convolutions that Eigen handles poorly, and
// OpenMP loops for the rest. Memory is plain 64-byte-aligned host memory, so Upload and Download
// are copies.
#include <omp.h>

// The products are split across threads here, by blocks of rows; Eigen's own OpenMP
// parallelisation spin-waits between its threads and collapses on a busy machine.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client_sdk/ml/backend.h"

namespace fl::client::ml {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;

// Loops shorter than this run on one thread: waking the team costs more than they do.
constexpr int64_t kParallelMin = 1 << 14;

class HostBuffer final : public Buffer {
 public:
  // Callers validate sizes upstream (architecture and batch caps); a request that still cannot
  // be met is a programmer error or an exhausted host, and aborts with a message rather than
  // writing through a null pointer.
  explicit HostBuffer(int64_t floats) : size_(floats) {
    constexpr int64_t kMaxFloats =
        static_cast<int64_t>((std::numeric_limits<size_t>::max() - 63) / sizeof(float));
    if (floats < 0 || floats > kMaxFloats) {
      std::fprintf(stderr, "cpu backend: cannot allocate %lld floats (invalid size)\n",
                   static_cast<long long>(floats));
      std::abort();
    }
    const size_t bytes =
        (static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float) + 63) & ~size_t{63};
    data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (data_ == nullptr) {
      std::fprintf(stderr, "cpu backend: cannot allocate %zu bytes\n", bytes);
      std::abort();
    }
    std::memset(data_.get(), 0, bytes);
  }
  float* data() override { return data_.get(); }
  const float* data() const override { return data_.get(); }
  int64_t size() const override { return size_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  int64_t size_;
  std::unique_ptr<float, Free> data_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}

  std::string_view name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  std::string Describe() const override {
    return absl::StrCat("cpu (Eigen ", EIGEN_WORLD_VERSION, ".", EIGEN_MAJOR_VERSION, ".",
                        EIGEN_MINOR_VERSION, ", ", threads_, " threads)");
  }

  std::unique_ptr<Buffer> Allocate(int64_t floats) override {
    return std::make_unique<HostBuffer>(floats);
  }
  void Upload(const float* host, int64_t n, float* dst) override { Copy(host, n, dst); }
  void UploadInts(const int32_t* host, int64_t n, int32_t* dst) override {
    if (n > 0 && host != dst) std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(int32_t));
  }
  void Download(const float* src, int64_t n, float* host) override { Copy(src, n, host); }
  void DownloadInts(const int32_t* src, int64_t n, int32_t* host) override {
    UploadInts(src, n, host);
  }
  void Copy(const float* src, int64_t n, float* dst) override {
    if (n > 0 && src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
  void Fill(float value, int64_t n, float* dst) override { std::fill_n(dst, n, value); }
  void Synchronize() override {}

  void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override;

  void AddRowBias(int64_t rows, int64_t cols, const float* bias, float* y) override {
#pragma omp parallel for num_threads(threads_) if (rows * cols >= kParallelMin) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
    }
  }

  void ColumnSums(int64_t rows, int64_t cols, const float* x, float beta, float* out) override {
    // Row by row into one accumulator: the rows are contiguous, the columns are few.
    std::vector<float> acc(static_cast<size_t>(cols), 0.0f);
    float* __restrict sum = acc.data();
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict row = x + r * cols;
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) sum[j] += row[j];
    }
    for (int64_t j = 0; j < cols; ++j) out[j] = sum[j] + (beta == 0.0f ? 0.0f : beta * out[j]);
  }

  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
#pragma omp parallel for simd num_threads(threads_) if (n >= 4 * kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }

  void Scale(int64_t n, float alpha, float* x) override {
#pragma omp parallel for simd num_threads(threads_) if (n >= 4 * kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
  }

  double SumSquares(int64_t n, const float* x) override {
    double sum = 0;
#pragma omp parallel for num_threads(threads_) if (n >= 4 * kParallelMin) reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    return sum;
  }

  void Relu(int64_t n, const float* x, float* y) override {
#pragma omp parallel for simd num_threads(threads_) if (n >= 4 * kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }

  void ReluBackward(int64_t n, const float* y, const float* grad_y, float* grad_x) override {
#pragma omp parallel for simd num_threads(threads_) if (n >= 4 * kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) grad_x[i] = y[i] > 0.0f ? grad_y[i] : 0.0f;
  }

  void MaxPool2(const PoolShape& s, const float* x, float* y, int32_t* argmax) override;
  void MaxPool2Backward(const PoolShape& s, const float* grad_y, const int32_t* argmax,
                        float* grad_x) override;
  void Im2Col(const ConvShape& s, const float* x, float* patches) override;
  void Col2Im(const ConvShape& s, const float* grad_patches, float* grad_x) override;
  LossStats SoftmaxCrossEntropy(int64_t rows, int64_t classes, const int32_t* labels,
                                float grad_scale, float* logits) override;
  void Softmax(int64_t rows, int64_t classes, float* logits) override;

 private:
  // Shapes Eigen handles poorly (see the definitions).
  static constexpr int64_t kSmallOutput = 4096;
  static constexpr int64_t kNarrowOutput = 16;
  // Products with fewer multiply-adds than this run on one thread.
  static constexpr int64_t kParallelGemm = int64_t{1} << 20;
  void SmallOutputGemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
                       float beta, float* c);
  void NarrowOutputGemm(bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, const float* b, float beta, float* c);

  const int threads_;
  std::vector<float> scratch_;  // NarrowOutputGemm's padded b^T, reused
};

void CpuBackend::Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, const float* b, float beta, float* c) {
  if (k == 0) {
    Eigen::Map<RowMatrix> out(c, m, n);
    if (beta == 0.0f) {
      out.setZero();
    } else {
      out *= beta;
    }
    return;
  }
  if (transpose_a && !transpose_b && n <= 32 && m <= kSmallOutput / 32 && k >= 64 * m) {
    return SmallOutputGemm(m, n, k, alpha, a, b, beta, c);
  }
  if (!transpose_a && n <= kNarrowOutput && m >= 16 * kNarrowOutput) {
    return NarrowOutputGemm(transpose_b, m, n, k, alpha, a, b, beta, c);
  }
  // Stored shapes: a is m x k (k x m when transposed), b is k x n (n x k when transposed).
  const ConstMatrixMap a_map(a, transpose_a ? k : m, transpose_a ? m : k);
  const ConstMatrixMap b_map(b, transpose_b ? n : k, transpose_b ? k : n);
  // Rows [begin, end) of c, with Eigen on one thread.
  auto rows = [&](int64_t begin, int64_t end) {
    Eigen::Map<RowMatrix> out(c + begin * n, end - begin, n);
    auto run = [&](const auto& lhs, const auto& rhs) {
      if (beta == 0.0f) {
        out.noalias() = alpha * lhs * rhs;
      } else {
        if (beta != 1.0f) out *= beta;
        out.noalias() += alpha * lhs * rhs;
      }
    };
    if (transpose_a) {
      auto lhs = a_map.middleCols(begin, end - begin).transpose();
      transpose_b ? run(lhs, b_map.transpose()) : run(lhs, b_map);
    } else {
      auto lhs = a_map.middleRows(begin, end - begin);
      transpose_b ? run(lhs, b_map.transpose()) : run(lhs, b_map);
    }
  };
  const int blocks = static_cast<int>(std::min<int64_t>(threads_, m / 8));
  if (blocks < 2 || m * n * k < kParallelGemm) return rows(0, m);
#pragma omp parallel for num_threads(blocks) schedule(static)
  for (int i = 0; i < blocks; ++i) rows(m * i / blocks, m * (i + 1) / blocks);
}

// Adds a[begin..end)^T b[begin..end) into acc (m x kPad, row stride kPad), for n <= kPad: rows
// of b are copied in chunks into a zero-padded block, so the inner loop has a fixed length.
template <int kPad>
void AccumulateOuter(int64_t begin, int64_t end, int64_t m, int64_t n, const float* a,
                     const float* b, float* __restrict acc) {
  constexpr int64_t kChunk = 64;
  alignas(64) float block[kChunk][kPad] = {};
  for (int64_t p0 = begin; p0 < end; p0 += kChunk) {
    const int64_t rows = std::min(kChunk, end - p0);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(b + (p0 + r) * n, n, block[r]);
    for (int64_t r = 0; r < rows; ++r) {
      const float* a_row = a + (p0 + r) * m;
      for (int64_t i = 0; i < m; ++i) {
        const float ai = a_row[i];
        float* __restrict acc_i = acc + i * kPad;
#pragma omp simd
        for (int j = 0; j < kPad; ++j) acc_i[j] += ai * block[r][j];
      }
    }
  }
}

// c (m x n, small) = alpha a^T b + beta c with a stored k x m, b k x n (n <= 32) and k long: the
// weight gradient of a convolution over few channels (grad_y^T patches). Eigen would pack both
// long operands first; this streams them once, accumulating k-slices per thread in private sums.
void CpuBackend::SmallOutputGemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                 const float* b, float beta, float* c) {
  const int parts = static_cast<int>(std::min<int64_t>(threads_, std::max<int64_t>(1, k / 256)));
  const int64_t stride = n <= 16 ? 16 : 32;  // padded row length of the sums
  std::vector<float> sums(static_cast<size_t>(parts * m * stride), 0.0f);
#pragma omp parallel for num_threads(parts) schedule(static)
  for (int part = 0; part < parts; ++part) {
    float* acc = sums.data() + part * m * stride;
    const int64_t begin = k * part / parts, end = k * (part + 1) / parts;
    if (stride == 16) {
      AccumulateOuter<16>(begin, end, m, n, a, b, acc);
    } else {
      AccumulateOuter<32>(begin, end, m, n, a, b, acc);
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float total = 0;
      for (int part = 0; part < parts; ++part) {
        total += sums[static_cast<size_t>((part * m + i) * stride + j)];
      }
      c[i * n + j] = alpha * total + (beta == 0.0f ? 0.0f : beta * c[i * n + j]);
    }
  }
}

// Rows [begin, end) of c = alpha a b^T + beta c, with bt = b^T zero-padded to N columns (N >= n,
// a multiple of 8) and k x N. Eight rows at a time, with their sums held in registers.
template <int N>
void NarrowRows(int64_t begin, int64_t end, int64_t n, int64_t k, float alpha, const float* a,
                const float* bt, float beta, float* c) {
  constexpr int kRows = 8;
  int64_t i = begin;
  for (; i + kRows <= end; i += kRows) {
    float acc[kRows][N] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* __restrict bk = bt + kk * N;
      for (int r = 0; r < kRows; ++r) {
        const float av = a[(i + r) * k + kk];
#pragma omp simd
        for (int j = 0; j < N; ++j) acc[r][j] += av * bk[j];
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float* row = c + (i + r) * n;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = alpha * acc[r][j] + (beta == 0.0f ? 0.0f : beta * row[j]);
      }
    }
  }
  for (; i < end; ++i) {
    float acc[N] = {};
    for (int64_t kk = 0; kk < k; ++kk) {
      const float av = a[i * k + kk];
#pragma omp simd
      for (int j = 0; j < N; ++j) acc[j] += av * bt[kk * N + j];
    }
    float* row = c + i * n;
    for (int64_t j = 0; j < n; ++j) row[j] = alpha * acc[j] + (beta == 0.0f ? 0.0f : beta * row[j]);
  }
}

// c (m x n, n <= 16, m large) = alpha a op(b) + beta c: the forward product of a convolution
// (patches times the few filters). Eigen's kernel would run along the short side of c; this one
// keeps eight rows of c in registers and streams a once.
void CpuBackend::NarrowOutputGemm(bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                                  const float* a, const float* b, float beta, float* c) {
  const int64_t padded = n <= 8 ? 8 : 16;
  if (static_cast<int64_t>(scratch_.size()) < k * padded) {
    scratch_.resize(static_cast<size_t>(k * padded));
  }
  float* bt = scratch_.data();
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = 0; j < padded; ++j) {
      bt[kk * padded + j] = j >= n ? 0.0f : transpose_b ? b[j * k + kk] : b[kk * n + j];
    }
  }
  const int blocks = m * n * k >= kParallelGemm ? threads_ : 1;
#pragma omp parallel for num_threads(blocks) schedule(static)
  for (int block = 0; block < blocks; ++block) {
    // Block edges on multiples of 8 rows, so that only the last block has a ragged end.
    const int64_t begin = (m / 8 * block / blocks) * 8;
    const int64_t end = block + 1 == blocks ? m : (m / 8 * (block + 1) / blocks) * 8;
    if (padded == 8) {
      NarrowRows<8>(begin, end, n, k, alpha, a, bt, beta, c);
    } else {
      NarrowRows<16>(begin, end, n, k, alpha, a, bt, beta, c);
    }
  }
}

void CpuBackend::MaxPool2(const PoolShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t oh = s.out_height(), ow = s.out_width(), ch = s.channels;
  const int64_t rows = s.batch * oh;  // one output row of one image per iteration
#pragma omp parallel for num_threads(threads_) if (s.out_size() >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / oh, oy = r % oh;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t base = ((n * s.height + 2 * oy) * s.width + 2 * ox) * ch;
      const int64_t offsets[4] = {0, ch, s.width * ch, s.width * ch + ch};
      float* out = y + (r * ow + ox) * ch;
      int32_t* arg = argmax + (r * ow + ox) * ch;
      for (int64_t c = 0; c < ch; ++c) {
        int32_t best = static_cast<int32_t>(base + c);
        float best_value = x[best];
        for (int q = 1; q < 4; ++q) {
          const int32_t i = static_cast<int32_t>(base + offsets[q] + c);
          const bool larger = x[i] > best_value;  // strictly: the first of equal values wins
          best_value = larger ? x[i] : best_value;
          best = larger ? i : best;
        }
        out[c] = best_value;
        arg[c] = best;
      }
    }
  }
}

void CpuBackend::MaxPool2Backward(const PoolShape& s, const float* grad_y, const int32_t* argmax,
                                  float* grad_x) {
  // The windows do not overlap, so every input is the winner of at most one output: each image
  // is written by one thread.
  const int64_t in_per_image = s.height * s.width * s.channels;
  const int64_t out_per_image = s.out_height() * s.out_width() * s.channels;
#pragma omp parallel for num_threads(threads_) if (s.out_size() >= kParallelMin) schedule(static)
  for (int64_t n = 0; n < s.batch; ++n) {
    std::fill_n(grad_x + n * in_per_image, in_per_image, 0.0f);
    for (int64_t i = n * out_per_image; i < (n + 1) * out_per_image; ++i) {
      grad_x[argmax[i]] += grad_y[i];
    }
  }
}

// One kernel row of a patch: `span` contiguous floats. A compile-time span lets the compiler
// turn the copy into a few vector moves instead of a call to memcpy.
template <int kSpan>
inline void CopySpan(const float* __restrict src, float* __restrict dst, int64_t span) {
  if constexpr (kSpan > 0) {
    for (int j = 0; j < kSpan; ++j) dst[j] = src[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < span; ++j) dst[j] = src[j];
  }
}

template <int kSpan>
void Im2ColRows(const ConvShape& s, const float* x, float* patches, int threads) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, ch = s.channels;
  const int64_t patch = s.patch_size();
  const int64_t span = k * ch;  // one kernel row of a patch is contiguous in NHWC
  const int64_t rows = s.batch * oh;
#pragma omp parallel for num_threads(threads) if (s.patches() * patch >= kParallelMin) \
    schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / oh, oy = r % oh;
    for (int64_t ox = 0; ox < ow; ++ox) {
      float* dst = patches + (r * ow + ox) * patch;
      for (int64_t ky = 0; ky < k; ++ky) {
        CopySpan<kSpan>(x + ((n * s.height + oy + ky) * s.width + ox) * ch, dst + ky * span, span);
      }
    }
  }
}

void CpuBackend::Im2Col(const ConvShape& s, const float* x, float* patches) {
  // The simple CNN's two convolutions: 5x5 over 1 channel, 5x5 over 6.
  switch (s.kernel * s.channels) {
    case 5:
      return Im2ColRows<5>(s, x, patches, threads_);
    case 30:
      return Im2ColRows<30>(s, x, patches, threads_);
    default:
      return Im2ColRows<0>(s, x, patches, threads_);
  }
}

void CpuBackend::Col2Im(const ConvShape& s, const float* grad_patches, float* grad_x) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, ch = s.channels;
  const int64_t patch = s.patch_size();
  const int64_t span = k * ch;
  const int64_t per_image = s.height * s.width * ch;
  // Patches of one image overlap, so each image belongs to one thread.
#pragma omp parallel for num_threads(threads_) if (s.patches() * patch >= kParallelMin) \
    schedule(static)
  for (int64_t n = 0; n < s.batch; ++n) {
    float* image = grad_x + n * per_image;
    std::fill_n(image, per_image, 0.0f);
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const float* src = grad_patches + ((n * oh + oy) * ow + ox) * patch;
        for (int64_t ky = 0; ky < k; ++ky) {
          float* dst = image + ((oy + ky) * s.width + ox) * ch;
          const float* row = src + ky * span;
#pragma omp simd
          for (int64_t j = 0; j < span; ++j) dst[j] += row[j];
        }
      }
    }
  }
}

LossStats CpuBackend::SoftmaxCrossEntropy(int64_t rows, int64_t classes, const int32_t* labels,
                                          float grad_scale, float* logits) {
  double loss = 0;
  int64_t correct = 0;
#pragma omp parallel for num_threads(threads_) if (rows * classes >= kParallelMin) \
    reduction(+ : loss, correct) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* z = logits + r * classes;
    const int32_t label = labels[r];
    int64_t arg = 0;
    float max = z[0];
    for (int64_t j = 1; j < classes; ++j) {
      if (z[j] > max) {
        max = z[j];
        arg = j;
      }
    }
    if (arg == label) ++correct;
    const float label_logit = z[label] - max;
    float sum = 0;
    for (int64_t j = 0; j < classes; ++j) {
      z[j] = std::exp(z[j] - max);
      sum += z[j];
    }
    // -log p_y = log(sum_j exp(z_j - max)) - (z_y - max).
    loss += static_cast<double>(std::log(sum) - label_logit);
    const float scale = grad_scale / sum;
    for (int64_t j = 0; j < classes; ++j) z[j] *= scale;
    z[label] -= grad_scale;
  }
  return LossStats{loss, correct};
}

void CpuBackend::Softmax(int64_t rows, int64_t classes, float* logits) {
#pragma omp parallel for num_threads(threads_) if (rows * classes >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* z = logits + r * classes;
    const float max = *std::max_element(z, z + classes);
    float sum = 0;
    for (int64_t j = 0; j < classes; ++j) {
      z[j] = std::exp(z[j] - max);
      sum += z[j];
    }
    for (int64_t j = 0; j < classes; ++j) z[j] /= sum;
  }
}

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  if (threads <= 0) threads = std::max(1, omp_get_num_procs());
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace fl::client::ml
