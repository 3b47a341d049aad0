// Strategy: how the server runs a round with the sites, after Flower's interface. Per round:
//
//   ConfigureFit        which of the available sites train, and what each is told (RoundPlan)
//   BeginRound ...      aggregate fit: the round's RoundAggregator takes each update as it
//   ... Finish          streams in (BeginUpdate/Write/Accept), is told of each sampled site
//                       that failed (Failed), and gives the next global model (Finish)
//   ConfigureEvaluate   which sites evaluate the new model
//   AggregateEvaluate   the federation's loss and metrics from their reports and failures
//
// ConfigureFit, ConfigureEvaluate and AggregateEvaluate run under the engine's lock, while
// every site waits: they must be quick (choose from what they are given) and must not call back
// into the engine.
//
// Strategies aggregate by streaming: a round's aggregator receives each update one chunk at a
// time, so the server holds one accumulator per round, never every update. The server folds an
// update only once its whole payload checked out (size, finiteness, SHA-256), so a refused update
// never touches the aggregate. Wrappers (differential privacy, norm bounding: wrappers.h, and
// dp/central_dp.h) wrap another strategy and pass on what they do not change
// (strategy_wrapper.h).
#ifndef FL_AGGREGATION_STRATEGY_H_
#define FL_AGGREGATION_STRATEGY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// What the engine offers a strategy to configure a round of training or evaluation from.
struct RoundContext {
  int32_t round = 0;    // the round to train, or the committed round to evaluate
  int32_t attempt = 0;  // of the round (0 for an evaluation)
  // The sites it may ask: online and not left out of the run, in the order the default draw
  // starts from (by name, then id). Valid while the call lasts.
  std::span<const std::string_view> available;
  // How many the run's settings ask for: sample_fraction (eval_fraction) of the available, at
  // least min_fit_clients (3 with secure aggregation), at most all of them.
  int32_t num_to_sample = 0;
  // The fewest sites a plan may choose (min_fit_clients, 3 with secure aggregation; 1 for an
  // evaluation).
  int32_t min_sites = 1;
  uint64_t seed = 0;  // the run's seed mixed with the round and attempt; SampleSites draws by it
};

// Which sites take part in a round, and what each is told beside the run's fit settings (Flower's
// FitIns, without the parameters: every site gets the round's global model).
struct RoundPlan {
  std::vector<std::string> sites;  // ids from RoundContext::available, each once
  // Values every fit task of the round carries in FitTask.config, over the run's own (a round's
  // learning-rate schedule, say).
  std::map<std::string, double> config;
  // Values for single sites, over `config`.
  std::map<std::string, std::map<std::string, double>> site_config;
};

// The default draw: num_to_sample of `available` by a Fisher-Yates shuffle seeded with
// ctx.seed, returned sorted. The same context gives the same sites.
std::vector<std::string> SampleSites(const RoundContext& ctx);

// A sampled site that gave the round nothing (Flower's failures): why, as the engine saw it.
struct SiteFailure {
  enum class Kind {
    kDropped,   // went silent (no poll or heartbeat for client_timeout)
    kDeclined,  // said it would not do the task, with its reason
    kRefused,   // its update was refused (shape, SHA-256, a strategy's check, ...)
    kMissing,   // nothing by the round's close (its deadline)
  };
  std::string site;
  Kind kind = Kind::kMissing;
  std::string reason;
};
// "dropped", "declined", "refused", "missing".
const char* SiteFailureKindName(SiteFailure::Kind kind);

// One site's evaluation of a committed model, and the federation's (AggregateEvaluate).
struct SiteEvaluation {
  std::string site;
  int64_t num_examples = 0;
  double loss = 0;
  std::map<std::string, double> metrics;
};
struct EvaluationSummary {
  double loss = 0;
  int64_t num_examples = 0;  // behind the loss
  std::map<std::string, double> metrics;
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
  // A sampled site whose update will not count (see SiteFailure), told once per site before
  // Finish: a strategy may fail the round for it (wrappers.h, RequireEverySite) or weigh the
  // others otherwise. Ignored by default, as Flower's accept_failures = True. Thread-safe.
  virtual void Failed(const SiteFailure& failure) {}
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
  // Which sites train in round ctx.round and what each is told. The default: SampleSites, and no
  // values beyond the run's. An error (or a plan naming a site not available, a site twice, or
  // fewer than ctx.min_sites) keeps the round from starting: the engine logs it and tries again
  // after retry_backoff.
  virtual absl::StatusOr<RoundPlan> ConfigureFit(const RoundContext& ctx) const;
  // Which sites evaluate the model committed in round ctx.round (only `sites` is used). The
  // default: SampleSites.
  virtual absl::StatusOr<RoundPlan> ConfigureEvaluate(const RoundContext& ctx) const;
  // The federation's evaluation from the sites' `results` (finite losses) and `failures`
  // (declined, silent). The default: the example-weighted mean of the losses, and of each metric
  // over the sites that reported it (a metric only some sites compute, e.g. "auc", is neither
  // dragged towards 0 nor divided by the others' examples). FAILED_PRECONDITION when no result
  // holds an example.
  virtual absl::StatusOr<EvaluationSummary> AggregateEvaluate(
      int32_t round, std::span<const SiteEvaluation> results,
      std::span<const SiteFailure> failures) const;
  // The L2 norm the engine clips each update's change from the round's global model to before
  // this strategy sees it (central DP's C, a norm bound's M; dp/clipping.h's StreamingClip); 0:
  // none. A secure round cannot clip what it cannot read: CheckPlan refuses the combination.
  virtual double update_norm_bound() const { return 0; }
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
