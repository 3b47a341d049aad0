#include "fl/aggregation/dp/central_dp.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/server_optimizers.h"
#include "fl/aggregation/strategy_wrapper.h"

namespace fl::aggregation::dp {
namespace {

class CentralDpAggregator final : public RoundAggregatorWrapper {
 public:
  CentralDpAggregator(std::unique_ptr<RoundAggregator> inner, const CentralDpOptions& options)
      : RoundAggregatorWrapper(std::move(inner)), options_(options) {}

  // Every update counts alike (see the header): the inner mean is unweighted, whether the update
  // streams in (BeginUpdate) or is folded directly.
  absl::StatusOr<std::unique_ptr<UpdateSink>> BeginUpdate(const UpdateInfo& info) override {
    UpdateInfo alike = info;
    alike.weight = 1.0;
    return inner().BeginUpdate(alike);
  }
  void Fold(int64_t offset, std::span<const float> values, double weight) override {
    inner().Fold(offset, values, 1.0);
  }
  void Accept(double weight) override { inner().Accept(1.0); }

  absl::StatusOr<Model> Finish() override {
    absl::StatusOr<Model> mean = inner().Finish();
    if (!mean.ok()) return mean.status();
    const int n = inner().num_accepted();
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
  const CentralDpOptions options_;  // a copy: an aggregator may outlive its strategy
};

class CentralDpStrategy final : public StrategyWrapper {
 public:
  CentralDpStrategy(Strategy& inner, CentralDpOptions options)
      : StrategyWrapper(inner), options_(std::move(options)) {}

  std::string name() const override { return inner().name() + "+central_dp"; }
  // The engine clips every update's change to C before the mean sees it.
  // (A tighter bound of the inner strategy's, a norm bound, holds too: clipping further keeps
  // every change within C.)
  double update_norm_bound() const override {
    const double inner_bound = inner().update_norm_bound();
    return inner_bound > 0 ? std::min(inner_bound, options_.clip_norm) : options_.clip_norm;
  }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<CentralDpAggregator>(inner().BeginRound(global), options_);
  }

 private:
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
