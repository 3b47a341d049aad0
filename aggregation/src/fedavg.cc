#include "fl/aggregation/fedavg.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "aggregation/internal/accepted_weight.h"
#include "aggregation/internal/striped_sum.h"

namespace fl::aggregation {
namespace {

class FedAvgAggregator final : public RoundAggregator {
 public:
  explicit FedAvgAggregator(const ModelSpec& spec) : sum_(spec) {}

  void Fold(int64_t offset, std::span<const float> values, double weight) override {
    sum_.Add(offset, values, weight);
  }

  void Accept(double weight) override { accepted_.Add(weight); }
  int num_accepted() const override { return accepted_.count(); }

  absl::StatusOr<Model> Finish() override {
    if (absl::Status s = accepted_.CheckAny("FedAvg"); !s.ok()) return s;
    const double inv = 1.0 / accepted_.total();
    return sum_.TakeModel("FedAvg: the average", [inv](int64_t, double sum) { return sum * inv; });
  }

 private:
  internal::StripedSum sum_;
  internal::AcceptedWeight accepted_;
};

class FedAvg final : public Strategy {
 public:
  std::string name() const override { return "fedavg"; }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<FedAvgAggregator>(global.spec());
  }
};

}  // namespace

std::unique_ptr<Strategy> MakeFedAvg() { return std::make_unique<FedAvg>(); }

absl::StatusOr<Model> WeightedAverage(const std::vector<const Model*>& models,
                                      const std::vector<double>& weights) {
  if (models.empty() || models.size() != weights.size()) {
    return absl::InvalidArgumentError("WeightedAverage needs as many weights as models, and some");
  }
  double total = 0;
  for (size_t i = 0; i < models.size(); ++i) {
    if (!(weights[i] > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("weight ", i, " is not positive"));
    }
    if (!(models[i]->spec() == models[0]->spec())) {
      return absl::InvalidArgumentError(absl::StrCat("model ", i, " has another spec"));
    }
    total += weights[i];
  }
  Model out(models[0]->spec());
  std::span<float> data = out.data();
  for (size_t j = 0; j < data.size(); ++j) {
    double acc = 0;
    for (size_t i = 0; i < models.size(); ++i) acc += weights[i] * models[i]->data()[j];
    data[j] = static_cast<float>(acc / total);
  }
  return out;
}

}  // namespace fl::aggregation
