#include "fl/aggregation/dp/central_dp.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/server_optimizers.h"

namespace fl::aggregation::dp {
namespace {

class CentralDpAggregator final : public RoundAggregator {
 public:
  CentralDpAggregator(std::unique_ptr<RoundAggregator> inner, const CentralDpOptions& options)
      : inner_(std::move(inner)), options_(options) {}

  // Every update counts alike (see the header): the inner mean is unweighted.
  void Fold(int64_t offset, std::span<const float> values, double weight) override {
    inner_->Fold(offset, values, 1.0);
  }
  void Accept(double weight) override { inner_->Accept(1.0); }
  int num_accepted() const override { return inner_->num_accepted(); }

  absl::StatusOr<Model> Finish() override {
    absl::StatusOr<Model> mean = inner_->Finish();
    if (!mean.ok()) return mean.status();
    const int n = inner_->num_accepted();
    const double stddev = options_.noise_multiplier * options_.clip_norm / n;
    std::unique_ptr<BitSource> source =
        options_.make_source ? options_.make_source() : MakeSecureBitSource();
    GaussianSampler sampler(*source);
    if (absl::Status s = AddGaussianNoise(mean->data(), stddev, sampler); !s.ok()) {
      return absl::InternalError(
          absl::StrCat("could not add differential-privacy noise: ", s.message()));
    }
    return mean;
  }

 private:
  std::unique_ptr<RoundAggregator> inner_;
  const CentralDpOptions options_;  // a copy: an aggregator may outlive its strategy
};

class CentralDpStrategy final : public Strategy {
 public:
  CentralDpStrategy(Strategy& inner, CentralDpOptions options)
      : inner_(inner), options_(std::move(options)) {}

  std::string name() const override { return inner_.name() + "+central_dp"; }
  absl::Status CheckModel(const ModelSpec& spec) const override { return inner_.CheckModel(spec); }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<CentralDpAggregator>(inner_.BeginRound(global), options_);
  }

 private:
  Strategy& inner_;
  CentralDpOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> MakeCentralDp(Strategy& inner, CentralDpOptions options) {
  if (inner.name() == "scaffold") {
    return absl::InvalidArgumentError(
        "central DP cannot wrap strategy 'scaffold': its control variates are not a mean of the "
        "clients' models; use fedavg or fedprox");
  }
  if (IsServerOptimizer(inner.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "central DP cannot wrap strategy '", inner.name(),
        "': the noise must be added to the mean before a server optimizer steps on it, which "
        "this wrapper (noise on the inner strategy's result) does not do; use fedavg or fedprox"));
  }
  if (absl::Status s = inner.CheckPlan({.central_dp = true}); !s.ok()) return s;
  if (absl::StatusOr<double> s = CentralNoiseStddev(options.noise_multiplier, options.clip_norm);
      !s.ok()) {
    return s.status();
  }
  return std::make_unique<CentralDpStrategy>(inner, std::move(options));
}

}  // namespace fl::aggregation::dp
