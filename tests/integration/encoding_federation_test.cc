// Update encodings end to end (issue 6): the real server with [run] update_encoding, real SDK
// clients training the built-in MLP on Fashion-MNIST slices, over loopback gRPC with mutual TLS.
// Every round commits, every update arrives in the run's encoding with its exact size, and the
// model learns as a float32 run does.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fl/client/builtin_models.h"
#include "fl/common/update_codec.h"
#include "fl/server/server.h"
#include "fl/simulation/evaluation.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

constexpr int kSites = 3;
constexpr int64_t kExamplesPerSite = 640;
constexpr int32_t kRounds = 3;

struct Outcome {
  std::vector<server::RoundRecord> rounds;
  std::vector<server::ParticipationRecord> participations;
  double final_accuracy = 0;
  int64_t num_floats = 0;
};

Outcome RunWith(const std::string& encoding) {
  Outcome out;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), kSites, kRounds);
  o.engine.fit.batch_size = 32;
  o.engine.fit.learning_rate = 0.05f;
  o.engine.update_encoding = encoding;
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  EXPECT_TRUE(initial.ok()) << initial.status();
  if (!initial.ok()) return out;
  out.num_floats = initial->spec().NumFloats();
  server::EngineHooks hooks;
  hooks.evaluate = simulation::BuiltinTestSetEvaluation(
      FashionMlp(), std::make_shared<const client::Dataset>(FashionTestSlice(1000)), "cpu");
  std::mutex mu;
  hooks.on_round_end = [&](const server::RoundSummary& r) {
    std::lock_guard<std::mutex> lock(mu);
    if (r.committed && r.metrics.count("test_accuracy") != 0) {
      out.final_accuracy = r.metrics.at("test_accuracy");
    }
  };
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, std::move(*initial), hooks);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return out;
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < kSites; ++i) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer = client::MakeBuiltinTrainer(
        FashionMlp(), FashionTrainSlice(i * kExamplesPerSite, kExamplesPerSite), {},
        {.backend = "cpu", .cpu_threads = 1, .seed = static_cast<uint64_t>(i)});
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return out;
    clients.push_back(std::make_unique<ClientThread>(TlsClientOptions(pki, i, (*server)->port()),
                                                     *std::move(trainer)));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  server::Store& store = (*server)->store();
  const int64_t run = (*server)->engine().run_id();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = store.Rounds(run);
  EXPECT_TRUE(rounds.ok()) << rounds.status();
  if (rounds.ok()) out.rounds = *rounds;
  for (int32_t r = 1; r <= kRounds; ++r) {
    absl::StatusOr<std::vector<server::ParticipationRecord>> p = store.Participations(run, r);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) out.participations.insert(out.participations.end(), p->begin(), p->end());
  }
  return out;
}

TEST(EncodingFederationTest, Int8AndFloat16RunsCommitEveryRoundWithExactSizesAndLearn) {
  const Outcome f32 = RunWith("float32");
  for (const auto& [name, e] : std::vector<std::pair<std::string, UpdateEncoding>>{
           {"int8", UpdateEncoding::kInt8}, {"float16", UpdateEncoding::kFloat16}}) {
    SCOPED_TRACE(name);
    const Outcome run = RunWith(name);
    ASSERT_EQ(run.rounds.size(), static_cast<size_t>(kRounds));
    for (const server::RoundRecord& r : run.rounds) {
      EXPECT_EQ(r.status, server::RoundStatus::kCommitted) << "round " << r.round;
    }
    ASSERT_EQ(run.participations.size(), static_cast<size_t>(kSites * kRounds));
    for (const server::ParticipationRecord& p : run.participations) {
      EXPECT_EQ(p.status, server::ParticipationStatus::kAccepted) << p.reason;
      EXPECT_EQ(p.bytes_received, EncodedBytes(e, run.num_floats));
    }
    // The encoding's noise costs little after three rounds (float32 reaches about 0.7 here).
    EXPECT_GT(run.final_accuracy, 0.5);
    EXPECT_NEAR(run.final_accuracy, f32.final_accuracy, 0.05);
  }
}

// Adds 1e5 to one weight: a change that half precision cannot hold.
class BlowUpTrainer final : public client::Trainer {
 public:
  explicit BlowUpTrainer(std::unique_ptr<client::Trainer> inner) : inner_(std::move(inner)) {}
  ModelSpec spec() const override { return inner_->spec(); }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override {
    absl::StatusOr<client::FitResult> r = inner_->Fit(global, config);
    if (r.ok()) r->model.data()[5] = global.data()[5] + 1e5f;
    return r;
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override {
    return inner_->Evaluate(model);
  }

 private:
  std::unique_ptr<client::Trainer> inner_;
};

TEST(EncodingFederationTest, ASiteWhoseChangeIsNotFiniteInHalfDeclinesNamingTheParameter) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), kSites, 1);
  o.engine.min_fit_clients = kSites - 1;
  o.engine.update_encoding = "float16";
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  ASSERT_TRUE(initial.ok()) << initial.status();
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, std::move(*initial), {});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < kSites; ++i) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer = client::MakeBuiltinTrainer(
        FashionMlp(), FashionTrainSlice(i * 100, 100), {},
        {.backend = "cpu", .cpu_threads = 1, .seed = static_cast<uint64_t>(i)});
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    std::unique_ptr<client::Trainer> t = *std::move(trainer);
    if (i == 0) t = std::make_unique<BlowUpTrainer>(std::move(t));
    clients.push_back(
        std::make_unique<ClientThread>(TlsClientOptions(pki, i, (*server)->port()), std::move(t)));
  }
  for (auto& c : clients) (void)c->Join();
  server::Store& store = (*server)->store();
  const int64_t run = (*server)->engine().run_id();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = store.Rounds(run);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ(rounds->front().status, server::RoundStatus::kCommitted);
  absl::StatusOr<std::vector<server::ParticipationRecord>> parts = store.Participations(run, 1);
  ASSERT_TRUE(parts.ok());
  int declined = 0;
  for (const server::ParticipationRecord& p : *parts) {
    if (p.status != server::ParticipationStatus::kRefused) continue;
    ++declined;
    EXPECT_NE(p.reason.find("not finite in float16"), std::string::npos) << p.reason;
    EXPECT_NE(p.reason.find("parameter 5"), std::string::npos) << p.reason;
  }
  EXPECT_EQ(declined, 1);
}

}  // namespace
}  // namespace fl::testing
