// The server's storage fails under it: the disk fills mid-round, the checkpoint directory turns
// read-only mid-run, the data directory is moved away. A round that cannot be written fails
// cleanly saying why, nothing committed is damaged, and the retry commits once the disk is back;
// a data directory gone stops the server saying so.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "fl/client/builtin_models.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "gtest/gtest.h"
#include "tests/integration/server_run_util.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using server::RoundRecord;
using server::RoundStatus;

// The reason round `round` of run 1 failed with, once an attempt of it has (waits up to 20 s);
// empty if none did.
std::string FailureOf(const std::string& data_dir, int round) {
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
    if (store.ok()) {
      absl::StatusOr<std::vector<RoundRecord>> rounds = (*store)->Rounds(1);
      if (rounds.ok()) {
        for (const RoundRecord& r : *rounds) {
          if (r.round == round && r.status == RoundStatus::kFailed) return r.reason;
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return "";
}

// Waits up to 30 s for run 1's first committed round.
std::map<int, RoundRecord> FirstCommit(const std::string& data_dir) {
  std::map<int, RoundRecord> committed;
  for (int i = 0; i < 3000 && committed.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    committed = CommittedRounds(data_dir);
  }
  return committed;
}

// Every checkpoint of the committed rounds reads back under its name, and no half-written file
// is left beside them.
void ExpectCheckpointsWhole(const std::string& data_dir,
                            const std::map<int, RoundRecord>& committed) {
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& [round, record] : committed) {
    absl::StatusOr<Model> model = (*store)->ReadCheckpoint(record.checkpoint);
    EXPECT_TRUE(model.ok()) << "round " << round << ": " << model.status();
  }
  for (const auto& entry : std::filesystem::directory_iterator(data_dir + "/checkpoints")) {
    EXPECT_EQ(entry.path().extension(), ".ckpt") << entry.path();
  }
}

// The disk fills mid-run: once round 1 is committed, the server's files are held to 600 KiB with
// RLIMIT_FSIZE, which the SQLite file and its journal stay under but an update's spill file and a
// checkpoint of this model (636 KB each) do not. Round 2 fails cleanly, its record saying why
// (the sites' updates could not be staged: "File too large"), the committed round is untouched
// and the SQLite file passes its check; once there is room again, a retry commits and the run
// finishes, with no partial file left among the checkpoints.
TEST(FaultTest, ADiskFullMidRoundFailsTheRoundCleanlyAndTheRetryCommits) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  std::vector<std::string> command = RunCommand(
      pki, data_dir, port, {"--rounds", "3", "--model", "mlp", "--max-round-retries", "10"});
  // A full disk makes write() fail with EFBIG here; the signal that comes with it is ignored, as a
  // full disk sends none.
  command.insert(command.begin(), {"/bin/bash", "-c", "trap '' XFSZ; exec \"$@\"", "bash"});
  auto server = std::make_unique<ChildProcess>(command, log);
  std::vector<std::unique_ptr<ClientThread>> clients;
  client::ModelArchitecture mlp;  // the server's --model mlp: 784 -> 200 -> 10
  mlp.kind = client::ModelKind::kMlp;
  mlp.num_features = 784;
  mlp.num_classes = 10;
  mlp.hidden = {200};
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, port);
    options.reconnect_timeout = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer =
        client::MakeBuiltinTrainer(mlp, FashionTrainSlice(i * 1000, 1000), {});
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    clients.push_back(std::make_unique<ClientThread>(
        options, std::make_unique<SlowTrainer>(*std::move(trainer), absl::Milliseconds(300))));
  }
  const std::map<int, RoundRecord> before = FirstCommit(data_dir);
  ASSERT_EQ(before.size(), 1u) << *ReadFile(log);
  // The soft limit only: lifting it again needs no privilege.
  const rlimit full{600 * 1024, RLIM_INFINITY};
  ASSERT_EQ(prlimit(server->pid(), RLIMIT_FSIZE, &full, nullptr), 0) << std::strerror(errno);

  // Round 2's checkpoint cannot be written: the attempt fails, saying so.
  const std::string failure = FailureOf(data_dir, 2);
  ASSERT_FALSE(failure.empty()) << "round 2 never failed\n" << *ReadFile(log);
  EXPECT_NE(failure.find("for: cannot stage the update"), std::string::npos) << failure;
  EXPECT_NE(failure.find("File too large"), std::string::npos) << failure;
  EXPECT_EQ(IntegrityCheck(data_dir), "ok");
  std::map<int, RoundRecord> during = CommittedRounds(data_dir);
  ASSERT_EQ(during.size(), 1u);
  EXPECT_EQ(during[1].checkpoint, before.at(1).checkpoint);

  // Room again: a retry commits round 2, and the run ends.
  const rlimit room{RLIM_INFINITY, RLIM_INFINITY};
  ASSERT_EQ(prlimit(server->pid(), RLIMIT_FSIZE, &room, nullptr), 0) << std::strerror(errno);
  for (auto& c : clients) {
    absl::Status s = c->Join();
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(server->Wait(), 0) << *ReadFile(log);
  EXPECT_EQ(IntegrityCheck(data_dir), "ok");
  std::map<int, RoundRecord> after = CommittedRounds(data_dir);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[1].checkpoint, before.at(1).checkpoint);
  ExpectCheckpointsWhole(data_dir, after);
}

// The checkpoint directory turns read-only once round 1 is committed (a remount after a disk
// error, an operator's chmod): round 2's checkpoint cannot be written, so the attempt fails
// saying so (the checkpoint, the directory and "Permission denied"), the committed round and
// the SQLite file are untouched, and once the directory is writable again a retry commits and the
// run finishes. Root ignores file modes, so under root the server runs as nobody (setpriv).
TEST(FaultTest, ACheckpointDirectoryTurnedReadOnlyFailsTheRoundSayingSoAndTheRetryCommits) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  std::vector<std::string> command =
      RunCommand(pki, data_dir, port, {"--rounds", "3", "--max-round-retries", "10"});
  if (geteuid() == 0) {
    const std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534",
                                                "--regid=65534", "--clear-groups", "--"};
    // Where uid 65534 cannot run the build's binary (a build under /root, a user namespace
    // without it), there is no one for modes to stop: skip rather than fail.
    std::vector<std::string> probe = as_nobody;
    probe.insert(probe.end(), {FL_BINARY, "--version"});
    if (ChildProcess(probe, dir.path() + "/probe.log").Wait() != 0) {
      GTEST_SKIP() << "uid 65534 cannot run " << FL_BINARY << ": "
                   << ReadFile(dir.path() + "/probe.log").value_or("");
    }
    std::error_code ec;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path(), ec)) {
      ASSERT_EQ(lchown(entry.path().c_str(), 65534, 65534), 0) << entry.path();
    }
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_EQ(chown(dir.path().c_str(), 65534, 65534), 0) << std::strerror(errno);
    command.insert(command.begin(), as_nobody.begin(), as_nobody.end());
  }
  auto server = std::make_unique<ChildProcess>(command, log);
  std::vector<std::unique_ptr<ClientThread>> clients =
      StartSlowClients(pki, port, absl::Milliseconds(300));
  const std::map<int, RoundRecord> before = FirstCommit(data_dir);
  ASSERT_EQ(before.size(), 1u) << *ReadFile(log);
  const std::string checkpoints = data_dir + "/checkpoints";
  ASSERT_EQ(chmod(checkpoints.c_str(), 0555), 0) << std::strerror(errno);
  // Writable again however the test ends, so that its directory can be removed.
  absl::Cleanup writable = [&] { chmod(checkpoints.c_str(), 0755); };

  const std::string failure = FailureOf(data_dir, 2);
  ASSERT_FALSE(failure.empty()) << "round 2 never failed\n" << *ReadFile(log);
  EXPECT_NE(failure.find(checkpoints), std::string::npos) << failure;
  EXPECT_NE(failure.find("Permission denied"), std::string::npos) << failure;
  EXPECT_EQ(IntegrityCheck(data_dir), "ok");
  EXPECT_EQ(CommittedRounds(data_dir).size(), 1u);

  ASSERT_EQ(chmod(checkpoints.c_str(), 0755), 0) << std::strerror(errno);
  for (auto& c : clients) {
    absl::Status s = c->Join();
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(server->Wait(), 0) << *ReadFile(log);
  EXPECT_EQ(IntegrityCheck(data_dir), "ok");
  const std::map<int, RoundRecord> after = CommittedRounds(data_dir);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after.at(1).checkpoint, before.at(1).checkpoint);
  ExpectCheckpointsWhole(data_dir, after);
}

// The data directory is moved away under a running server (an operator's mistake, a cleanup
// script): the server notices within a second or two that its SQLite file is gone, stops rather
// than go on committing into a file nobody will see, and exits non-zero naming the file and what to
// do.
TEST(FaultTest, TheDataDirectoryRemovedUnderARunningServerStopsItSayingSo) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string data_dir = dir.path() + "/server";
  const std::string log = dir.path() + "/server.log";
  const int port = FreeLoopbackPort();
  auto server =
      std::make_unique<ChildProcess>(RunCommand(pki, data_dir, port, {"--rounds", "50"}), log);
  std::vector<std::unique_ptr<ClientThread>> clients =
      StartSlowClients(pki, port, absl::Milliseconds(200));
  std::map<int, RoundRecord> before;
  for (int i = 0; i < 3000 && before.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    before = CommittedRounds(data_dir);
  }
  ASSERT_FALSE(before.empty()) << *ReadFile(log);
  // Moved away at once (a rename), as a cleanup script or a mistaken mv does; the server's files
  // go with it.
  std::filesystem::rename(data_dir, dir.path() + "/moved-away");
  const absl::Time removed = absl::Now();
  const int code = server->Wait();
  EXPECT_LT(absl::Now() - removed, absl::Seconds(10));
  EXPECT_NE(code, 0);
  EXPECT_NE(code, 128 + SIGKILL);
  const std::string text = *ReadFile(log);
  EXPECT_NE(text.find("data_directory_gone"), std::string::npos) << text;
  EXPECT_NE(text.find(absl::StrCat("the SQLite file ", data_dir,
                                   "/federation.db was removed or "
                                   "replaced while the server ran")),
            std::string::npos)
      << text;
  for (auto& c : clients) c->Stop();
}

}  // namespace
}  // namespace fl::testing
