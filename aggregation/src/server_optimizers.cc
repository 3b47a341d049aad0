#include "fl/aggregation/server_optimizers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "aggregation/internal/accepted_weight.h"
#include "aggregation/internal/striped_sum.h"

namespace fl::aggregation {
namespace {

enum class Kind { kAvgM, kAdagrad, kAdam, kYogi };

constexpr char kStepTensor[] = "fedopt.step";

double Sign(double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }

// Whether `v` can be kept as a float; TakeModel fails the round on kNotFinite.
bool Fits(double v) {
  return std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max());
}
constexpr double kNotFinite = std::numeric_limits<double>::infinity();

// The state's spec for a model of `spec`: m for every tensor, then v (not for FedAvgM), then the
// step.
ModelSpec StateSpec(const ModelSpec& spec, bool with_v) {
  std::vector<TensorSpec> tensors;
  for (const char* part : {"m", "v"}) {
    if (part[0] == 'v' && !with_v) break;
    for (const TensorSpec& t : spec.tensors()) {
      tensors.push_back({absl::StrCat("fedopt.", part, "/", t.name), t.shape});
    }
  }
  tensors.push_back({kStepTensor, {1}});
  return ModelSpec(std::move(tensors));
}

class OptimizerAggregator final : public RoundAggregator {
 public:
  // `state` is the strategy's state when the round began (null: zeros, step 0); `state_ok` says
  // whether it fits `global` (when not, Finish fails with it).
  OptimizerAggregator(Kind kind, const ServerOptimizerOptions& options, const Model& global,
                      std::shared_ptr<const Model> state, absl::Status state_ok,
                      std::optional<Model> spare)
      : kind_(kind),
        options_(options),
        global_(&global),
        state_(std::move(state)),
        state_ok_(std::move(state_ok)),
        spare_(std::move(spare)),
        sum_(global.spec()) {}

  void Fold(int64_t offset, std::span<const float> values, double weight) override {
    sum_.Add(offset, values, weight);
  }
  void Accept(double weight) override { accepted_.Add(weight); }
  int num_accepted() const override { return accepted_.count(); }

  absl::StatusOr<Model> Finish() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!state_ok_.ok()) return state_ok_;
    if (absl::Status s = accepted_.CheckAny(options_.name); !s.ok()) return s;
    const bool with_v = kind_ != Kind::kAvgM;
    const int64_t n = global_->spec().NumFloats();
    // The next state goes into the strategy's spare buffer (the state before last) when there
    // is one: no fresh allocation, whose page faults would cost as much as the step itself.
    ModelSpec state_spec = StateSpec(global_->spec(), with_v);
    Model next_state = spare_.has_value() && spare_->spec() == state_spec
                           ? *std::move(spare_)
                           : Model(std::move(state_spec));
    spare_.reset();
    std::span<float> out = next_state.data();
    std::span<const float> old;
    if (state_ != nullptr) old = state_->data();
    const double step = (state_ != nullptr ? old[old.size() - 1] : 0.0) + 1;
    out[out.size() - 1] = static_cast<float>(step);
    const double inv = 1.0 / accepted_.total();
    const double eta = options_.learning_rate, tau = options_.tau;
    const double b1 = options_.beta_1, b2 = options_.beta_2, mu = options_.momentum;
    const double eta_t = kind_ == Kind::kAdam
                             ? eta * std::sqrt(1 - std::pow(b2, step)) / (1 - std::pow(b1, step))
                             : eta;
    std::span<const float> x = global_->data();
    absl::StatusOr<Model> next =
        sum_.TakeModel("the server optimizer's new global model", [&](int64_t i, double sum) {
          const double d = sum * inv - static_cast<double>(x[i]);
          const double m_old = old.empty() ? 0.0 : old[i];
          if (kind_ == Kind::kAvgM) {
            const double m = mu * m_old + d;
            if (!Fits(m)) return kNotFinite;
            out[i] = static_cast<float>(m);
            return static_cast<double>(x[i]) + eta * m;
          }
          const double v_old = old.empty() ? 0.0 : old[n + i];
          const double m = b1 * m_old + (1 - b1) * d;
          double v = 0;
          switch (kind_) {
            case Kind::kAdagrad:
              v = v_old + d * d;
              break;
            case Kind::kYogi:
              v = v_old - (1 - b2) * d * d * Sign(v_old - d * d);
              break;
            default:
              v = b2 * v_old + (1 - b2) * d * d;
          }
          // A moment past float's range would freeze its coordinate for the rest of the run
          // (v = inf steps by 0): the round fails instead, as a model that overflows does.
          if (!Fits(m) || !Fits(v)) return kNotFinite;
          out[i] = static_cast<float>(m);
          out[n + i] = static_cast<float>(v);
          // The update uses m and v as they are kept (float), so that a resumed run, which
          // reads them back, takes the same steps.
          return static_cast<double>(x[i]) +
                 eta_t * static_cast<double>(out[i]) /
                     (std::sqrt(std::max(0.0, static_cast<double>(out[n + i]))) + tau);
        });
    if (next.ok()) next_state_ = std::move(next_state);
    return next;
  }

  std::optional<Model> TakeState() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<Model> s = std::move(next_state_);
    next_state_.reset();
    return s;
  }

 private:
  const Kind kind_;
  const ServerOptimizerOptions options_;
  const Model* global_;
  const std::shared_ptr<const Model> state_;
  const absl::Status state_ok_;
  std::optional<Model> spare_;
  internal::StripedSum sum_;
  internal::AcceptedWeight accepted_;
  std::mutex mu_;  // next_state_, between Finish and TakeState
  std::optional<Model> next_state_;
};

class ServerOptimizer final : public Strategy {
 public:
  ServerOptimizer(Kind kind, ServerOptimizerOptions options)
      : kind_(kind), options_(std::move(options)) {}

  std::string name() const override { return options_.name; }

  std::unique_ptr<RoundAggregator> BeginRound(const Model& global) override {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status fits = absl::OkStatus();
    if (state_ != nullptr && !(state_->spec() == StateSpec(global.spec(), kind_ != Kind::kAvgM))) {
      fits = absl::FailedPreconditionError(
          absl::StrCat(options_.name, ": the server state adopted does not fit the model (",
                       state_->spec().tensors().size(), " tensors for a model of ",
                       global.spec().tensors().size(), ")"));
    }
    std::optional<Model> spare = std::move(spare_);
    spare_.reset();
    return std::make_unique<OptimizerAggregator>(kind_, options_, global, state_, fits,
                                                 std::move(spare));
  }

  absl::Status AdoptState(Model state) override {
    const std::vector<TensorSpec>& t = state.spec().tensors();
    const size_t per = kind_ == Kind::kAvgM ? 1 : 2;
    if (t.empty() || t.back().name != kStepTensor || (t.size() - 1) % per != 0 ||
        !absl::StartsWith(t.front().name, "fedopt.m/")) {
      return absl::InvalidArgumentError(absl::StrCat(options_.name, ": not its server state (",
                                                     t.size(), " tensors, the last '",
                                                     t.empty() ? "" : t.back().name, "')"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    // The state it replaces becomes the spare for the next round's, once no aggregator reads it
    // (the engine drops a round's aggregator before its commit adopts the new state).
    if (state_ != nullptr && state_.use_count() == 1) spare_ = std::move(*state_);
    state_ = std::make_shared<Model>(std::move(state));
    return absl::OkStatus();
  }

 private:
  const Kind kind_;
  const ServerOptimizerOptions options_;
  std::mutex mu_;
  std::shared_ptr<Model> state_;  // null: zeros, step 0; aggregators read it, never write
  std::optional<Model> spare_;    // a buffer of the state's size to write the next state into
};

absl::Status OutOfRange(const char* key, const char* bound, double value) {
  return absl::InvalidArgumentError(absl::StrCat(key, " must be ", bound, ", got ", value));
}

}  // namespace

bool IsServerOptimizer(const std::string& name) {
  return name == "fedavgm" || name == "fedadagrad" || name == "fedadam" || name == "fedyogi";
}

double DefaultServerLearningRate(const std::string& name) {
  if (name == "fedavgm") return 1.0;
  if (name == "fedyogi") return 0.01;
  return 0.1;
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeServerOptimizer(ServerOptimizerOptions options) {
  Kind kind;
  if (options.name == "fedavgm") {
    kind = Kind::kAvgM;
  } else if (options.name == "fedadagrad") {
    kind = Kind::kAdagrad;
  } else if (options.name == "fedadam") {
    kind = Kind::kAdam;
  } else if (options.name == "fedyogi") {
    kind = Kind::kYogi;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown server optimizer '", options.name,
                                                   "'; fedavgm, fedadagrad, fedadam or fedyogi"));
  }
  if (!std::isfinite(options.learning_rate) || !(options.learning_rate > 0)) {
    return OutOfRange("server_learning_rate", "> 0", options.learning_rate);
  }
  if (!(options.momentum >= 0 && options.momentum < 1)) {
    return OutOfRange("server_momentum", "in [0, 1)", options.momentum);
  }
  if (!(options.beta_1 >= 0 && options.beta_1 < 1)) {
    return OutOfRange("beta_1", "in [0, 1)", options.beta_1);
  }
  if (!(options.beta_2 >= 0 && options.beta_2 < 1)) {
    return OutOfRange("beta_2", "in [0, 1)", options.beta_2);
  }
  if (!std::isfinite(options.tau) || !(options.tau > 0))
    return OutOfRange("tau", "> 0", options.tau);
  return std::unique_ptr<Strategy>(std::make_unique<ServerOptimizer>(kind, std::move(options)));
}

}  // namespace fl::aggregation
