#include "fl/aggregation/scaffold.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "aggregation/internal/accepted_weight.h"
#include "aggregation/internal/striped_sum.h"

namespace fl::aggregation {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

class ScaffoldAggregator final : public RoundAggregator {
 public:
  // `spec_ok` is CheckScaffoldSpec(global.spec()); when it failed, every fold is ignored and
  // Finish returns it. `num_parties` < 1: the number of accepted updates.
  ScaffoldAggregator(const Model& global, absl::Status spec_ok, double server_learning_rate,
                     int64_t num_parties)
      : spec_ok_(std::move(spec_ok)),
        eta_(server_learning_rate),
        num_parties_(num_parties),
        global_(spec_ok_.ok() ? std::optional<Model>(global.Clone()) : std::nullopt),
        weights_end_(spec_ok_.ok() ? global.spec().NumFloats() / 2 : 0),
        sum_(spec_ok_.ok() ? global.spec() : ModelSpec({{"unused", {1}}})) {}

  void Fold(int64_t offset, std::span<const float> values, double weight) override {
    if (!spec_ok_.ok()) return;
    // Weights [0, weights_end_) are averaged with the update's weight; the control-variate deltas
    // after them are summed unweighted.
    const int64_t end = offset + static_cast<int64_t>(values.size());
    if (offset < weights_end_) {
      const int64_t n = std::min(end, weights_end_) - offset;
      sum_.Add(offset, values.first(static_cast<size_t>(n)), weight);
    }
    if (end > weights_end_) {
      const int64_t from = std::max(offset, weights_end_);
      sum_.Add(from, values.subspan(static_cast<size_t>(from - offset)), 1.0);
    }
  }

  void Accept(double weight) override { accepted_.Add(weight); }
  int num_accepted() const override { return accepted_.count(); }

  absl::StatusOr<Model> Finish() override {
    if (!spec_ok_.ok()) return spec_ok_;
    if (absl::Status s = accepted_.CheckAny("SCAFFOLD"); !s.ok()) return s;
    const int num_accepted = accepted_.count();
    const int64_t parties = num_parties_ >= 1 ? num_parties_ : num_accepted;
    if (num_accepted > parties) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SCAFFOLD: ", num_accepted, " updates were accepted but the federation has N = ", parties,
          " parties; set strategy.num_parties to the number of parties"));
    }
    std::span<const float> x = global_->data();
    const double inv_weight = 1.0 / accepted_.total();
    const double inv_parties = 1.0 / static_cast<double>(parties);
    const double eta = eta_;
    const int64_t weights_end = weights_end_;
    return sum_.TakeModel("SCAFFOLD: the new global model", [&](int64_t i, double sum) {
      const double xi = x[static_cast<size_t>(i)];
      return i < weights_end ? xi + eta * (sum * inv_weight - xi) : xi + sum * inv_parties;
    });
  }

 private:
  const absl::Status spec_ok_;
  const double eta_;
  const int64_t num_parties_;
  const std::optional<Model> global_;  // x and c of the round's global model
  const int64_t weights_end_;          // floats of the weights; the control variates follow
  internal::StripedSum sum_;
  internal::AcceptedWeight accepted_;
};

class Scaffold final : public Strategy {
 public:
  explicit Scaffold(ScaffoldOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "scaffold"; }

  absl::Status CheckModel(const ModelSpec& spec) const override { return CheckScaffoldSpec(spec); }

  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    const int64_t parties = options_.num_parties ? options_.num_parties() : 0;
    return std::make_unique<ScaffoldAggregator>(global, CheckScaffoldSpec(global.spec()),
                                                options_.server_learning_rate, parties);
  }

 private:
  const ScaffoldOptions options_;
};

}  // namespace

absl::Status CheckScaffoldSpec(const ModelSpec& spec) {
  const std::vector<TensorSpec>& t = spec.tensors();
  size_t weights = 0;
  while (weights < t.size() && !IsScaffoldTensor(t[weights].name)) ++weights;
  if (weights == 0) {
    return absl::InvalidArgumentError(
        "SCAFFOLD: the model has no weight tensors before its control variates");
  }
  if (t.size() != 2 * weights) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SCAFFOLD: the model has ", weights, " weight tensors but ", t.size() - weights,
        " tensors after them; each weight tensor t needs one control variate '",
        std::string(kScaffoldPrefix), "<t>', in the same order"));
  }
  for (size_t i = 0; i < weights; ++i) {
    const TensorSpec& c = t[weights + i];
    const std::string want = absl::StrCat(std::string(kScaffoldPrefix), t[i].name);
    if (c.name != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("SCAFFOLD: tensor ", weights + i, " is '", c.name, "' but should be '", want,
                       "', the control variate of '", t[i].name, "'"));
    }
    if (c.shape != t[i].shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("SCAFFOLD: control variate '", c.name, "' has shape ", ShapeText(c.shape),
                       " but '", t[i].name, "' has shape ", ShapeText(t[i].shape)));
    }
  }
  return absl::OkStatus();
}

Model WithZeroControlVariates(const Model& weights) {
  Model out(ScaffoldSpec(weights.spec()));
  std::copy(weights.data().begin(), weights.data().end(), out.data().begin());
  return out;
}

Model WithoutControlVariates(const Model& scaffold_model) {
  const std::vector<TensorSpec>& all = scaffold_model.spec().tensors();
  Model out(ModelSpec(std::vector<TensorSpec>(all.begin(), all.begin() + all.size() / 2)));
  std::copy_n(scaffold_model.data().begin(), out.data().size(), out.data().begin());
  return out;
}

std::unique_ptr<Strategy> MakeScaffold(ScaffoldOptions options) {
  return std::make_unique<Scaffold>(std::move(options));
}

}  // namespace fl::aggregation
