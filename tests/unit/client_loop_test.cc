// The SDK's client loop (Client::Impl) against a fake transport: what it sends for a fit task,
// what it declines before downloading, how it retries a server that is away, and how a DONE
// task ends Run.
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "client_sdk/internal/transport.h"
#include "fl/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

using ::testing::HasSubstr;

ModelSpec Spec() { return ModelSpec({{"w", {4}}}); }

// Adds 1 to every weight; reports 12 examples.
class PlusOneTrainer final : public Trainer {
 public:
  ModelSpec spec() const override { return Spec(); }
  absl::StatusOr<FitResult> Fit(const Model& global, const FitConfig& config) override {
    last_config = config;
    FitResult r{.model = global.Clone(), .num_examples = 12, .metrics = {{"loss", 0.5}}};
    for (float& v : r.model.data()) v += 1;
    ++fits;
    return r;
  }
  absl::StatusOr<EvalResult> Evaluate(const Model&) override {
    return EvalResult{.loss = 0.25, .num_examples = 3, .metrics = {{"accuracy", 0.75}}};
  }
  FitConfig last_config;
  int fits = 0;
};

// Scripted polls; records everything the loop sends.
class FakeTransport final : public Transport {
 public:
  std::deque<absl::StatusOr<ClientTask>> polls;
  std::vector<UpdateHeader> headers;
  std::vector<std::vector<float>> payloads;
  std::vector<std::string> declines;
  std::vector<EvaluationReply> evaluations;
  int downloads = 0;
  int joins = 0;

  absl::StatusOr<JoinAnswer> Join(const JoinRequestInfo& r) override {
    ++joins;
    EXPECT_TRUE(r.model_spec.has_value());
    return JoinAnswer{.client_id = "id-1", .run_id = 5};
  }
  absl::StatusOr<ClientTask> Poll(int64_t, absl::Duration) override {
    if (polls.empty()) return absl::CancelledError("script over");
    absl::StatusOr<ClientTask> t = polls.front();
    polls.pop_front();
    return t;
  }
  absl::StatusOr<std::shared_ptr<const Model>> Download(const ClientTask&,
                                                        const ModelSpec& spec) override {
    ++downloads;
    auto m = std::make_shared<Model>(spec);
    for (size_t i = 0; i < m->data().size(); ++i) m->data()[i] = static_cast<float>(i);
    return std::shared_ptr<const Model>(std::move(m));
  }
  absl::Status SubmitUpdate(const UpdateHeader& h, const ChunkSource& next) override {
    headers.push_back(h);
    std::vector<float> values(static_cast<size_t>(h.payload_bytes) / sizeof(float));
    std::span<const std::byte> bytes = next(0);
    std::memcpy(values.data(), bytes.data(), std::min(bytes.size(), values.size() * 4));
    payloads.push_back(values);
    return absl::OkStatus();
  }
  absl::Status Decline(const ClientTask&, const std::string& reason) override {
    declines.push_back(reason);
    return absl::OkStatus();
  }
  absl::Status SubmitEvaluation(const EvaluationReply& r) override {
    evaluations.push_back(r);
    return absl::OkStatus();
  }
  absl::Status SubmitSecAgg(const SecAggReply&) override { return absl::OkStatus(); }
  absl::StatusOr<bool> Heartbeat(const ClientTask&, std::string*) override { return true; }
  bool wants_heartbeats() const override { return false; }
  bool WaitForServer(absl::Duration) override { return true; }
  void Cancel() override {}
};

ClientTask FitTask(int32_t round) {
  ClientTask t;
  t.kind = ClientTask::Kind::kFit;
  t.run_id = 5;
  t.round = round;
  t.task_id = "r1.a0.id-1";
  t.config.round = round;
  t.config.local_epochs = 3;
  t.has_spec = true;
  t.spec = Spec();
  t.model_bytes = 16;
  return t;
}

ClientTask Done() {
  ClientTask t;
  t.kind = ClientTask::Kind::kDone;
  t.run_id = 5;
  t.message = "run 5 finished";
  return t;
}

struct Harness {
  explicit Harness(ClientOptions options = {}) {
    auto t = std::make_unique<FakeTransport>();
    transport = t.get();
    options.initial_backoff = absl::Milliseconds(1);
    options.max_backoff = absl::Milliseconds(2);
    client = *internal::MakeClient(options, &trainer, std::move(t));
  }
  PlusOneTrainer trainer;
  FakeTransport* transport;
  std::unique_ptr<Client> client;
};

TEST(ClientLoopTest, FitTaskSendsTheTrainedWeightsAndDoneEndsTheRun) {
  Harness h;
  h.transport->polls = {FitTask(1), Done()};
  ASSERT_TRUE(h.client->Run().ok());
  ASSERT_EQ(h.transport->headers.size(), 1u);
  const UpdateHeader& sent = h.transport->headers[0];
  EXPECT_EQ(sent.task_id, "r1.a0.id-1");
  EXPECT_EQ(sent.num_examples, 12);
  EXPECT_EQ(sent.encoding, UpdateHeader::Encoding::kFloat32);
  EXPECT_EQ(sent.metrics.at("loss"), 0.5);
  EXPECT_THAT(h.transport->payloads[0], ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(h.trainer.last_config.local_epochs, 3);
  EXPECT_EQ(h.client->last_run().message, "run 5 finished");
  EXPECT_TRUE(h.client->last_run().was_live);
  EXPECT_EQ(h.client->client_id(), "id-1");
}

TEST(ClientLoopTest, ATaskOutsideTheSiteLimitsIsDeclinedBeforeDownloading) {
  ClientOptions options;
  options.limits.max_local_epochs = 2;
  Harness h(options);
  h.transport->polls = {FitTask(1), Done()};
  ASSERT_TRUE(h.client->Run().ok());
  EXPECT_EQ(h.transport->downloads, 0);
  EXPECT_EQ(h.trainer.fits, 0);
  ASSERT_EQ(h.transport->declines.size(), 1u);
  EXPECT_THAT(h.transport->declines[0], HasSubstr("3 local epochs"));
  EXPECT_THAT(h.transport->declines[0], HasSubstr("limits.max_local_epochs"));
}

TEST(ClientLoopTest, AnUnknownEncodingIsDeclinedNamingIt) {
  Harness h;
  ClientTask t = FitTask(1);
  t.update_encoding = std::nullopt;
  t.encoding_name = "BFLOAT8";
  h.transport->polls = {t, Done()};
  ASSERT_TRUE(h.client->Run().ok());
  EXPECT_TRUE(h.transport->headers.empty());
  ASSERT_EQ(h.transport->declines.size(), 1u);
  EXPECT_THAT(h.transport->declines[0], HasSubstr("BFLOAT8"));
}

TEST(ClientLoopTest, AServerThatIsAwayIsRetriedThenTheLoopGoesOn) {
  Harness h;
  h.transport->polls = {absl::UnavailableError("connection refused"),
                        absl::UnavailableError("connection refused"), FitTask(1), Done()};
  ASSERT_TRUE(h.client->Run().ok());
  EXPECT_EQ(h.transport->headers.size(), 1u);
}

TEST(ClientLoopTest, ARefusalEndsRunWithTheServersReason) {
  Harness h;
  h.transport->polls = {absl::PermissionDeniedError("client revoked")};
  absl::Status s = h.client->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("revoked"));
}

TEST(ClientLoopTest, AServerAwayPastTheReconnectTimeoutEndsRunUnavailable) {
  ClientOptions options;
  options.reconnect_timeout = absl::ZeroDuration();
  Harness h(options);
  h.transport->polls = {absl::UnavailableError("down"), absl::UnavailableError("down"),
                        absl::UnavailableError("down")};
  absl::Status s = h.client->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("unreachable"));
}

TEST(ClientLoopTest, EvaluateTaskReportsTheTrainersResult) {
  Harness h;
  ClientTask t = FitTask(2);
  t.kind = ClientTask::Kind::kEvaluate;
  h.transport->polls = {t, Done()};
  ASSERT_TRUE(h.client->Run().ok());
  ASSERT_EQ(h.transport->evaluations.size(), 1u);
  EXPECT_EQ(h.transport->evaluations[0].num_examples, 3);
  EXPECT_EQ(h.transport->evaluations[0].metrics.at("accuracy"), 0.75);
  EXPECT_TRUE(h.transport->evaluations[0].error.empty());
}

// A site that takes part only under secure aggregation sends no evaluation result in the clear
// (the server could record it whatever it claims) unless it says it shares them.
TEST(ClientLoopTest, ASiteRequiringSecureAggregationKeepsItsEvaluationUnlessItShares) {
  ClientOptions options;
  options.limits.require_secure_aggregation = true;
  Harness h(options);
  ClientTask t = FitTask(2);
  t.kind = ClientTask::Kind::kEvaluate;
  h.transport->polls = {t, Done()};
  ASSERT_TRUE(h.client->Run().ok());
  EXPECT_EQ(h.transport->downloads, 0);
  ASSERT_EQ(h.transport->evaluations.size(), 1u);
  EXPECT_EQ(h.transport->evaluations[0].num_examples, 0);
  EXPECT_TRUE(h.transport->evaluations[0].metrics.empty());
  EXPECT_THAT(h.transport->evaluations[0].error, HasSubstr("keeps its evaluation results"));
  EXPECT_THAT(h.transport->evaluations[0].error, HasSubstr("share_site_evaluation"));

  options.share_site_evaluation = true;
  Harness shares(options);
  shares.transport->polls = {t, Done()};
  ASSERT_TRUE(shares.client->Run().ok());
  ASSERT_EQ(shares.transport->evaluations.size(), 1u);
  EXPECT_EQ(shares.transport->evaluations[0].num_examples, 3);
  EXPECT_TRUE(shares.transport->evaluations[0].share_site_result);
}

TEST(ClientLoopTest, RunTaskDoesOneTaskAsRunWould) {
  Harness h;
  ASSERT_TRUE(internal::JoinOnce(*h.client).ok());
  ASSERT_TRUE(internal::RunTask(*h.client, FitTask(4)).ok());
  EXPECT_EQ(h.transport->headers.size(), 1u);
  EXPECT_EQ(h.trainer.last_config.round, 4);
}

TEST(SharedConnectionTest, IsForPlaintextToALoopbackAddressOnly) {
  ClientOptions tls;
  tls.server_address = "127.0.0.1:1";
  absl::StatusOr<std::shared_ptr<SharedConnection>> refused = MakeSharedConnection(tls);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("plaintext only"));

  ClientOptions plain;
  plain.server_address = "127.0.0.1:1";
  plain.insecure_plaintext = true;
  absl::StatusOr<std::shared_ptr<SharedConnection>> connection = MakeSharedConnection(plain);
  ASSERT_TRUE(connection.ok()) << connection.status();
  for (const char* name : {"site-0", "site-1"}) {
    ClientOptions site = plain;
    site.name = name;
    EXPECT_TRUE(MakeGrpcTransport(site, *connection).ok()) << name;
  }
  EXPECT_EQ(MakeGrpcTransport(tls, *connection).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A plaintext connection goes to a loopback address only, as any plaintext transport.
  ClientOptions remote = plain;
  remote.server_address = "example.org:443";
  EXPECT_FALSE(MakeSharedConnection(remote).ok());
}

}  // namespace
}  // namespace fl::client
