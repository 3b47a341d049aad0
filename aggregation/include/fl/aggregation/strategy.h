// Strategy: how the server turns the clients' updates of a round into the next global model.
//
// Strategies aggregate by streaming: a round's aggregator receives each update one chunk at a
// time, so the server holds one accumulator per round, never every update. The server folds an
// update only once its whole payload checked out (size, finiteness, SHA-256), so a refused update
// never touches the aggregate.
#ifndef FL_AGGREGATION_STRATEGY_H_
#define FL_AGGREGATION_STRATEGY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "fl/common/model.h"

namespace fl::aggregation {

// One client's update on its way into a round's aggregation: its parameters written piece by
// piece (each piece once), then Accept counts it. An update dropped before Accept was written in
// vain: a streaming aggregator has folded its pieces already (the round is spoiled, the engine
// fails it), one that keeps updates apart forgets it.
class UpdateSink {
 public:
  virtual ~UpdateSink() = default;
  // Parameters [offset, offset + size) of the update. An error (the spill could not be written)
  // names what failed.
  virtual absl::Status Write(int64_t offset, std::span<const float> values) = 0;
  // The update is whole: it counts in the round with the weight BeginUpdate was given.
  virtual absl::Status Accept() = 0;
};

// What the server knows of an update before its values: its weight (the site's example count)
// and the metrics the site reported with it ("loss", "initial_loss", ...).
struct UpdateInfo {
  double weight = 1;
  std::map<std::string, double> metrics;
};

// What a run is about to do, for a strategy to refuse what cannot work with it (Strategy::
// CheckPlan): a run's settings, not a round's.
struct RunPlan {
  int32_t min_updates = 1;          // the fewest accepted updates a round commits with
  bool secure_aggregation = false;  // the server sees only the sum of the updates
  bool central_dp = false;          // the server clips the updates and noises their mean
};

// The aggregation state of one round. Fold, Accept and BeginUpdate are thread-safe (clients
// upload at once); Finish is called once, after every fold has returned.
class RoundAggregator {
 public:
  virtual ~RoundAggregator() = default;
  // A sink for one whole update of `info.weight`. The default folds each piece at once (Fold)
  // and accepts with Accept; an aggregator that needs every update apart (a robust one) keeps
  // it, one that weighs by a metric (q-FedAvg) reads it here. An error refuses the update.
  virtual absl::StatusOr<std::unique_ptr<UpdateSink>> BeginUpdate(const UpdateInfo& info);
  // What BeginUpdate would refuse of `info`, asked when an upload begins so that a site is told
  // before it sends the payload (thread-safe). OK by default.
  virtual absl::Status CheckUpdate(const UpdateInfo& info) const { return absl::OkStatus(); }
  // Whether an update dropped half-written leaves the round as it was (see UpdateSink).
  virtual bool keeps_updates_apart() const { return false; }
  // Adds `values` (parameters [offset, offset + size) of one client's model) with `weight`.
  virtual void Fold(int64_t offset, std::span<const float> values, double weight) = 0;
  // Counts one whole, accepted update of `weight` in the denominator.
  virtual void Accept(double weight) = 0;
  virtual int num_accepted() const = 0;
  // The next global model. FAILED_PRECONDITION when no update was accepted, or when the result
  // is not finite (weights or values so large that the sum overflowed).
  virtual absl::StatusOr<Model> Finish() = 0;
  // The strategy's server state after this round (a server optimizer's momentum or moments), as
  // named tensors, computed by a successful Finish; nullopt for a strategy without state. The
  // engine checkpoints it with the round and, once the round is committed, hands it to
  // Strategy::AdoptState; a round that fails leaves the strategy's state as it was.
  virtual std::optional<Model> TakeState() { return std::nullopt; }
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Whether this strategy can aggregate models of `spec` (e.g. SCAFFOLD needs its control
  // variates beside the weights); INVALID_ARGUMENT saying what does not fit. The server asks
  // before its run starts.
  virtual absl::Status CheckModel(const ModelSpec& spec) const { return absl::OkStatus(); }
  // Whether this strategy can run as `plan` says (a robust strategy needs the updates apart and
  // enough of them); INVALID_ARGUMENT with the reason and what to change. Asked before a run
  // starts or resumes.
  virtual absl::Status CheckPlan(const RunPlan& plan) const { return absl::OkStatus(); }
  // Starts aggregating a round whose global model is `global`, which outlives the aggregator's
  // Finish (the engine keeps a round's global model until its commit).
  virtual std::unique_ptr<RoundAggregator> BeginRound(const Model& global) = 0;
  // Makes `state` (a committed round's TakeState, or the same read back when a run resumes) the
  // state the next round starts from. INVALID_ARGUMENT when the strategy keeps no state or
  // `state` is not of its shape.
  virtual absl::Status AdoptState(Model state) {
    return absl::InvalidArgumentError(absl::StrCat("strategy '", name(),
                                                   "' keeps no server state (given ",
                                                   state.spec().tensors().size(), " tensors)"));
  }
};

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_STRATEGY_H_
