#include "fl/aggregation/fltrust.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aggregation/internal/kept_updates.h"
#include "aggregation/internal/robust_kernels.h"

namespace fl::aggregation {
namespace {

using internal::ReleaseFn;
using internal::Rows;

class FLTrustRound final : public internal::KeptUpdatesRound {
 public:
  FLTrustRound(const RootTrainer& root, std::shared_ptr<SpillSpace> spill, const Model& global,
               int32_t round)
      : KeptUpdatesRound("fltrust", std::move(spill), global.spec()),
        root_(root),
        global_(global),
        round_(round) {}

 protected:
  absl::Status Combine(const Rows& rows, const std::vector<double>&, const ReleaseFn& release,
                       std::span<float> out) override {
    // The server's own change, trained on its root data.
    absl::StatusOr<Model> trained = root_(global_, round_);
    if (!trained.ok()) {
      return absl::Status(trained.status().code(),
                          absl::StrCat("fltrust: training on the server's root data failed: ",
                                       trained.status().message()));
    }
    if (trained->spec() != global_.spec()) {
      return absl::InternalError("fltrust: the root trainer returned a model of another spec");
    }
    std::span<const float> x = global_.data();
    std::vector<float> g0(x.size());
    double g0_norm_sq = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      g0[j] = trained->data()[j] - x[j];
      g0_norm_sq += static_cast<double>(g0[j]) * g0[j];
    }
    if (!(g0_norm_sq > 0)) {
      return absl::FailedPreconditionError(
          "fltrust: training on the root data did not move the model, so no site's change can "
          "be compared with it; check the root data and the learning rate");
    }
    std::vector<double> dots, norms_sq;
    internal::ChangeDotsAndNorms(rows, x, g0, dots, norms_sq);
    const double g0_norm = std::sqrt(g0_norm_sq);
    std::vector<double> coeffs(rows.size(), 0.0);
    double trust_sum = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!(norms_sq[i] > 0)) continue;  // no change: nothing to trust
      const double norm = std::sqrt(norms_sq[i]);
      const double trust = std::max(0.0, dots[i] / (norm * g0_norm));
      coeffs[i] = trust * g0_norm / norm;
      trust_sum += trust;
    }
    if (!(trust_sum > 0)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fltrust: no site's change agreed with the server's (every trust score is 0 among ",
          rows.size(), " updates)"));
    }
    for (double& c : coeffs) c /= trust_sum;
    internal::AddScaledChanges(rows, coeffs, x, out, release);
    return absl::OkStatus();
  }

 private:
  const RootTrainer& root_;
  const Model& global_;  // outlives Finish (Strategy::BeginRound)
  const int32_t round_;
};

class FLTrust final : public Strategy {
 public:
  FLTrust(RootTrainer root, std::shared_ptr<SpillSpace> spill)
      : root_(std::move(root)), spill_(std::move(spill)) {}
  std::string name() const override { return "fltrust"; }
  absl::Status CheckPlan(const RunPlan& plan) const override {
    if (plan.secure_aggregation) {
      return absl::InvalidArgumentError(
          "strategy 'fltrust' compares each site's change with the server's, and secure "
          "aggregation shows the server only their sum; turn secure aggregation off, or choose "
          "fedavg");
    }
    if (plan.central_dp) {
      return absl::InvalidArgumentError(
          "central DP cannot wrap strategy 'fltrust': its noise is calibrated to a mean's "
          "sensitivity; use fedavg with central DP");
    }
    return absl::OkStatus();
  }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<FLTrustRound>(root_, spill_, global, ++rounds_begun_);
  }

 private:
  const RootTrainer root_;
  const std::shared_ptr<SpillSpace> spill_;
  int32_t rounds_begun_ = 0;  // round attempts begun: the root trainer's `attempt`
};

}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> MakeFLTrust(RootTrainer root,
                                                      std::shared_ptr<SpillSpace> spill) {
  if (!root) {
    return absl::InvalidArgumentError(
        "strategy 'fltrust' needs a root dataset on the server to train on: `fl server` takes "
        "model.root_images and root_labels, `fl sim` keeps strategy.root_examples training "
        "rows, a program embedding the server gives ServerOptions::root_trainer");
  }
  if (spill == nullptr) return absl::InvalidArgumentError("strategy 'fltrust' needs a spill");
  return std::make_unique<FLTrust>(std::move(root), std::move(spill));
}

}  // namespace fl::aggregation
