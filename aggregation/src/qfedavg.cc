#include "fl/aggregation/qfedavg.h"

#include <cmath>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "aggregation/internal/striped_sum.h"

namespace fl::aggregation {
namespace {

class QFedAvgAggregator;

// One update: its pieces go into the round's sum with weight F^q, and ||w - x||^2 is measured
// as they pass; Accept adds its h_k.
class QFedAvgSink final : public UpdateSink {
 public:
  QFedAvgSink(QFedAvgAggregator& round, double fq, double h_per_norm, double h_constant)
      : round_(round), fq_(fq), h_per_norm_(h_per_norm), h_constant_(h_constant) {}
  absl::Status Write(int64_t offset, std::span<const float> values) override;
  absl::Status Accept() override;

 private:
  QFedAvgAggregator& round_;
  const double fq_;          // F^q
  const double h_per_norm_;  // q F^(q-1) L^2: h's factor on ||x - w||^2
  const double h_constant_;  // L F^q
  double norm_sq_ = 0;       // ||x - w||^2 of the pieces written so far
  bool accepted_ = false;
};

class QFedAvgAggregator final : public RoundAggregator {
 public:
  QFedAvgAggregator(const QFedAvgOptions& options, const Model& global)
      : options_(options), global_(global), sum_(global.spec()) {}

  absl::Status CheckUpdate(const UpdateInfo& info) const override {
    return WeightsOf(info).status();
  }

  absl::StatusOr<std::unique_ptr<UpdateSink>> BeginUpdate(const UpdateInfo& info) override {
    absl::StatusOr<Weights> w = WeightsOf(info);
    if (!w.ok()) return w.status();
    return std::make_unique<QFedAvgSink>(*this, w->fq, w->per_norm, w->constant);
  }

  // Pieces without an update (a secure round's sum) have no loss to weigh them by.
  void Fold(int64_t, std::span<const float>, double) override { Misuse(); }
  void Accept(double) override { Misuse(); }

  int num_accepted() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }

  absl::StatusOr<Model> Finish() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (misused_) {
      return absl::InternalError("q-FedAvg was given pieces of updates without their losses");
    }
    if (accepted_ == 0 || !(h_ > 0)) {
      return absl::FailedPreconditionError("q-FedAvg: no update was accepted in this round");
    }
    // x' = x - L (C x - S) / H, with C = sum F^q and S = sum F^q w.
    const double l = 1.0 / options_.qffl_learning_rate;
    const double step = l / h_;
    const double c = c_;
    std::span<const float> x = global_.data();
    return sum_.TakeModel("q-FedAvg: the next model", [&](int64_t i, double s) {
      return x[static_cast<size_t>(i)] - step * (c * x[static_cast<size_t>(i)] - s);
    });
  }

  void Add(int64_t offset, std::span<const float> values, double weight) {
    sum_.Add(offset, values, weight);
  }
  float global_at(int64_t i) const { return global_.data()[static_cast<size_t>(i)]; }
  void Count(double fq, double h) {
    std::lock_guard<std::mutex> lock(mu_);
    c_ += fq;
    h_ += h;
    ++accepted_;
  }

 private:
  // An update's F^q, h's factor on ||x - w||^2 and h's constant, from its initial_loss F.
  struct Weights {
    double fq, per_norm, constant;
  };
  absl::StatusOr<Weights> WeightsOf(const UpdateInfo& info) const {
    auto it = info.metrics.find(kInitialLossMetric);
    if (it == info.metrics.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "q-FedAvg weighs each update by the metric '", kInitialLossMetric,
          "' (the loss of the round's global model on the site's training data), which this "
          "update lacks; built-in trainers send it when the fit config has '",
          kReportInitialLossKey, "', a custom trainer must add it to its metrics"));
    }
    const double loss = it->second;
    if (!std::isfinite(loss) || loss < 0) {
      return absl::InvalidArgumentError(absl::StrCat("q-FedAvg: the update's ", kInitialLossMetric,
                                                     " must be finite and >= 0, got ", loss));
    }
    const double f = loss + 1e-10;
    const double q = options_.q;
    const double l = 1.0 / options_.qffl_learning_rate;
    Weights w{std::pow(f, q), q * std::pow(f, q - 1) * l * l, 0};
    w.constant = l * w.fq;
    if (!std::isfinite(w.fq) || !std::isfinite(w.per_norm) || !std::isfinite(w.constant)) {
      return absl::InvalidArgumentError(absl::StrCat("q-FedAvg: the update's ", kInitialLossMetric,
                                                     " ", loss, " raised to q = ", q,
                                                     " is not finite; lower q"));
    }
    return w;
  }
  void Misuse() {
    std::lock_guard<std::mutex> lock(mu_);
    misused_ = true;
  }

  const QFedAvgOptions options_;
  const Model& global_;  // outlives Finish (Strategy::BeginRound)
  internal::StripedSum sum_;
  mutable std::mutex mu_;
  double c_ = 0;  // sum F^q, guarded by mu_
  double h_ = 0;  // sum h_k, guarded by mu_
  int accepted_ = 0;
  bool misused_ = false;
};

absl::Status QFedAvgSink::Write(int64_t offset, std::span<const float> values) {
  round_.Add(offset, values, fq_);
  for (size_t i = 0; i < values.size(); ++i) {
    const double d = static_cast<double>(values[i]) - round_.global_at(offset + i);
    norm_sq_ += d * d;
  }
  return absl::OkStatus();
}

absl::Status QFedAvgSink::Accept() {
  if (accepted_) return absl::FailedPreconditionError("update accepted twice");
  accepted_ = true;
  const double h = h_per_norm_ * norm_sq_ + h_constant_;
  if (!std::isfinite(h)) {
    return absl::InvalidArgumentError(
        "q-FedAvg: the update's h (from its loss and its distance to the global model) is not "
        "finite");
  }
  round_.Count(fq_, h);
  return absl::OkStatus();
}

class QFedAvg final : public Strategy {
 public:
  explicit QFedAvg(QFedAvgOptions options) : options_(options) {}
  std::string name() const override { return "qfedavg"; }
  absl::Status CheckPlan(const RunPlan& plan) const override {
    if (plan.secure_aggregation) {
      return absl::InvalidArgumentError(
          "strategy 'qfedavg' weighs each site's update by its own loss and distance, which "
          "secure aggregation hides from the server; turn secure aggregation off, or choose "
          "fedavg");
    }
    if (plan.central_dp) {
      return absl::InvalidArgumentError(
          "central DP cannot wrap strategy 'qfedavg': its noise is calibrated to a mean's "
          "sensitivity; use fedavg with central DP");
    }
    return absl::OkStatus();
  }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<QFedAvgAggregator>(options_, global);
  }

 private:
  const QFedAvgOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> MakeQFedAvg(QFedAvgOptions options) {
  if (!std::isfinite(options.q) || options.q < 0) {
    return absl::InvalidArgumentError(absl::StrCat("q must be >= 0, got ", options.q));
  }
  if (!std::isfinite(options.qffl_learning_rate) || !(options.qffl_learning_rate > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("qffl_learning_rate must be > 0, got ", options.qffl_learning_rate));
  }
  return std::make_unique<QFedAvg>(options);
}

}  // namespace fl::aggregation
