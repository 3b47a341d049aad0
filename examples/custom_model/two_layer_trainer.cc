#include "two_layer_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace custom_model {
namespace {

// The four tensors of the model, in spec order.
struct Layers {
  std::span<float> w1, b1, w2, b2;
};
Layers Split(fl::Model& m) { return {m.tensor(0), m.tensor(1), m.tensor(2), m.tensor(3)}; }

// Forward pass of one row: hidden activations (after ReLU) and class probabilities.
void Forward(const Layers& p, const float* x, int64_t in, int64_t hidden, int64_t classes,
             std::vector<float>& h, std::vector<float>& prob) {
  for (int64_t j = 0; j < hidden; ++j) {
    float z = p.b1[j];
    const float* w = &p.w1[j * in];
    for (int64_t i = 0; i < in; ++i) z += w[i] * x[i];
    h[j] = std::max(z, 0.0f);
  }
  float top = -INFINITY;
  for (int64_t k = 0; k < classes; ++k) {
    float z = p.b2[k];
    const float* w = &p.w2[k * hidden];
    for (int64_t j = 0; j < hidden; ++j) z += w[j] * h[j];
    prob[k] = z;
    top = std::max(top, z);
  }
  float sum = 0;
  for (int64_t k = 0; k < classes; ++k) sum += prob[k] = std::exp(prob[k] - top);
  for (int64_t k = 0; k < classes; ++k) prob[k] /= sum;
}

}  // namespace

TwoLayerTrainer::TwoLayerTrainer(fl::client::Dataset train, fl::client::Dataset test,
                                 int64_t features, int64_t hidden, int64_t classes, uint64_t seed)
    : train_(std::move(train)),
      test_(std::move(test)),
      features_(features),
      hidden_(hidden),
      classes_(classes),
      seed_(seed) {}

fl::ModelSpec TwoLayerTrainer::spec() const {
  return fl::ModelSpec({{"fc1.weight", {hidden_, features_}},
                        {"fc1.bias", {hidden_}},
                        {"fc2.weight", {classes_, hidden_}},
                        {"fc2.bias", {classes_}}});
}

fl::Model TwoLayerTrainer::InitialModel(uint64_t seed) const {
  fl::Model model(spec());
  Layers p = Split(model);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u1(-1.0f / std::sqrt(float(features_)),
                                           1.0f / std::sqrt(float(features_)));
  std::uniform_real_distribution<float> u2(-1.0f / std::sqrt(float(hidden_)),
                                           1.0f / std::sqrt(float(hidden_)));
  for (float& w : p.w1) w = u1(rng);
  for (float& w : p.w2) w = u2(rng);
  return model;
}

absl::StatusOr<fl::client::FitResult> TwoLayerTrainer::Fit(const fl::Model& global,
                                                           const fl::client::FitConfig& config) {
  if (!(global.spec() == spec())) {
    return absl::InvalidArgumentError("the global model is not this trainer's: " +
                                      global.spec().ToJson());
  }
  if (train_.num_examples() == 0) return absl::FailedPreconditionError("no training rows");
  fl::Model local = global.Clone();
  Layers p = Split(local);
  const int64_t n = train_.num_examples();
  const int64_t batch = std::max<int64_t>(1, config.batch_size);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(config.round));
  std::vector<float> h(hidden_), prob(classes_), dh(hidden_);
  std::vector<float> g1(p.w1.size()), gb1(p.b1.size()), g2(p.w2.size()), gb2(p.b2.size());
  double loss = 0;
  for (int32_t epoch = 0; epoch < config.local_epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    loss = 0;
    for (int64_t start = 0; start < n; start += batch) {
      const int64_t end = std::min(n, start + batch);
      std::fill(g1.begin(), g1.end(), 0.0f);
      std::fill(gb1.begin(), gb1.end(), 0.0f);
      std::fill(g2.begin(), g2.end(), 0.0f);
      std::fill(gb2.begin(), gb2.end(), 0.0f);
      for (int64_t r = start; r < end; ++r) {
        const float* x = train_.row(order[r]);
        const int32_t y = train_.labels[order[r]];
        Forward(p, x, features_, hidden_, classes_, h, prob);
        loss -= std::log(std::max(prob[y], 1e-12f));
        prob[y] -= 1.0f;  // d loss / d logits
        std::fill(dh.begin(), dh.end(), 0.0f);
        for (int64_t k = 0; k < classes_; ++k) {
          gb2[k] += prob[k];
          for (int64_t j = 0; j < hidden_; ++j) {
            g2[k * hidden_ + j] += prob[k] * h[j];
            dh[j] += prob[k] * p.w2[k * hidden_ + j];
          }
        }
        for (int64_t j = 0; j < hidden_; ++j) {
          if (h[j] <= 0) continue;  // ReLU
          gb1[j] += dh[j];
          for (int64_t i = 0; i < features_; ++i) g1[j * features_ + i] += dh[j] * x[i];
        }
      }
      const float step = config.learning_rate / static_cast<float>(end - start);
      for (size_t i = 0; i < g1.size(); ++i) p.w1[i] -= step * g1[i];
      for (size_t i = 0; i < gb1.size(); ++i) p.b1[i] -= step * gb1[i];
      for (size_t i = 0; i < g2.size(); ++i) p.w2[i] -= step * g2[i];
      for (size_t i = 0; i < gb2.size(); ++i) p.b2[i] -= step * gb2[i];
    }
  }
  return fl::client::FitResult{std::move(local), n, {{"loss", loss / static_cast<double>(n)}}};
}

absl::StatusOr<fl::client::EvalResult> TwoLayerTrainer::Evaluate(const fl::Model& model) {
  if (!(model.spec() == spec())) {
    return absl::InvalidArgumentError("the model is not this trainer's: " + model.spec().ToJson());
  }
  if (test_.num_examples() == 0) return absl::FailedPreconditionError("no test rows");
  fl::Model copy = model.Clone();
  Layers p = Split(copy);
  std::vector<float> h(hidden_), prob(classes_);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t r = 0; r < test_.num_examples(); ++r) {
    Forward(p, test_.row(r), features_, hidden_, classes_, h, prob);
    const int32_t y = test_.labels[r];
    loss -= std::log(std::max(prob[y], 1e-12f));
    correct += std::max_element(prob.begin(), prob.end()) - prob.begin() == y ? 1 : 0;
  }
  const double n = static_cast<double>(test_.num_examples());
  return fl::client::EvalResult{loss / n, test_.num_examples(), {{"accuracy", correct / n}}};
}

}  // namespace custom_model
