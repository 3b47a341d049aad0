#include "fl/client/softmax_trainer.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/random.h"

namespace fl::client {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVector = Eigen::Matrix<float, 1, Eigen::Dynamic>;

// Rows per block when evaluating.
constexpr int64_t kEvalBlockRows = 1024;

// The index and label invariants the math relies on; Dataset is a plain struct anyone can fill.
absl::Status CheckDataset(const Dataset& d, const char* what) {
  if (d.num_features <= 0 || d.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", d.num_features, " features and ", d.num_classes, " classes"));
  }
  if (d.features.size() != d.labels.size() * static_cast<size_t>(d.num_features)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " holds ", d.features.size(),
                                                   " feature values for ", d.labels.size(),
                                                   " rows of ", d.num_features));
  }
  for (size_t i = 0; i < d.labels.size(); ++i) {
    if (d.labels[i] < 0 || d.labels[i] >= d.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(what, " row ", i, " has label ", d.labels[i],
                                                     ", outside [0, ", d.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

// Turns each row of `logits` into softmax probabilities (subtracting the row's maximum first, so
// exp never overflows). Returns the summed cross-entropy against `labels` and adds the number of
// rows whose largest logit is at the label to `*correct`.
double SoftmaxCrossEntropy(RowMatrix& logits, const int32_t* labels, int64_t* correct) {
  const Eigen::Index rows = logits.rows();
  Eigen::VectorXf row_max(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    Eigen::Index arg = 0;
    row_max(i) = logits.row(i).maxCoeff(&arg);
    if (arg == labels[i]) ++*correct;
  }
  logits.colwise() -= row_max;
  Eigen::VectorXf label_logit(rows);
  for (Eigen::Index i = 0; i < rows; ++i) label_logit(i) = logits(i, labels[i]);
  logits = logits.array().exp();
  const Eigen::VectorXf sums = logits.rowwise().sum();
  logits.array().colwise() /= sums.array();
  // -log p_y = log(sum_j exp(z_j - max)) - (z_y - max).
  return (sums.array().log() - label_logit.array()).cast<double>().sum();
}

std::string DescribeSpec(const ModelSpec& spec) { return spec.ToJson(); }

class SoftmaxRegressionTrainer final : public Trainer {
 public:
  SoftmaxRegressionTrainer(Dataset train, Dataset test, SoftmaxTrainerOptions options)
      : train_(std::move(train)), test_(std::move(test)), options_(options) {}

  ModelSpec spec() const override {
    // A site without training data can still evaluate; its spec then comes from the test set.
    const Dataset& d = train_.num_features > 0 ? train_ : test_;
    return SoftmaxRegressionSpec(d.num_features, d.num_classes);
  }

  absl::StatusOr<FitResult> Fit(const Model& global, const FitConfig& config) override;

  absl::StatusOr<EvalResult> Evaluate(const Model& model) override {
    if (test_.num_examples() == 0) {
      return absl::FailedPreconditionError("this trainer has no test data to evaluate on");
    }
    return EvaluateSoftmaxRegression(model, test_);
  }

 private:
  Dataset train_;
  Dataset test_;
  SoftmaxTrainerOptions options_;
};

absl::StatusOr<FitResult> SoftmaxRegressionTrainer::Fit(const Model& global,
                                                        const FitConfig& config) {
  if (train_.num_examples() == 0) {
    return absl::FailedPreconditionError("this trainer has no training data");
  }
  if (absl::Status s = CheckDataset(train_, "training data"); !s.ok()) return s;
  const ModelSpec expected = spec();
  if (global.spec() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("global model spec ", DescribeSpec(global.spec()),
                     " does not match the softmax-regression spec ", DescribeSpec(expected),
                     " of the training data (", train_.num_features, " features, ",
                     train_.num_classes, " classes)"));
  }
  if (config.local_epochs < 1 || config.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("local_epochs (", config.local_epochs,
                                                   ") and batch_size (", config.batch_size,
                                                   ") must be at least 1"));
  }
  if (!std::isfinite(config.learning_rate) || config.learning_rate <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning_rate must be positive and finite, not ", config.learning_rate));
  }
  if (!std::isfinite(options_.weight_decay) || options_.weight_decay < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_decay must be >= 0 and finite, not ", options_.weight_decay));
  }

  const int64_t n = train_.num_examples();
  const int64_t f = train_.num_features;
  const int64_t c = train_.num_classes;
  Model local = global.Clone();
  Eigen::Map<RowMatrix> w(local.tensor(0).data(), c, f);
  Eigen::Map<RowVector> b(local.tensor(1).data(), c);

  std::seed_seq seq{static_cast<uint32_t>(options_.seed),
                    static_cast<uint32_t>(options_.seed >> 32),
                    static_cast<uint32_t>(config.round)};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;

  const float lr = config.learning_rate;
  const float decay = 1.0f - lr * options_.weight_decay;
  const int64_t max_batch = std::min<int64_t>(config.batch_size, n);
  RowMatrix x(max_batch, f);
  RowMatrix probs(max_batch, c);
  std::vector<int32_t> y(static_cast<size_t>(max_batch));
  double epoch_loss = 0;
  for (int32_t epoch = 0; epoch < config.local_epochs; ++epoch) {
    Shuffle(order, rng);
    epoch_loss = 0;
    int64_t unused_correct = 0;
    for (int64_t start = 0; start < n; start += max_batch) {
      const int64_t rows = std::min(max_batch, n - start);
      x.resize(rows, f);
      probs.resize(rows, c);
      y.resize(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t src = order[static_cast<size_t>(start + r)];
        std::copy_n(train_.row(src), f, x.row(r).data());
        y[static_cast<size_t>(r)] = train_.labels[static_cast<size_t>(src)];
      }
      probs.noalias() = x * w.transpose();
      probs.rowwise() += b;
      epoch_loss += SoftmaxCrossEntropy(probs, y.data(), &unused_correct);
      // d(mean loss)/d(logits) = (softmax - onehot) / rows.
      for (int64_t r = 0; r < rows; ++r) probs(r, y[static_cast<size_t>(r)]) -= 1.0f;
      probs *= 1.0f / static_cast<float>(rows);
      if (options_.weight_decay > 0) {
        w *= decay;
        b *= decay;
      }
      w.noalias() -= lr * probs.transpose() * x;
      b.noalias() -= lr * probs.colwise().sum();
    }
  }
  const double mean_loss = epoch_loss / static_cast<double>(n);
  if (!std::isfinite(mean_loss)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training diverged (loss is not finite) with learning_rate ", lr, "; lower it"));
  }
  FitResult result{std::move(local), n, {{"loss", mean_loss}}};
  return result;
}

}  // namespace

ModelSpec SoftmaxRegressionSpec(int64_t num_features, int32_t num_classes) {
  return ModelSpec(
      {TensorSpec{"weight", {num_classes, num_features}}, TensorSpec{"bias", {num_classes}}});
}

std::unique_ptr<Trainer> MakeSoftmaxRegressionTrainer(Dataset train, Dataset test,
                                                      SoftmaxTrainerOptions options) {
  return std::make_unique<SoftmaxRegressionTrainer>(std::move(train), std::move(test), options);
}

absl::StatusOr<EvalResult> EvaluateSoftmaxRegression(const Model& model, const Dataset& data) {
  if (data.num_examples() == 0) {
    return absl::FailedPreconditionError("no examples to evaluate on");
  }
  if (absl::Status s = CheckDataset(data, "evaluation data"); !s.ok()) return s;
  // The model may know more classes than the data shows (a test set can lack the last class);
  // it must have the data's features and at least its classes.
  const std::vector<TensorSpec>& t = model.spec().tensors();
  const bool matches = t.size() == 2 && t[0].shape.size() == 2 &&
                       model.spec() == SoftmaxRegressionSpec(data.num_features,
                                                             static_cast<int32_t>(t[0].shape[0])) &&
                       t[0].shape[0] >= data.num_classes;
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model spec ", DescribeSpec(model.spec()), " does not match the softmax-regression spec ",
        DescribeSpec(SoftmaxRegressionSpec(data.num_features, data.num_classes)),
        " of the evaluation data"));
  }
  const int64_t n = data.num_examples();
  const int64_t f = data.num_features;
  const int64_t c = t[0].shape[0];
  Eigen::Map<const RowMatrix> w(model.tensor(0).data(), c, f);
  Eigen::Map<const RowVector> b(model.tensor(1).data(), c);
  RowMatrix logits;
  double loss = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += kEvalBlockRows) {
    const int64_t rows = std::min(kEvalBlockRows, n - start);
    Eigen::Map<const RowMatrix> x(data.row(start), rows, f);
    logits.noalias() = x * w.transpose();
    logits.rowwise() += b;
    loss += SoftmaxCrossEntropy(logits, data.labels.data() + start, &correct);
  }
  EvalResult result;
  result.loss = loss / static_cast<double>(n);
  result.num_examples = n;
  result.metrics["accuracy"] = static_cast<double>(correct) / static_cast<double>(n);
  return result;
}

}  // namespace fl::client
