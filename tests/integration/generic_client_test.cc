// The site side as an operator runs it: limits a site sets that the server cannot override
// (SDK clients against the real server), and the generic `fl client` process driven by a TOML
// file: refusing bad data before it connects, and picking its run up again after the server is
// killed and restarted.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/client/softmax_trainer.h"
#include "fl/common/file_util.h"
#include "fl/server/server.h"
#include "fl/server/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;

TEST(SiteLimitsTest, TasksOutsideASitesLimitsAreDeclinedAuditedAndTheRoundGoesOn) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2", "site-3"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.num_rounds = 2;
  o.engine.min_clients = 4;
  o.engine.min_fit_clients = 2;
  o.engine.round_timeout = absl::Seconds(60);
  o.engine.fit.local_epochs = 3;
  o.engine.fit.batch_size = 32;
  o.engine.fit.learning_rate = 0.1f;
  o.engine.fit.model_name = "softmax";
  o.max_poll_wait = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Start(
      o, Model(client::SoftmaxRegressionSpec(784, 10)), server::EngineHooks{});
  ASSERT_TRUE(server.ok()) << server.status();

  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 4; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, (*server)->port());
    if (i == 0) options.limits.max_local_epochs = 2;
    if (i == 1) options.limits.allowed_models = {"mlp", "simple_cnn"};
    clients.push_back(std::make_unique<ClientThread>(
        options, client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 500, 500), {})));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  EXPECT_EQ(clients[0]->tasks_accepted(), 0);
  EXPECT_EQ(clients[1]->tasks_accepted(), 0);
  EXPECT_EQ(clients[2]->tasks_accepted(), 2);
  EXPECT_EQ(clients[3]->tasks_accepted(), 2);

  server::Store& store = (*server)->store();
  absl::StatusOr<server::RunRecord> run = store.GetRun((*server)->engine().run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, server::RunStatus::kFinished) << run->reason;
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = store.Rounds(run->run_id);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u);
  for (const server::RoundRecord& r : *rounds) {
    EXPECT_EQ(r.status, server::RoundStatus::kCommitted);
    EXPECT_EQ(r.num_reported, 2);
  }
  // Each declining site's reason is in the audit log once per round, as task_declined.
  const std::string audit = AuditText(store);
  auto count = [&audit](const std::string& needle) {
    int n = 0;
    for (size_t at = audit.find(needle); at != std::string::npos; at = audit.find(needle, at + 1)) {
      ++n;
    }
    return n;
  };
  // Declined in round 1, and then left out of the draw for the rest of the run: a site's limits
  // do not change while the run's settings do not.
  for (int round : {1, 2}) {
    const std::string prefix =
        absl::StrCat("task_declined round ", round, ": the client declined the task: ");
    EXPECT_EQ(count(prefix +
                    "PERMISSION_DENIED: task asks for 3 local epochs; this site allows at most 2 "
                    "(limits.max_local_epochs)\n"),
              round == 1 ? 1 : 0)
        << audit;
    EXPECT_EQ(count(prefix +
                    "PERMISSION_DENIED: task asks for model 'softmax'; this site allows only mlp, "
                    "simple_cnn (limits.allowed_models)\n"),
              round == 1 ? 1 : 0)
        << audit;
  }
  EXPECT_EQ(count("client_excluded round 1: client 'site-0' declined round 1"), 1) << audit;
  EXPECT_EQ(count("client_excluded round 1: client 'site-1' declined round 1"), 1) << audit;
}

// --- `fl client` as a process.

struct Result {
  int exit_code = -1;
  std::string err;
};

Result RunFl(const std::vector<std::string>& args, const std::string& dir) {
  const std::string log = dir + "/fl.log";
  std::vector<std::string> argv = {FL_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child(argv, log);
  Result r;
  r.exit_code = child.Wait();
  r.err = ReadFile(log).value_or("");
  return r;
}

// A listening loopback socket that nobody should connect to.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(listen(fd_, 8), 0);
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }
  // Whether a connection is waiting to be accepted.
  bool SomeoneConnected() {
    const int c = accept(fd_, nullptr, nullptr);
    if (c >= 0) close(c);
    return c >= 0;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(GenericClientTest, DataThatDoesNotFitTheModelStopsTheClientBeforeItConnects) {
  TempDir dir;
  Listener server;
  const std::string address = absl::StrCat("127.0.0.1:", server.port());
  ASSERT_TRUE(
      WriteFileAtomic(dir.path() + "/site.csv", "age,weight,label\n50,80,0\n61,72,1\n44,90,x\n")
          .ok());
  ASSERT_TRUE(WriteFileAtomic(dir.path() + "/site.toml",
                              absl::StrCat("[server]\naddress = \"", address,
                                           "\"\ninsecure_plaintext = true\n[data]\npath = \"",
                                           dir.path(), "/site.csv\"\n[model]\nkind = \"mlp\"\n"))
                  .ok());
  Result r = RunFl({"client", "--config", dir.path() + "/site.toml"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << "kExitConfig (cli/exit_codes.h)";
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(dir.path(),
                                            "/site.csv: row 4, column 'label': not a number: "
                                            "'x'")));
  ASSERT_TRUE(
      WriteFileAtomic(dir.path() + "/site.csv", "age,weight,label\n50,80,0\n61,72,1\n").ok());
  // A flag overrides the file's model.
  r = RunFl({"client", "--config", dir.path() + "/site.toml", "--features", "30"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << "kExitConfig (cli/exit_codes.h)";
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(dir.path(),
                                            "/site.csv has 2 feature columns but model mlp "
                                            "expects 30")));
  r = RunFl({"client", "--config", dir.path() + "/site.toml", "--classes", "1"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << "kExitConfig (cli/exit_codes.h)";
  EXPECT_THAT(r.err, HasSubstr("model.classes (--classes) must be 0 (from the data) or >= 2"));
  EXPECT_FALSE(server.SomeoneConnected()) << "a client with bad data must not connect";
}

TEST(GenericClientTest, TheClientPicksItsRunUpAgainAfterTheServerIsKilledAndRestarted) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1"});
  const std::string data_dir = dir.path() + "/server";
  const int port = FreeLoopbackPort();
  const std::vector<std::string> server_argv = ServerCommand(
      pki, data_dir, port,
      {"--rounds", "5", "--min-clients", "2", "--min-fit-clients", "2", "--round-timeout", "60",
       "--grace", "3", "--local-epochs", "8", "--lr", "0.1"});
  const std::string server_log = dir.path() + "/server.log";
  auto server = std::make_unique<ChildProcess>(server_argv, server_log);

  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 2; ++i) {
    const std::string toml = absl::StrCat(
        "[server]\naddress = \"127.0.0.1:", port, "\"\nca = \"", pki.ca_cert, "\"\ncert = \"",
        pki.client_certs[i], "\"\nkey = \"", pki.client_keys[i], "\"\n\n[data]\nformat = \"idx\"\n",
        "images = \"", FL_FASHION_MNIST_DIR, "/t10k-images-idx3-ubyte.gz\"\nlabels = \"",
        FL_FASHION_MNIST_DIR, "/t10k-labels-idx1-ubyte.gz\"\nnum_shards = 5\nshard = ", i,
        "\n\n[model]\nkind = \"softmax\"\nclasses = 10\n\n[training]\nbackend = \"cpu\"\n",
        "cpu_threads = 1\n\n[client]\nreconnect_timeout_s = 60\npoll_wait_s = 2\nonce = true\n");
    const std::string path = absl::StrCat(dir.path(), "/site-", i, ".toml");
    ASSERT_TRUE(WriteFileAtomic(path, toml).ok());
    clients.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{FL_BINARY, "client", "--config", path},
        absl::StrCat(dir.path(), "/site-", i, ".log")));
  }

  // Kill the server once round 1 is committed, and start it again.
  auto committed = [&] {
    int n = 0;
    absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
    if (!store.ok()) return 0;
    absl::StatusOr<std::vector<server::RoundRecord>> rounds = (*store)->Rounds(1);
    if (!rounds.ok()) return 0;
    for (const auto& r : *rounds) n += r.status == server::RoundStatus::kCommitted ? 1 : 0;
    return n;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  while (committed() < 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_GE(committed(), 1) << ReadFile(server_log).value_or("")
                            << ReadFile(dir.path() + "/site-0.log").value_or("");
  server->Kill(SIGKILL);
  EXPECT_EQ(server->Wait(), 128 + SIGKILL);
  const int before = committed();
  ASSERT_LT(before, 5) << "the run finished before the kill; give the rounds more epochs";
  server = std::make_unique<ChildProcess>(server_argv, server_log);

  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(clients[i]->Wait(), 0)
        << ReadFile(absl::StrCat(dir.path(), "/site-", i, ".log")).value_or("");
  }
  EXPECT_EQ(server->Wait(), 0) << ReadFile(server_log).value_or("");
  EXPECT_EQ(committed(), 5) << ReadFile(server_log).value_or("");
  const std::string client_log = ReadFile(dir.path() + "/site-0.log").value_or("");
  EXPECT_THAT(client_log, HasSubstr("client_ready model=softmax features=784 classes=10"));
  EXPECT_THAT(client_log, HasSubstr("client_done"));
}

}  // namespace
}  // namespace fl::testing
