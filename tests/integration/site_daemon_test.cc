// `fl client` as a site runs it (cli/client_daemon.h), a real `fl server` over loopback TLS: it
// serves run after run (a restarted server with a new data directory starts a new run), stops
// with exit 0 on SIGTERM or SIGINT at any point, and exits with the documented code
// (cli/exit_codes.h) for a finished or failed run with --once, a refusal, a configuration error
// and an unreachable server.
#include <signal.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/site_test_util.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Whether process `pid` runs (exists and is not a zombie waiting to be reaped).
bool Running(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat")).value_or("");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// The argv of `fl server` enrolling only the certificates of `pki` at `enrolled` (indexes).
std::vector<std::string> ServerEnrolling(const ProvisionedFiles& pki,
                                         const std::vector<int>& enrolled,
                                         const std::string& data_dir, int port,
                                         const std::vector<std::string>& flags) {
  ProvisionedFiles some = pki;
  some.client_certs.clear();
  for (int i : enrolled) some.client_certs.push_back(pki.client_certs[static_cast<size_t>(i)]);
  return ServerCommand(some, data_dir, port, flags);
}

TEST(SiteDaemonTest, ServesTheNextRunOfARestartedServerThenStopsWithExitZeroOnSigterm) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();
  const std::string toml =
      WriteSiteToml(dir.path(), "site", port, pki.ca_cert, pki.client_certs[0], pki.client_keys[0]);
  const std::string site_log = dir.path() + "/site.log";
  const std::string server_log = dir.path() + "/server.log";
  std::unique_ptr<ChildProcess> server = StartServer(
      ServerCommand(pki, dir.path() + "/server-1", port, TinyRunFlags(2, 2)), server_log);
  ChildProcess site({FL_BINARY, "client", "--config", toml}, site_log);
  ASSERT_EQ(server->Wait(), 0) << ReadFile(server_log).value_or("");

  // The run is over and its server gone: the site waits for the next run instead of exiting,
  // and asked the finished run's server again at a bounded pace, not in a spin.
  ASSERT_TRUE(Running(site.pid())) << ReadFile(site_log).value_or("");
  std::string log = ReadFile(site_log).value_or("");
  EXPECT_EQ(Count(log, "run_ended run=1 status=finished"), 1) << log;
  EXPECT_GE(Count(log, "waiting_for_next_run run_over=1"), 1) << log;
  EXPECT_LE(Count(log, "waiting_for_next_run"), 20) << log;
  // Every retry of the absent server is logged with its attempt, delay and gRPC's message.
  ASSERT_TRUE(WaitForText(site_log, "client_retry name=site-0 attempt=2 delay=")) << log;
  EXPECT_THAT(ReadFile(site_log).value_or(""), HasSubstr("code=UNAVAILABLE error="));

  // A new server on the same address with a new data directory: a new run 1, which the same
  // process joins and trains in.
  server = StartServer(ServerCommand(pki, dir.path() + "/server-2", port, TinyRunFlags(2, 1)),
                       server_log);
  ASSERT_EQ(server->Wait(), 0) << ReadFile(server_log).value_or("");
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (Count(ReadFile(site_log).value_or(""), "run_ended") < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  log = ReadFile(site_log).value_or("");
  EXPECT_EQ(Count(log, "run_ended run=1 status=finished"), 2) << log;
  EXPECT_EQ(Count(log, "stage=fit examples=4"), 4) << "two rounds in each run\n" << log;
  EXPECT_THAT(log, HasSubstr("client_reconnected"));

  ASSERT_TRUE(Running(site.pid()));
  site.Kill(SIGTERM);
  EXPECT_EQ(site.Wait(), 0) << ReadFile(site_log).value_or("");
  EXPECT_THAT(ReadFile(site_log).value_or(""), HasSubstr("client_stopped signal=15"));
}

TEST(SiteDaemonTest, SigtermOrSigintMidRunStopsTheSiteWithExitZero) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1"});
  const int port = FreeLoopbackPort();
  std::vector<std::string> flags = TinyRunFlags(1, 1);
  flags.insert(flags.end(), {"--min-clients", "3"});  // the run waits for a third site
  const std::string server_log = dir.path() + "/server.log";
  std::unique_ptr<ChildProcess> server =
      StartServer(ServerCommand(pki, dir.path() + "/server", port, flags), server_log);
  std::vector<std::unique_ptr<ChildProcess>> sites;
  for (int i : {0, 1}) {
    const std::string toml =
        WriteSiteToml(dir.path(), absl::StrCat("site-", i), port, pki.ca_cert, pki.client_certs[i],
                      pki.client_keys[i], i == 1 ? "once = true\n" : "");
    sites.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{FL_BINARY, "client", "--config", toml},
        absl::StrCat(dir.path(), "/site-", i, ".log")));
  }
  ASSERT_TRUE(WaitForText(server_log, "name=site-0"));
  ASSERT_TRUE(WaitForText(server_log, "name=site-1"));
  sites[0]->Kill(SIGTERM);
  sites[1]->Kill(SIGINT);
  for (int i : {0, 1}) {
    const std::string log = absl::StrCat(dir.path(), "/site-", i, ".log");
    EXPECT_EQ(sites[i]->Wait(), 0) << ReadFile(log).value_or("");
    EXPECT_THAT(ReadFile(log).value_or(""),
                HasSubstr(absl::StrCat("client_stopped signal=", i == 0 ? SIGTERM : SIGINT)));
  }
}

// A run that cannot start says so in the server's log at once (then every minute): how many
// clients are online, how many more it waits for, who is connected and who is missing.
TEST(SiteDaemonTest, AWaitingServerLogsWhoItWaitsFor) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1"});
  const int port = FreeLoopbackPort();
  std::vector<std::string> flags = TinyRunFlags(1, 1);
  flags.insert(flags.end(), {"--min-clients", "2", "--min-fit-clients", "2"});
  const std::string log = dir.path() + "/server.log";
  std::unique_ptr<ChildProcess> server =
      StartServer(ServerCommand(pki, dir.path() + "/data", port, flags), log);
  ASSERT_TRUE(WaitForText(log, "waiting_for_clients")) << ReadFile(log).value_or("");
  const std::string text = ReadFile(log).value_or("");
  EXPECT_THAT(text, HasSubstr("waiting_for_clients round=1 online=0 waiting_for=\"2 more clients "
                              "online (min_clients 2)\" connected=- missing=- fails_in="))
      << text;
  server->Kill(SIGTERM);
  EXPECT_EQ(server->Wait(), 0);
}

TEST(SiteDaemonTest, OnceExitsZeroForAFinishedRunAndFourForAFailedOne) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();
  const std::string toml =
      WriteSiteToml(dir.path(), "site", port, pki.ca_cert, pki.client_certs[0], pki.client_keys[0]);
  std::unique_ptr<ChildProcess> server =
      StartServer(ServerCommand(pki, dir.path() + "/finished", port, TinyRunFlags(1, 1)),
                  dir.path() + "/finished.log");
  FlResult r = RunFl({"client", "--config", toml, "--once"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("run_ended run=1 status=finished"));
  EXPECT_EQ(server->Wait(), 0);

  // Every update is declined (the site allows 1 local epoch, the run asks for 2) and the round
  // is not retried, so the run fails.
  std::vector<std::string> flags = TinyRunFlags(1, 1);
  flags.insert(flags.end(), {"--max-round-retries", "0", "--local-epochs", "2"});
  server = StartServer(ServerCommand(pki, dir.path() + "/failed", port, flags),
                       dir.path() + "/failed.log");
  r = RunFl({"client", "--config", toml, "--once", "--max-local-epochs", "1"}, dir.path());
  EXPECT_EQ(r.exit_code, 4) << r.out;
  EXPECT_THAT(r.out, HasSubstr("run_ended run=1 status=failed"));
  EXPECT_THAT(r.out,
              HasSubstr("error: the server ended run 1 as failed (run 1 is failed: round 1"));
  server->Wait();
}

TEST(SiteDaemonTest, ASiteTheServerRefusesExitsThreeWithoutRetrying) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1"});
  const int port = FreeLoopbackPort();
  std::vector<std::string> flags = TinyRunFlags(1, 1);
  flags.insert(flags.end(), {"--min-clients", "3"});
  const std::string data_dir = dir.path() + "/server";
  std::unique_ptr<ChildProcess> server =
      StartServer(ServerEnrolling(pki, {0}, data_dir, port, flags), dir.path() + "/server.log");

  // Never enrolled: refused at Join.
  const std::string toml1 = WriteSiteToml(dir.path(), "site-1", port, pki.ca_cert,
                                          pki.client_certs[1], pki.client_keys[1]);
  const absl::Time start = absl::Now();
  FlResult r = RunFl({"client", "--config", toml1}, dir.path(), "site-1.log");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "a refusal is not retried";
  EXPECT_THAT(r.out, HasSubstr("is not enrolled in this federation"));
  EXPECT_THAT(r.out, HasSubstr("fl admin"));
  EXPECT_THAT(r.out, Not(HasSubstr("client_retry")));

  // Revoked while it waits in the run: refused at its next poll.
  const std::string toml0 = WriteSiteToml(dir.path(), "site-0", port, pki.ca_cert,
                                          pki.client_certs[0], pki.client_keys[0]);
  const std::string log0 = dir.path() + "/site-0.log";
  ChildProcess site0({FL_BINARY, "client", "--config", toml0}, log0);
  ASSERT_TRUE(WaitForText(dir.path() + "/server.log", "name=site-0"));
  absl::StatusOr<std::string> pem = ReadFile(pki.client_certs[0]);
  ASSERT_TRUE(pem.ok());
  absl::StatusOr<std::string> fingerprint = CertificateFingerprint(*pem);
  ASSERT_TRUE(fingerprint.ok());
  FlResult revoke =
      RunFl({"admin", "--data-dir", data_dir, "revoke", *fingerprint}, dir.path(), "revoke.log");
  ASSERT_EQ(revoke.exit_code, 0) << revoke.out;
  EXPECT_EQ(site0.Wait(), 3) << ReadFile(log0).value_or("");
  EXPECT_THAT(ReadFile(log0).value_or(""), HasSubstr("error: the server refused this site"));
}

// A server this site cannot trust (its certificate from another CA than server.ca, or not
// valid for the address dialled) is a configuration error: exit 2 at the first attempt, one
// line naming the cause and the fix, no retries and no gRPC handshake lines at the default level.
TEST(SiteDaemonTest, AServerTheSiteCannotTrustExitsTwoAtOnceWithTheCause) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  ProvisionedFiles other = MakePki(dir.path() + "/other", {"x"});
  const int port = FreeLoopbackPort();
  // On 127.0.0.2, an address its certificate does not list (localhost, 127.0.0.1, ::1).
  std::vector<std::string> flags = TinyRunFlags(1, 1);
  flags.insert(flags.end(), {"--listen", absl::StrCat("127.0.0.2:", port)});
  std::unique_ptr<ChildProcess> server = StartServer(
      ServerCommand(pki, dir.path() + "/server", port, flags), dir.path() + "/server.log");
  const std::string host = "127.0.0.2";
  for (const auto& [name, ca, cause] :
       {std::tuple{"wrong-ca", other.ca_cert,
                   "its certificate does not verify against this site's CA (" + other.ca_cert},
        std::tuple{"wrong-name", pki.ca_cert,
                   std::string("its certificate is not valid for the address dialled")}}) {
    std::string toml =
        WriteSiteToml(dir.path(), name, port, ca, pki.client_certs[0], pki.client_keys[0]);
    std::string text = ReadFile(toml).value_or("");
    text.replace(text.find("127.0.0.1"), 9, host);
    ASSERT_TRUE(WriteFileAtomic(toml, text).ok());
    const absl::Time start = absl::Now();
    FlResult r =
        RunFl({"client", "--once", "--config", toml}, dir.path(), std::string(name) + ".log");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "not retried for reconnect_timeout";
    EXPECT_THAT(r.out, HasSubstr("error: cannot trust the server at " + host));
    EXPECT_THAT(r.out, HasSubstr(cause));
    EXPECT_THAT(r.out, HasSubstr("fl client --preflight shows which"));
    EXPECT_THAT(r.out, Not(HasSubstr("client_retry")));
    EXPECT_THAT(r.out, Not(HasSubstr("Handshake failed with fatal error")));
  }
  // Serving, the site keeps trying at its next-run pace (a renewed certificate lets it in
  // without a restart) and stops with 0 on SIGTERM.
  std::string toml = WriteSiteToml(dir.path(), "serving", port, other.ca_cert, pki.client_certs[0],
                                   pki.client_keys[0]);
  std::string text = ReadFile(toml).value_or("");
  text.replace(text.find("127.0.0.1"), 9, host);
  ASSERT_TRUE(WriteFileAtomic(toml, text).ok());
  const std::string log = dir.path() + "/serving.log";
  ChildProcess serving({FL_BINARY, "client", "--config", toml}, log);
  ASSERT_TRUE(WaitForText(log, "server_untrusted"));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(Running(serving.pid()));
  serving.Kill(SIGTERM);
  EXPECT_EQ(serving.Wait(), 0);
  EXPECT_THAT(ReadFile(log).value_or(""), Not(HasSubstr("Handshake failed with fatal error")));
}

TEST(SiteDaemonTest, ConfigurationErrorsExitTwoAndAnUnreachableServerFiveWithOnce) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();  // nothing listens there
  const std::string toml =
      WriteSiteToml(dir.path(), "site", port, pki.ca_cert, pki.client_certs[0], pki.client_keys[0]);
  const std::string bad_key =
      WriteSiteToml(dir.path(), "bad-key", port, pki.ca_cert, pki.client_certs[0],
                    pki.client_keys[0], "once_upon_a_time = true\n");
  FlResult r = RunFl({"client", "--config", bad_key}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unknown key 'client.once_upon_a_time'"));
  r = RunFl({"client", "--config", toml, "--no-such-flag"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = RunFl({"client", "--config", toml, "--next-run-poll", "soon"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = RunFl({"client", "--config", toml, "--cert", dir.path() + "/missing.pem"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("missing.pem"));

  r = RunFl({"client", "--config", toml, "--once", "--reconnect-timeout", "1"}, dir.path());
  EXPECT_EQ(r.exit_code, 5) << r.out;
  EXPECT_THAT(r.out, HasSubstr("unreachable for"));
  EXPECT_THAT(r.out, HasSubstr("client_retry name=site-0 attempt=1"));
}

}  // namespace
}  // namespace fl::testing
