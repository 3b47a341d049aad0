#include "fl/aggregation/fedprox.h"

#include <memory>
#include <string>

#include "fl/aggregation/fedavg.h"

namespace fl::aggregation {
namespace {

// The proximal term lives in the clients' trainers; the server aggregates as FedAvg does.
class FedProx final : public Strategy {
 public:
  std::string name() const override { return "fedprox"; }
  absl::Status CheckModel(const ModelSpec& spec) const override {
    return fedavg_->CheckModel(spec);
  }
  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    return fedavg_->BeginRound(global);
  }

 private:
  const std::unique_ptr<Strategy> fedavg_ = MakeFedAvg();
};

}  // namespace

std::unique_ptr<Strategy> MakeFedProx() { return std::make_unique<FedProx>(); }

}  // namespace fl::aggregation
