// FedProx and SCAFFOLD end to end: the real server with the strategy, real SDK clients training
// the built-in MLP on Fashion-MNIST slices, over loopback gRPC with mutual TLS.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/scaffold.h"
#include "fl/client/builtin_models.h"
#include "fl/server/server.h"
#include "fl/simulation/evaluation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using server::RoundRecord;
using server::RoundStatus;

constexpr int kSites = 3;
constexpr int64_t kExamplesPerSite = 640;  // 20 batches of 32: K = 20 local steps per round
constexpr int32_t kBatch = 32;
constexpr float kLearningRate = 0.05f;
constexpr int32_t kRounds = 3;

// Passes fits through to a built-in trainer and records the strategy values each task carried.
class RecordingTrainer final : public client::Trainer {
 public:
  explicit RecordingTrainer(std::unique_ptr<client::Trainer> inner) : inner_(std::move(inner)) {}
  ModelSpec spec() const override { return inner_->spec(); }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      configs_.push_back(config.extra);
      model_names_.push_back(config.model_name);
    }
    return inner_->Fit(global, config);
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override {
    return inner_->Evaluate(model);
  }
  std::vector<std::map<std::string, double>> configs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return configs_;
  }
  std::vector<std::string> model_names() const {
    std::lock_guard<std::mutex> lock(mu_);
    return model_names_;
  }

 private:
  std::unique_ptr<client::Trainer> inner_;
  mutable std::mutex mu_;
  std::vector<std::map<std::string, double>> configs_;
  std::vector<std::string> model_names_;
};

struct RunOutcome {
  std::vector<Model> models;  // the initial model, then each committed round's
  std::vector<RoundRecord> rounds;
  std::map<int32_t, std::map<std::string, double>> metrics;         // of each committed round
  std::vector<std::vector<std::map<std::string, double>>> configs;  // per site, per task
  std::vector<std::vector<std::string>> model_names;
};

// Runs kRounds rounds of `strategy` with kSites sites. `enrolled_sites` >= kSites certificates
// are enrolled; only the first kSites sites run.
RunOutcome RunFederation(const aggregation::StrategyOptions& strategy, int enrolled_sites) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(enrolled_sites));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), kSites, kRounds);
  o.engine.fit.local_epochs = 1;
  o.engine.fit.batch_size = kBatch;
  o.engine.fit.learning_rate = kLearningRate;
  o.strategy = strategy;

  const bool scaffold = strategy.name == "scaffold";
  absl::StatusOr<Model> weights = client::InitialBuiltinModel(FashionMlp(), 1);
  EXPECT_TRUE(weights.ok()) << weights.status();
  Model initial = scaffold ? aggregation::WithZeroControlVariates(*weights) : weights->Clone();
  RunOutcome outcome;
  outcome.models.push_back(initial.Clone());

  server::EngineHooks hooks;
  hooks.evaluate = simulation::BuiltinTestSetEvaluation(
      FashionMlp(), std::make_shared<const client::Dataset>(FashionTestSlice(1000)), "cpu");
  std::mutex metrics_mu;
  hooks.on_round_end = [&](const server::RoundSummary& r) {
    std::lock_guard<std::mutex> lock(metrics_mu);
    if (r.committed) outcome.metrics[r.round] = r.metrics;
  };
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, std::move(initial), hooks);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return outcome;

  std::vector<RecordingTrainer*> trainers;
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < kSites; ++i) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer = client::MakeBuiltinTrainer(
        FashionMlp(), FashionTrainSlice(i * kExamplesPerSite, kExamplesPerSite), {},
        {.backend = "cpu",
         .cpu_threads = 1,
         .seed = static_cast<uint64_t>(i),
         .scaffold = scaffold});
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return outcome;
    auto recording = std::make_unique<RecordingTrainer>(*std::move(trainer));
    trainers.push_back(recording.get());
    clients.push_back(std::make_unique<ClientThread>(TlsClientOptions(pki, i, (*server)->port()),
                                                     std::move(recording)));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());

  server::Store& store = (*server)->store();
  absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds((*server)->engine().run_id());
  EXPECT_TRUE(rounds.ok()) << rounds.status();
  if (!rounds.ok()) return outcome;
  outcome.rounds = *rounds;
  for (const RoundRecord& r : *rounds) {
    if (r.status != RoundStatus::kCommitted) continue;
    absl::StatusOr<Model> m = store.ReadCheckpoint(r.checkpoint);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) outcome.models.push_back(*std::move(m));
  }
  for (RecordingTrainer* t : trainers) {
    outcome.configs.push_back(t->configs());
    outcome.model_names.push_back(t->model_names());
  }
  clients.clear();  // the trainers go with their clients
  return outcome;
}

double Accuracy(const Model& model) {
  absl::StatusOr<client::EvalResult> r = client::EvaluateBuiltinModel(
      FashionMlp(), simulation::WithoutScaffoldTensors(model), FashionTestSlice(1000), "cpu");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->metrics["accuracy"] : 0.0;
}

void ExpectEveryRoundCommitted(const RunOutcome& run) {
  ASSERT_EQ(run.rounds.size(), static_cast<size_t>(kRounds));
  for (const RoundRecord& r : run.rounds) {
    EXPECT_EQ(r.status, RoundStatus::kCommitted) << "round " << r.round << ": " << r.reason;
    EXPECT_EQ(r.num_reported, kSites);
  }
  ASSERT_EQ(run.models.size(), static_cast<size_t>(kRounds + 1));
}

TEST(StrategyTest, FedProxSendsMuAndLearns) {
  RunOutcome run = RunFederation(
      {.name = "fedprox", .proximal_mu = 0.1, .momentum = 0.5, .weight_decay = 1e-4}, kSites);
  ExpectEveryRoundCommitted(run);
  if (HasFailure()) return;
  // Every fit task carried FedProx's mu and the clients' SGD settings, and the model's name.
  ASSERT_EQ(run.configs.size(), static_cast<size_t>(kSites));
  for (int i = 0; i < kSites; ++i) {
    ASSERT_EQ(run.configs[i].size(), static_cast<size_t>(kRounds)) << "site " << i;
    for (const auto& config : run.configs[i]) {
      EXPECT_THAT(config, ::testing::Contains(::testing::Pair("proximal_mu", 0.1)));
      EXPECT_THAT(config, ::testing::Contains(::testing::Pair("momentum", 0.5)));
      EXPECT_THAT(config, ::testing::Contains(::testing::Pair("weight_decay", 1e-4)));
    }
    EXPECT_THAT(run.model_names[i], ::testing::Each(std::string("mlp")));
  }
  // FedProx's global model is the weights only, and it learned.
  EXPECT_EQ(run.models.back().spec(), run.models.front().spec());
  const double before = Accuracy(run.models.front());
  const double after = Accuracy(run.models.back());
  EXPECT_GT(after, before + 0.3) << "accuracy " << before << " -> " << after;
  EXPECT_GT(run.metrics[kRounds].count("test_accuracy"), 0u);
}

// q-FedAvg through the real server and built-in trainers: every fit task asks for the sites'
// initial loss, every update carries it (one without it is refused, see EngineQFedAvgTest), and
// the model learns.
TEST(StrategyTest, QFedAvgAsksForTheSitesLossAndLearns) {
  RunOutcome run =
      RunFederation({.name = "qfedavg", .q = 1, .qffl_learning_rate = kLearningRate}, kSites);
  ExpectEveryRoundCommitted(run);
  if (HasFailure()) return;
  for (int i = 0; i < kSites; ++i) {
    for (const auto& config : run.configs[i]) {
      EXPECT_THAT(config, ::testing::Contains(::testing::Pair("report_initial_loss", 1.0)));
    }
  }
  const double before = Accuracy(run.models.front());
  const double after = Accuracy(run.models.back());
  EXPECT_GT(after, before + 0.2) << "accuracy " << before << " -> " << after;
}

// Four sites are enrolled and three take part, so N = 4 (the enrolled clients) and each round
// moves c by 3/4 of the sites' mean delta. Every site holds 640 examples (equal weights, so the
// new weights are the plain mean of the y_i) and takes K = 20 steps with lr = 0.05, so with
// option II (delta c_i = -c + (x - y_i) / (K lr)) each round must give
//   c' = c + (1/4) * sum_i delta c_i = c + (3/4) * (-c + (x - x') / (K lr)).
TEST(StrategyTest, ScaffoldControlVariatesFollowTheFormulaAndTheModelLearns) {
  RunOutcome run = RunFederation({.name = "scaffold"}, kSites + 1);
  ExpectEveryRoundCommitted(run);
  if (HasFailure()) return;
  const ModelSpec spec = run.models.front().spec();
  ASSERT_TRUE(aggregation::CheckScaffoldSpec(spec).ok());
  const size_t p = static_cast<size_t>(spec.NumFloats() / 2);
  const double k_lr = (kExamplesPerSite / kBatch) * static_cast<double>(kLearningRate);
  const double n = kSites + 1;

  // The initial control variate is zero, and after round 1 it is not.
  std::span<const float> c0 = run.models[0].data().subspan(p);
  EXPECT_TRUE(std::all_of(c0.begin(), c0.end(), [](float v) { return v == 0; }));
  std::span<const float> c1 = run.models[1].data().subspan(p);
  double c1_norm = 0;
  for (float v : c1) c1_norm += static_cast<double>(v) * v;
  EXPECT_GT(std::sqrt(c1_norm), 1e-3);

  for (int r = 1; r <= kRounds; ++r) {
    std::span<const float> before = run.models[r - 1].data();
    std::span<const float> after = run.models[r].data();
    int failures = 0;
    for (size_t j = 0; j < p && failures < 5; ++j) {
      const double c = before[p + j];
      const double expected =
          c + (kSites / n) * (-c + (static_cast<double>(before[j]) - after[j]) / k_lr);
      const double tol = 2e-5 + 1e-3 * std::abs(expected);
      if (!(std::abs(after[p + j] - expected) <= tol)) {
        ADD_FAILURE() << "round " << r << ", control variate " << j << ": " << after[p + j]
                      << ", expected " << expected;
        ++failures;
      }
    }
  }

  // Its weights learned, and the server scored them without the control variates.
  const double before = Accuracy(run.models.front());
  const double after = Accuracy(run.models.back());
  EXPECT_GT(after, before + 0.3) << "accuracy " << before << " -> " << after;
  ASSERT_GT(run.metrics[kRounds].count("test_accuracy"), 0u);
  EXPECT_NEAR(run.metrics[kRounds].at("test_accuracy"), after, 1e-9);
  // No proximal term was asked for.
  for (const auto& site : run.configs) {
    for (const auto& config : site) EXPECT_EQ(config.count("proximal_mu"), 0u);
  }
  // Every site's update was folded into every committed round, so round r's task names round
  // r - 1 as the site's last committed one (its c_i+ of r - 1 becomes its c_i).
  for (const auto& site : run.configs) {
    ASSERT_EQ(site.size(), static_cast<size_t>(kRounds));
    for (int r = 1; r <= kRounds; ++r) {
      EXPECT_THAT(site[r - 1], ::testing::Contains(::testing::Pair("scaffold_committed_round",
                                                                   static_cast<double>(r - 1))));
    }
  }
}

TEST(StrategyTest, ScaffoldRefusesAModelWithoutControlVariates) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.strategy.name = "scaffold";
  absl::StatusOr<Model> weights = client::InitialBuiltinModel(FashionMlp(), 1);
  ASSERT_TRUE(weights.ok());
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, *std::move(weights));
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), ::testing::HasSubstr("SCAFFOLD"));
}

}  // namespace
}  // namespace fl::testing
