#include "fl/aggregation/robust.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "aggregation/internal/robust_kernels.h"

namespace fl::aggregation {
namespace {

using internal::Rows;

struct Kept {
  std::unique_ptr<SpillFile> file;
  double weight = 0;
};

class RobustAggregator;

// Writes one update into its own spill file; Accept hands the file to the round.
class SpillSink final : public UpdateSink {
 public:
  SpillSink(RobustAggregator& round, std::unique_ptr<SpillFile> file, double weight)
      : round_(round), file_(std::move(file)), weight_(weight) {}
  absl::Status Write(int64_t offset, std::span<const float> values) override {
    return file_->Write(offset, values);
  }
  absl::Status Accept() override;

 private:
  RobustAggregator& round_;
  std::unique_ptr<SpillFile> file_;
  double weight_;
};

class RobustAggregator final : public RoundAggregator {
 public:
  RobustAggregator(const RobustOptions& options, std::shared_ptr<SpillSpace> spill, ModelSpec spec)
      : options_(options), spill_(std::move(spill)), spec_(std::move(spec)) {}

  absl::StatusOr<std::unique_ptr<UpdateSink>> BeginUpdate(double weight) override {
    absl::StatusOr<std::unique_ptr<SpillFile>> file = spill_->Create(spec_.NumFloats());
    if (!file.ok()) return file.status();
    return std::make_unique<SpillSink>(*this, *std::move(file), weight);
  }
  bool keeps_updates_apart() const override { return true; }

  // Robust statistics need each update whole and apart: pieces folded without BeginUpdate
  // cannot be told apart, and fail the round.
  void Fold(int64_t, std::span<const float>, double) override { MarkMisused(); }
  void Accept(double) override { MarkMisused(); }

  int num_accepted() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(kept_.size());
  }

  void Keep(std::unique_ptr<SpillFile> file, double weight) {
    std::lock_guard<std::mutex> lock(mu_);
    kept_.push_back({std::move(file), weight});
  }

  absl::StatusOr<Model> Finish() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (misused_) {
      return absl::InternalError(absl::StrCat("strategy '", options_.name,
                                              "' was given pieces of updates not kept apart"));
    }
    const int k = static_cast<int>(kept_.size());
    if (k == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.name, ": no update was accepted in this round"));
    }
    if (const int32_t need = MinRobustUpdates(options_); k < need) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.name, " with num_malicious = ", options_.num_malicious,
                       " needs at least ", need, " updates in a round, and this one accepted ", k));
    }
    Rows rows;
    std::vector<double> weights;
    for (Kept& kept : kept_) {
      absl::StatusOr<std::span<const float>> row = kept.file->Map();
      if (!row.ok()) return row.status();
      rows.push_back(*row);
      weights.push_back(kept.weight);
    }
    // Each block of every update leaves the server's memory once read.
    internal::ReleaseFn release = [this](int64_t first, int64_t count) {
      for (Kept& kept : kept_) kept.file->Release(first, count);
    };
    Model out(spec_);
    std::span<float> data = out.data();
    const std::string& name = options_.name;
    const int f = options_.num_malicious;
    if (name == "fedmedian") {
      internal::CoordinateMedian(rows, data, release);
    } else if (name == "fedtrimmedavg") {
      internal::TrimmedMean(rows, TrimCount(k), data, release);
    } else if (name == "krum" || name == "multikrum") {
      const std::vector<double> d2 = internal::SquaredDistances(rows, release);
      std::vector<int> all(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) all[static_cast<size_t>(i)] = i;
      const int m = name == "krum" ? 1 : (options_.num_to_keep > 0 ? options_.num_to_keep : k - f);
      internal::WeightedMeanOfRows(
          rows, internal::KrumSelect(d2, k, std::move(all), f, m),
          name == "krum" ? std::vector<double>(static_cast<size_t>(k), 1.0) : weights, data,
          release);
    } else {  // bulyan
      const std::vector<double> d2 = internal::SquaredDistances(rows, release);
      internal::MeanClosestToMedian(rows, internal::BulyanSelect(d2, k, f), k - 4 * f, data,
                                    release);
    }
    for (size_t i = 0; i < data.size(); ++i) {
      if (!std::isfinite(data[i])) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, ": the aggregate is not finite at parameter ", i, " (", data[i], ")"));
      }
    }
    return out;
  }

 private:
  int TrimCount(int k) const {
    return static_cast<int>(std::floor(options_.trim_beta * static_cast<double>(k)));
  }
  void MarkMisused() {
    std::lock_guard<std::mutex> lock(mu_);
    misused_ = true;
  }

  const RobustOptions options_;
  const std::shared_ptr<SpillSpace> spill_;
  const ModelSpec spec_;
  mutable std::mutex mu_;
  std::vector<Kept> kept_;  // guarded by mu_
  bool misused_ = false;    // guarded by mu_
};

absl::Status SpillSink::Accept() {
  if (file_ == nullptr) return absl::FailedPreconditionError("update accepted twice");
  round_.Keep(std::move(file_), weight_);
  return absl::OkStatus();
}

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
    if (options_.name == "fedtrimmedavg" &&
        std::floor(options_.trim_beta * plan.min_updates) * 2 >= plan.min_updates) {
      return absl::InvalidArgumentError(
          absl::StrCat("fedtrimmedavg with trim_beta = ", options_.trim_beta,
                       " trims every value of a round "
                       "of ",
                       plan.min_updates, " updates; lower trim_beta below 0.5"));
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
