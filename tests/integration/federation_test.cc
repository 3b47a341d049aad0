// The real server and real clients over loopback gRPC with mutual TLS.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "fl/client/softmax_trainer.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/server/server.h"
#include "fl/v1/federation.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "sqlite3.h"
#include "tests/fake_clock.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using server::RoundRecord;
using server::RoundStatus;
using ::testing::HasSubstr;
using ::testing::Not;

ModelSpec FashionSpec() { return client::SoftmaxRegressionSpec(784, 10); }

// Three rounds of one local epoch with three sites online, two of them enough to commit.
server::ServerOptions ThreeRoundOptions(const ProvisionedFiles& pki, const std::string& dir) {
  server::ServerOptions o = TlsServerOptions(pki, dir);
  o.engine.num_rounds = 3;
  o.engine.min_clients = 3;
  o.engine.min_fit_clients = 2;
  o.engine.round_timeout = absl::Seconds(60);
  o.engine.fit.local_epochs = 1;
  o.engine.fit.batch_size = 32;
  o.engine.fit.learning_rate = 0.1f;
  o.max_poll_wait = absl::Seconds(2);
  return o;
}

std::unique_ptr<client::Trainer> FashionTrainer(int index, int64_t examples) {
  return client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(index * examples, examples), {},
                                              {.seed = static_cast<uint64_t>(index)});
}

TEST(FederationTest, FullRunOverMutualTls) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  client::Dataset test = FashionTestSlice(2000);
  server::EngineHooks hooks;
  hooks.evaluate = [&test](const Model& m) -> std::map<std::string, double> {
    absl::StatusOr<client::EvalResult> r = client::EvaluateSoftmaxRegression(m, test);
    return {{"test_accuracy", r.ok() ? r->metrics["accuracy"] : 0.0}};
  };
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(ThreeRoundOptions(pki, dir.path()), Model(FashionSpec()), hooks);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<ClientThread>(TlsClientOptions(pki, i, (*server)->port()),
                                                     FashionTrainer(i, 3000)));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  for (auto& c : clients) EXPECT_EQ(c->tasks_accepted(), 3);

  server::Store& store = (*server)->store();
  absl::StatusOr<server::RunRecord> run = store.GetRun((*server)->engine().run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, server::RunStatus::kFinished);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds(run->run_id);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 3u);
  for (const RoundRecord& r : *rounds) {
    EXPECT_EQ(r.status, RoundStatus::kCommitted);
    EXPECT_EQ(r.num_reported, 3);
    absl::StatusOr<Model> checkpoint = store.ReadCheckpoint(r.checkpoint);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  }
  // Three rounds over 9000 examples already classify most of the test set.
  absl::StatusOr<client::EvalResult> eval =
      client::EvaluateSoftmaxRegression(*(*server)->engine().global_model(), test);
  ASSERT_TRUE(eval.ok());
  EXPECT_GT(eval->metrics["accuracy"], 0.75);
  // Clients were identified by their certificates' fingerprints.
  absl::StatusOr<std::string> fp0 = CertificateFingerprint(*ReadFile(pki.client_certs[0]));
  absl::StatusOr<std::vector<server::ParticipationRecord>> parts =
      store.Participations(run->run_id, 1);
  ASSERT_TRUE(parts.ok());
  bool found = false;
  for (const auto& p : *parts) found |= p.client_id == *fp0;
  EXPECT_TRUE(found);
}

// Sends the global model plus `delta` everywhere: the round's FedAvg of such sites is exact.
class ShiftTrainer final : public client::Trainer {
 public:
  ShiftTrainer(ModelSpec spec, float delta) : spec_(std::move(spec)), delta_(delta) {}
  ModelSpec spec() const override { return spec_; }
  absl::StatusOr<client::FitResult> Fit(const Model& global, const client::FitConfig&) override {
    client::FitResult r{.model = global.Clone(), .num_examples = 10, .metrics = {}};
    for (float& v : r.model.data()) v += delta_;
    return r;
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model&) override {
    return absl::UnimplementedError("not evaluated");
  }

 private:
  ModelSpec spec_;
  float delta_;
};

// Uploads of several 1 MiB chunks arrive whole under every flow-control setting an operator
// can pick: the smallest fixed window (one chunk does not even fit), the default, and gRPC's
// own probe-tuned window (stream_window_mib = 0).
class UploadWindowTest : public ::testing::TestWithParam<int> {};

TEST_P(UploadWindowTest, MultiChunkUploadsArriveWholeAndTheRoundCommitsTheirMean) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1"});
  const ModelSpec spec({{"w", {(5 << 20) / 4 + 3}}});  // 5 MiB + 12 bytes: six chunks
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.num_rounds = 1;
  o.engine.min_clients = 2;
  o.engine.min_fit_clients = 2;
  o.engine.round_timeout = absl::Seconds(60);
  o.max_poll_wait = absl::Seconds(2);
  o.stream_window_mib = GetParam();
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(spec), {});
  ASSERT_TRUE(server.ok()) << server.status();
  ClientThread a(TlsClientOptions(pki, 0, (*server)->port()),
                 std::make_unique<ShiftTrainer>(spec, 1.0f));
  ClientThread b(TlsClientOptions(pki, 1, (*server)->port()),
                 std::make_unique<ShiftTrainer>(spec, 3.0f));
  EXPECT_TRUE(a.Join().ok());
  EXPECT_TRUE(b.Join().ok());
  EXPECT_EQ(a.tasks_accepted(), 1);
  EXPECT_EQ(b.tasks_accepted(), 1);
  std::shared_ptr<const Model> global = (*server)->engine().global_model();
  ASSERT_NE(global, nullptr);
  ASSERT_EQ(global->data().size(), static_cast<size_t>(spec.NumFloats()));
  size_t wrong = 0;
  for (float v : global->data()) wrong += v != 2.0f;
  EXPECT_EQ(wrong, 0u) << "values that are not the mean of 1 and 3";
}

INSTANTIATE_TEST_SUITE_P(Windows, UploadWindowTest, ::testing::Values(1, 4, 0),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("GrpcAutoTuned")
                                                  : absl::StrCat("Fixed", info.param, "MiB");
                         });

TEST(FederationTest, HeartbeatsKeepASlowSiteInTheRound) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  server::ServerOptions o = ThreeRoundOptions(pki, dir.path());
  o.engine.num_rounds = 1;
  o.engine.client_timeout = absl::Milliseconds(800);  // far shorter than site-2's training
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(FashionSpec()));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, (*server)->port());
    options.poll_wait = absl::Milliseconds(300);
    options.heartbeat_interval = absl::Milliseconds(150);
    std::unique_ptr<client::Trainer> trainer = FashionTrainer(i, 500);
    if (i == 2) trainer = std::make_unique<SlowTrainer>(std::move(trainer), absl::Seconds(2));
    clients.push_back(std::make_unique<ClientThread>(options, std::move(trainer)));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  absl::StatusOr<std::vector<RoundRecord>> rounds =
      (*server)->store().Rounds((*server)->engine().run_id());
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].num_reported, 3) << "the slow site was dropped despite its heartbeats";
}

TEST(FederationTest, FederatedEvaluationOnTheSitesHeldOutData) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  server::ServerOptions o = ThreeRoundOptions(pki, dir.path());
  o.engine.num_rounds = 2;
  o.engine.eval_every = 1;
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(FashionSpec()));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    // Each site holds out its own test rows: 200, 400 and 600 of them.
    client::Dataset test = FashionTestSlice(600);
    test = test.Subset([&] {
      std::vector<int64_t> idx;
      for (int64_t r = 0; r < 200 * (i + 1); ++r) idx.push_back(r);
      return idx;
    }());
    clients.push_back(std::make_unique<ClientThread>(
        TlsClientOptions(pki, i, (*server)->port()),
        client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 2000, 2000), std::move(test),
                                             {.seed = static_cast<uint64_t>(i)})));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/server/federation.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT round, accuracy, num_examples FROM evaluations WHERE "
                               "source = 'federated' ORDER BY round",
                               -1, &st, nullptr),
            SQLITE_OK);
  for (int round = 1; round <= 2; ++round) {
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW) << "no federated evaluation of round " << round;
    EXPECT_EQ(sqlite3_column_int(st, 0), round);
    EXPECT_GT(sqlite3_column_double(st, 1), 0.6);
    EXPECT_EQ(sqlite3_column_int64(st, 2), 1200);  // 200 + 400 + 600 held-out rows
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
}

// Refusals at the door: each names its reason to the caller and lands in the audit log.
class RefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = MakePki(dir_.path(), {"site-0", "site-1", "site-2", "stranger"});
    server::ServerOptions o = ThreeRoundOptions(pki_, dir_.path());
    o.enroll_cert_paths.pop_back();  // "stranger" has a valid certificate but is not enrolled
    absl::StatusOr<std::unique_ptr<server::Server>> server =
        server::Server::Start(o, Model(FashionSpec()));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::Status RunClient(client::ClientOptions options) {
    options.reconnect_timeout = absl::Seconds(2);
    auto trainer = client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(0, 100), {});
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Create(options, trainer.get());
    if (!c.ok()) return c.status();
    return (*c)->Run();
  }

  TempDir dir_;
  ProvisionedFiles pki_;
  std::unique_ptr<server::Server> server_;
};

TEST_F(RefusalTest, ClientNotEnrolledIsRefused) {
  absl::Status s = RunClient(TlsClientOptions(pki_, 3, server_->port()));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("CN=stranger) is not enrolled"), absl::string_view::npos) << s;
  EXPECT_NE(AuditText(server_->store()).find("not enrolled"), std::string::npos);
}

TEST_F(RefusalTest, CertificateFromAnotherCaIsRefused) {
  TempDir other;
  ProvisionedFiles foreign = MakePki(other.path(), {"site-0"}, "other-federation");
  client::ClientOptions o = TlsClientOptions(pki_, 0, server_->port());
  o.cert_path = foreign.client_certs[0];  // trusts our server, but signed by another CA
  o.key_path = foreign.client_keys[0];
  absl::Status s = RunClient(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("not signed by this federation's CA"), absl::string_view::npos) << s;
  EXPECT_NE(AuditText(server_->store()).find("not signed by this federation's CA"),
            std::string::npos);
}

TEST_F(RefusalTest, PlaintextClientIsRefused) {
  client::ClientOptions o;
  o.server_address = absl::StrCat("127.0.0.1:", server_->port());
  o.insecure_plaintext = true;
  o.name = "plain";
  absl::Status s = RunClient(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("if the server requires TLS"), absl::string_view::npos) << s;
  EXPECT_NE(AuditText(server_->store()).find("tls_handshake_refused"), std::string::npos)
      << AuditText(server_->store());
}

TEST(ServerStartTest, ARevokedClientStaysRevokedAcrossARestart) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string fp = *CertificateFingerprint(*ReadFile(pki.client_certs[0]));
  {
    absl::StatusOr<std::unique_ptr<server::Server>> server =
        server::Server::Start(ThreeRoundOptions(pki, dir.path()), Model(FashionSpec()));
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE((*server)->store().RevokeClient(fp, 1).ok());
  }
  // The same configuration, still listing site-0's certificate under enroll.
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(ThreeRoundOptions(pki, dir.path()), Model(FashionSpec()));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE(*(*server)->store().IsEnrolled(fp));
  client::ClientOptions o = TlsClientOptions(pki, 0, (*server)->port());
  auto trainer = FashionTrainer(0, 100);
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o, trainer.get());
  ASSERT_TRUE(c.ok());
  absl::Status s = (*c)->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // Told that it was revoked, and when (revoked at 1 ms past the epoch), not "not enrolled".
  EXPECT_THAT(s.message(), HasSubstr("(CN=site-0) was revoked at 1970-01-01 00:00:00Z")) << s;
  EXPECT_THAT(s.message(), HasSubstr("fl admin enroll"));
  EXPECT_THAT(s.message(), Not(HasSubstr("not enrolled")));
}

TEST(ServerStartTest, APortInUseIsAnError) {
  TempDir dir;
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.data_dir = dir.path() + "/a";
  o.insecure_plaintext = true;
  absl::StatusOr<std::unique_ptr<server::Server>> first =
      server::Server::Start(o, Model(FashionSpec()));
  ASSERT_TRUE(first.ok()) << first.status();
  o.listen_address = absl::StrCat("127.0.0.1:", (*first)->port());
  o.data_dir = dir.path() + "/b";
  absl::StatusOr<std::unique_ptr<server::Server>> second =
      server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("cannot listen on"), absl::string_view::npos);
}

TEST(ServerStartTest, OneServerPerDataDirectory) {
  TempDir dir;
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.data_dir = dir.path() + "/server";
  o.insecure_plaintext = true;
  absl::StatusOr<std::unique_ptr<server::Server>> first =
      server::Server::Start(o, Model(FashionSpec()));
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<server::Server>> second =
      server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_NE(second.status().message().find("another server is running on the data directory"),
            absl::string_view::npos);
  first->reset();
  EXPECT_TRUE(server::Server::Start(o, Model(FashionSpec())).ok())
      << "the lock outlived its server";
}

TEST(ServerStartTest, AListenAddressWithoutAPortIsRefused) {
  TempDir dir;
  server::ServerOptions o;
  o.data_dir = dir.path() + "/server";
  o.insecure_plaintext = true;
  for (const char* address :
       {"127.0.0.1", "localhost", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http", "[::1]"}) {
    o.listen_address = address;
    absl::StatusOr<std::unique_ptr<server::Server>> s =
        server::Server::Start(o, Model(FashionSpec()));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(s.status().message(), HasSubstr(absl::StrCat("listen address '", address)));
    EXPECT_THAT(s.status().message(), HasSubstr("127.0.0.1:7443"));
  }
  o.listen_address = "[::1]:0";
  EXPECT_TRUE(server::Server::Start(o, Model(FashionSpec())).ok());
}

// An unwritable data directory is not "another server is running".
TEST(ServerStartTest, AnUnwritableDataDirectorySaysSo) {
  TempDir dir;
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.insecure_plaintext = true;
  if (::geteuid() != 0) {
    o.data_dir = dir.path() + "/locked";
    std::filesystem::create_directories(o.data_dir);
    std::filesystem::permissions(
        o.data_dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  } else if (std::filesystem::is_directory("/sys/kernel")) {
    o.data_dir = "/sys";  // refuses new files even to root
  } else {
    GTEST_SKIP() << "running as root without /sys: no directory refuses a new file";
  }
  absl::StatusOr<std::unique_ptr<server::Server>> s =
      server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("cannot create " + o.data_dir + "/server.lock"));
  EXPECT_THAT(s.status().message(), HasSubstr("writable by the user running the server"));
  EXPECT_THAT(s.status().message(), Not(HasSubstr("another server")));
}

// The SQLite path that `fl sim` prints is taken for its directory; another file is refused.
TEST(ServerStartTest, TheDataDirectoryMayBeGivenAsItsSqliteFile) {
  TempDir dir;
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.insecure_plaintext = true;
  o.data_dir = dir.path() + "/server";
  std::string db;
  {
    absl::StatusOr<std::unique_ptr<server::Server>> first =
        server::Server::Start(o, Model(FashionSpec()));
    ASSERT_TRUE(first.ok()) << first.status();
    db = (*first)->store().db_path();
  }
  o.data_dir = db;
  absl::StatusOr<std::unique_ptr<server::Server>> again =
      server::Server::Start(o, Model(FashionSpec()));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->store().db_path(), db);
  again->reset();
  o.data_dir = dir.path() + "/server/server.lock";
  absl::StatusOr<std::unique_ptr<server::Server>> file =
      server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("server.lock is a file but not a federation database"));
}

// A run that waits without progress past stall_after_s is "stalled" on /healthz (503, with how
// many clients are online) and in fl_run_state; before that it is "waiting".
TEST(ServerHealthTest, ARunWithoutProgressIsReportedStalled) {
  TempDir dir;
  server::FakeClock clock;
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.data_dir = dir.path() + "/server";
  o.insecure_plaintext = true;
  o.metrics_address = "127.0.0.1:0";
  o.engine.min_clients = 2;
  o.stall_after = absl::Minutes(10);
  o.clock = &clock;
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(FashionSpec()));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->metrics_port();
  std::string health = HttpGet(port, "/healthz");
  EXPECT_THAT(health, HasSubstr("HTTP/1.1 200")) << health;
  EXPECT_THAT(health, HasSubstr("\"state\":\"waiting\"")) << health;

  clock.Advance(absl::Minutes(11));
  std::string metrics;
  for (int i = 0; i < 200; ++i) {  // the server's tick (every 50 ms) sets the gauge
    metrics = HttpGet(port, "/metrics");
    if (metrics.find("fl_run_state 3\n") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(metrics, HasSubstr("fl_run_state 3\n")) << metrics;
  EXPECT_THAT(metrics, HasSubstr("fl_seconds_since_progress 660\n")) << metrics;
  health = HttpGet(port, "/healthz");
  EXPECT_THAT(health, HasSubstr("HTTP/1.1 503")) << health;
  EXPECT_THAT(health, HasSubstr("\"state\":\"stalled\"")) << health;
  EXPECT_THAT(health, HasSubstr("has made no progress for 11m (stall_after_s 600): 0 of the 2 "
                                "clients needed are online"))
      << health;
}

// A site's certificate or a key of another certificate given to the server: refused at start,
// naming the files, instead of gRPC's "cannot listen" (and "empty address list" at the sites).
TEST(ServerStartTest, AServerCertificateThatIsASitesOrHasTheWrongKeyIsRefused) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.cert_path = pki.client_certs[0];
  o.key_path = pki.client_keys[0];
  absl::StatusOr<std::unique_ptr<server::Server>> s =
      server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("(CN=site-0) is not for TLS servers"));
  EXPECT_THAT(s.status().message(), HasSubstr(pki.client_certs[0]));

  o = TlsServerOptions(pki, dir.path());
  o.key_path = pki.client_keys[0];
  s = server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("is not the key of the server certificate"));
}

TEST(ServerStartTest, PlaintextOnlyOnLoopback) {
  TempDir dir;
  server::ServerOptions o;
  o.listen_address = "0.0.0.0:0";
  o.data_dir = dir.path() + "/server";
  o.insecure_plaintext = true;
  absl::StatusOr<std::unique_ptr<server::Server>> s =
      server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("only on a loopback address"), absl::string_view::npos);
  o.listen_address = "127.0.0.1:0";
  o.insecure_plaintext = false;
  s = server::Server::Start(o, Model(FashionSpec()));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("mutual TLS needs"), absl::string_view::npos);
}

}  // namespace
}  // namespace fl::testing
