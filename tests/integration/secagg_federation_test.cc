// Secure aggregation end to end: the real server with [secure_aggregation] enabled and real SDK
// clients training the built-in MLP on Fashion-MNIST slices over loopback gRPC with mutual TLS.
// Every round runs the five stages (advertise keys, share keys, masked input, consistency,
// unmask) as tasks, each site signing with its certificate's key; the server only sums masked
// words. Clients are stopped at a given stage from set_on_task, whose TaskReport names the stage.
#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/client/builtin_models.h"
#include "fl/client/client.h"
#include "fl/server/server.h"
#include "fl/server/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

constexpr int64_t kExamplesPerSite = 640;

// Counts the fits that were told their update is masked.
class SecureCountingTrainer final : public client::Trainer {
 public:
  explicit SecureCountingTrainer(std::unique_ptr<client::Trainer> inner)
      : inner_(std::move(inner)) {}
  ModelSpec spec() const override { return inner_->spec(); }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override {
    if (config.secure_aggregation) ++secure_fits_;
    ++fits_;
    return inner_->Fit(global, config);
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override {
    return inner_->Evaluate(model);
  }
  int fits() const { return fits_.load(); }
  int secure_fits() const { return secure_fits_.load(); }

 private:
  std::unique_ptr<client::Trainer> inner_;
  std::atomic<int> fits_{0};
  std::atomic<int> secure_fits_{0};
};

// A real SDK client on a thread that records the stage of every task it finished, and stops
// itself once it has done `stop_after` (e.g. "secagg_share_keys"; empty: never).
class StageClient {
 public:
  StageClient(client::ClientOptions options, int site, std::string stop_after = "")
      : stop_after_(std::move(stop_after)) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> inner = client::MakeBuiltinTrainer(
        FashionMlp(), FashionTrainSlice(site * kExamplesPerSite, kExamplesPerSite), {},
        {.backend = "cpu", .cpu_threads = 1, .seed = static_cast<uint64_t>(site)});
    EXPECT_TRUE(inner.ok()) << inner.status();
    if (!inner.ok()) return;
    trainer_ = std::make_unique<SecureCountingTrainer>(*std::move(inner));
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Create(std::move(options), trainer_.get());
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return;
    client_ = *std::move(c);
    client_->set_on_task([this](const client::TaskReport& r) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stages_.push_back(r.status.ok() ? r.stage
                                        : absl::StrCat(r.stage, " failed: ", r.status.ToString()));
      }
      if (r.status.ok() && r.stage == stop_after_) client_->Stop();
    });
    thread_ = std::thread([this] { status_ = client_->Run(); });
  }
  ~StageClient() {
    if (client_ != nullptr) client_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  absl::Status Join() {
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  std::vector<std::string> stages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stages_;
  }
  const SecureCountingTrainer& trainer() const { return *trainer_; }

 private:
  const std::string stop_after_;
  std::unique_ptr<SecureCountingTrainer> trainer_;
  std::unique_ptr<client::Client> client_;
  absl::Status status_;
  mutable std::mutex mu_;
  std::vector<std::string> stages_;
  std::thread thread_;
};

double Accuracy(const Model& model) {
  absl::StatusOr<client::EvalResult> r =
      client::EvaluateBuiltinModel(FashionMlp(), model, FashionTestSlice(1000), "cpu");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->metrics["accuracy"] : 0.0;
}

client::ClientOptions SiteOptions(const ProvisionedFiles& pki, int site, int port) {
  client::ClientOptions co = TlsClientOptions(pki, site, port);
  co.heartbeat_interval = absl::Seconds(1);
  return co;
}

server::ServerOptions SecureRunOptions(const ProvisionedFiles& pki, const std::string& dir,
                                       int sites, int rounds) {
  server::ServerOptions o = MlpRunOptions(pki, dir, sites, rounds);
  o.engine.fit.local_epochs = 1;
  o.engine.fit.batch_size = 32;
  o.engine.fit.learning_rate = 0.05f;
  o.engine.secure_aggregation.enabled = true;
  o.engine.secure_aggregation.stage_timeout = absl::Seconds(20);
  return o;
}

// One secure round that goes on without a site that stopped: min_fit_clients 4, and a stopped
// site (it neither polls nor heartbeats) is offline after 6 s, so its stage stops waiting for it.
server::ServerOptions DropoutRunOptions(const ProvisionedFiles& pki, const std::string& dir,
                                        int sites) {
  server::ServerOptions o = SecureRunOptions(pki, dir, sites, 1);
  o.engine.min_fit_clients = 4;
  o.engine.client_timeout = absl::Seconds(6);
  o.engine.round_timeout = absl::Seconds(30);
  return o;
}

// Secure rounds with distributed DP (z = 1, C = 1), committing without one site: the noise is
// planned for n_min = max(min_fit_clients, 0.7 n) survivors.
server::ServerOptions DistributedDpRunOptions(const ProvisionedFiles& pki, const std::string& dir,
                                              int sites, int rounds) {
  server::ServerOptions o = SecureRunOptions(pki, dir, sites, rounds);
  o.engine.min_fit_clients = sites - 1;
  o.engine.privacy.mode = "distributed";
  o.engine.privacy.noise_multiplier = 1.0;
  o.engine.privacy.clip_norm = 1.0;
  return o;
}

// The server on the MLP's initial model and `sites` StageClients; `require(i)` says whether
// site i insists on secure aggregation and `stop_after(i)` the stage after which it stops.
struct Federation {
  Model initial;
  std::unique_ptr<server::Server> server;
  std::vector<std::unique_ptr<StageClient>> clients;
};

Federation StartFederation(const ProvisionedFiles& pki, const server::ServerOptions& o, int sites,
                           const std::function<bool(int)>& require,
                           const std::function<std::string(int)>& stop_after = {},
                           const std::function<void(int, client::SiteLimits&)>& limits = {}) {
  absl::StatusOr<Model> initial = client::InitialBuiltinModel(FashionMlp(), 1);
  EXPECT_TRUE(initial.ok()) << initial.status();
  Federation f{.initial = initial.ok() ? *std::move(initial) : Model(ModelSpec{}),
               .server = nullptr,
               .clients = {}};
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, f.initial.Clone());
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return f;
  f.server = *std::move(server);
  for (int i = 0; i < sites; ++i) {
    client::ClientOptions co = SiteOptions(pki, i, f.server->port());
    co.limits.require_secure_aggregation = require(i);
    if (limits) limits(i, co.limits);
    f.clients.push_back(std::make_unique<StageClient>(co, i, stop_after ? stop_after(i) : ""));
  }
  return f;
}

TEST(SecAggFederationTest, SixSitesCommitTwoSecureRoundsAndLearn) {
  constexpr int kSites = 6;
  constexpr int kRounds = 2;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = SecureRunOptions(pki, dir.path(), kSites, kRounds);
  // Every site insists on secure aggregation, and the run complies.
  Federation f = StartFederation(pki, o, kSites, [](int) { return true; });
  ASSERT_NE(f.server, nullptr);
  std::vector<std::unique_ptr<StageClient>>& clients = f.clients;
  const Model* initial = &f.initial;
  std::unique_ptr<server::Server>* server = &f.server;
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  const std::vector<std::string> one_round = {"secagg_advertise_keys", "secagg_share_keys",
                                              "secagg_masked_input", "secagg_consistency",
                                              "secagg_unmask"};
  std::vector<std::string> expected;
  for (int r = 0; r < kRounds; ++r)
    expected.insert(expected.end(), one_round.begin(), one_round.end());
  for (int i = 0; i < kSites; ++i) {
    EXPECT_EQ(clients[i]->stages(), expected) << "site " << i;
    EXPECT_EQ(clients[i]->trainer().fits(), kRounds) << "site " << i;
    EXPECT_EQ(clients[i]->trainer().secure_fits(), kRounds) << "site " << i;
  }

  server::Store& store = (*server)->store();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds((*server)->engine().run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), static_cast<size_t>(kRounds));
  std::vector<double> accuracy = {Accuracy(*initial)};
  for (const server::RoundRecord& r : *rounds) {
    ASSERT_EQ(r.status, server::RoundStatus::kCommitted) << "round " << r.round << ": " << r.reason;
    EXPECT_EQ(r.num_reported, kSites);
    EXPECT_FALSE(r.secagg_json.empty()) << "round " << r.round;
    EXPECT_THAT(r.metrics_json, ::testing::Not(HasSubstr("train_")))
        << "no site's training metrics travel in the clear in a secure round";
    absl::StatusOr<Model> model = store.ReadCheckpoint(r.checkpoint);
    ASSERT_TRUE(model.ok()) << model.status();
    accuracy.push_back(Accuracy(*model));
  }
  EXPECT_GT(accuracy[1], accuracy[0]) << accuracy[0] << " -> " << accuracy[1];
  EXPECT_GT(accuracy[2], accuracy[0] + 0.2) << accuracy[0] << " -> " << accuracy[2];
  clients.clear();
}

// One site stops itself right after finishing a stage; the round goes on without it.
struct StopCase {
  std::string stage;  // the last stage the stopped site finishes
  int stages_done;    // how many stages it finished
  int reported;       // masked inputs summed (U3): the stopped site's counts once it sent it
};

void PrintTo(const StopCase& c, std::ostream* os) { *os << "stopped after " << c.stage; }

class SecAggFederationDropoutTest : public ::testing::TestWithParam<StopCase> {};

TEST_P(SecAggFederationDropoutTest, ARoundCommitsWithoutASiteThatStopped) {
  constexpr int kSites = 6;
  const StopCase& c = GetParam();
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = DropoutRunOptions(pki, dir.path(), kSites);
  Federation f = StartFederation(
      pki, o, kSites, [](int) { return false; },
      [&](int i) { return i == kSites - 1 ? c.stage : ""; });
  ASSERT_NE(f.server, nullptr);
  std::vector<std::unique_ptr<StageClient>>& clients = f.clients;
  const Model* initial = &f.initial;
  std::unique_ptr<server::Server>* server = &f.server;
  const std::vector<std::string> all = {"secagg_advertise_keys", "secagg_share_keys",
                                        "secagg_masked_input", "secagg_consistency",
                                        "secagg_unmask"};
  EXPECT_EQ(clients.back()->Join().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(clients.back()->stages(),
            std::vector<std::string>(all.begin(), all.begin() + c.stages_done));
  for (int i = 0; i + 1 < kSites; ++i) {
    EXPECT_TRUE(clients[i]->Join().ok()) << "site " << i;
    EXPECT_EQ(clients[i]->stages(), all) << "site " << i;
  }

  server::Store& store = (*server)->store();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds((*server)->engine().run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  const server::RoundRecord& r = rounds->front();
  ASSERT_EQ(r.status, server::RoundStatus::kCommitted) << r.reason;
  EXPECT_EQ(r.num_reported, c.reported);
  // The dropped site's masks were removed: the sum is a real model that learned.
  absl::StatusOr<Model> model = store.ReadCheckpoint(r.checkpoint);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_GT(Accuracy(*model), Accuracy(*initial) + 0.1);
  clients.clear();
}

// The share-keys case is a dropout after sharing: its pairwise masks are recovered from shares.
INSTANTIATE_TEST_SUITE_P(Stages, SecAggFederationDropoutTest,
                         ::testing::Values(StopCase{"secagg_advertise_keys", 1, 5},
                                           StopCase{"secagg_share_keys", 2, 5},
                                           StopCase{"secagg_masked_input", 3, 6},
                                           StopCase{"secagg_consistency", 4, 6}),
                         [](const ::testing::TestParamInfo<StopCase>& info) {
                           return absl::StrCat("StoppedAfter_", info.param.stage);
                         });

// Distributed DP: each client clips its change to clip_norm and adds its share of the noise
// before masking, with weight 1; the server cannot clip what it cannot read, so every committed
// round moving the model by at most clip_norm (plus the noise) shows the clients clipped.
TEST(SecAggFederationTest, DistributedDpClientsClipAndNoiseTheirChanges) {
  constexpr int kSites = 4;
  constexpr int kRounds = 2;
  // Unclipped, a round moves this model by about 0.6: clipping to 0.1 is plain to see.
  constexpr double kClipNorm = 0.1;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = SecureRunOptions(pki, dir.path(), kSites, kRounds);
  o.engine.privacy.mode = "distributed";
  o.engine.privacy.noise_multiplier = 0.01;
  o.engine.privacy.clip_norm = kClipNorm;
  Federation f = StartFederation(pki, o, kSites, [](int) { return true; });
  ASSERT_NE(f.server, nullptr);
  std::vector<std::unique_ptr<StageClient>>& clients = f.clients;
  const Model* initial = &f.initial;
  std::unique_ptr<server::Server>* server = &f.server;
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());

  server::Store& store = (*server)->store();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds((*server)->engine().run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), static_cast<size_t>(kRounds));
  Model previous = initial->Clone();
  // The noise of the mean is z * C / 4 per coordinate, about 0.04 in norm over ~25k
  // parameters; quantization adds less than one step of [-8, 8] in 2^b levels per coordinate.
  const double slack = 0.1;
  for (const server::RoundRecord& r : *rounds) {
    ASSERT_EQ(r.status, server::RoundStatus::kCommitted) << "round " << r.round << ": " << r.reason;
    EXPECT_GT(r.dp_epsilon, 0) << "round " << r.round;
    absl::StatusOr<Model> model = store.ReadCheckpoint(r.checkpoint);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<float> change(model->data().begin(), model->data().end());
    for (size_t i = 0; i < change.size(); ++i) change[i] -= previous.data()[i];
    const double moved = aggregation::dp::L2Norm(change);
    EXPECT_LT(moved, kClipNorm + slack) << "round " << r.round;
    EXPECT_GT(moved, 0.1 * kClipNorm) << "round " << r.round;
    previous = *std::move(model);
  }
  clients.clear();
}

TEST(SecAggFederationTest, ASiteThatRequiresSecureAggregationDeclinesAPlainRun) {
  constexpr int kSites = 4;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = MlpRunOptions(pki, dir.path(), kSites, 1);  // no secure aggregation
  o.engine.min_fit_clients = kSites - 1;
  Federation f = StartFederation(pki, o, kSites, [&](int i) { return i == kSites - 1; });
  ASSERT_NE(f.server, nullptr);
  std::vector<std::unique_ptr<StageClient>>& clients = f.clients;
  std::unique_ptr<server::Server>* server = &f.server;
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  const std::string refusal =
      "PERMISSION_DENIED: task runs without secure aggregation; this site requires it "
      "(limits.require_secure_aggregation)";
  EXPECT_EQ(clients.back()->stages(), (std::vector<std::string>{"fit failed: " + refusal}));
  EXPECT_EQ(clients.back()->trainer().fits(), 0);  // declined before the model was downloaded
  for (int i = 0; i + 1 < kSites; ++i) {
    EXPECT_EQ(clients[i]->stages(), (std::vector<std::string>{"fit"})) << "site " << i;
    EXPECT_EQ(clients[i]->trainer().secure_fits(), 0);
  }

  server::Store& store = (*server)->store();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds((*server)->engine().run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ(rounds->front().status, server::RoundStatus::kCommitted) << rounds->front().reason;
  EXPECT_EQ(rounds->front().num_reported, kSites - 1);
  EXPECT_THAT(
      AuditText(store),
      HasSubstr(absl::StrCat("task_declined round 1: the client declined the task: ", refusal)));
  clients.clear();
}

// The run's one round committed with `reported` inputs, and a site's `refusal` in the audit log;
// then the clients stop.
void ExpectOneRoundCommittedWith(Federation& f, int reported, const std::string& refusal) {
  server::Store& store = f.server->store();
  EXPECT_THAT(AuditText(store), HasSubstr(refusal));
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds(f.server->engine().run_id());
  EXPECT_TRUE(rounds.ok()) << rounds.status();
  if (rounds.ok()) {
    EXPECT_EQ(rounds->size(), 1u);
    EXPECT_EQ(rounds->front().status, server::RoundStatus::kCommitted) << rounds->front().reason;
    EXPECT_EQ(rounds->front().num_reported, reported);
  }
  f.clients.clear();
}

// A site that wants more distributed noise than the run gives declines the round at its first
// stage, before any key is made; the server records why, and the others commit the round.
TEST(SecAggFederationTest, ASiteDeclinesARoundWhoseNoiseIsBelowItsFloor) {
  constexpr int kSites = 5;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = DistributedDpRunOptions(pki, dir.path(), kSites, 1);
  Federation f = StartFederation(
      pki, o, kSites, [](int) { return true; }, {},
      [](int i, client::SiteLimits& limits) {
        limits.min_noise_multiplier = i == kSites - 1 ? 1.0 : 0.0;
      });
  ASSERT_NE(f.server, nullptr);
  for (auto& c : f.clients) EXPECT_TRUE(c->Join().ok());
  // The noise is planned for n_min = max(min_fit_clients 4, 0.7 x 5) = 4 survivors: each site
  // adds sigma = z C / sqrt(4) = 0.5, which alone gives its input z = 0.5 against the server.
  const std::string refusal =
      "PERMISSION_DENIED: the round's noise gives this site's input a noise multiplier of 0.5 "
      "against the server (stddev 0.5 / clip norm 1); this site requires at least 1 "
      "(limits.min_noise_multiplier)";
  EXPECT_EQ(f.clients.back()->stages(),
            (std::vector<std::string>{"secagg_advertise_keys failed: " + refusal}));
  EXPECT_EQ(f.clients.back()->trainer().fits(), 0);
  ExpectOneRoundCommittedWith(f, kSites - 1, refusal);
}

// The discrete Gaussian over gRPC and mutual TLS: the tasks carry its encoding, the sites' SDK
// encodes with it and the round commits; a site's noise floor is judged on the sigma and the
// rounding's norm bound the encoding states (not on the dp_* fields, which a server could set
// apart from it).
TEST(SecAggFederationTest, TheDiscreteGaussianCommitsAndASiteJudgesItsNoise) {
  constexpr int kSites = 5;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = DistributedDpRunOptions(pki, dir.path(), kSites, 1);
  o.engine.privacy.distributed_noise = "discrete_gaussian";
  Federation f = StartFederation(
      pki, o, kSites, [](int) { return true; }, {},
      [](int i, client::SiteLimits& limits) {
        limits.min_noise_multiplier = i == kSites - 1 ? 0.6 : 0.0;
      });
  ASSERT_NE(f.server, nullptr);
  for (auto& c : f.clients) EXPECT_TRUE(c->Join().ok());
  // sigma = z C / sqrt(4) = 0.5 for each site, over a norm bound a hair above C = 1.
  const std::string refusal =
      "the round's noise gives this site's input a noise multiplier of 0.5 against the server "
      "(stddev 0.5 / clip norm 1); this site requires at least 0.6 (limits.min_noise_multiplier)";
  ASSERT_EQ(f.clients.back()->stages().size(), 1u);
  EXPECT_THAT(f.clients.back()->stages()[0], HasSubstr(refusal));
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      f.server->store().Rounds(f.server->engine().run_id());
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_THAT(rounds->front().secagg_json, HasSubstr("\"ddg\""));
  EXPECT_GT(rounds->front().dp_epsilon, 0);
  ExpectOneRoundCommittedWith(f, kSites - 1, refusal);
}

// Each site of DistributedDpRunOptions' rounds adds sigma = 0.5 (planned for 4 survivors): z = 0.5
// per input against the server. The epsilon of `inputs` such inputs, at delta 1e-5.
double EpsilonOfInputs(int inputs) {
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::ComputeEpsilon(1.0, 0.5, inputs, 1e-5);
  EXPECT_TRUE(spent.ok()) << spent.status();
  return spent.ok() ? spent->epsilon : -1;
}

// The last of `sites` may spend against the server enough for one input and not two, and keeps
// its count in `ledger`.
std::function<void(int, client::SiteLimits&)> LastSiteBudgetsOneInput(int sites,
                                                                      std::string ledger) {
  return [sites, ledger = std::move(ledger)](int i, client::SiteLimits& limits) {
    if (i != sites - 1) return;
    limits.max_epsilon = (EpsilonOfInputs(1) + EpsilonOfInputs(2)) / 2;
    limits.privacy_ledger = ledger;
  };
}

// What that site says when a round would bring it to two inputs.
std::string SecondInputRefusal() {
  return absl::StrCat(
      "this round (noise multiplier 0.5) would bring this site's epsilon against the server to ",
      EpsilonOfInputs(2), " (delta 1e-05) after 2 masked inputs");
}

// A site restarted with its ledger counts the inputs its earlier process masked: with one input
// already in the ledger and a budget for two, it declines the first round of the new run.
TEST(SecAggFederationTest, ARestartedSiteCountsTheInputsInItsLedger) {
  constexpr int kSites = 5;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = DistributedDpRunOptions(pki, dir.path(), kSites, 1);
  const std::string ledger = dir.path() + "/site-4.ledger";
  {
    std::ofstream out(ledger);
    out << "0.5\t1796000000000\trun 7 round 3 task r3.a0.earlier\n";
  }
  Federation f = StartFederation(
      pki, o, kSites, [](int) { return true; }, {}, LastSiteBudgetsOneInput(kSites, ledger));
  ASSERT_NE(f.server, nullptr);
  for (auto& c : f.clients) EXPECT_TRUE(c->Join().ok());
  const std::string refusal = SecondInputRefusal();
  ASSERT_EQ(f.clients.back()->stages().size(), 1u);
  EXPECT_THAT(f.clients.back()->stages()[0], HasSubstr(refusal));
  ExpectOneRoundCommittedWith(f, kSites - 1, refusal);
}

// A site whose epsilon budget against the server allows one masked input takes part in the first
// round and declines the second, counting the input it masked; the others commit both.
TEST(SecAggFederationTest, ASiteDeclinesOnceItsEpsilonAgainstTheServerIsSpent) {
  constexpr int kSites = 5;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = DistributedDpRunOptions(pki, dir.path(), kSites, 2);
  const std::string ledger = dir.path() + "/site-4.ledger";
  Federation f = StartFederation(
      pki, o, kSites, [](int) { return true; }, {}, LastSiteBudgetsOneInput(kSites, ledger));
  ASSERT_NE(f.server, nullptr);
  for (auto& c : f.clients) EXPECT_TRUE(c->Join().ok());
  const std::vector<std::string> stages = f.clients.back()->stages();
  ASSERT_EQ(stages.size(), 6u);
  // The one input it masked is in its ledger, to all 17 digits.
  std::ifstream in(ledger);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_THAT(line, ::testing::StartsWith("0.5\t"));
  EXPECT_THAT(line, HasSubstr("round 1 task r1.a0."));
  EXPECT_FALSE(std::getline(in, line)) << "one input only";
  EXPECT_EQ(stages[4], "secagg_unmask");
  EXPECT_THAT(stages[5], HasSubstr(absl::StrCat("secagg_advertise_keys failed: PERMISSION_DENIED: ",
                                                SecondInputRefusal())));
  server::Store& store = f.server->store();
  absl::StatusOr<std::vector<server::RoundRecord>> rounds =
      store.Rounds(f.server->engine().run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ(rounds->at(0).num_reported, kSites);
  EXPECT_EQ(rounds->at(1).num_reported, kSites - 1);
  f.clients.clear();
}

// A site that allows sums of no fewer than 6 inputs refuses to sign a survivor set of five (and so
// to reveal shares) when one of the six dropped after sharing. One site alone cannot stop the
// unmasking (its neighbours hold its self-mask seed's shares): the floor protects a sum when the
// sites holding its shares set it too, so the round here commits with the others' signatures and
// shares, and the refusal is on record.
TEST(SecAggFederationTest, ASiteRefusesToUnmaskASumSmallerThanItsFloor) {
  constexpr int kSites = 6;
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), SiteNames(kSites));
  server::ServerOptions o = DropoutRunOptions(pki, dir.path(), kSites);
  // Five survivors, of whom site 0 will not sign: the four others are a majority of the six
  // that advertised keys only with the check sized for no colluding site (the default third
  // needs five).
  o.engine.secure_aggregation.corrupt_fraction = 0;
  Federation f = StartFederation(
      pki, o, kSites, [](int) { return false; },
      [](int i) { return i == kSites - 1 ? std::string("secagg_share_keys") : std::string(); },
      [](int i, client::SiteLimits& limits) { limits.min_sum_size = i == 0 ? kSites : 0; });
  ASSERT_NE(f.server, nullptr);
  EXPECT_EQ(f.clients.back()->Join().code(), absl::StatusCode::kCancelled);
  for (int i = 0; i + 1 < kSites; ++i) EXPECT_TRUE(f.clients[i]->Join().ok()) << "site " << i;
  const std::string refusal =
      "ABORTED: the survivor set lists 5 inputs in the sum; this site reveals shares only for "
      "sums of at least 6 (limits.min_sum_size)";
  EXPECT_EQ(
      f.clients[0]->stages(),
      (std::vector<std::string>{"secagg_advertise_keys", "secagg_share_keys", "secagg_masked_input",
                                "secagg_consistency failed: " + refusal}));
  ExpectOneRoundCommittedWith(f, kSites - 1, refusal);
}

}  // namespace
}  // namespace fl::testing
