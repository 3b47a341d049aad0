// Bases for strategies that wrap another (Flower's wrappers: differential privacy, robustness):
// every call goes on to the inner strategy or aggregator unless the wrapper overrides it, so a
// wrapper states only what it changes and a method added to Strategy later reaches the inner
// one without touching every wrapper.
#ifndef FL_AGGREGATION_STRATEGY_WRAPPER_H_
#define FL_AGGREGATION_STRATEGY_WRAPPER_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

class StrategyWrapper : public Strategy {
 public:
  // Wraps `inner`, which must outlive the wrapper.
  explicit StrategyWrapper(Strategy& inner) : inner_(&inner) {}
  // Wraps and owns `inner`.
  explicit StrategyWrapper(std::unique_ptr<Strategy> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}

  std::string name() const override { return inner_->name(); }
  absl::Status CheckModel(const ModelSpec& spec) const override { return inner_->CheckModel(spec); }
  absl::Status CheckPlan(const RunPlan& plan) const override { return inner_->CheckPlan(plan); }
  absl::StatusOr<RoundPlan> ConfigureFit(const RoundContext& ctx) const override {
    return inner_->ConfigureFit(ctx);
  }
  absl::StatusOr<RoundPlan> ConfigureEvaluate(const RoundContext& ctx) const override {
    return inner_->ConfigureEvaluate(ctx);
  }
  absl::StatusOr<EvaluationSummary> AggregateEvaluate(
      int32_t round, std::span<const SiteEvaluation> results,
      std::span<const SiteFailure> failures) const override {
    return inner_->AggregateEvaluate(round, results, failures);
  }
  double update_norm_bound() const override { return inner_->update_norm_bound(); }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return inner_->BeginRound(global);
  }
  absl::Status AdoptState(Model state) override { return inner_->AdoptState(std::move(state)); }

 protected:
  Strategy& inner() const { return *inner_; }

 private:
  std::unique_ptr<Strategy> owned_;  // null when the caller owns the inner strategy
  Strategy* inner_;
};

// BeginUpdate hands out the inner aggregator's sink (a robust one keeps the update in its spill,
// which only it can do), and that sink writes into the inner aggregator directly: an override of
// Fold or Accept alone is bypassed by every update the engine streams. A wrapper that changes
// what an update counts for overrides BeginUpdate, and Fold and Accept too for callers that fold
// directly (dp/central_dp.cc does both).
class RoundAggregatorWrapper : public RoundAggregator {
 public:
  explicit RoundAggregatorWrapper(std::unique_ptr<RoundAggregator> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<std::unique_ptr<UpdateSink>> BeginUpdate(const UpdateInfo& info) override {
    return inner_->BeginUpdate(info);
  }
  absl::Status CheckUpdate(const UpdateInfo& info) const override {
    return inner_->CheckUpdate(info);
  }
  bool keeps_updates_apart() const override { return inner_->keeps_updates_apart(); }
  void Fold(int64_t offset, std::span<const float> values, double weight) override {
    inner_->Fold(offset, values, weight);
  }
  void Accept(double weight) override { inner_->Accept(weight); }
  int num_accepted() const override { return inner_->num_accepted(); }
  absl::StatusOr<Model> Finish() override { return inner_->Finish(); }
  std::optional<Model> TakeState() override { return inner_->TakeState(); }
  void Failed(const SiteFailure& failure) override { inner_->Failed(failure); }

 protected:
  RoundAggregator& inner() const { return *inner_; }

 private:
  std::unique_ptr<RoundAggregator> inner_;
};

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_STRATEGY_WRAPPER_H_
