#include "fl/aggregation/wrappers.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fl/aggregation/strategy_wrapper.h"

namespace fl::aggregation {
namespace {

// The smaller of two bounds, 0 meaning none.
double TighterBound(double a, double b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

class NormBoundStrategy final : public StrategyWrapper {
 public:
  NormBoundStrategy(std::unique_ptr<Strategy> inner, double max_norm)
      : StrategyWrapper(std::move(inner)), max_norm_(max_norm) {}

  absl::Status CheckPlan(const RunPlan& plan) const override {
    if (plan.secure_aggregation) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy.norm_bound (", max_norm_,
          ") cannot be used with secure aggregation: the server cannot clip updates it only sees "
          "masked; bound them on the sites (privacy.mode = \"distributed\" clips each change) or "
          "turn secure aggregation off"));
    }
    return inner().CheckPlan(plan);
  }
  double update_norm_bound() const override {
    return TighterBound(max_norm_, inner().update_norm_bound());
  }

 private:
  double max_norm_;
};

class RequireEveryAggregator final : public RoundAggregatorWrapper {
 public:
  using RoundAggregatorWrapper::RoundAggregatorWrapper;

  void Failed(const SiteFailure& failure) override {
    {
      absl::MutexLock lock(&mu_);
      failures_.push_back(failure);
    }
    inner().Failed(failure);
  }
  absl::StatusOr<Model> Finish() override {
    {
      absl::MutexLock lock(&mu_);
      if (!failures_.empty()) {
        constexpr size_t kShown = 5;
        std::string text = absl::StrCat("accept_failures is false and ", failures_.size(),
                                        " of the sampled sites failed: ");
        for (size_t i = 0; i < std::min(kShown, failures_.size()); ++i) {
          const SiteFailure& f = failures_[i];
          absl::StrAppend(&text, i == 0 ? "" : "; ", f.site.substr(0, 16), " ",
                          SiteFailureKindName(f.kind), " (", f.reason, ")");
        }
        if (failures_.size() > kShown) absl::StrAppend(&text, "; ...");
        return absl::FailedPreconditionError(text);
      }
    }
    return inner().Finish();
  }

 private:
  absl::Mutex mu_;
  std::vector<SiteFailure> failures_ ABSL_GUARDED_BY(mu_);
};

class RequireEverySiteStrategy final : public StrategyWrapper {
 public:
  using StrategyWrapper::StrategyWrapper;
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<RequireEveryAggregator>(inner().BeginRound(global));
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> MakeNormBound(std::unique_ptr<Strategy> inner,
                                                        double max_norm) {
  if (!std::isfinite(max_norm) || max_norm <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm_bound must be a finite number > 0, got ", max_norm));
  }
  if (inner->name() == "scaffold") {
    return absl::InvalidArgumentError(
        "norm_bound cannot wrap strategy 'scaffold': its updates carry control variates, which "
        "are no change of the model to bound; use fedavg, fedprox or a robust strategy");
  }
  return std::make_unique<NormBoundStrategy>(std::move(inner), max_norm);
}

std::unique_ptr<Strategy> MakeRequireEverySite(std::unique_ptr<Strategy> inner) {
  return std::make_unique<RequireEverySiteStrategy>(std::move(inner));
}

}  // namespace fl::aggregation
