#include "fl/aggregation/robust.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "aggregation/internal/kept_updates.h"
#include "aggregation/internal/robust_kernels.h"

namespace fl::aggregation {
namespace {

using internal::ReleaseFn;
using internal::Rows;

class RobustAggregator final : public internal::KeptUpdatesRound {
 public:
  RobustAggregator(const RobustOptions& options, std::shared_ptr<SpillSpace> spill, ModelSpec spec)
      : KeptUpdatesRound(options.name, std::move(spill), std::move(spec)), options_(options) {}

 protected:
  absl::Status CheckCount(int k) const override {
    if (const int32_t need = MinRobustUpdates(options_); k < need) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.name, " with num_malicious = ", options_.num_malicious,
                       " needs at least ", need, " updates in a round, and this one accepted ", k));
    }
    return absl::OkStatus();
  }

  absl::Status Combine(const Rows& rows, const std::vector<double>& weights,
                       const ReleaseFn& release, std::span<float> out) override {
    const int k = static_cast<int>(rows.size());
    const std::string& name = options_.name;
    const int f = options_.num_malicious;
    if (name == "fedmedian") {
      internal::CoordinateMedian(rows, out, release);
    } else if (name == "fedtrimmedavg") {
      const int cut = static_cast<int>(std::floor(options_.trim_beta * static_cast<double>(k)));
      internal::TrimmedMean(rows, cut, out, release);
    } else if (name == "krum" || name == "multikrum") {
      const std::vector<double> d2 = internal::SquaredDistances(rows, release);
      std::vector<int> all(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) all[static_cast<size_t>(i)] = i;
      const int m = name == "krum" ? 1 : (options_.num_to_keep > 0 ? options_.num_to_keep : k - f);
      internal::WeightedMeanOfRows(
          rows, internal::KrumSelect(d2, k, std::move(all), f, m),
          name == "krum" ? std::vector<double>(static_cast<size_t>(k), 1.0) : weights, out,
          release);
    } else {  // bulyan
      const std::vector<double> d2 = internal::SquaredDistances(rows, release);
      internal::MeanClosestToMedian(rows, internal::BulyanSelect(d2, k, f), k - 4 * f, out,
                                    release);
    }
    return absl::OkStatus();
  }

 private:
  const RobustOptions options_;
};

class RobustStrategy final : public Strategy {
 public:
  RobustStrategy(RobustOptions options, std::shared_ptr<SpillSpace> spill)
      : options_(std::move(options)), spill_(std::move(spill)) {}

  std::string name() const override { return options_.name; }

  absl::Status CheckPlan(const RunPlan& plan) const override {
    if (plan.secure_aggregation) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", options_.name,
          "' needs each site's update apart, and secure aggregation shows the server only their "
          "sum; turn secure aggregation off, or choose fedavg"));
    }
    if (plan.central_dp) {
      return absl::InvalidArgumentError(absl::StrCat(
          "central DP cannot wrap strategy '", options_.name,
          "': its noise is calibrated to a mean's sensitivity; use fedavg with central DP"));
    }
    if (const int32_t need = MinRobustUpdates(options_); plan.min_updates < need) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", options_.name, "' with num_malicious = ", options_.num_malicious,
          (options_.name == "multikrum" && options_.num_to_keep > 0
               ? absl::StrCat(" and num_to_keep = ", options_.num_to_keep)
               : std::string()),
          " needs at least ", need, " updates in every round, and min_fit_clients is ",
          plan.min_updates, "; raise min_fit_clients to ", need, " or lower num_malicious"));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<RobustAggregator>(options_, spill_, global.spec());
  }

 private:
  const RobustOptions options_;
  const std::shared_ptr<SpillSpace> spill_;
};

}  // namespace

bool IsRobustStrategy(const std::string& name) {
  return name == "fedmedian" || name == "fedtrimmedavg" || name == "krum" || name == "multikrum" ||
         name == "bulyan";
}

int32_t MinRobustUpdates(const RobustOptions& options) {
  const int32_t f = options.num_malicious;
  if (options.name == "krum") return 2 * f + 3;
  if (options.name == "multikrum") return std::max(2 * f + 3, f + options.num_to_keep);
  if (options.name == "bulyan") return 4 * f + 3;
  return 1;
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeRobustStrategy(RobustOptions options,
                                                             std::shared_ptr<SpillSpace> spill) {
  if (!IsRobustStrategy(options.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", options.name,
                     "' is not a robust strategy; choose fedmedian, fedtrimmedavg, krum, "
                     "multikrum or bulyan"));
  }
  if (!(options.trim_beta >= 0 && options.trim_beta < 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trim_beta must be in [0, 0.5) (at 0.5 the trimmed mean trims every value), got ",
        options.trim_beta));
  }
  if (options.num_malicious < 0 || options.num_malicious > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_malicious must be in [0, 1000000], got ", options.num_malicious));
  }
  if (options.num_to_keep < 0 || options.num_to_keep > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_to_keep must be in [0, 1000000] (0: K - num_malicious), got ", options.num_to_keep));
  }
  if (spill == nullptr) return absl::InvalidArgumentError("a robust strategy needs a spill");
  return std::make_unique<RobustStrategy>(std::move(options), std::move(spill));
}

}  // namespace fl::aggregation
