// The cuda backend against the cpu backend (the oracle) on the same seeded random inputs: every
// op, every layer's forward and backward pass. Each test skips, saying why, when no CUDA device
// is present; the target is built only when CMake found nvcc (FL_CUDA_BACKEND).
//
// Tolerances, element-wise |cuda - cpu| <= rel * |cpu| + abs + of_max * max|cpu| (the last term
// scales with the output's magnitude, as the rounding of a long sum does):
// - data movement, ReLU, max pooling, im2col, argmax: exact;
// - element-wise arithmetic (bias, axpy, scale): rel 1e-6, abs 1e-7 (FMA contraction may differ);
// - short sums in another order (col2im, softmax, its cross-entropy gradient): rel 1e-5, abs 1e-6;
// - column sums over up to 18k rows: rel 1e-4, abs 1e-5, of_max 5e-5;
// - Gemm and the layers built on it: rel 1e-4, abs 1e-5, of_max 2e-5 (cuBLAS in plain FP32, no
//   TF32; sums of up to 2304 products in a different order).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "client_sdk/ml/backend.h"
#include "client_sdk/ml/layers.h"
#include "gtest/gtest.h"

namespace fl::client::ml {
namespace {

struct Tolerance {
  double rel;
  double abs;
  double of_max = 0;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kElementwise{1e-6, 1e-7};
constexpr Tolerance kReordered{1e-5, 1e-6};
constexpr Tolerance kColumnSums{1e-4, 1e-5, 5e-5};
constexpr Tolerance kGemm{1e-4, 1e-5, 2e-5};

std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Element-wise comparison naming the first few elements out of tolerance.
::testing::AssertionResult Near(const std::vector<float>& cuda, const std::vector<float>& cpu,
                                Tolerance tol) {
  if (cuda.size() != cpu.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << cuda.size() << " vs " << cpu.size();
  }
  double largest = 0;
  for (float v : cpu) largest = std::max(largest, std::abs(static_cast<double>(v)));
  const double slack = tol.abs + tol.of_max * largest;
  std::ostringstream bad;
  int64_t mismatches = 0;
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double diff = std::abs(static_cast<double>(cuda[i]) - cpu[i]);
    const bool ok = diff <= tol.rel * std::abs(static_cast<double>(cpu[i])) + slack ||
                    (std::isnan(cuda[i]) && std::isnan(cpu[i]));
    worst = std::max(worst, diff);
    if (!ok && mismatches++ < 5) {
      bad << "\n  [" << i << "] cuda " << cuda[i] << " cpu " << cpu[i] << " diff " << diff;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << cpu.size() << " elements differ beyond rel " << tol.rel
         << " abs " << slack << " (largest difference " << worst << ", largest |cpu| " << largest
         << "):" << bad.str();
}

// Runs every test on a fresh pair of backends; skips without a device.
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!CudaAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    absl::StatusOr<std::unique_ptr<Backend>> cuda = MakeCudaBackend();
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *std::move(cuda);
    cpu_ = MakeCpuBackend();
  }

  // The same host data in memory of each backend.
  struct Twin {
    const Backend* cpu_backend;
    std::unique_ptr<Buffer> cpu, cuda;
    Buffer* Of(const Backend& b) { return &b == cpu_backend ? cpu.get() : cuda.get(); }
  };
  Twin Both(const std::vector<float>& host) {
    Twin t{cpu_.get(), cpu_->Allocate(static_cast<int64_t>(host.size())),
           cuda_->Allocate(static_cast<int64_t>(host.size()))};
    cpu_->Upload(host.data(), static_cast<int64_t>(host.size()), t.cpu->data());
    cuda_->Upload(host.data(), static_cast<int64_t>(host.size()), t.cuda->data());
    return t;
  }
  Twin BothInts(const std::vector<int32_t>& host) {
    Twin t{cpu_.get(), cpu_->AllocateInts(static_cast<int64_t>(host.size())),
           cuda_->AllocateInts(static_cast<int64_t>(host.size()))};
    cpu_->UploadInts(host.data(), static_cast<int64_t>(host.size()), t.cpu->ints());
    cuda_->UploadInts(host.data(), static_cast<int64_t>(host.size()), t.cuda->ints());
    return t;
  }
  Twin Zeros(int64_t n) { return Twin{cpu_.get(), cpu_->Allocate(n), cuda_->Allocate(n)}; }

  static std::vector<float> Get(Backend& b, const Buffer& buf, int64_t n = -1) {
    if (n < 0) n = buf.size();
    std::vector<float> host(static_cast<size_t>(n));
    b.Download(buf.data(), n, host.data());
    return host;
  }
  static std::vector<int32_t> GetInts(Backend& b, const Buffer& buf, int64_t n) {
    std::vector<int32_t> host(static_cast<size_t>(n));
    b.DownloadInts(buf.ints(), n, host.data());
    return host;
  }
  ::testing::AssertionResult Same(const Twin& t, Tolerance tol, int64_t n = -1) {
    return Near(Get(*cuda_, *t.cuda, n), Get(*cpu_, *t.cpu, n), tol);
  }

  // Runs the layer `make(backend)` makes on both backends with the same parameters, input and
  // output gradient, and compares the output, the parameter gradients and the input gradient.
  template <typename MakeLayer>
  void CompareLayer(int64_t batch, MakeLayer make, Tolerance tol, bool input_nonneg = false) {
    Backend* backends[2] = {cpu_.get(), cuda_.get()};
    std::unique_ptr<Layer> layers[2] = {make(backends[0]), make(backends[1])};
    const int64_t in = layers[0]->input_size(), out = layers[0]->output_size();
    const int64_t params = layers[0]->NumParams();
    const std::vector<float> x = RandomVector(batch * in, 140, input_nonneg ? 0.0f : -1.0f, 1.0f);
    const std::vector<float> w = RandomVector(params, 141, -0.3f, 0.3f);
    const std::vector<float> g = RandomVector(batch * out, 142);
    std::vector<float> y_out[2], grads_out[2], grad_x_out[2];
    for (int i = 0; i < 2; ++i) {
      Backend& b = *backends[i];
      std::unique_ptr<Buffer> x_buf = b.Allocate(batch * in), y_buf = b.Allocate(batch * out);
      std::unique_ptr<Buffer> g_buf = b.Allocate(batch * out), gx_buf = b.Allocate(batch * in);
      std::unique_ptr<Buffer> p_buf = b.Allocate(params), pg_buf = b.Allocate(params);
      b.Upload(x.data(), batch * in, x_buf->data());
      b.Upload(g.data(), batch * out, g_buf->data());
      b.Upload(w.data(), params, p_buf->data());
      layers[i]->Bind(p_buf->data(), pg_buf->data());
      layers[i]->Forward(batch, x_buf->data(), y_buf->data());
      layers[i]->Backward(batch, g_buf->data(), gx_buf->data());
      y_out[i] = Get(b, *y_buf);
      grads_out[i] = Get(b, *pg_buf);
      grad_x_out[i] = Get(b, *gx_buf);
    }
    EXPECT_TRUE(Near(y_out[1], y_out[0], tol)) << "forward output";
    EXPECT_TRUE(Near(grads_out[1], grads_out[0], tol)) << "parameter gradients";
    EXPECT_TRUE(Near(grad_x_out[1], grad_x_out[0], tol)) << "input gradient";
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;
};

TEST_F(CudaVsCpuTest, DescribesTheDevice) {
  EXPECT_EQ(cuda_->name(), "cuda");
  EXPECT_NE(cuda_->Describe().find("cuda ("), std::string::npos) << cuda_->Describe();
}

TEST_F(CudaVsCpuTest, MemoryIsZeroedAndRoundTrips) {
  std::unique_ptr<Buffer> zeros = cuda_->Allocate(1000);
  EXPECT_EQ(Get(*cuda_, *zeros), std::vector<float>(1000, 0.0f));
  const std::vector<float> host = RandomVector(1000, 1);
  Twin t = Both(host);
  EXPECT_EQ(Get(*cuda_, *t.cuda), host);
  std::unique_ptr<Buffer> copy = cuda_->Allocate(1000);
  cuda_->Copy(t.cuda->data(), 1000, copy->data());
  EXPECT_EQ(Get(*cuda_, *copy), host);
  cuda_->Fill(2.5f, 999, copy->data());
  std::vector<float> filled = Get(*cuda_, *copy);
  EXPECT_EQ(filled[998], 2.5f);
  EXPECT_EQ(filled[999], host[999]);  // Fill stops at n
  cuda_->Fill(0.0f, 1000, copy->data());
  EXPECT_EQ(Get(*cuda_, *copy), std::vector<float>(1000, 0.0f));
  const std::vector<int32_t> ints = {7, -3, 1 << 30, 0};
  Twin ti = BothInts(ints);
  EXPECT_EQ(GetInts(*cuda_, *ti.cuda, 4), ints);
}

// All four transpose combinations, beta != 0, odd sizes that are no multiple of any tile.
TEST_F(CudaVsCpuTest, GemmMatchesForEveryTransposeAndBeta) {
  const int64_t m = 37, n = 29, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.3f, 1.0f}) {
        SCOPED_TRACE(::testing::Message()
                     << "transpose_a=" << ta << " transpose_b=" << tb << " beta=" << beta);
        Twin a = Both(RandomVector(m * k, 10 + ta));
        Twin b = Both(RandomVector(k * n, 20 + tb));
        Twin c = Both(RandomVector(m * n, 30));
        for (Backend* be : {cpu_.get(), cuda_.get()}) {
          be->Gemm(ta, tb, m, n, k, 0.7f, a.Of(*be)->data(), b.Of(*be)->data(), beta,
                   c.Of(*be)->data());
        }
        EXPECT_TRUE(Same(c, kGemm));
      }
    }
  }
}

// The sizes of the CNN's products (patches x kernel) and of a wide dense layer.
TEST_F(CudaVsCpuTest, GemmMatchesAtModelSizes) {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case& s :
       {Case{32 * 24 * 24, 6, 25, false, true}, Case{16, 150, 32 * 8 * 8, true, false},
        Case{256, 200, 784, false, true}, Case{256, 784, 200, false, false}}) {
    SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k);
    Twin a = Both(RandomVector(s.m * s.k, 40));
    Twin b = Both(RandomVector(s.k * s.n, 41));
    Twin c = Zeros(s.m * s.n);
    for (Backend* be : {cpu_.get(), cuda_.get()}) {
      be->Gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.Of(*be)->data(), b.Of(*be)->data(), 0.0f,
               c.Of(*be)->data());
    }
    EXPECT_TRUE(Same(c, kGemm));
  }
}

// With beta = 0 the old contents of c are not read, even when they are NaN.
TEST_F(CudaVsCpuTest, GemmWithZeroBetaIgnoresOldOutput) {
  Twin a = Both(RandomVector(8 * 4, 50));
  Twin b = Both(RandomVector(4 * 5, 51));
  Twin c = Both(std::vector<float>(8 * 5, std::nanf("")));
  for (Backend* be : {cpu_.get(), cuda_.get()}) {
    be->Gemm(false, false, 8, 5, 4, 1.0f, a.Of(*be)->data(), b.Of(*be)->data(), 0.0f,
             c.Of(*be)->data());
  }
  std::vector<float> out = Get(*cuda_, *c.cuda);
  EXPECT_TRUE(std::none_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
  EXPECT_TRUE(Same(c, kGemm));
}

TEST_F(CudaVsCpuTest, AddRowBiasMatches) {
  const int64_t rows = 1000, cols = 37;
  Twin bias = Both(RandomVector(cols, 60));
  Twin y = Both(RandomVector(rows * cols, 61));
  for (Backend* be : {cpu_.get(), cuda_.get()}) {
    be->AddRowBias(rows, cols, bias.Of(*be)->data(), y.Of(*be)->data());
  }
  EXPECT_TRUE(Same(y, kElementwise));
}

TEST_F(CudaVsCpuTest, ColumnSumsMatchWithAndWithoutBeta) {
  // Few columns and many rows (a conv bias gradient), and many columns over several tiles.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{18432, 6}, {257, 100}, {1, 33}}) {
    for (float beta : {0.0f, 0.5f}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " beta=" << beta);
      Twin x = Both(RandomVector(rows * cols, 70));
      Twin out = Both(RandomVector(cols, 71));
      for (Backend* be : {cpu_.get(), cuda_.get()}) {
        be->ColumnSums(rows, cols, x.Of(*be)->data(), beta, out.Of(*be)->data());
      }
      EXPECT_TRUE(Same(out, kColumnSums));
    }
  }
}

TEST_F(CudaVsCpuTest, AxpyAndScaleMatch) {
  const int64_t n = 100003;
  Twin x = Both(RandomVector(n, 80));
  Twin y = Both(RandomVector(n, 81));
  for (Backend* be : {cpu_.get(), cuda_.get()}) {
    be->Axpy(n, -0.37f, x.Of(*be)->data(), y.Of(*be)->data());
  }
  EXPECT_TRUE(Same(y, kElementwise));
  for (Backend* be : {cpu_.get(), cuda_.get()}) be->Scale(n, 1.7f, y.Of(*be)->data());
  EXPECT_TRUE(Same(y, kElementwise));
}

TEST_F(CudaVsCpuTest, SumSquaresMatchesInDouble) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3'000'017}}) {
    SCOPED_TRACE(n);
    Twin x = Both(RandomVector(n, 90, -3.0f, 3.0f));
    const double cpu = cpu_->SumSquares(n, x.cpu->data());
    const double cuda = cuda_->SumSquares(n, x.cuda->data());
    EXPECT_NEAR(cuda, cpu, 1e-9 * cpu);
  }
  EXPECT_EQ(cuda_->SumSquares(0, nullptr), 0.0);
}

TEST_F(CudaVsCpuTest, ReluAndItsBackwardMatch) {
  const int64_t n = 50001;
  std::vector<float> host = RandomVector(n, 100);
  for (int64_t i = 0; i < n; i += 7) host[i] = 0.0f;  // exact zeros get no gradient
  Twin x = Both(host);
  Twin y = Zeros(n);
  Twin grad = Both(RandomVector(n, 101));
  Twin grad_x = Zeros(n);
  for (Backend* be : {cpu_.get(), cuda_.get()}) {
    be->Relu(n, x.Of(*be)->data(), y.Of(*be)->data());
    be->ReluBackward(n, y.Of(*be)->data(), grad.Of(*be)->data(), grad_x.Of(*be)->data());
    be->Relu(n, x.Of(*be)->data(), x.Of(*be)->data());  // in place
    be->ReluBackward(n, y.Of(*be)->data(), grad.Of(*be)->data(), grad.Of(*be)->data());
  }
  EXPECT_TRUE(Same(y, kExact));
  EXPECT_TRUE(Same(grad_x, kExact));
  EXPECT_TRUE(Same(x, kExact));
  EXPECT_TRUE(Same(grad, kExact));
}

TEST_F(CudaVsCpuTest, MaxPoolAndItsBackwardMatchIncludingTies) {
  // Odd height and width (the last row and column are dropped); values drawn from a few levels
  // so that windows hold ties, which both must resolve to the first.
  const PoolShape shape{3, 9, 11, 5};
  const int64_t in_size = shape.batch * shape.height * shape.width * shape.channels;
  std::vector<float> host = RandomVector(in_size, 110);
  for (float& v : host) v = std::round(v * 2.0f);
  Twin x = Both(host);
  Twin y = Zeros(shape.out_size());
  Twin argmax = Zeros(shape.out_size());
  Twin grad_y = Both(RandomVector(shape.out_size(), 111));
  Twin grad_x = Both(RandomVector(in_size, 112));  // overwritten: backward zeroes first
  for (Backend* be : {cpu_.get(), cuda_.get()}) {
    be->MaxPool2(shape, x.Of(*be)->data(), y.Of(*be)->data(), argmax.Of(*be)->ints());
    be->MaxPool2Backward(shape, grad_y.Of(*be)->data(), argmax.Of(*be)->ints(),
                         grad_x.Of(*be)->data());
  }
  EXPECT_TRUE(Same(y, kExact));
  EXPECT_EQ(GetInts(*cuda_, *argmax.cuda, shape.out_size()),
            GetInts(*cpu_, *argmax.cpu, shape.out_size()));
  EXPECT_TRUE(Same(grad_x, kExact));
}

TEST_F(CudaVsCpuTest, Im2ColAndCol2ImMatch) {
  for (const ConvShape& shape : {ConvShape{2, 28, 28, 1, 5}, ConvShape{3, 12, 10, 6, 5},
                                 ConvShape{2, 7, 9, 3, 3}, ConvShape{1, 4, 4, 2, 1}}) {
    SCOPED_TRACE(::testing::Message() << shape.height << "x" << shape.width << "x" << shape.channels
                                      << " k" << shape.kernel);
    const int64_t in_size = shape.batch * shape.height * shape.width * shape.channels;
    const int64_t cols = shape.patches() * shape.patch_size();
    Twin x = Both(RandomVector(in_size, 120));
    Twin patches = Zeros(cols);
    Twin grad_patches = Both(RandomVector(cols, 121));
    Twin grad_x = Both(RandomVector(in_size, 122));  // overwritten
    for (Backend* be : {cpu_.get(), cuda_.get()}) {
      be->Im2Col(shape, x.Of(*be)->data(), patches.Of(*be)->data());
      be->Col2Im(shape, grad_patches.Of(*be)->data(), grad_x.Of(*be)->data());
    }
    EXPECT_TRUE(Same(patches, kExact));
    EXPECT_TRUE(Same(grad_x, kReordered));
  }
}

TEST_F(CudaVsCpuTest, SoftmaxCrossEntropyMatchesLossCorrectAndGradient) {
  // Two classes (logistic), ten (Fashion-MNIST), and more classes than a warp has lanes.
  for (int64_t classes : {2, 10, 47}) {
    SCOPED_TRACE(classes);
    const int64_t rows = 301;
    std::vector<int32_t> labels(rows);
    std::mt19937 rng(130);
    for (int32_t& l : labels) l = static_cast<int32_t>(rng() % classes);
    Twin label_buf = BothInts(labels);
    Twin logits = Both(RandomVector(rows * classes, 131, -4.0f, 4.0f));
    Twin probs = Both(RandomVector(rows * classes, 132, -4.0f, 4.0f));
    LossStats stats[2];
    int i = 0;
    for (Backend* be : {cpu_.get(), cuda_.get()}) {
      stats[i++] = be->SoftmaxCrossEntropy(rows, classes, label_buf.Of(*be)->ints(), 1.0f / rows,
                                           logits.Of(*be)->data());
      be->Softmax(rows, classes, probs.Of(*be)->data());
    }
    EXPECT_NEAR(stats[1].loss_sum, stats[0].loss_sum, 1e-5 * stats[0].loss_sum);
    EXPECT_GT(stats[0].loss_sum, 0.0);
    EXPECT_EQ(stats[1].correct, stats[0].correct);
    EXPECT_TRUE(Same(logits, kReordered));  // now the gradient
    EXPECT_TRUE(Same(probs, kReordered));
  }
}

// --- layers: forward and backward through the same layer class on each backend ---

TEST_F(CudaVsCpuTest, DenseLayerMatchesForwardAndBackward) {
  CompareLayer(
      64, [](Backend* b) { return std::make_unique<Dense>(b, 100, 30); }, kGemm);
  CompareLayer(
      1, [](Backend* b) { return std::make_unique<Dense>(b, 784, 10); }, kGemm);
}

TEST_F(CudaVsCpuTest, Conv2dLayerMatchesForwardAndBackward) {
  CompareLayer(
      8, [](Backend* b) { return std::make_unique<Conv2d>(b, 12, 12, 3, 5, 5); }, kGemm);
  CompareLayer(
      4, [](Backend* b) { return std::make_unique<Conv2d>(b, 28, 28, 1, 6, 5); }, kGemm, true);
}

TEST_F(CudaVsCpuTest, ReluLayerMatchesForwardAndBackward) {
  CompareLayer(
      16, [](Backend* b) { return std::make_unique<Relu>(b, 333); }, kExact);
}

TEST_F(CudaVsCpuTest, MaxPoolLayerMatchesForwardAndBackward) {
  CompareLayer(
      5, [](Backend* b) { return std::make_unique<MaxPool2>(b, 24, 24, 6); }, kExact);
}

}  // namespace
}  // namespace fl::client::ml
