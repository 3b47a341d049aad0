#include "fl/aggregation/strategy.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "fl/common/random.h"

namespace fl::aggregation {
namespace {

// Folds each piece into the round's sum as it comes (a streaming aggregator).
class FoldingSink final : public UpdateSink {
 public:
  FoldingSink(RoundAggregator& aggregator, double weight)
      : aggregator_(aggregator), weight_(weight) {}
  absl::Status Write(int64_t offset, std::span<const float> values) override {
    aggregator_.Fold(offset, values, weight_);
    return absl::OkStatus();
  }
  absl::Status Accept() override {
    aggregator_.Accept(weight_);
    return absl::OkStatus();
  }

 private:
  RoundAggregator& aggregator_;
  double weight_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<UpdateSink>> RoundAggregator::BeginUpdate(const UpdateInfo& info) {
  return std::make_unique<FoldingSink>(*this, info.weight);
}

std::vector<std::string> SampleSites(const RoundContext& ctx) {
  std::vector<std::string_view> order(ctx.available.begin(), ctx.available.end());
  std::mt19937_64 rng(ctx.seed);
  Shuffle(order, rng);
  const size_t k = std::min(order.size(), static_cast<size_t>(std::max(0, ctx.num_to_sample)));
  std::vector<std::string> sites(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
  std::sort(sites.begin(), sites.end());
  return sites;
}

const char* SiteFailureKindName(SiteFailure::Kind kind) {
  switch (kind) {
    case SiteFailure::Kind::kDropped:
      return "dropped";
    case SiteFailure::Kind::kDeclined:
      return "declined";
    case SiteFailure::Kind::kRefused:
      return "refused";
    case SiteFailure::Kind::kMissing:
      return "missing";
  }
  return "missing";
}

absl::StatusOr<RoundPlan> Strategy::ConfigureFit(const RoundContext& ctx) const {
  RoundPlan plan;
  plan.sites = SampleSites(ctx);
  return plan;
}

absl::StatusOr<RoundPlan> Strategy::ConfigureEvaluate(const RoundContext& ctx) const {
  RoundPlan plan;
  plan.sites = SampleSites(ctx);
  return plan;
}

absl::StatusOr<EvaluationSummary> Strategy::AggregateEvaluate(
    int32_t round, std::span<const SiteEvaluation> results,
    std::span<const SiteFailure> failures) const {
  double examples = 0, loss = 0;
  std::map<std::string, double> metric_examples;
  EvaluationSummary out;
  for (const SiteEvaluation& r : results) {
    const double n = static_cast<double>(r.num_examples);
    examples += n;
    loss += n * r.loss;
    for (const auto& [k, v] : r.metrics) {
      out.metrics[k] += n * v;
      metric_examples[k] += n;
    }
  }
  if (!(examples > 0)) {
    return absl::FailedPreconditionError(absl::StrCat("no site's evaluation of round ", round,
                                                      " holds an example (", results.size(),
                                                      " results, ", failures.size(), " failures)"));
  }
  out.loss = loss / examples;
  out.num_examples = static_cast<int64_t>(examples);
  for (auto& [k, v] : out.metrics) v /= metric_examples[k];
  return out;
}

}  // namespace fl::aggregation
