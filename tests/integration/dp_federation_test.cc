// Central differential privacy end to end: the real server with [privacy] mode "central" and
// real SDK clients training the built-in MLP over loopback gRPC with mutual TLS. Every fit task
// says differential_privacy (so a site that requires it takes part), the server clips each
// update's change to clip_norm before averaging (so no round moves the model by more than
// clip_norm plus the noise), and the epsilon spent is recorded with every committed round.
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/client/builtin_models.h"
#include "fl/server/server.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

constexpr int kSites = 3;
constexpr int32_t kRounds = 3;

// Counts the fit tasks that asked for differential privacy.
class DpCountingTrainer final : public client::Trainer {
 public:
  DpCountingTrainer(std::unique_ptr<client::Trainer> inner, std::atomic<int>* dp_tasks)
      : inner_(std::move(inner)), dp_tasks_(dp_tasks) {}
  ModelSpec spec() const override { return inner_->spec(); }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override {
    if (config.differential_privacy) ++*dp_tasks_;
    return inner_->Fit(global, config);
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override {
    return inner_->Evaluate(model);
  }

 private:
  std::unique_ptr<client::Trainer> inner_;
  std::atomic<int>* dp_tasks_;
};

TEST(DpFederationTest, CentralDpClipsNoisesAndRecordsEpsilonEveryRound) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), kSites, kRounds);
  o.engine.fit.batch_size = 32;
  o.engine.fit.learning_rate = 0.05f;
  o.engine.privacy.mode = "central";
  o.engine.privacy.noise_multiplier = 0.01;
  o.engine.privacy.clip_norm = 0.5;
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  ASSERT_TRUE(initial.ok()) << initial.status();
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, initial->Clone());
  ASSERT_TRUE(server.ok()) << server.status();

  std::atomic<int> dp_tasks{0};
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < kSites; ++i) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer = client::MakeBuiltinTrainer(
        FashionMlp(), FashionTrainSlice(i * 640, 640), {},
        {.backend = "cpu", .cpu_threads = 1, .seed = static_cast<uint64_t>(i)});
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    client::ClientOptions co = TlsClientOptions(pki, i, (*server)->port());
    co.limits.require_differential_privacy = true;  // the site insists, and the tasks comply
    clients.push_back(std::make_unique<ClientThread>(
        co, std::make_unique<DpCountingTrainer>(*std::move(trainer), &dp_tasks)));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  EXPECT_EQ(dp_tasks.load(), kSites * kRounds);

  server::Store& store = (*server)->store();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds((*server)->engine().run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), static_cast<size_t>(kRounds));
  Model previous = initial->Clone();
  // Noise on the mean: 0.01 * 0.5 / 3 per coordinate, about 0.27 in norm over ~25k parameters.
  const double noise_norm =
      0.01 * 0.5 / kSites * std::sqrt(static_cast<double>(previous.spec().NumFloats()));
  for (const server::RoundRecord& r : *rounds) {
    ASSERT_EQ(r.status, server::RoundStatus::kCommitted) << r.reason;
    EXPECT_EQ(r.dp_sampling_rate, 1.0);
    absl::StatusOr<aggregation::dp::PrivacySpent> expected =
        aggregation::dp::ComputeEpsilon(1.0, 0.01, r.round, 1e-5);
    ASSERT_TRUE(expected.ok());
    EXPECT_NEAR(r.dp_epsilon, expected->epsilon, 1e-9 * expected->epsilon) << "round " << r.round;
    absl::StatusOr<Model> model = store.ReadCheckpoint(r.checkpoint);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<float> change(model->data().begin(), model->data().end());
    for (size_t i = 0; i < change.size(); ++i) change[i] -= previous.data()[i];
    const double moved = aggregation::dp::L2Norm(change);
    // The mean of changes clipped to 0.5 has norm <= 0.5; the noise adds about noise_norm.
    EXPECT_LT(moved, 0.5 + 1.5 * noise_norm) << "round " << r.round;
    EXPECT_GT(moved, 0.5 * noise_norm) << "round " << r.round;
    previous = *std::move(model);
  }
  clients.clear();
}

}  // namespace
}  // namespace fl::testing
