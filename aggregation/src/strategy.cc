#include "fl/aggregation/strategy.h"

#include <memory>

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

}  // namespace fl::aggregation
