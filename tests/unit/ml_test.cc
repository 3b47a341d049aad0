// The CPU core of the built-in models: layers against finite differences, the loss gradient, the
// optimizer's rules on hand-computed cases, the models' specs and initialisation, the trainer's
// reproducibility, accuracy on a Fashion-MNIST slice, and its refusals.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client_sdk/ml/backend.h"
#include "client_sdk/ml/layers.h"
#include "client_sdk/ml/models.h"
#include "client_sdk/ml/optimizer.h"
#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"
#include "fl/client/softmax_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

using ml::Backend;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Random(size_t n, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks a layer's backward pass against central finite differences of L = sum(y * r) for a
// fixed random r (so dL/dy = r), for every input and every parameter. The layers are piecewise
// linear, so with inputs away from kinks central differences are exact up to float rounding:
// tolerance 2e-3 absolute plus 1e-3 relative.
void CheckLayerGradients(ml::Layer& layer, Backend& backend, int64_t batch, std::vector<float> x,
                         uint64_t seed) {
  const int64_t in = batch * layer.input_size(), out = batch * layer.output_size();
  ASSERT_EQ(static_cast<int64_t>(x.size()), in);
  const int64_t np = layer.NumParams();
  std::vector<float> params = Random(static_cast<size_t>(np), seed + 1);
  const std::vector<float> r = Random(static_cast<size_t>(out), seed + 2);
  auto px = backend.Allocate(in), py = backend.Allocate(out), pp = backend.Allocate(np + 1),
       pg = backend.Allocate(np + 1), pr = backend.Allocate(out), pgx = backend.Allocate(in);
  layer.Bind(pp->data(), pg->data());
  auto loss = [&]() {
    backend.Upload(x.data(), in, px->data());
    backend.Upload(params.data(), np, pp->data());
    layer.Forward(batch, px->data(), py->data());
    std::vector<float> y(static_cast<size_t>(out));
    backend.Download(py->data(), out, y.data());
    return Dot(y, r);
  };
  loss();
  backend.Upload(r.data(), out, pr->data());
  layer.Backward(batch, pr->data(), pgx->data());
  std::vector<float> grad_x(static_cast<size_t>(in)), grad_p(static_cast<size_t>(np));
  backend.Download(pgx->data(), in, grad_x.data());
  backend.Download(pg->data(), np, grad_p.data());

  const float h = 1e-2f;
  auto check = [&](std::vector<float>& v, const std::vector<float>& analytic, const char* what) {
    for (size_t i = 0; i < v.size(); ++i) {
      const float saved = v[i];
      v[i] = saved + h;
      const double plus = loss();
      v[i] = saved - h;
      const double minus = loss();
      v[i] = saved;
      const double numeric = (plus - minus) / (2.0 * h);
      ASSERT_NEAR(analytic[i], numeric, 2e-3 + 1e-3 * std::abs(numeric)) << what << " " << i;
    }
  };
  check(x, grad_x, "input");
  check(params, grad_p, "parameter");
}

// Every path of the cpu Gemm (Eigen by row blocks, the narrow-output and the small-output
// kernels), every transpose, beta 0 and not, one and three threads, against a double loop.
TEST(CpuGemmTest, MatchesNaiveProduct) {
  struct Shape {
    int64_t m, n, k;
  };
  for (int threads : {1, 3}) {
    auto cpu = ml::MakeCpuBackend(threads);
    for (Shape s : {Shape{300, 6, 25}, Shape{520, 16, 150}, Shape{6, 25, 5000}, Shape{16, 30, 2048},
                    Shape{130, 70, 90}, Shape{64, 200, 784}, Shape{1, 10, 7}}) {
      for (int flags = 0; flags < 4; ++flags) {
        const bool ta = flags & 1, tb = flags & 2;
        const std::vector<float> a = Random(s.m * s.k, 1), b = Random(s.k * s.n, 2);
        for (float beta : {0.0f, 1.5f}) {
          std::vector<float> c = Random(s.m * s.n, 3);
          const std::vector<float> c0 = c;
          cpu->Gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), b.data(), beta, c.data());
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
              double sum = 0;
              for (int64_t p = 0; p < s.k; ++p) {
                sum += static_cast<double>(ta ? a[p * s.m + i] : a[i * s.k + p]) *
                       (tb ? b[j * s.k + p] : b[p * s.n + j]);
              }
              const double expected = 0.5 * sum + beta * c0[i * s.n + j];
              ASSERT_NEAR(c[i * s.n + j], expected, 1e-4 * (1 + std::sqrt(s.k)))
                  << s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb << " beta "
                  << beta << " threads " << threads << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST(LayerGradientTest, DenseMatchesFiniteDifferences) {
  auto cpu = ml::MakeCpuBackend();
  ml::Dense dense(cpu.get(), 7, 5);
  EXPECT_EQ(dense.NumParams(), 7 * 5 + 5);
  CheckLayerGradients(dense, *cpu, 4, Random(4 * 7, 1), 10);
}

TEST(LayerGradientTest, Conv2dMatchesFiniteDifferences) {
  auto cpu = ml::MakeCpuBackend();
  ml::Conv2d conv(cpu.get(), /*height=*/7, /*width=*/6, /*in_channels=*/2, /*out_channels=*/3,
                  /*kernel=*/3);
  EXPECT_EQ(conv.output_size(), 5 * 4 * 3);
  EXPECT_EQ(conv.NumParams(), 3 * 3 * 3 * 2 + 3);
  CheckLayerGradients(conv, *cpu, 2, Random(2 * 7 * 6 * 2, 2), 20);
}

// The convolution itself against a direct loop over the NHWC definition, weight [o][ky][kx][c].
TEST(LayerGradientTest, Conv2dForwardMatchesDirectConvolution) {
  auto cpu = ml::MakeCpuBackend();
  const int64_t b = 2, h = 8, w = 7, c = 3, o = 4, k = 5, oh = h - k + 1, ow = w - k + 1;
  ml::Conv2d conv(cpu.get(), h, w, c, o, k);
  const std::vector<float> x = Random(b * h * w * c, 3), p = Random(conv.NumParams(), 4);
  auto px = cpu->Allocate(x.size()), py = cpu->Allocate(b * oh * ow * o),
       pp = cpu->Allocate(p.size()), pg = cpu->Allocate(p.size());
  cpu->Upload(x.data(), x.size(), px->data());
  cpu->Upload(p.data(), p.size(), pp->data());
  conv.Bind(pp->data(), pg->data());
  conv.Forward(b, px->data(), py->data());
  for (int64_t n = 0; n < b; ++n) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t xx = 0; xx < ow; ++xx) {
        for (int64_t oc = 0; oc < o; ++oc) {
          double s = p[o * k * k * c + oc];
          for (int64_t ky = 0; ky < k; ++ky) {
            for (int64_t kx = 0; kx < k; ++kx) {
              for (int64_t ic = 0; ic < c; ++ic) {
                s += static_cast<double>(p[((oc * k + ky) * k + kx) * c + ic]) *
                     x[((n * h + y + ky) * w + xx + kx) * c + ic];
              }
            }
          }
          ASSERT_NEAR(py->data()[((n * oh + y) * ow + xx) * o + oc], s, 1e-4);
        }
      }
    }
  }
}

TEST(LayerGradientTest, ReluMatchesFiniteDifferences) {
  auto cpu = ml::MakeCpuBackend();
  ml::Relu relu(cpu.get(), 9);
  std::vector<float> x = Random(3 * 9, 5);
  for (float& v : x) v += v >= 0 ? 0.05f : -0.05f;  // away from the kink at 0
  CheckLayerGradients(relu, *cpu, 3, x, 30);
}

TEST(LayerGradientTest, MaxPool2MatchesFiniteDifferences) {
  auto cpu = ml::MakeCpuBackend();
  ml::MaxPool2 pool(cpu.get(), /*height=*/5, /*width=*/4, /*channels=*/3);  // odd row dropped
  EXPECT_EQ(pool.output_size(), 2 * 2 * 3);
  // Distinct values 0.1 apart, so a step of 0.01 never changes a window's winner.
  std::vector<float> x(2 * 5 * 4 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i);
  std::shuffle(x.begin(), x.end(), std::mt19937_64(6));
  CheckLayerGradients(pool, *cpu, 2, x, 40);
}

// The mean cross-entropy's gradient with respect to the logits against central differences of a
// double-precision reference loss; the loss value and the count of correct rows as well.
TEST(LossTest, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  auto cpu = ml::MakeCpuBackend();
  const int64_t rows = 4, classes = 5;
  const std::vector<float> logits = Random(rows * classes, 7, -3.0f, 3.0f);
  const std::vector<int32_t> labels = {0, 3, 4, 1};
  auto reference = [&](const std::vector<double>& z) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(z[r * classes + j]);
      total += std::log(sum) - z[r * classes + labels[r]];
    }
    return total / rows;
  };
  auto buf = cpu->Allocate(rows * classes);
  auto lab = cpu->AllocateInts(rows);
  cpu->Upload(logits.data(), rows * classes, buf->data());
  cpu->UploadInts(labels.data(), rows, lab->ints());
  const ml::LossStats stats =
      cpu->SoftmaxCrossEntropy(rows, classes, lab->ints(), 1.0f / rows, buf->data());
  const std::vector<double> z(logits.begin(), logits.end());
  EXPECT_NEAR(stats.loss_sum / rows, reference(z), 1e-5);
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * classes;
    correct += std::max_element(row, row + classes) - row == labels[r];
  }
  EXPECT_EQ(stats.correct, correct);
  for (size_t i = 0; i < z.size(); ++i) {
    std::vector<double> plus = z, minus = z;
    plus[i] += 1e-6;
    minus[i] -= 1e-6;
    EXPECT_NEAR(buf->data()[i], (reference(plus) - reference(minus)) / 2e-6, 1e-5) << i;
  }
}

TEST(LossTest, SoftmaxGivesProbabilities) {
  auto cpu = ml::MakeCpuBackend();
  std::vector<float> z = {1.0f, 2.0f, 3.0f, 1000.0f, 1000.0f, -1000.0f};
  cpu->Softmax(2, 3, z.data());
  const double e = std::exp(1.0), total = 1 + e + e * e;
  EXPECT_NEAR(z[0], 1 / total, 1e-6);
  EXPECT_NEAR(z[2], e * e / total, 1e-6);
  EXPECT_NEAR(z[3], 0.5, 1e-6);  // no overflow for large logits
  EXPECT_NEAR(z[5], 0.0, 1e-6);
}

// A whole network (the simple CNN on 16x16 images) against central differences of its loss, on
// a sample of parameters; float forward passes, step 1e-2, tolerance 5e-3 + 5 %.
TEST(NetworkTest, CnnGradientMatchesFiniteDifferences) {
  auto cpu = ml::MakeCpuBackend();
  ModelArchitecture arch{.kind = ModelKind::kSimpleCnn,
                         .num_features = 16 * 16,
                         .num_classes = 3,
                         .image_height = 16,
                         .image_width = 16};
  absl::StatusOr<std::unique_ptr<ml::Network>> net = ml::MakeNetwork(arch, cpu.get());
  ASSERT_TRUE(net.ok()) << net.status();
  ml::Network& n = **net;
  absl::StatusOr<Model> init = InitialBuiltinModel(arch, 3);
  ASSERT_TRUE(init.ok()) << init.status();
  std::vector<float> params(init->data().begin(), init->data().end());
  const int64_t batch = 3;
  const std::vector<float> x = Random(batch * 256, 8, 0.0f, 1.0f);
  const std::vector<int32_t> labels = {2, 0, 1};
  auto px = cpu->Allocate(x.size());
  auto lab = cpu->AllocateInts(batch);
  cpu->Upload(x.data(), x.size(), px->data());
  cpu->UploadInts(labels.data(), batch, lab->ints());
  auto loss = [&](bool backward) {
    cpu->Upload(params.data(), n.num_params(), n.params());
    float* logits = n.Forward(batch, px->data());
    const double l = cpu->SoftmaxCrossEntropy(batch, 3, lab->ints(), 1.0f / batch, logits).loss_sum;
    if (backward) n.Backward(batch, logits);
    return l / batch;
  };
  loss(true);
  std::vector<float> grad(n.grads(), n.grads() + n.num_params());
  for (int64_t i = 0; i < n.num_params(); i += 997) {
    const float saved = params[i];
    params[i] = saved + 1e-2f;
    const double plus = loss(false);
    params[i] = saved - 1e-2f;
    const double minus = loss(false);
    params[i] = saved;
    const double numeric = (plus - minus) / 2e-2;
    EXPECT_NEAR(grad[i], numeric, 5e-3 + 0.05 * std::abs(numeric)) << "parameter " << i;
  }
}

// --- optimizer rules, on two parameters ---

struct Sgd {
  std::unique_ptr<Backend> cpu = ml::MakeCpuBackend(1);
  ml::SgdOptimizer opt{cpu.get(), 2};
  std::unique_ptr<ml::Buffer> w = cpu->Allocate(2), g = cpu->Allocate(2), global = cpu->Allocate(2),
                              c = cpu->Allocate(2);
  double Step(const ml::SgdOptions& o, std::vector<float> grad, bool correct = false) {
    cpu->Upload(grad.data(), 2, g->data());
    return opt.Step(o, w->data(), g->data(), global->data(), correct ? c->data() : nullptr);
  }
  void Set(std::unique_ptr<ml::Buffer>& b, std::vector<float> v) {
    cpu->Upload(v.data(), 2, b->data());
  }
  std::vector<float> W() { return {w->data()[0], w->data()[1]}; }
};

TEST(OptimizerTest, MomentumFollowsPytorch) {
  Sgd s;
  s.Set(s.w, {1.0f, 2.0f});
  const ml::SgdOptions o{.learning_rate = 0.1f, .momentum = 0.9f};
  s.Step(o, {0.5f, -1.0f});  // v = g
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(0.95f), testing::FloatEq(2.1f)));
  s.Step(o, {0.5f, -1.0f});  // v = 0.9 g + g = 1.9 g
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(0.855f), testing::FloatEq(2.29f)));
  s.opt.Reset();  // a new round forgets the velocity
  s.Step(o, {0.5f, -1.0f});
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(0.805f), testing::FloatEq(2.39f)));
}

TEST(OptimizerTest, WeightDecayShrinksTheWeights) {
  Sgd s;
  s.Set(s.w, {1.0f, -2.0f});
  s.Step({.learning_rate = 0.5f, .weight_decay = 0.1f}, {0.0f, 0.0f});
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(0.95f), testing::FloatEq(-1.9f)));
}

TEST(OptimizerTest, ProximalTermPullsTowardTheGlobalModel) {
  Sgd s;
  s.Set(s.w, {1.0f, -1.0f});
  s.Set(s.global, {0.0f, 1.0f});
  // g = mu (w - w_global) = 0.5 * [1, -2]; w -= 0.1 g.
  s.Step({.learning_rate = 0.1f, .proximal_mu = 0.5f}, {0.0f, 0.0f});
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(0.95f), testing::FloatEq(-0.9f)));
}

TEST(OptimizerTest, ClippingCapsTheGradientNorm) {
  Sgd s;
  const double norm = s.Step({.learning_rate = 1.0f, .clip_norm = 1.0f}, {3.0f, 4.0f});
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(-0.6f), testing::FloatEq(-0.8f)));
  s.Set(s.w, {0.0f, 0.0f});
  s.Step({.learning_rate = 1.0f, .clip_norm = 10.0f}, {3.0f, 4.0f});  // under the cap: unchanged
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(-3.0f), testing::FloatEq(-4.0f)));
}

TEST(OptimizerTest, WeightDecayJoinsAfterClippingAndTheProximalTermIsClipped) {
  Sgd s;
  s.Set(s.w, {10.0f, 0.0f});
  // The loss gradient is 0, so nothing is clipped; then g = wd w = [10, 0] moves w by lr 10 = 1.
  // (Clipping after the decay would have moved it by only lr clip = 0.1.)
  const double norm =
      s.Step({.learning_rate = 0.1f, .weight_decay = 1.0f, .clip_norm = 1.0f}, {0.0f, 0.0f});
  EXPECT_DOUBLE_EQ(norm, 0.0);
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(9.0f), testing::FloatEq(0.0f)));

  // FedProx's term belongs to the loss: g = mu (w - w_global) = [10, 0] is clipped to [1, 0].
  s.Set(s.w, {10.0f, 0.0f});
  s.Set(s.global, {0.0f, 0.0f});
  const double prox_norm =
      s.Step({.learning_rate = 0.1f, .proximal_mu = 1.0f, .clip_norm = 1.0f}, {0.0f, 0.0f});
  EXPECT_DOUBLE_EQ(prox_norm, 10.0);
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(9.9f), testing::FloatEq(0.0f)));
}

TEST(OptimizerTest, ScaffoldCorrectionStaysOutsideMomentum) {
  Sgd s;
  s.Set(s.c, {1.0f, -1.0f});  // c - c_i
  const ml::SgdOptions o{.learning_rate = 0.1f, .momentum = 0.9f};
  s.Step(o, {0.0f, 0.0f}, /*correct=*/true);
  s.Step(o, {0.0f, 0.0f}, /*correct=*/true);
  // Two plain steps of -lr (c - c_i): the velocity never saw the correction.
  EXPECT_THAT(s.W(), ElementsAre(testing::FloatEq(-0.2f), testing::FloatEq(0.2f)));
}

// --- models ---

TEST(ModelTest, SpecsAndParameterCounts) {
  ModelArchitecture softmax{
      .kind = ModelKind::kSoftmaxRegression, .num_features = 784, .num_classes = 10};
  EXPECT_EQ(*BuiltinModelSpec(softmax), SoftmaxRegressionSpec(784, 10));

  ModelArchitecture mlp{
      .kind = ModelKind::kMlp, .num_features = 784, .num_classes = 10, .hidden = {200, 200}};
  absl::StatusOr<ModelSpec> mlp_spec = BuiltinModelSpec(mlp);
  ASSERT_TRUE(mlp_spec.ok()) << mlp_spec.status();
  EXPECT_EQ(mlp_spec->NumFloats(), 199210);  // FedAvg's "2NN"
  EXPECT_EQ(mlp_spec->tensors()[0], (TensorSpec{"fc1.weight", {200, 784}}));
  EXPECT_EQ(mlp_spec->tensors()[5], (TensorSpec{"fc3.bias", {10}}));

  ModelArchitecture cnn{.kind = ModelKind::kSimpleCnn, .num_features = 784, .num_classes = 10};
  absl::StatusOr<ModelSpec> cnn_spec = BuiltinModelSpec(cnn);
  ASSERT_TRUE(cnn_spec.ok()) << cnn_spec.status();
  EXPECT_EQ(cnn_spec->NumFloats(), 44426);
  std::vector<std::string> names;
  for (const TensorSpec& t : cnn_spec->tensors()) names.push_back(t.name);
  EXPECT_THAT(names,
              ElementsAre("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                          "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"));
  EXPECT_EQ(cnn_spec->tensors()[2], (TensorSpec{"conv2.weight", {16, 5, 5, 6}}));
  EXPECT_EQ(cnn_spec->tensors()[4], (TensorSpec{"fc1.weight", {120, 256}}));
}

TEST(ModelTest, InitialModelIsSeededAndBoundedByFanIn) {
  ModelArchitecture cnn{.kind = ModelKind::kSimpleCnn, .num_features = 784, .num_classes = 10};
  absl::StatusOr<Model> a = InitialBuiltinModel(cnn, 42);
  absl::StatusOr<Model> b = InitialBuiltinModel(cnn, 42);
  absl::StatusOr<Model> c = InitialBuiltinModel(cnn, 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->Sha256Hex(), b->Sha256Hex());
  EXPECT_NE(a->Sha256Hex(), c->Sha256Hex());
  // fan-in: conv1 25, conv2 150, fc1 256, fc2 120, fc3 84; weights and biases alike.
  const double fan_in[] = {25, 25, 150, 150, 256, 256, 120, 120, 84, 84};
  for (size_t t = 0; t < 10; ++t) {
    const double bound = 1.0 / std::sqrt(fan_in[t]);
    double largest = 0;
    for (float v : a->tensor(t)) largest = std::max(largest, std::abs(static_cast<double>(v)));
    EXPECT_LE(largest, bound) << a->spec().tensors()[t].name;
    if (a->tensor(t).size() >= 100) {
      EXPECT_GT(largest, 0.9 * bound) << a->spec().tensors()[t].name;
    }
  }
  ModelArchitecture softmax{
      .kind = ModelKind::kSoftmaxRegression, .num_features = 4, .num_classes = 3};
  absl::StatusOr<Model> zero = InitialBuiltinModel(softmax, 42);
  ASSERT_TRUE(zero.ok());
  for (float v : zero->data()) EXPECT_EQ(v, 0.0f);
}

TEST(ModelTest, RefusesWhatDoesNotFit) {
  ModelArchitecture cnn{.kind = ModelKind::kSimpleCnn,
                        .num_features = 784,
                        .num_classes = 10,
                        .image_height = 12,
                        .image_width = 12};
  EXPECT_THAT(BuiltinModelSpec(cnn).status().message(), HasSubstr("12 x 12 x 1 != 784"));
  cnn.num_features = 144;
  EXPECT_THAT(BuiltinModelSpec(cnn).status().message(), HasSubstr("at least 16x16"));
  ModelArchitecture mlp{.kind = ModelKind::kMlp, .num_features = 4, .num_classes = 2, .hidden = {}};
  EXPECT_EQ(BuiltinModelSpec(mlp).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ParseModelKind("resnet").status().message(), HasSubstr("simple_cnn"));
  EXPECT_EQ(*ParseModelKind("logistic"), ModelKind::kSoftmaxRegression);
  EXPECT_EQ(ml::MakeBackend("tpu").status().code(), absl::StatusCode::kInvalidArgument);
  std::string why;
  if (!ml::CudaAvailable(&why)) {
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(ml::MakeCudaBackend().status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(ml::MakeBackend("auto").value()->name(), "cpu");
  }
}

TEST(ModelTest, RefusesSizesBeyondTheLimits) {
  // `fl server --model mlp --hidden 100000000000` used to crash; now the spec is refused.
  ModelArchitecture mlp{
      .kind = ModelKind::kMlp, .num_features = 784, .num_classes = 10, .hidden = {100000000000}};
  absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(mlp);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("MLP hidden width 100000000000 is over the limit of 2147483647"));
  ModelArchitecture softmax{
      .kind = ModelKind::kSoftmaxRegression, .num_features = 1000000000000, .num_classes = 10};
  EXPECT_THAT(BuiltinModelSpec(softmax).status().message(),
              HasSubstr("num_features 1000000000000 is over the limit"));

  // Every dimension in range, but one layer over kMaxModelFloats (2^38).
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  mlp.num_features = kMax;
  mlp.hidden = {kMax};
  spec = BuiltinModelSpec(mlp);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("layer fc1 would have 4611686016279904256 parameters, over the limit of "
                        "274877906944"));
  // Each layer 2^36 + 2^18 floats: the fourth takes the model over.
  mlp.num_features = 262144;
  mlp.hidden = {262144, 262144, 262144, 262144};
  EXPECT_THAT(BuiltinModelSpec(mlp).status().message(),
              HasSubstr("the model would have 274878955520 parameters with layer fc4"));

  // Just under the limit: the spec is computed without allocating the 800 GiB it describes.
  softmax.num_features = kMax;
  softmax.num_classes = 100;
  spec = BuiltinModelSpec(softmax);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumFloats(), kMax * 100 + 100);

  // Image sides whose product overflows int64 are compared without overflow.
  ModelArchitecture cnn{.kind = ModelKind::kSimpleCnn,
                        .num_features = 784,
                        .num_classes = 10,
                        .image_height = kMax,
                        .image_width = kMax,
                        .image_channels = 4};
  EXPECT_THAT(BuiltinModelSpec(cnn).status().message(),
              HasSubstr("2147483647 x 2147483647 x 4 != 784"));
}

TEST(NetworkTest, RefusesBatchesBeyondTheLimits) {
  std::unique_ptr<Backend> cpu = ml::MakeCpuBackend(1);
  ModelArchitecture mlp{
      .kind = ModelKind::kMlp, .num_features = 784, .num_classes = 10, .hidden = {200}};
  std::unique_ptr<ml::Network> net = *ml::MakeNetwork(mlp, cpu.get());
  // Per example: input 784, outputs 200 + 200 + 10, two gradient buffers of 784: 2762 floats
  // and a label.
  EXPECT_EQ(net->BatchBytes(100), 100.0 * (2762 * 4 + 4));
  EXPECT_TRUE(net->CheckBatch(100).ok());
  absl::Status s = net->CheckBatch(1000000000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("a batch of 1000000000 examples needs 11052000000000 bytes"),
                    HasSubstr("cap of 4294967296 bytes")));

  // Max pooling's int32 indices span the whole batch's input.
  ml::MaxPool2 pool(cpu.get(), 28, 28, 6);  // 4704 values per image
  EXPECT_TRUE(pool.CheckBatch(456522).ok());
  s = pool.CheckBatch(456523);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("batch of 456523 images of 28x28x6"),
                                 HasSubstr("use at most 456522")));
}

TEST(CpuBackendDeathTest, AllocationFailureAbortsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::unique_ptr<Backend> cpu = ml::MakeCpuBackend(1);
  EXPECT_DEATH(cpu->Allocate(int64_t{1} << 60),
               "cpu backend: cannot allocate 4611686018427387904 bytes");
  EXPECT_DEATH(cpu->Allocate(int64_t{1} << 62), "cpu backend: cannot allocate");
}

// --- the trainer ---

FitConfig Config(int32_t round, int32_t epochs, int32_t batch, float lr) {
  FitConfig c;
  c.round = round;
  c.local_epochs = epochs;
  c.batch_size = batch;
  c.learning_rate = lr;
  return c;
}

// Class k has feature k raised by 2; unit uniform noise elsewhere.
Dataset Blobs(int64_t n, int64_t features, int32_t classes, uint64_t seed) {
  Dataset d;
  d.num_features = features;
  d.num_classes = classes;
  d.features = Random(static_cast<size_t>(n * features), seed);
  for (int64_t i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<int32_t>(i % classes));
    d.features[i * features + i % classes % features] += 2.0f;
  }
  return d;
}

std::vector<float> Values(const Model& m) { return {m.data().begin(), m.data().end()}; }

TEST(TrainerTest, SameSeedGivesTheSameTrainedModel) {
  ModelArchitecture cnn{.kind = ModelKind::kSimpleCnn,
                        .num_features = 256,
                        .num_classes = 4,
                        .image_height = 16,
                        .image_width = 16};
  const Dataset data = Blobs(100, 256, 4, 1);
  auto fit = [&](uint64_t seed) {
    auto trainer = MakeBuiltinTrainer(cnn, data, Dataset{},
                                      {.backend = "cpu", .seed = seed, .momentum = 0.9f});
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    absl::StatusOr<FitResult> r =
        (*trainer)->Fit(*InitialBuiltinModel(cnn, 5), Config(2, 1, 16, 0.05f));
    EXPECT_TRUE(r.ok()) << r.status();
    return Values(r->model);
  };
  const std::vector<float> a = fit(7);
  EXPECT_EQ(a, fit(7));
  EXPECT_NE(a, fit(8));
}

TEST(TrainerTest, ExtrasOverrideTheOptionsForOneRound) {
  ModelArchitecture mlp{
      .kind = ModelKind::kMlp, .num_features = 6, .num_classes = 3, .hidden = {8}};
  const Dataset data = Blobs(60, 6, 3, 2);
  const Model init = *InitialBuiltinModel(mlp, 1);
  auto run = [&](BuiltinTrainerOptions options, std::map<std::string, double> extra) {
    options.backend = "cpu";
    FitConfig config = Config(0, 2, 8, 0.05f);
    config.extra = extra;
    absl::StatusOr<FitResult> r =
        (*MakeBuiltinTrainer(mlp, data, Dataset{}, options))->Fit(init, config);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? Values(r->model) : std::vector<float>{};
  };
  const std::vector<float> plain = run({}, {});
  const std::vector<float> by_option =
      run({.momentum = 0.9f, .weight_decay = 0.01f, .proximal_mu = 0.1f, .clip_norm = 0.5f}, {});
  EXPECT_NE(plain, by_option);
  EXPECT_EQ(by_option, run({}, {{"momentum", 0.9},
                                {"weight_decay", 0.01},
                                {"proximal_mu", 0.1},
                                {"clip_norm", 0.5},
                                {"unrelated_key", 3}}));
  auto trainer = MakeBuiltinTrainer(mlp, data, Dataset{}, {.backend = "cpu"});
  FitConfig bad = Config(0, 1, 8, 0.05f);
  bad.extra["momentum"] = 1.5;
  absl::StatusOr<FitResult> r = (*trainer)->Fit(init, bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("momentum"), HasSubstr("1.5")));
}

// One full-batch step per round makes SCAFFOLD checkable by hand. Round 1 (c = c_i = 0) is plain
// SGD, w1 = w - lr grad(w), and c_i becomes grad(w). Round 2 from the same w with server variate
// C: w2 = w - lr (grad(w) + C - c_i) = w - lr C, and delta c_i = -C + (w - w2) / lr = 0.
TEST(TrainerTest, ScaffoldCorrectsStepsAndUpdatesTheControlVariate) {
  ModelArchitecture arch{
      .kind = ModelKind::kSoftmaxRegression, .num_features = 3, .num_classes = 2};
  const Dataset data = Blobs(8, 3, 2, 3);
  auto trainer = MakeBuiltinTrainer(arch, data, Dataset{}, {.backend = "cpu", .scaffold = true});
  ASSERT_TRUE(trainer.ok());
  const ModelSpec spec = ScaffoldSpec(SoftmaxRegressionSpec(3, 2));
  EXPECT_EQ((*trainer)->spec(), spec);
  Model global(spec);
  const int64_t p = 8;  // 2 x 3 weights + 2 biases
  const std::vector<float> w = Random(p, 4);
  std::copy(w.begin(), w.end(), global.data().begin());
  const float lr = 0.5f;
  absl::StatusOr<FitResult> r1 = (*trainer)->Fit(global, Config(1, 1, 8, lr));
  ASSERT_TRUE(r1.ok()) << r1.status();
  auto plain = MakeBuiltinTrainer(arch, data, Dataset{}, {.backend = "cpu"});
  Model weights_only(SoftmaxRegressionSpec(3, 2));
  std::copy(w.begin(), w.end(), weights_only.data().begin());
  absl::StatusOr<FitResult> sgd = (*plain)->Fit(weights_only, Config(1, 1, 8, lr));
  ASSERT_TRUE(sgd.ok());
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_FLOAT_EQ(r1->model.data()[i], sgd->model.data()[i]);
    EXPECT_NEAR(r1->model.data()[p + i], (w[i] - sgd->model.data()[i]) / lr, 1e-5);  // grad(w)
  }
  const std::vector<float> big_c = Random(p, 5);
  std::copy(big_c.begin(), big_c.end(), global.data().begin() + p);
  absl::StatusOr<FitResult> r2 = (*trainer)->Fit(global, Config(2, 1, 8, lr));
  ASSERT_TRUE(r2.ok()) << r2.status();
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_NEAR(r2->model.data()[i], w[i] - lr * big_c[i], 1e-5) << i;
    EXPECT_NEAR(r2->model.data()[p + i], 0.0f, 1e-4) << i;
  }
}

FitConfig ScaffoldConfig(int32_t round, float lr, double committed_round) {
  FitConfig c = Config(round, 1, 8, lr);
  c.extra[std::string(kScaffoldCommittedRoundKey)] = committed_round;
  return c;
}

// c_i+ of a Fit counts only once the server names its round as this client's last committed one:
// a retried round, a refused update or a failed round leave c_i as it was, so a retry sends the
// same update. Same hand-checkable setting as above: one full-batch step, round 1 gives g.
TEST(TrainerTest, ScaffoldPromotesTheControlVariateOnlyWhenTheServerCommittedIt) {
  ModelArchitecture arch{
      .kind = ModelKind::kSoftmaxRegression, .num_features = 3, .num_classes = 2};
  const Dataset data = Blobs(8, 3, 2, 3);
  BuiltinTrainerOptions options{.backend = "cpu", .scaffold = true};
  auto trainer = MakeBuiltinTrainer(arch, data, Dataset{}, options);
  auto fresh = MakeBuiltinTrainer(arch, data, Dataset{}, options);
  ASSERT_TRUE(trainer.ok() && fresh.ok());
  const ModelSpec spec = ScaffoldSpec(SoftmaxRegressionSpec(3, 2));
  const int64_t p = 8;
  const float lr = 0.5f;
  const std::vector<float> w = Random(p, 4);
  Model global(spec);
  std::copy(w.begin(), w.end(), global.data().begin());
  auto same = [](const FitResult& a, const FitResult& b) {
    return std::equal(a.model.data().begin(), a.model.data().end(), b.model.data().begin());
  };

  // Round 1, and the same task again (upload cut short): identical uploads.
  absl::StatusOr<FitResult> r1 = (*trainer)->Fit(global, ScaffoldConfig(1, lr, 0));
  absl::StatusOr<FitResult> r1_again = (*trainer)->Fit(global, ScaffoldConfig(1, lr, 0));
  ASSERT_TRUE(r1.ok() && r1_again.ok()) << r1.status() << r1_again.status();
  EXPECT_TRUE(same(*r1, *r1_again));
  std::vector<float> g(p);
  for (int64_t i = 0; i < p; ++i) g[i] = r1->model.data()[p + i];  // c = c_i = 0: delta = grad

  // Round 2 while the server says none of this client's updates committed (round 1 failed or
  // refused it): c_i is still 0, exactly what a fresh trainer does.
  const std::vector<float> big_c = Random(p, 5);
  std::copy(big_c.begin(), big_c.end(), global.data().begin() + p);
  absl::StatusOr<FitResult> r2 = (*trainer)->Fit(global, ScaffoldConfig(2, lr, 0));
  absl::StatusOr<FitResult> r2_fresh = (*fresh)->Fit(global, ScaffoldConfig(2, lr, 0));
  ASSERT_TRUE(r2.ok() && r2_fresh.ok());
  EXPECT_TRUE(same(*r2, *r2_fresh));
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_NEAR(r2->model.data()[i], w[i] - lr * (g[i] + big_c[i]), 1e-4) << i;
    EXPECT_NEAR(r2->model.data()[p + i], g[i], 1e-4) << i;  // c_i+ = g
  }

  // Round 3 after round 2 committed this client's update: c_i = g, so w - lr C and delta 0; a
  // second Fit of round 3 starts from the same c_i.
  absl::StatusOr<FitResult> r3 = (*trainer)->Fit(global, ScaffoldConfig(3, lr, 2));
  absl::StatusOr<FitResult> r3_again = (*trainer)->Fit(global, ScaffoldConfig(3, lr, 2));
  ASSERT_TRUE(r3.ok() && r3_again.ok());
  EXPECT_TRUE(same(*r3, *r3_again));
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_NEAR(r3->model.data()[i], w[i] - lr * big_c[i], 1e-4) << i;
    EXPECT_NEAR(r3->model.data()[p + i], 0.0f, 1e-4) << i;
  }

  // Round 3's update was refused: round 4 still trains from round 2's c_i, as round 3 did.
  absl::StatusOr<FitResult> r4 = (*trainer)->Fit(global, ScaffoldConfig(4, lr, 2));
  ASSERT_TRUE(r4.ok());
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_NEAR(r4->model.data()[i], w[i] - lr * big_c[i], 1e-4) << i;
  }
  // A new run (the server names no committed round): c_i is zero again, like a fresh trainer's.
  absl::StatusOr<FitResult> new_run = (*trainer)->Fit(global, ScaffoldConfig(2, lr, 0));
  ASSERT_TRUE(new_run.ok());
  EXPECT_TRUE(same(*new_run, *r2_fresh));
}

TEST(TrainerTest, ScaffoldRefusesACommittedRoundThatIsNotAnEarlierRound) {
  ModelArchitecture arch{
      .kind = ModelKind::kSoftmaxRegression, .num_features = 3, .num_classes = 2};
  auto trainer =
      MakeBuiltinTrainer(arch, Blobs(8, 3, 2, 3), Dataset{}, {.backend = "cpu", .scaffold = true});
  ASSERT_TRUE(trainer.ok());
  const Model global(ScaffoldSpec(SoftmaxRegressionSpec(3, 2)));
  for (double bad : {3.0, 5.0, -1.0, 1.5, static_cast<double>(NAN)}) {
    absl::StatusOr<FitResult> r = (*trainer)->Fit(global, ScaffoldConfig(3, 0.5f, bad));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("scaffold_committed_round")) << bad;
  }
}

TEST(TrainerTest, RefusesDataThatDoesNotFit) {
  ModelArchitecture mlp{.kind = ModelKind::kMlp, .num_features = 784, .num_classes = 10};
  Dataset wrong = Blobs(10, 783, 10, 1);
  auto t = MakeBuiltinTrainer(mlp, wrong, Dataset{});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), AllOf(HasSubstr("783"), HasSubstr("784")));
  Dataset bad_label = Blobs(10, 784, 10, 1);
  bad_label.labels[4] = 10;
  t = MakeBuiltinTrainer(mlp, Dataset{}, bad_label);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), AllOf(HasSubstr("row 4"), HasSubstr("label 10")));
  EXPECT_EQ(MakeBuiltinTrainer(mlp, Dataset{}, Dataset{}, {.momentum = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A trainer without training data can evaluate but not fit.
  auto eval_only = MakeBuiltinTrainer(mlp, Dataset{}, Blobs(10, 784, 10, 2), {.backend = "cpu"});
  ASSERT_TRUE(eval_only.ok());
  const Model init = *InitialBuiltinModel(mlp, 0);
  EXPECT_EQ((*eval_only)->Fit(init, FitConfig()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*eval_only)->Evaluate(init).ok());
  EXPECT_EQ((*eval_only)->Evaluate(Model(SoftmaxRegressionSpec(784, 10))).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TrainerTest, RefusesABatchOverTheMemoryCap) {
  ModelArchitecture mlp{
      .kind = ModelKind::kMlp, .num_features = 784, .num_classes = 10, .hidden = {200}};
  const Dataset data = Blobs(100, 784, 10, 1);
  // A batch of 100 needs 100 x (2762 floats + 1 label) x 4 = 1105200 bytes; cap at 1 MiB.
  auto trainer =
      MakeBuiltinTrainer(mlp, data, data, {.backend = "cpu", .max_batch_bytes = 1024 * 1024});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const Model init = *InitialBuiltinModel(mlp, 0);
  absl::StatusOr<FitResult> r = (*trainer)->Fit(init, Config(1, 1, 100, 0.1f));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("a batch of 100 examples needs 1105200 bytes"));
  // Evaluation runs the test set in one block of 100 rows: refused the same way.
  EXPECT_THAT((*trainer)->Evaluate(init).status().message(),
              HasSubstr("a batch of 100 examples needs 1105200 bytes"));
  // A smaller batch fits and trains.
  EXPECT_TRUE((*trainer)->Fit(init, Config(1, 1, 50, 0.1f)).ok());
}

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST

#ifndef FL_FASHION_MNIST_DIR
#define FL_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

class FashionMnistSliceTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = FL_FASHION_MNIST_DIR;
    absl::StatusOr<Dataset> train =
        LoadIdx(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
    absl::StatusOr<Dataset> test =
        LoadIdx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
    if (!train.ok() || !test.ok()) return;
    std::vector<int64_t> rows(6000), test_rows(2000);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    for (size_t i = 0; i < test_rows.size(); ++i) test_rows[i] = static_cast<int64_t>(i);
    train_ = std::make_unique<Dataset>(train->Subset(rows));
    test_ = std::make_unique<Dataset>(test->Subset(test_rows));
  }
  static void TearDownTestSuite() {
    train_.reset();
    test_.reset();
  }
  void SetUp() override {
    if (train_ == nullptr) GTEST_SKIP() << "Fashion-MNIST not readable in " FL_FASHION_MNIST_DIR;
  }

  // Trains `arch` from seed 0 on the 6000-example slice (batch 64, momentum 0.9) and returns the
  // accuracy on 2000 test images. One thread: on a shared machine a second one mostly waits for
  // a core, and its time would say nothing (ThreadsGiveTheSameModel covers the threaded paths).
  double TrainAndTest(const ModelArchitecture& arch, int32_t epochs, float lr) {
    auto trainer = MakeBuiltinTrainer(
        arch, *train_, *test_, {.backend = "cpu", .cpu_threads = 1, .seed = 1, .momentum = 0.9f});
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return 0;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<FitResult> fit =
        (*trainer)->Fit(*InitialBuiltinModel(arch, 0), Config(0, epochs, 64, lr));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(fit.ok()) << fit.status();
    if (!fit.ok()) return 0;
    absl::StatusOr<EvalResult> eval = (*trainer)->Evaluate(fit->model);
    EXPECT_TRUE(eval.ok()) << eval.status();
    if (!eval.ok()) return 0;
    std::printf(
        "%s: %d epochs over 6000 in %.2f s, train loss %.4f accuracy %.4f, test loss "
        "%.4f accuracy %.4f\n",
        std::string(ModelKindName(arch.kind)).c_str(), epochs, seconds, fit->metrics.at("loss"),
        fit->metrics.at("accuracy"), eval->loss, eval->metrics.at("accuracy"));
    EXPECT_EQ(eval->num_examples, 2000);
    return eval->metrics.at("accuracy");
  }

  static inline std::unique_ptr<Dataset> train_;
  static inline std::unique_ptr<Dataset> test_;
};

// The threaded paths (row blocks of the products, parallel loops) give the model one thread
// gives, up to float rounding: a CNN and an MLP on full-size batches, where every path runs.
TEST_F(FashionMnistSliceTest, ThreadsGiveTheSameModel) {
  std::vector<int64_t> rows(512);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  const Dataset slice = train_->Subset(rows);
  for (ModelKind kind : {ModelKind::kSimpleCnn, ModelKind::kMlp}) {
    ModelArchitecture arch{.kind = kind, .num_features = 784, .num_classes = 10};
    std::vector<std::vector<float>> models;
    for (int threads : {1, 2, 3}) {
      auto trainer = MakeBuiltinTrainer(
          arch, slice, Dataset{}, {.backend = "cpu", .cpu_threads = threads, .momentum = 0.9f});
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      absl::StatusOr<FitResult> fit =
          (*trainer)->Fit(*InitialBuiltinModel(arch, 0), Config(0, 1, 128, 0.05f));
      ASSERT_TRUE(fit.ok()) << fit.status();
      models.push_back(Values(fit->model));
    }
    for (size_t t = 1; t < models.size(); ++t) {
      for (size_t i = 0; i < models[0].size(); ++i) {
        ASSERT_NEAR(models[t][i], models[0][i], 1e-4) << ModelKindName(kind) << " parameter " << i;
      }
    }
  }
}

// Measured: 84.0 % after 5 epochs (0.3 s on one core).
TEST_F(FashionMnistSliceTest, MlpReaches80Percent) {
  ModelArchitecture mlp{
      .kind = ModelKind::kMlp, .num_features = 784, .num_classes = 10, .hidden = {200}};
  EXPECT_GE(TrainAndTest(mlp, 5, 0.05f), 0.80);
}

// Measured: 80.3 % after 5 epochs (1.3 s on one core).
TEST_F(FashionMnistSliceTest, SimpleCnnReaches75Percent) {
  ModelArchitecture cnn{.kind = ModelKind::kSimpleCnn, .num_features = 784, .num_classes = 10};
  EXPECT_GE(TrainAndTest(cnn, 5, 0.05f), 0.75);
}

}  // namespace
}  // namespace fl::client
