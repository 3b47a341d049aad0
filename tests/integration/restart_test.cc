// The server process is killed with SIGKILL mid-run and restarted on the same data directory:
// clients reconnect, the run resumes at the next uncommitted round, and every committed round is
// intact at the end.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "fl/client/builtin_models.h"
#include "fl/client/softmax_trainer.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "gtest/gtest.h"
#include "tests/integration/server_run_util.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using server::RoundRecord;
using server::RoundStatus;

TEST(RestartTest, SigkillMidRunThenRestartFinishesWithEveryCommittedRoundIntact) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();

  auto server = std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port), log);
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, port);
    options.reconnect_timeout = absl::Seconds(60);
    auto trainer = std::make_unique<SlowTrainer>(
        client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {}),
        absl::Milliseconds(400));
    clients.push_back(std::make_unique<ClientThread>(options, std::move(trainer)));
  }

  // Kill the server once round 2 is committed and round 3 is in flight.
  std::map<int, RoundRecord> before;
  int rows = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while ((before.size() < 2 || rows < 3) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    before = CommittedRounds(data_dir, &rows);
  }
  ASSERT_GE(before.size(), 2u) << *ReadFile(log);
  server->Kill(SIGKILL);
  EXPECT_EQ(server->Wait(), 128 + SIGKILL);
  before = CommittedRounds(data_dir);
  ASSERT_GE(before.size(), 2u);
  ASSERT_LT(before.size(), 4u) << "the run finished before the kill; slow the trainer down";

  // Restart on the same data directory; the clients reconnect by themselves.
  server = std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port), log);
  for (auto& c : clients) {
    absl::Status s = c->Join();
    EXPECT_TRUE(s.ok()) << s << "\n" << *ReadFile(log);
  }
  EXPECT_EQ(server->Wait(), 0) << *ReadFile(log);

  int attempts = 0;
  std::map<int, RoundRecord> after = CommittedRounds(data_dir, &attempts);
  ASSERT_EQ(after.size(), 4u) << *ReadFile(log);
  for (const auto& [round, record] : before) {
    EXPECT_EQ(after[round].checkpoint, record.checkpoint) << "round " << round << " changed";
    EXPECT_EQ(after[round].ended_at_ms, record.ended_at_ms);
  }
  for (const auto& [round, record] : after) {
    EXPECT_EQ(record.num_reported, 3);
    absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
    ASSERT_TRUE(store.ok());
    EXPECT_TRUE((*store)->ReadCheckpoint(record.checkpoint).ok()) << "round " << round;
  }
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<server::RunRecord> run = (*store)->GetRun(1);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, server::RunStatus::kFinished);
  EXPECT_FALSE((*store)->GetRun(2).ok()) << "the restart must resume run 1, not start another";
  // The round that was in flight when the server died was recorded as aborted.
  EXPECT_GT(attempts, 4) << "expected an aborted attempt of round " << before.size() + 1;
  EXPECT_NE(ReadFile(log)->find("run_resumed"), std::string::npos);
}

}  // namespace
}  // namespace fl::testing

namespace fl::testing {
namespace {

TEST(RestartTest, SigtermStopsTheServerCleanly) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string log = dir.path() + "/server.log";
  ChildProcess server(RunCommand(pki, dir.path() + "/server", FreeLoopbackPort()), log);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (ReadFile(log).value_or("").find("server_listening") == std::string::npos &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  server.Kill(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << *ReadFile(log);
  EXPECT_NE(ReadFile(log)->find("signal=15"), std::string::npos) << *ReadFile(log);
}

}  // namespace
}  // namespace fl::testing

namespace fl::testing {
namespace {

// The final model and committed rounds of one run of the 4-round federation in RunCommand,
// the server armed to kill itself at `crash_point` (none when empty) and restarted if it does.
struct Outcome {
  std::map<int, RoundRecord> rounds;
  std::vector<float> final_model;
  int server_deaths = 0;
};

Outcome RunFederation(const std::string& crash_point) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  Outcome out;
  std::vector<std::string> env;
  if (!crash_point.empty()) env.push_back("FL_CRASH_POINT=" + crash_point);
  auto server = std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port), log, env);
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, port);
    options.reconnect_timeout = absl::Seconds(60);
    clients.push_back(std::make_unique<ClientThread>(
        options, client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {},
                                                      {.seed = static_cast<uint64_t>(i)})));
  }
  int code = server->Wait();
  if (code == 128 + SIGKILL) {
    ++out.server_deaths;
    server = std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port), log);
    code = server->Wait();
  }
  EXPECT_EQ(code, 0) << *ReadFile(log);
  for (auto& c : clients) {
    absl::Status s = c->Join();
    EXPECT_TRUE(s.ok()) << s;
  }
  out.rounds = CommittedRounds(data_dir);
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  EXPECT_TRUE(store.ok());
  if (out.rounds.count(4) != 0 && store.ok()) {
    absl::StatusOr<Model> final_model = (*store)->ReadCheckpoint(out.rounds[4].checkpoint);
    EXPECT_TRUE(final_model.ok()) << final_model.status();
    if (final_model.ok()) {
      out.final_model.assign(final_model->data().begin(), final_model->data().end());
    }
  }
  return out;
}

TEST(CrashTest, SigkillAtEachPointOfARoundLosesNothingAndChangesNothing) {
  const Outcome reference = RunFederation("");
  ASSERT_EQ(reference.rounds.size(), 4u);
  ASSERT_FALSE(reference.final_model.empty());
  // Round 2 is the one interrupted: 3 uploads of one chunk per round, and the initial model's
  // checkpoint is the first one written.
  for (const char* point :
       {"round_start@2", "mid_upload@4", "aggregate@2", "checkpoint_write@3", "after_commit@2"}) {
    SCOPED_TRACE(point);
    const Outcome crashed = RunFederation(point);
    EXPECT_EQ(crashed.server_deaths, 1) << "the crash point was never reached";
    ASSERT_EQ(crashed.rounds.size(), 4u);  // CommittedRounds flags a round committed twice
    ASSERT_EQ(crashed.final_model.size(), reference.final_model.size());
    float max_diff = 0;
    for (size_t i = 0; i < crashed.final_model.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(crashed.final_model[i] - reference.final_model[i]));
    }
    EXPECT_LT(max_diff, 1e-5f) << "the final model differs from the uninterrupted run's";
  }
}

}  // namespace
}  // namespace fl::testing

namespace fl::testing {
namespace {

TEST(RestartTest, SigtermMidRoundRecordsItAbortedAndTheRestartRunsItAgain) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  auto server = std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port), log);
  auto clients = StartSlowClients(pki, port, absl::Milliseconds(500));
  // Stop the server while round 2 is in flight.
  int rows = 0;
  std::map<int, RoundRecord> committed;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while ((committed.size() < 1 || rows < 2) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    committed = CommittedRounds(data_dir, &rows);
  }
  ASSERT_EQ(committed.size(), 1u);
  server->Kill(SIGTERM);
  EXPECT_EQ(server->Wait(), 0) << *ReadFile(log);
  {
    absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
    ASSERT_TRUE(store.ok());
    absl::StatusOr<std::vector<RoundRecord>> rounds = (*store)->Rounds(1);
    ASSERT_TRUE(rounds.ok());
    ASSERT_EQ(rounds->size(), 2u);
    EXPECT_EQ((*rounds)[1].round, 2);
    EXPECT_EQ((*rounds)[1].status, RoundStatus::kAborted);
    EXPECT_EQ((*rounds)[1].reason, "server shutting down");
  }
  server = std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port), log);
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  EXPECT_EQ(server->Wait(), 0) << *ReadFile(log);
  EXPECT_EQ(CommittedRounds(data_dir).size(), 4u);
}

// Killed while round 2's secure sum is unmasked (distributed DP): the restarted server does not
// run round 2 again from the same model, and counts the release it was making, by the
// accountant and against the server, on the aborted attempt.
TEST(CrashTest, SigkillWhileASecureSumIsUnmaskedCountsTheReleaseAtRestart) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  std::vector<std::string> command =
      RunCommand(pki, data_dir, port, {"--dp-mode", "distributed", "--dp-noise-multiplier", "2"});
  command.push_back("--secagg");
  auto server = std::make_unique<ChildProcess>(
      command, log, std::vector<std::string>{"FL_CRASH_POINT=secagg_unmask@2"});
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, port);
    options.reconnect_timeout = absl::Seconds(60);
    clients.push_back(std::make_unique<ClientThread>(
        options, client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {})));
  }
  ASSERT_EQ(server->Wait(), 128 + SIGKILL) << *ReadFile(log);
  server = std::make_unique<ChildProcess>(command, log);
  for (auto& c : clients) (void)c->Join();
  server->Kill(SIGTERM);
  (void)server->Wait();
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<std::vector<server::RunRecord>> runs = (*store)->Runs();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, server::RunStatus::kFailed);
  EXPECT_NE(runs->front().reason.find("round 2 attempt 0: the secure sum was unmasked"),
            std::string::npos)
      << runs->front().reason;
  EXPECT_NE(runs->front().reason.find("the release is counted: epsilon"), std::string::npos)
      << runs->front().reason;
  absl::StatusOr<std::vector<RoundRecord>> rounds = (*store)->Rounds(1);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u) << "round 2 ran again";
  const RoundRecord& first = (*rounds)[0];
  const RoundRecord& interrupted = (*rounds)[1];
  EXPECT_EQ(first.status, RoundStatus::kCommitted);
  EXPECT_EQ(interrupted.status, RoundStatus::kAborted);
  EXPECT_GT(first.dp_epsilon, 0);
  // Two releases of all three sites: more than one, for the users and for the server.
  EXPECT_GT(interrupted.dp_epsilon, first.dp_epsilon);
  EXPECT_GT(interrupted.dp_epsilon_server, first.dp_epsilon_server);
  EXPECT_NE(runs->front().reason.find(absl::StrCat(interrupted.dp_epsilon)), std::string::npos);
}

TEST(RestartTest, AnEvaluationSetThatDoesNotFitTheModelIsRefusedAtStart) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string log = dir.path() + "/server.log";
  const std::string fmnist = FL_FASHION_MNIST_DIR;
  ChildProcess server(
      RunCommand(pki, dir.path() + "/server", FreeLoopbackPort(),
                 {"--features", "20", "--eval-images", fmnist + "/t10k-images-idx3-ubyte.gz",
                  "--eval-labels", fmnist + "/t10k-labels-idx1-ubyte.gz"}),
      log);
  EXPECT_EQ(server.Wait(), 1);
  EXPECT_NE(ReadFile(log)->find("--eval-images/--eval-labels do not fit the model"),
            std::string::npos)
      << *ReadFile(log);
}

TEST(RestartTest, ServerSideEvaluationAndAStoppingRuleFromTheCommandLine) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  const std::string fmnist = FL_FASHION_MNIST_DIR;
  ChildProcess server(
      RunCommand(pki, data_dir, port,
                 {"--rounds", "50", "--eval-images", fmnist + "/t10k-images-idx3-ubyte.gz",
                  "--eval-labels", fmnist + "/t10k-labels-idx1-ubyte.gz", "--stop-metric",
                  "test_accuracy", "--stop-threshold", "0.7"}),
      log);
  auto clients = StartSlowClients(pki, port, absl::ZeroDuration());
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  EXPECT_EQ(server.Wait(), 0) << *ReadFile(log);
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<server::RunRecord> run = (*store)->GetRun(1);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, server::RunStatus::kFinished);
  EXPECT_NE(run->reason.find("stopping rule met after round"), std::string::npos) << run->reason;
  const size_t committed = CommittedRounds(data_dir).size();
  EXPECT_LT(committed, 50u);
  EXPECT_GE(committed, 1u);
  absl::StatusOr<std::vector<RoundRecord>> rounds = (*store)->Rounds(1);
  ASSERT_TRUE(rounds.ok());
  EXPECT_NE(rounds->back().metrics_json.find("test_accuracy"), std::string::npos);
}

// `fl server --strategy fltrust` trains on the root dataset it is given (here the test set's
// labelled images) every round and commits; root files that cannot be read are refused at start.
TEST(RestartTest, FLTrustTrainsOnTheServersRootDataset) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  const std::string fmnist = FL_FASHION_MNIST_DIR;
  ChildProcess server(RunCommand(pki, data_dir, port,
                                 {"--rounds", "2", "--strategy", "fltrust", "--root-images",
                                  fmnist + "/t10k-images-idx3-ubyte.gz", "--root-labels",
                                  fmnist + "/t10k-labels-idx1-ubyte.gz"}),
                      log);
  auto clients = StartSlowClients(pki, port, absl::ZeroDuration());
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  EXPECT_EQ(server.Wait(), 0) << *ReadFile(log);
  EXPECT_EQ(CommittedRounds(data_dir).size(), 2u) << *ReadFile(log);

  const std::string bad_log = dir.path() + "/bad.log";
  ChildProcess bad(
      RunCommand(pki, dir.path() + "/bad", FreeLoopbackPort(),
                 {"--strategy", "fltrust", "--root-images", fmnist + "/t10k-images-idx3-ubyte.gz",
                  "--root-labels", dir.path() + "/missing-labels"}),
      bad_log);
  EXPECT_EQ(bad.Wait(), 1);
  EXPECT_NE(ReadFile(bad_log)->find("model.root_images/root_labels:"), std::string::npos)
      << *ReadFile(bad_log);
}

}  // namespace
}  // namespace fl::testing

namespace fl::testing {
namespace {

// Twenty SIGKILLs at moments drawn from a seeded generator (0.15 to 0.9 s after each server
// process starts serving, so inside joins, uploads, aggregation and commits alike), each followed
// by a restart on the same data directory, then a last restart that runs to the end. Nothing
// committed is lost or changed by any kill, no round is committed twice, the SQLite file passes its
// integrity check after every kill, and every checkpoint reads back under its name.
TEST(CrashTest, TwentySeededSigkillsAtRandomMomentsLoseNothingAndDoubleNothing) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  constexpr size_t kRounds = 150;
  const std::vector<std::string> command =
      RunCommand(pki, data_dir, port, {"--rounds", absl::StrCat(kRounds)});
  std::vector<std::unique_ptr<ClientThread>> clients;
  auto server = std::make_unique<ChildProcess>(command, log);
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, port);
    options.reconnect_timeout = absl::Seconds(120);
    options.max_backoff = absl::Milliseconds(300);
    auto trainer = std::make_unique<SlowTrainer>(
        client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {}),
        absl::Milliseconds(150));
    clients.push_back(std::make_unique<ClientThread>(options, std::move(trainer)));
  }
  std::mt19937_64 rng(19);
  std::uniform_int_distribution<int> delay_ms(150, 900);
  // bench/sanitizers.sh runs everything several times slower; its FL_TEST_SLOWDOWN stretches the
  // moments by as much, so that rounds still commit between the kills.
  const char* env = std::getenv("FL_TEST_SLOWDOWN");
  const double slowdown = env != nullptr && std::atof(env) >= 1 ? std::atof(env) : 1.0;
  std::map<int, RoundRecord> committed;
  int kills = 0;
  // How many of the server processes so far have started serving (each logs it once).
  auto serving = [&] {
    const std::string text = ReadFile(log).value_or("");
    int n = 0;
    for (size_t at = text.find("server_listening"); at != std::string::npos;
         at = text.find("server_listening", at + 1)) {
      ++n;
    }
    return n;
  };
  for (; kills < 20; ++kills) {
    // The moment counts from when this process serves, not from its start, so that a slow start
    // (a sanitizer build, a busy machine) does not leave every kill before the first round.
    for (int i = 0; i < 3000 && serving() <= kills; ++i) absl::SleepFor(absl::Milliseconds(10));
    absl::SleepFor(absl::Milliseconds(delay_ms(rng)) * slowdown);
    server->Kill(SIGKILL);
    const int code = server->Wait();
    if (code != 128 + SIGKILL) {
      ASSERT_EQ(code, 0) << *ReadFile(log);
      break;  // the run ended before this kill
    }
    ASSERT_EQ(IntegrityCheck(data_dir), "ok") << "after kill " << kills + 1;
    const std::map<int, RoundRecord> now = CommittedRounds(data_dir);
    for (const auto& [round, record] : committed) {
      ASSERT_EQ(now.count(round), 1u) << "round " << round << " lost by kill " << kills + 1;
      EXPECT_EQ(now.at(round).checkpoint, record.checkpoint) << "round " << round << " changed";
    }
    for (int round = 1; round <= static_cast<int>(now.size()); ++round) {
      EXPECT_EQ(now.count(round), 1u) << "committed rounds have a gap at " << round;
    }
    committed = now;
    // Killed in its grace after the last round: a restart would start a new run.
    if (committed.size() == kRounds) break;
    server = std::make_unique<ChildProcess>(command, log);
  }
  ASSERT_EQ(kills, 20) << "the run finished after " << kills << " kills; make it longer";
  EXPECT_GE(committed.size(), 3u) << "too little progress between the kills to mean much";
  EXPECT_EQ(server->Wait(), 0) << *ReadFile(log);
  for (auto& c : clients) {
    absl::Status s = c->Join();
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(IntegrityCheck(data_dir), "ok");
  const std::map<int, RoundRecord> after = CommittedRounds(data_dir);
  ASSERT_EQ(after.size(), kRounds) << *ReadFile(log);
  for (const auto& [round, record] : committed) {
    EXPECT_EQ(after.at(round).checkpoint, record.checkpoint) << "round " << round << " changed";
  }
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  ASSERT_TRUE(store.ok());
  for (const auto& [round, record] : after) {
    absl::StatusOr<Model> model = (*store)->ReadCheckpoint(record.checkpoint);
    ASSERT_TRUE(model.ok()) << "round " << round << ": " << model.status();
    EXPECT_EQ(model->Sha256Hex(), record.checkpoint) << "round " << round;
  }
  EXPECT_EQ((*store)->GetRun(1)->status, server::RunStatus::kFinished);
  EXPECT_FALSE((*store)->GetRun(2).ok()) << "a restart started another run";
  std::cerr << kills << " kills; " << committed.size() << " rounds committed before the last\n";
}

}  // namespace
}  // namespace fl::testing
