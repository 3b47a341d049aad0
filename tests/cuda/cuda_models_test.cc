// Every built-in model trained through the public API (fl::client::MakeBuiltinTrainer) on the
// "cuda" and the "cpu" backend from the same initial weights, data and seed: the trained weights
// must agree. Skips, saying why, when no CUDA device is present.
//
// Tolerance on the trained weights, |cuda - cpu| <= rel * |cpu| + abs: one SGD step rel 1e-4,
// abs 1e-5; four steps with momentum rel 1e-3, abs 1e-4 (differences of Gemm summation order
// compound from step to step).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "client_sdk/ml/backend.h"
#include "fl/client/builtin_models.h"
#include "gtest/gtest.h"

namespace fl::client {

// Names the parameter in test output and CTest names (found by argument-dependent lookup, so it
// lives in ModelKind's namespace; internal linkage keeps it out of other test files' way).
static void PrintTo(ModelKind kind, std::ostream* os) { *os << ModelKindName(kind); }

namespace {

// 784 features in [0, 1) (a 28x28 grey image for the CNN) and labels in [0, 10).
Dataset SyntheticImages(int64_t n, uint32_t seed) {
  Dataset d;
  d.num_features = 28 * 28;
  d.num_classes = 10;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  d.features.resize(static_cast<size_t>(n * d.num_features));
  for (float& v : d.features) v = pixel(rng);
  d.labels.resize(static_cast<size_t>(n));
  for (int32_t& l : d.labels) l = static_cast<int32_t>(rng() % 10);
  return d;
}

ModelArchitecture Architecture(ModelKind kind) {
  ModelArchitecture arch;
  arch.kind = kind;
  arch.num_features = 28 * 28;
  arch.num_classes = 10;
  arch.hidden = {200};
  return arch;
}

struct Trained {
  std::vector<float> weights;
  double loss = 0;
};

class CudaModelsTest : public ::testing::TestWithParam<ModelKind> {
 protected:
  void SetUp() override {
    std::string why;
    if (!ml::CudaAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }

  // Trains `arch` from its seeded initial weights for one epoch on `backend`.
  static Trained Train(const ModelArchitecture& arch, const std::string& backend,
                       const Dataset& data, int32_t batch_size, float momentum) {
    BuiltinTrainerOptions options;
    options.backend = backend;
    options.seed = 7;
    options.momentum = momentum;
    options.weight_decay = 1e-4f;
    absl::StatusOr<std::unique_ptr<Trainer>> trainer =
        MakeBuiltinTrainer(arch, data, Dataset{}, options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return {};
    absl::StatusOr<Model> initial = InitialBuiltinModel(arch, 42);
    EXPECT_TRUE(initial.ok()) << initial.status();
    if (!initial.ok()) return {};
    FitConfig config;
    config.round = 1;
    config.local_epochs = 1;
    config.batch_size = batch_size;
    config.learning_rate = 0.05f;
    absl::StatusOr<FitResult> fit = (*trainer)->Fit(*initial, config);
    EXPECT_TRUE(fit.ok()) << fit.status();
    if (!fit.ok()) return {};
    EXPECT_EQ(fit->model.spec(), initial->spec());
    Trained out;
    out.weights.assign(fit->model.data().begin(), fit->model.data().end());
    // The step must have moved the weights, or the comparison below would prove nothing.
    double moved = 0;
    for (size_t i = 0; i < out.weights.size(); ++i) {
      moved = std::max(moved, std::abs(double{out.weights[i]} - initial->data()[i]));
    }
    EXPECT_GT(moved, 1e-4) << backend << ": training did not change the weights";
    if (auto it = fit->metrics.find("loss"); it != fit->metrics.end()) out.loss = it->second;
    return out;
  }

  static ::testing::AssertionResult WeightsNear(const Trained& cuda, const Trained& cpu, double rel,
                                                double abs) {
    if (cuda.weights.size() != cpu.weights.size() || cpu.weights.empty()) {
      return ::testing::AssertionFailure()
             << "weight counts differ: " << cuda.weights.size() << " vs " << cpu.weights.size();
    }
    int64_t bad = 0;
    std::ostringstream first;
    for (size_t i = 0; i < cpu.weights.size(); ++i) {
      const double diff = std::abs(double{cuda.weights[i]} - cpu.weights[i]);
      if (diff > rel * std::abs(double{cpu.weights[i]}) + abs && bad++ < 5) {
        first << "\n  [" << i << "] cuda " << cuda.weights[i] << " cpu " << cpu.weights[i];
      }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << bad << " of " << cpu.weights.size() << " trained weights differ:" << first.str();
  }
};

TEST_P(CudaModelsTest, OneSgdStepGivesTheCpuWeights) {
  const ModelArchitecture arch = Architecture(GetParam());
  const Dataset data = SyntheticImages(128, 1);
  const Trained cpu = Train(arch, "cpu", data, 128, 0.0f);
  const Trained cuda = Train(arch, "cuda", data, 128, 0.0f);
  EXPECT_TRUE(WeightsNear(cuda, cpu, 1e-4, 1e-5));
  EXPECT_NEAR(cuda.loss, cpu.loss, 1e-4 * std::abs(cpu.loss) + 1e-6);
}

TEST_P(CudaModelsTest, AnEpochWithMomentumGivesTheCpuWeights) {
  const ModelArchitecture arch = Architecture(GetParam());
  const Dataset data = SyntheticImages(128, 2);
  const Trained cpu = Train(arch, "cpu", data, 32, 0.9f);
  const Trained cuda = Train(arch, "cuda", data, 32, 0.9f);
  EXPECT_TRUE(WeightsNear(cuda, cpu, 1e-3, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(BuiltinModels, CudaModelsTest,
                         ::testing::Values(ModelKind::kSoftmaxRegression, ModelKind::kMlp,
                                           ModelKind::kSimpleCnn),
                         [](const ::testing::TestParamInfo<ModelKind>& info) {
                           return std::string(ModelKindName(info.param));
                         });

// Without a device, asking for "cuda" is refused with the reason instead of falling back.
TEST(CudaUnavailableTest, CudaBackendIsRefusedWithTheReason) {
  std::string why;
  if (ml::CudaAvailable(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  absl::StatusOr<std::unique_ptr<ml::Backend>> backend = ml::MakeCudaBackend();
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(backend.status().message().find(why), std::string::npos) << backend.status();
  BuiltinTrainerOptions options;
  options.backend = "cuda";
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      MakeBuiltinTrainer(Architecture(ModelKind::kMlp), SyntheticImages(8, 3), Dataset{}, options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kUnavailable) << trainer.status();
}

}  // namespace
}  // namespace fl::client
