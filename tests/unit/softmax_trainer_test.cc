#include "fl/client/softmax_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/client/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A FitConfig without strategy extras (designated initializers would warn about `extra`).
FitConfig Config(int32_t round, int32_t local_epochs, int32_t batch_size, float learning_rate) {
  FitConfig c;
  c.round = round;
  c.local_epochs = local_epochs;
  c.batch_size = batch_size;
  c.learning_rate = learning_rate;
  return c;
}

// Gaussian blobs: class k is centred at 3 * e_k (k < num_features), unit noise.
Dataset Blobs(int64_t n, int64_t num_features, int32_t num_classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Dataset d;
  d.num_features = num_features;
  d.num_classes = num_classes;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t y = static_cast<int32_t>(i % num_classes);
    d.labels.push_back(y);
    for (int64_t j = 0; j < num_features; ++j) {
      d.features.push_back(noise(rng) + (j == y % num_features ? 3.0f : 0.0f));
    }
  }
  return d;
}

Model RandomModel(int64_t num_features, int32_t num_classes, uint64_t seed) {
  Model m(SoftmaxRegressionSpec(num_features, num_classes));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  for (float& x : m.data()) x = dist(rng);
  return m;
}

// Mean cross-entropy of softmax regression in double; `theta` is the model payload
// (weight [c, f] row-major, then bias [c]).
double ReferenceLoss(const std::vector<double>& theta, const Dataset& d) {
  const int64_t f = d.num_features;
  const int64_t c = d.num_classes;
  double total = 0;
  for (int64_t i = 0; i < d.num_examples(); ++i) {
    std::vector<double> z(c);
    for (int64_t k = 0; k < c; ++k) {
      z[k] = theta[c * f + k];
      for (int64_t j = 0; j < f; ++j) z[k] += theta[k * f + j] * d.row(i)[j];
    }
    double log_sum = 0;
    for (double v : z) log_sum += std::exp(v);
    total += std::log(log_sum) - z[d.labels[i]];
  }
  return total / static_cast<double>(d.num_examples());
}

TEST(SoftmaxTrainerTest, SpecHasWeightAndBias) {
  const ModelSpec spec = SoftmaxRegressionSpec(784, 10);
  ASSERT_EQ(spec.tensors().size(), 2u);
  EXPECT_EQ(spec.tensors()[0], (TensorSpec{"weight", {10, 784}}));
  EXPECT_EQ(spec.tensors()[1], (TensorSpec{"bias", {10}}));
}

// One full-batch SGD step with weight decay equals theta - lr * (grad + wd * theta), with the
// gradient taken by central finite differences of a double-precision reference loss.
TEST(SoftmaxTrainerTest, OneStepMatchesFiniteDifferenceGradient) {
  const Dataset data = Blobs(/*n=*/5, /*num_features=*/3, /*num_classes=*/4, /*seed=*/7);
  const Model global = RandomModel(3, 4, /*seed=*/11);
  const float lr = 0.5f;
  const float wd = 0.01f;
  std::unique_ptr<Trainer> trainer =
      MakeSoftmaxRegressionTrainer(data, data, {.seed = 3, .weight_decay = wd});
  absl::StatusOr<FitResult> fit =
      trainer->Fit(global, Config(/*round=*/1, /*local_epochs=*/1, /*batch_size=*/5, lr));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->num_examples, 5);

  std::vector<double> theta(global.data().begin(), global.data().end());
  EXPECT_NEAR(fit->metrics.at("loss"), ReferenceLoss(theta, data), 1e-5);
  const double h = 1e-5;
  for (size_t i = 0; i < theta.size(); ++i) {
    std::vector<double> plus = theta;
    std::vector<double> minus = theta;
    plus[i] += h;
    minus[i] -= h;
    const double grad = (ReferenceLoss(plus, data) - ReferenceLoss(minus, data)) / (2 * h);
    const double expected = theta[i] - lr * (grad + wd * theta[i]);
    EXPECT_NEAR(fit->model.data()[i], expected, 1e-5) << "parameter " << i;
  }
}

TEST(SoftmaxTrainerTest, TrainingLowersTheLoss) {
  const Dataset train = Blobs(600, 5, 3, /*seed=*/1);
  const Dataset test = Blobs(300, 5, 3, /*seed=*/2);
  std::unique_ptr<Trainer> trainer = MakeSoftmaxRegressionTrainer(train, test);
  Model model(trainer->spec());
  absl::StatusOr<EvalResult> before = trainer->Evaluate(model);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_NEAR(before->loss, std::log(3.0), 1e-6);  // the zero model predicts uniformly
  EXPECT_EQ(before->num_examples, 300);

  double last_fit_loss = INFINITY;
  for (int32_t round = 0; round < 3; ++round) {
    absl::StatusOr<FitResult> fit = trainer->Fit(model, Config(round, 1, 16, 0.1f));
    ASSERT_TRUE(fit.ok()) << fit.status();
    EXPECT_LT(fit->metrics.at("loss"), last_fit_loss);
    last_fit_loss = fit->metrics.at("loss");
    model = std::move(fit->model);
  }
  absl::StatusOr<EvalResult> after = trainer->Evaluate(model);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_LT(after->loss, 0.5 * before->loss);
  EXPECT_GT(after->metrics.at("accuracy"), 0.9);
}

TEST(SoftmaxTrainerTest, FixedSeedIsReproducible) {
  const Dataset train = Blobs(200, 4, 3, /*seed=*/5);
  const Model global = RandomModel(4, 3, /*seed=*/6);
  const FitConfig config = Config(/*round=*/4, /*local_epochs=*/2, /*batch_size=*/7, 0.05f);
  auto fit_with = [&](uint64_t seed, int32_t round) {
    FitConfig c = config;
    c.round = round;
    absl::StatusOr<FitResult> fit =
        MakeSoftmaxRegressionTrainer(train, Dataset{}, {.seed = seed})->Fit(global, c);
    EXPECT_TRUE(fit.ok()) << fit.status();
    if (!fit.ok()) return std::vector<float>();
    return std::vector<float>(fit->model.data().begin(), fit->model.data().end());
  };
  const std::vector<float> a = fit_with(9, 4);
  EXPECT_EQ(a, fit_with(9, 4));
  EXPECT_NE(a, fit_with(10, 4));  // another seed shuffles differently
  EXPECT_NE(a, fit_with(9, 5));   // so does another round
  // The global model is left alone.
  EXPECT_TRUE(
      std::equal(global.data().begin(), global.data().end(), RandomModel(4, 3, 6).data().begin()));
}

TEST(SoftmaxTrainerTest, RefusesSpecMismatchNamingBothSpecs) {
  const Dataset data = Blobs(20, 4, 3, /*seed=*/1);
  std::unique_ptr<Trainer> trainer = MakeSoftmaxRegressionTrainer(data, data);
  const Model wrong(SoftmaxRegressionSpec(5, 3));
  absl::StatusOr<FitResult> fit = trainer->Fit(wrong, FitConfig());
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fit.status().message(), AllOf(HasSubstr(SoftmaxRegressionSpec(5, 3).ToJson()),
                                            HasSubstr(SoftmaxRegressionSpec(4, 3).ToJson())));
  EXPECT_EQ(trainer->Evaluate(wrong).status().code(), absl::StatusCode::kInvalidArgument);
  const Model too_few_classes(SoftmaxRegressionSpec(4, 2));
  EXPECT_EQ(EvaluateSoftmaxRegression(too_few_classes, data).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SoftmaxTrainerTest, RefusesBadConfigAndMissingData) {
  const Dataset data = Blobs(20, 4, 3, /*seed=*/1);
  std::unique_ptr<Trainer> trainer = MakeSoftmaxRegressionTrainer(data, Dataset{});
  const Model model(trainer->spec());
  EXPECT_EQ(trainer->Fit(model, Config(0, 1, 0, 0.1f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->Fit(model, Config(0, 0, 8, 0.1f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->Fit(model, Config(0, 1, 8, -1.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->Fit(model, Config(0, 1, 8, NAN)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->Evaluate(model).status().code(), absl::StatusCode::kFailedPrecondition);

  Dataset bad_label = data;
  bad_label.labels[3] = 3;
  EXPECT_EQ(
      MakeSoftmaxRegressionTrainer(bad_label, Dataset{})->Fit(model, FitConfig()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

class FashionMnistTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = kFashionMnistDir;
    absl::StatusOr<Dataset> train =
        LoadIdx(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
    absl::StatusOr<Dataset> test =
        LoadIdx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
    if (train.ok() && test.ok()) {
      train_ = std::make_unique<Dataset>(*std::move(train));
      test_ = std::make_unique<Dataset>(*std::move(test));
    }
  }
  static void TearDownTestSuite() {
    train_.reset();
    test_.reset();
  }
  void SetUp() override {
    if (train_ == nullptr) GTEST_SKIP() << "Fashion-MNIST not readable in " << kFashionMnistDir;
  }

  // Loaded once for the suite: decompressing and parsing takes about a second.
  static inline std::unique_ptr<Dataset> train_;
  static inline std::unique_ptr<Dataset> test_;
};

// One epoch at lr 0.1 ends anywhere between 73 % and 82 % depending on the seed (the last SGD
// steps are noisy); two epochs land at 82-83 % for every seed tried.
TEST_F(FashionMnistTest, CentralTrainingReaches80Percent) {
  std::unique_ptr<Trainer> trainer = MakeSoftmaxRegressionTrainer(*train_, *test_, {.seed = 1});
  Model model(trainer->spec());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<FitResult> fit =
      trainer->Fit(model, Config(/*round=*/0, /*local_epochs=*/2, /*batch_size=*/64, 0.1f));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(fit.ok()) << fit.status();
  absl::StatusOr<EvalResult> eval = trainer->Evaluate(fit->model);
  ASSERT_TRUE(eval.ok()) << eval.status();
  RecordProperty("epoch_seconds", std::to_string(seconds));
  std::printf(
      "central: 2 epochs over 60000 in %.2f s, train loss %.4f, test loss %.4f, "
      "accuracy %.4f\n",
      seconds, fit->metrics.at("loss"), eval->loss, eval->metrics.at("accuracy"));
  EXPECT_EQ(fit->num_examples, 60000);
  EXPECT_EQ(eval->num_examples, 10000);
  EXPECT_GE(eval->metrics.at("accuracy"), 0.80);
}

// The federated demo: 10 clients of 6000 IID examples, 1 local epoch per round, FedAvg for 10
// rounds. Batch 32 at lr 0.1 passes 80 % in round 2 and ends near 83 %; lr 0.05 ends near 82 %,
// batch 64 at lr 0.1 near 82.5 %.
TEST_F(FashionMnistTest, FedAvgOverTenIidClientsReaches80Percent) {
  constexpr int kClients = 10;
  constexpr int kRounds = 10;
  const FitConfig base = Config(/*round=*/0, /*local_epochs=*/1, /*batch_size=*/32, 0.1f);
  std::vector<int64_t> perm(static_cast<size_t>(train_->num_examples()));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(2024));
  std::vector<std::unique_ptr<Trainer>> clients;
  const size_t per_client = perm.size() / kClients;
  for (int i = 0; i < kClients; ++i) {
    std::vector<int64_t> part(perm.begin() + i * per_client, perm.begin() + (i + 1) * per_client);
    clients.push_back(MakeSoftmaxRegressionTrainer(train_->Subset(part), Dataset{},
                                                   {.seed = static_cast<uint64_t>(i)}));
  }
  Model global(clients[0]->spec());
  double accuracy = 0;
  for (int32_t round = 1; round <= kRounds; ++round) {
    FitConfig config = base;
    config.round = round;
    std::vector<double> sum(global.data().size(), 0.0);
    int64_t total = 0;
    for (auto& client : clients) {
      absl::StatusOr<FitResult> fit = client->Fit(global, config);
      ASSERT_TRUE(fit.ok()) << fit.status();
      for (size_t k = 0; k < sum.size(); ++k) {
        sum[k] += static_cast<double>(fit->num_examples) * fit->model.data()[k];
      }
      total += fit->num_examples;
    }
    for (size_t k = 0; k < sum.size(); ++k) {
      global.data()[k] = static_cast<float>(sum[k] / static_cast<double>(total));
    }
    absl::StatusOr<EvalResult> eval = EvaluateSoftmaxRegression(global, *test_);
    ASSERT_TRUE(eval.ok()) << eval.status();
    accuracy = eval->metrics.at("accuracy");
    std::printf("fedavg round %d: test loss %.4f, accuracy %.4f\n", round, eval->loss, accuracy);
  }
  EXPECT_GE(accuracy, 0.80);
}

}  // namespace
}  // namespace fl::client
