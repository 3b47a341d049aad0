// Trainer: the one interface a site implements to train its own model under federation.
//
// The SDK calls Fit with the round's global model and the server's configuration; the trainer
// returns its locally trained weights (same spec as the global model), the number of examples it
// trained on (the FedAvg weight) and any metrics it wants the server to record. Evaluate measures
// a model on the site's held-out data. A trainer is called from one thread at a time.
#ifndef FL_CLIENT_TRAINER_H_
#define FL_CLIENT_TRAINER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fl/client/dataset.h"
#include "fl/common/model.h"

namespace fl::client {

struct FitConfig {
  int32_t round = 0;
  int32_t local_epochs = 1;
  int32_t batch_size = 32;
  float learning_rate = 0.01f;
  std::map<std::string, double> extra;  // strategy-specific values from the server
  std::string model_name;               // the server's built-in architecture, or empty
  bool differential_privacy = false;    // whether the run applies differential privacy
  // Whether the update is masked before it leaves the site (secure aggregation): the server then
  // sees only the sum of the round's updates, and FitResult::metrics are not sent.
  bool secure_aggregation = false;
};

struct FitResult {
  Model model;                            // the locally trained weights
  int64_t num_examples = 0;               // > 0
  std::map<std::string, double> metrics;  // e.g. {"loss": 0.41}
};

struct EvalResult {
  double loss = 0;
  int64_t num_examples = 0;
  std::map<std::string, double> metrics;  // e.g. {"accuracy": 0.83}
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // The spec of the model this trainer trains; the client refuses a task for another spec.
  virtual ModelSpec spec() const = 0;
  virtual absl::StatusOr<FitResult> Fit(const Model& global, const FitConfig& config) = 0;
  virtual absl::StatusOr<EvalResult> Evaluate(const Model& model) = 0;
  // What the SDK calls: the same, handed a share of the model's ownership, for a trainer that
  // lends the weights to code that may keep them past the call (the Python SDK's zero-copy
  // views keep the model alive with them). By default, Fit(*global, config) and
  // Evaluate(*model).
  virtual absl::StatusOr<FitResult> FitShared(std::shared_ptr<const Model> global,
                                              const FitConfig& config) {
    return Fit(*global, config);
  }
  virtual absl::StatusOr<EvalResult> EvaluateShared(std::shared_ptr<const Model> model) {
    return Evaluate(*model);
  }

  // Federated standardisation (a run with [run] federated_standardization): before round 1 the
  // server asks every site for the per-feature sums of its training rows (ComputeFeatureSums in
  // fl/client/dataset.h makes them from a Dataset), adds them up into each feature's mean and
  // standard deviation, and hands those to ApplyFeatureStatistics before the site's first fit
  // or evaluation (and again only if they change), for the trainer to standardise its training
  // and test features with (Standardize), always from the raw data: empty stats (a later run
  // without statistics) mean the raw data again. By default a trainer declines the statistics
  // (UNIMPLEMENTED), and refuses non-empty ones, so that its fit and evaluation tasks are
  // declined with the reason rather than trained on unscaled features.
  virtual absl::StatusOr<FeatureSums> FeatureSumsForStatistics() {
    return absl::UnimplementedError("this trainer does not report feature statistics");
  }
  virtual absl::Status ApplyFeatureStatistics(const ColumnStats& stats) {
    if (stats.mean.empty()) return absl::OkStatus();
    return absl::UnimplementedError(
        "the run standardises features with federated statistics, which this trainer does not "
        "apply (implement Trainer::ApplyFeatureStatistics)");
  }
};

}  // namespace fl::client

#endif  // FL_CLIENT_TRAINER_H_
