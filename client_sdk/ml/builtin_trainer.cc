// The built-in trainer: mini-batch SGD of a built-in network on one backend.
#include "client_sdk/ml/builtin_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client_sdk/ml/models.h"
#include "client_sdk/ml/optimizer.h"
#include "fl/client/builtin_models.h"
#include "fl/client/metrics.h"
#include "fl/common/random.h"

namespace fl::client {
namespace {

// Rows per forward pass when evaluating.
constexpr int64_t kEvalBlockRows = 256;
// The fit-config key with which q-FedAvg asks for "initial_loss" (fl/aggregation/qfedavg.h's
// kReportInitialLossKey; the SDK does not link the strategies).
constexpr char kReportInitialLoss[] = "report_initial_loss";

absl::Status CheckData(const ModelArchitecture& arch, const Dataset& d, std::string_view what) {
  if (d.num_features != arch.num_features) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " has ", d.num_features, " features but the ",
                     std::string(ModelKindName(arch.kind)), " model takes ", arch.num_features));
  }
  if (d.features.size() != d.labels.size() * static_cast<size_t>(d.num_features)) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " holds ", d.features.size(),
                                                   " feature values for ", d.labels.size(),
                                                   " rows of ", d.num_features));
  }
  for (size_t i = 0; i < d.labels.size(); ++i) {
    if (d.labels[i] < 0 || d.labels[i] >= arch.num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(what), " row ", i, " has label ", d.labels[i],
                       ", outside the model's classes [0, ", arch.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

// Reads an override from FitConfig::extra: finite and in [low, high).
absl::Status Override(const FitConfig& config, const char* key, double low, double high,
                      float* value) {
  auto it = config.extra.find(key);
  if (it == config.extra.end()) return absl::OkStatus();
  if (!std::isfinite(it->second) || it->second < low || it->second >= high) {
    return absl::InvalidArgumentError(absl::StrCat("config value \"", key, "\" is ", it->second,
                                                   "; it must be in [", low, ", ", high, ")"));
  }
  *value = static_cast<float>(it->second);
  return absl::OkStatus();
}

absl::Status CheckOptions(const ml::SgdOptions& o) {
  struct Check {
    const char* name;
    float value;
    float high;
  };
  for (const Check& c :
       {Check{"momentum", o.momentum, 1.0f}, Check{"weight_decay", o.weight_decay, INFINITY},
        Check{"proximal_mu", o.proximal_mu, INFINITY}, Check{"clip_norm", o.clip_norm, INFINITY}}) {
    if (!std::isfinite(c.value) || c.value < 0 || c.value >= c.high) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.name, " must be finite, >= 0 and below ", c.high, ", not ", c.value));
    }
  }
  return absl::OkStatus();
}

// Loss and accuracy of the network's current parameters on `data` (already checked); with two
// classes also "auc", the area under the ROC curve of class 1 (the rare class in fraud or
// diagnosis data, where accuracy says little).
EvalResult Measure(ml::Network& net, const Dataset& data, ml::Buffer& labels) {
  ml::Backend& backend = *net.backend();
  const int64_t n = data.num_examples();
  const int64_t f = data.num_features;
  const bool binary = net.output_size() == 2;
  // A staging buffer only where the kernels cannot read the dataset where it is (a GPU).
  std::unique_ptr<ml::Buffer> x;
  if (!backend.host_memory()) x = backend.Allocate(std::min(n, kEvalBlockRows) * f);
  double loss = 0;
  int64_t correct = 0;
  std::vector<float> scores;  // logit 1 - logit 0: ranks rows as p(class 1) does
  std::vector<float> block_logits;
  if (binary) scores.reserve(static_cast<size_t>(n));
  for (int64_t start = 0; start < n; start += kEvalBlockRows) {
    const int64_t rows = std::min(kEvalBlockRows, n - start);
    const float* input = data.row(start);
    if (x != nullptr) {
      backend.Upload(input, rows * f, x->data());
      input = x->data();
    }
    backend.UploadInts(data.labels.data() + start, rows, labels.ints());
    float* logits = net.Forward(rows, input);
    if (binary) {
      block_logits.resize(static_cast<size_t>(rows * 2));
      backend.Download(logits, rows * 2, block_logits.data());
      for (int64_t r = 0; r < rows; ++r) {
        scores.push_back(block_logits[static_cast<size_t>(2 * r + 1)] -
                         block_logits[static_cast<size_t>(2 * r)]);
      }
    }
    const ml::LossStats s =
        backend.SoftmaxCrossEntropy(rows, net.output_size(), labels.ints(), 0.0f, logits);
    loss += s.loss_sum;
    correct += s.correct;
  }
  EvalResult result;
  result.loss = loss / static_cast<double>(n);
  result.num_examples = n;
  result.metrics["accuracy"] = static_cast<double>(correct) / static_cast<double>(n);
  if (binary) {
    std::vector<uint8_t> positive(data.labels.size());
    for (size_t i = 0; i < positive.size(); ++i) positive[i] = data.labels[i] == 1 ? 1 : 0;
    if (std::optional<double> auc = BinaryAuc(scores, positive)) result.metrics["auc"] = *auc;
  }
  return result;
}

class BuiltinTrainer final : public Trainer {
 public:
  BuiltinTrainer(const ModelArchitecture& arch, Dataset train, Dataset test,
                 BuiltinTrainerOptions options, std::unique_ptr<ml::Backend> backend)
      : arch_(arch),
        train_(std::move(train)),
        test_(std::move(test)),
        options_(std::move(options)),
        backend_(std::move(backend)) {
    absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(arch_);
    if (spec.ok()) weights_spec_ = *std::move(spec);
  }

  ModelSpec spec() const override {
    return options_.scaffold ? ScaffoldSpec(weights_spec_) : weights_spec_;
  }

  absl::StatusOr<FitResult> Fit(const Model& global, const FitConfig& config) override;

  absl::StatusOr<EvalResult> Evaluate(const Model& model) override {
    if (test_.num_examples() == 0) {
      return absl::FailedPreconditionError("this trainer has no test data to evaluate on");
    }
    if (absl::Status s = CheckData(arch_, test_, "test data"); !s.ok()) return s;
    if (model.spec() != spec() && model.spec() != weights_spec_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model spec ", model.spec().ToJson(), " does not match the ",
          std::string(ModelKindName(arch_.kind)), " spec ", spec().ToJson(), " of this trainer"));
    }
    if (absl::Status s = EnsureNetwork(); !s.ok()) return s;
    if (absl::Status s = net_->CheckBatch(std::min(test_.num_examples(), kEvalBlockRows),
                                          static_cast<double>(options_.max_batch_bytes));
        !s.ok()) {
      return s;
    }
    backend_->Upload(model.data().data(), net_->num_params(), net_->params());
    return Measure(*net_, test_, *labels_);
  }

  // The training rows' sums, as this site's share of the federation's statistics.
  absl::StatusOr<FeatureSums> FeatureSumsForStatistics() override {
    const Dataset& train = raw_train_.has_value() ? *raw_train_ : train_;
    if (train.num_examples() == 0) {
      return absl::FailedPreconditionError("this trainer has no training data");
    }
    return ComputeFeatureSums(train);
  }

  // Standardises both sets from the raw data kept at the first call (empty stats: the raw data).
  absl::Status ApplyFeatureStatistics(const ColumnStats& stats) override {
    if (!raw_train_.has_value()) {
      raw_train_ = std::move(train_);
      raw_test_ = std::move(test_);
    }
    // At most two copies of the data: the raw one and the one trained on.
    train_ = *raw_train_;
    test_ = *raw_test_;
    if (stats.mean.empty()) return absl::OkStatus();
    absl::Status s = Standardize(train_, stats.mean, stats.stddev);
    if (s.ok() && test_.num_examples() > 0) s = Standardize(test_, stats.mean, stats.stddev);
    if (!s.ok()) {
      train_ = *raw_train_;
      test_ = *raw_test_;
    }
    return s;
  }

 private:
  absl::Status EnsureNetwork() {
    if (net_ != nullptr) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<ml::Network>> net = ml::MakeNetwork(arch_, backend_.get());
    if (!net.ok()) return net.status();
    net_ = *std::move(net);
    labels_ = backend_->AllocateInts(kEvalBlockRows);
    return absl::OkStatus();
  }

  ModelArchitecture arch_;
  Dataset train_;
  Dataset test_;
  // The data as loaded, kept once federated statistics first standardise train_ and test_.
  std::optional<Dataset> raw_train_;
  std::optional<Dataset> raw_test_;
  BuiltinTrainerOptions options_;
  std::unique_ptr<ml::Backend> backend_;
  ModelSpec weights_spec_;
  std::unique_ptr<ml::Network> net_;  // made at first use
  std::unique_ptr<ml::Buffer> labels_;
  std::unique_ptr<ml::SgdOptimizer> optimizer_;
  int64_t optimizer_p_ = -1;             // the size optimizer_ was made for
  std::unique_ptr<ml::Buffer> batch_x_;  // one training batch, reused across rounds
  std::unique_ptr<ml::Buffer> batch_y_;
  // SCAFFOLD: this client's control variate c_i as the server's c counts it (empty: zero), and
  // the c_i+ of the latest Fit with its round, which becomes committed only once the server
  // reports that update accepted in a committed round (see PromoteControlVariate).
  std::vector<float> committed_ci_;
  std::vector<float> pending_ci_;
  std::optional<int32_t> pending_ci_round_;

  absl::Status PromoteControlVariate(const FitConfig& config);
};

// The server names in "scaffold_committed_round" the last round in which this client's update was
// accepted and that round committed (0: none in this run). Every earlier round is closed when a
// task of round R arrives, so a pending c_i+ of any other round was never folded into c and is
// dropped. Without that value (a driver without a server) the previous round's Fit counts.
absl::Status BuiltinTrainer::PromoteControlVariate(const FitConfig& config) {
  auto it = config.extra.find(std::string(kScaffoldCommittedRoundKey));
  if (it == config.extra.end()) {
    if (pending_ci_round_.has_value() && *pending_ci_round_ < config.round) {
      committed_ci_ = std::move(pending_ci_);
    }
  } else {
    const double r = it->second;
    if (!std::isfinite(r) || r < 0 || r != std::floor(r) || r >= config.round) {
      return absl::InvalidArgumentError(
          absl::StrCat("config value \"", std::string(kScaffoldCommittedRoundKey), "\" is ", r,
                       "; it must be a whole round in [0, ", config.round, ")"));
    }
    const int32_t committed = static_cast<int32_t>(r);
    if (committed == 0) {
      committed_ci_.clear();  // none of this client's updates is in the server's c
    } else if (committed == pending_ci_round_) {
      committed_ci_ = std::move(pending_ci_);
    }
    // Otherwise committed_ci_ already is that round's c_i, or it was lost with an earlier process
    // of this site (docs/design-decisions.md): training goes on from what this process holds.
  }
  pending_ci_.clear();
  pending_ci_round_.reset();
  return absl::OkStatus();
}

absl::StatusOr<FitResult> BuiltinTrainer::Fit(const Model& global, const FitConfig& config) {
  if (train_.num_examples() == 0) {
    return absl::FailedPreconditionError("this trainer has no training data");
  }
  if (absl::Status s = CheckData(arch_, train_, "training data"); !s.ok()) return s;
  const ModelSpec expected = spec();
  if (global.spec() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("global model spec ", global.spec().ToJson(), " does not match the ",
                     std::string(ModelKindName(arch_.kind)), " spec ", expected.ToJson(),
                     " of the training data (", train_.num_features, " features, ",
                     arch_.num_classes, " classes)"));
  }
  if (config.local_epochs < 1 || config.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("local_epochs (", config.local_epochs,
                                                   ") and batch_size (", config.batch_size,
                                                   ") must be at least 1"));
  }
  if (!std::isfinite(config.learning_rate) || config.learning_rate <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning_rate must be positive and finite, not ", config.learning_rate));
  }
  ml::SgdOptions sgd{.learning_rate = config.learning_rate,
                     .momentum = options_.momentum,
                     .weight_decay = options_.weight_decay,
                     .proximal_mu = options_.proximal_mu,
                     .clip_norm = options_.clip_norm};
  for (absl::Status s :
       {Override(config, "momentum", 0, 1, &sgd.momentum),
        Override(config, "weight_decay", 0, INFINITY, &sgd.weight_decay),
        Override(config, "proximal_mu", 0, INFINITY, &sgd.proximal_mu),
        Override(config, "clip_norm", 0, INFINITY, &sgd.clip_norm), CheckOptions(sgd)}) {
    if (!s.ok()) return s;
  }
  if (options_.scaffold) {
    if (absl::Status s = PromoteControlVariate(config); !s.ok()) return s;
  }
  if (absl::Status s = EnsureNetwork(); !s.ok()) return s;
  // Refuse a batch whose buffers would not fit before anything is allocated for it.
  if (absl::Status s = net_->CheckBatch(std::min<int64_t>(config.batch_size, train_.num_examples()),
                                        static_cast<double>(options_.max_batch_bytes));
      !s.ok()) {
    return s;
  }

  ml::Backend& backend = *backend_;
  ml::Network& net = *net_;
  const int64_t p = net.num_params();
  const int64_t n = train_.num_examples();
  const int64_t f = train_.num_features;
  const float* global_weights = global.data().data();
  backend.Upload(global_weights, p, net.params());
  // q-FedAvg weighs the update by the global model's loss on this site's data: measured before
  // the first step.
  std::optional<double> initial_loss;
  if (auto it = config.extra.find(kReportInitialLoss); it != config.extra.end() && it->second > 0) {
    if (absl::Status s = net.CheckBatch(std::min(n, kEvalBlockRows),
                                        static_cast<double>(options_.max_batch_bytes));
        !s.ok()) {
      return s;
    }
    initial_loss = Measure(net, train_, *labels_).loss;
  }
  std::unique_ptr<ml::Buffer> anchor;  // w_global on the backend, for the proximal term
  if (sgd.proximal_mu > 0) {
    anchor = backend.Allocate(p);
    backend.Upload(global_weights, p, anchor->data());
  }
  std::unique_ptr<ml::Buffer> correction;  // SCAFFOLD: c - c_i, c_i the committed one
  if (options_.scaffold) {
    if (committed_ci_.empty()) committed_ci_.assign(static_cast<size_t>(p), 0.0f);
    std::vector<float> c_minus_ci(static_cast<size_t>(p));
    for (int64_t i = 0; i < p; ++i) c_minus_ci[i] = global_weights[p + i] - committed_ci_[i];
    correction = backend.Allocate(p);
    backend.Upload(c_minus_ci.data(), p, correction->data());
  }
  if (optimizer_p_ != p) {
    optimizer_ = std::make_unique<ml::SgdOptimizer>(&backend, p);
    optimizer_p_ = p;
  }
  optimizer_->Reset();

  std::seed_seq seq{static_cast<uint32_t>(options_.seed),
                    static_cast<uint32_t>(options_.seed >> 32),
                    static_cast<uint32_t>(config.round)};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;

  const int64_t max_batch = std::min<int64_t>(config.batch_size, n);
  if (batch_x_ == nullptr || batch_x_->size() < max_batch * f) {
    batch_x_ = backend.Allocate(max_batch * f);
    batch_y_ = backend.AllocateInts(max_batch);
  }
  // On the CPU the batch is gathered straight into backend memory; elsewhere through the host.
  const bool host_memory = backend.host_memory();
  std::vector<float> host_x(host_memory ? 0 : static_cast<size_t>(max_batch * f));
  std::vector<int32_t> host_y(host_memory ? 0 : static_cast<size_t>(max_batch));
  float* gather_x = host_memory ? batch_x_->data() : host_x.data();
  int32_t* gather_y = host_memory ? batch_y_->ints() : host_y.data();

  double epoch_loss = 0;
  int64_t epoch_correct = 0;
  int64_t steps = 0;
  for (int32_t epoch = 0; epoch < config.local_epochs; ++epoch) {
    Shuffle(order, rng);
    epoch_loss = 0;
    epoch_correct = 0;
    for (int64_t start = 0; start < n; start += max_batch) {
      const int64_t rows = std::min(max_batch, n - start);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t src = order[static_cast<size_t>(start + r)];
        std::copy_n(train_.row(src), f, gather_x + r * f);
        gather_y[r] = train_.labels[static_cast<size_t>(src)];
      }
      backend.Upload(gather_x, rows * f, batch_x_->data());
      backend.UploadInts(gather_y, rows, batch_y_->ints());
      float* logits = net.Forward(rows, batch_x_->data());
      const ml::LossStats s = backend.SoftmaxCrossEntropy(rows, net.output_size(), batch_y_->ints(),
                                                          1.0f / static_cast<float>(rows), logits);
      epoch_loss += s.loss_sum;
      epoch_correct += s.correct;
      net.Backward(rows, logits);
      optimizer_->Step(sgd, net.params(), net.grads(), anchor ? anchor->data() : nullptr,
                       correction ? correction->data() : nullptr);
      ++steps;
    }
  }
  const double mean_loss = epoch_loss / static_cast<double>(n);
  if (!std::isfinite(mean_loss)) {
    // ABORTED, not INVALID_ARGUMENT: it depends on this round's global model, so the server keeps
    // the site in the run's draw (a permanent reason would leave it out).
    return absl::AbortedError(
        absl::StrCat("training diverged (loss is not finite) with "
                     "learning_rate ",
                     config.learning_rate, "; lower it"));
  }
  Model local(expected);
  float* out = local.data().data();
  backend.Download(net.params(), p, out);
  if (options_.scaffold) {
    // Option II: c_i+ = c_i - c + (w_global - w_local) / (K lr); the update carries c_i+ - c_i.
    // c_i+ stays pending until the server reports the update folded into a committed round.
    const double k_lr = static_cast<double>(steps) * config.learning_rate;
    pending_ci_.resize(static_cast<size_t>(p));
    for (int64_t i = 0; i < p; ++i) {
      const double c = global_weights[p + i];
      const double delta = -c + (static_cast<double>(global_weights[i]) - out[i]) / k_lr;
      out[p + i] = static_cast<float>(delta);
      pending_ci_[i] = static_cast<float>(committed_ci_[i] + delta);
    }
    pending_ci_round_ = config.round;
  }
  FitResult result{std::move(local), n, {}};
  result.metrics["loss"] = mean_loss;
  result.metrics["accuracy"] = static_cast<double>(epoch_correct) / static_cast<double>(n);
  if (initial_loss.has_value()) result.metrics["initial_loss"] = *initial_loss;
  return result;
}

}  // namespace

std::unique_ptr<Trainer> MakeBuiltinTrainerUnchecked(const ModelArchitecture& arch, Dataset train,
                                                     Dataset test, BuiltinTrainerOptions options,
                                                     std::unique_ptr<ml::Backend> backend) {
  return std::make_unique<BuiltinTrainer>(arch, std::move(train), std::move(test),
                                          std::move(options), std::move(backend));
}

absl::StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainer(const ModelArchitecture& arch,
                                                            Dataset train, Dataset test,
                                                            BuiltinTrainerOptions options) {
  if (absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(arch); !spec.ok()) return spec.status();
  if (train.num_examples() > 0) {
    if (absl::Status s = CheckData(arch, train, "training data"); !s.ok()) return s;
  }
  if (test.num_examples() > 0) {
    if (absl::Status s = CheckData(arch, test, "test data"); !s.ok()) return s;
  }
  ml::SgdOptions sgd{.momentum = options.momentum,
                     .weight_decay = options.weight_decay,
                     .proximal_mu = options.proximal_mu,
                     .clip_norm = options.clip_norm};
  if (absl::Status s = CheckOptions(sgd); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ml::Backend>> backend =
      ml::MakeBackend(options.backend, options.cpu_threads);
  if (!backend.ok()) return backend.status();
  return MakeBuiltinTrainerUnchecked(arch, std::move(train), std::move(test), std::move(options),
                                     *std::move(backend));
}

absl::StatusOr<EvalResult> EvaluateBuiltinModel(const ModelArchitecture& arch, const Model& model,
                                                const Dataset& data, std::string_view backend) {
  if (data.num_examples() == 0) return absl::FailedPreconditionError("no examples to evaluate on");
  absl::StatusOr<ModelSpec> spec = BuiltinModelSpec(arch);
  if (!spec.ok()) return spec.status();
  if (model.spec() != *spec && model.spec() != ScaffoldSpec(*spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec ", model.spec().ToJson(), " does not match the ",
                     std::string(ModelKindName(arch.kind)), " spec ", spec->ToJson()));
  }
  if (absl::Status s = CheckData(arch, data, "evaluation data"); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ml::Backend>> b = ml::MakeBackend(backend);
  if (!b.ok()) return b.status();
  absl::StatusOr<std::unique_ptr<ml::Network>> net = ml::MakeNetwork(arch, b->get());
  if (!net.ok()) return net.status();
  if (absl::Status s = (*net)->CheckBatch(std::min(data.num_examples(), kEvalBlockRows)); !s.ok()) {
    return s;
  }
  (*b)->Upload(model.data().data(), (*net)->num_params(), (*net)->params());
  std::unique_ptr<ml::Buffer> labels = (*b)->AllocateInts(kEvalBlockRows);
  return Measure(**net, data, *labels);
}

bool CudaBackendAvailable(std::string* why) { return ml::CudaAvailable(why); }

}  // namespace fl::client
