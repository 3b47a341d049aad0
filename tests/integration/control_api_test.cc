// The control API (fl run) against a real `fl server --stay-up` over loopback mutual TLS: an
// admin certificate made by `fl certs --admin` submits runs that a real site serves one after
// another, lists them, follows one to its end, cancels a queued run and stops the active one;
// the server stays up throughout. A site's certificate, a bad run file, a wrong CA and a wrong
// server name are each refused with what to do.
#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/site_test_util.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The flags of a tiny one-shot run that waits: it needs three sites.
std::vector<std::string> WaitingRunFlags() {
  std::vector<std::string> flags = TinyRunFlags(2, 0);
  flags.insert(flags.end(), {"--min-clients", "3", "--min-fit-clients", "3"});
  return flags;
}

// Runs the server `argv` until its run waits for sites, then stops it with SIGTERM: the run is
// left unfinished in its data directory, for the next start to resume.
void RunUntilWaitingThenStop(const std::vector<std::string>& argv, const std::string& log) {
  std::unique_ptr<ChildProcess> server = StartServer(argv, log);
  ASSERT_TRUE(WaitForText(log, "waiting_for_clients")) << ReadFile(log).value_or("");
  server->Kill(SIGTERM);
  ASSERT_EQ(server->Wait(), 0) << ReadFile(log).value_or("");
}

class ControlApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = MakePki(dir_.path(), {"site-0"});
    certs_ = dir_.path() + "/certs";
    FlResult admin = RunFl({"certs", "--out", certs_, "--admin", "alice"}, dir_.path());
    ASSERT_EQ(admin.exit_code, 0) << admin.out;
    ASSERT_THAT(admin.out, HasSubstr("admins/alice.pem"));
    port_ = FreeLoopbackPort();
    std::vector<std::string> argv =
        ServerCommand(pki_, dir_.path() + "/data", port_, TinyRunFlags(2, 0));
    argv.push_back("--stay-up");
    server_log_ = dir_.path() + "/server.log";
    server_ = StartServer(argv, server_log_);
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Kill(SIGTERM);
      EXPECT_EQ(server_->Wait(), 0) << ReadFile(server_log_).value_or("");
    }
  }

  // `fl run ARGS` as alice (or with the certificate and key given).
  FlResult Run(std::vector<std::string> args, const std::string& cert = "",
               const std::string& key = "") {
    std::vector<std::string> argv = {"run",
                                     "--server",
                                     absl::StrCat("127.0.0.1:", port_),
                                     "--ca",
                                     pki_.ca_cert,
                                     "--cert",
                                     cert.empty() ? certs_ + "/admins/alice.pem" : cert,
                                     "--key",
                                     key.empty() ? certs_ + "/admins/alice.key" : key};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunFl(argv, dir_.path(), absl::StrCat("run-", ++calls_, ".log"));
  }

  std::string RunFile(const std::string& name, const std::string& toml) {
    const std::string path = absl::StrCat(dir_.path(), "/", name, ".toml");
    EXPECT_TRUE(WriteFileAtomic(path, toml).ok());
    return path;
  }

  std::string Audit() {
    absl::StatusOr<std::unique_ptr<server::Store>> store =
        server::Store::OpenReadOnly(dir_.path() + "/data");
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? AuditText(**store) : "";
  }

  TempDir dir_;
  ProvisionedFiles pki_;
  std::string certs_;
  int port_ = 0;
  std::string server_log_;
  std::unique_ptr<ChildProcess> server_;
  int calls_ = 0;
};

TEST_F(ControlApiTest, AnAdminRunsRunsOneAfterAnotherOnAServerThatStaysUp) {
  FlResult empty = Run({"list"});
  ASSERT_EQ(empty.exit_code, 0) << empty.out;
  EXPECT_THAT(empty.out, HasSubstr("RUN    NAME"));
  EXPECT_THAT(ReadFile(server_log_).value_or(""), HasSubstr("server_idle"));

  const std::string toml = WriteSiteToml(dir_.path(), "site", port_, pki_.ca_cert,
                                         pki_.client_certs[0], pki_.client_keys[0]);
  ChildProcess site({FL_BINARY, "client", "--config", toml}, dir_.path() + "/site.log");

  FlResult first = Run({"submit", RunFile("first", "[run]\nname = \"first\"\nrounds = 2\n")});
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_THAT(first.out, HasSubstr("queued first as q1"));
  // Followed from the queue to its end: both rounds, then the end, and the command returns.
  FlResult logs = Run({"logs", "q1", "--follow"});
  ASSERT_EQ(logs.exit_code, 0) << logs.out;
  EXPECT_THAT(logs.out, HasSubstr("run_started"));
  EXPECT_EQ(Count(logs.out, "round_committed"), 2) << logs.out;
  EXPECT_THAT(logs.out, HasSubstr("run_finished           all rounds committed"));

  // The next run takes the same site, with its own settings.
  FlResult second = Run({"submit",
                         RunFile("second",
                                 "[run]\nrounds = 3\n[strategy]\nname = \"fedprox\"\n"
                                 "proximal_mu = 0.1\n"),
                         "--name", "again"});
  ASSERT_EQ(second.exit_code, 0) << second.out;
  ASSERT_EQ(Run({"logs", "q2", "-f"}).exit_code, 0);
  FlResult status = Run({"status", "2", "--format", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.out;
  nlohmann::json run = nlohmann::json::parse(status.out.substr(status.out.find('{')));
  EXPECT_EQ(run["name"], "again");
  EXPECT_EQ(run["status"], "finished");
  EXPECT_EQ(run["committed_round"], 3);
  EXPECT_EQ(run["submitted_by"], "alice");
  EXPECT_EQ(run["strategy"], "fedprox");  // its own, recorded with it
  EXPECT_THAT(run["config_toml"].get<std::string>(), HasSubstr("rounds = 3"));

  // A run that cannot start (it needs three sites) is stopped as failed; the one queued behind
  // it is cancelled first. The server stays up.
  ASSERT_EQ(Run({"submit", RunFile("stuck",
                                   "[run]\nname = \"stuck\"\nmin_clients = 3\n"
                                   "min_fit_clients = 3\n")})
                .exit_code,
            0);
  ASSERT_EQ(Run({"submit", RunFile("later", "[run]\nname = \"later\"\n")}).exit_code, 0);
  FlResult cancel = Run({"stop", "q4", "--reason", "not needed"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.out;
  EXPECT_THAT(cancel.out, HasSubstr("q4 later: cancelled (stopped by alice: not needed)"));
  ASSERT_TRUE(WaitForText(server_log_, "queued_run_started queue_id=3"));
  FlResult stop = Run({"stop", "3", "--fail", "--reason", "too few sites"});
  ASSERT_EQ(stop.exit_code, 0) << stop.out;
  EXPECT_THAT(stop.out, HasSubstr("3 stuck: failed (stopped by alice: too few sites)"));
  FlResult again = Run({"stop", "3"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.out, HasSubstr("FAILED_PRECONDITION: run 3 is already over"));

  FlResult list = Run({"list", "--format", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.out;
  nlohmann::json runs = nlohmann::json::parse(list.out.substr(list.out.find('[')));
  ASSERT_EQ(runs.size(), 4u) << list.out;
  EXPECT_EQ(runs[0]["run"], "q4");
  EXPECT_EQ(runs[0]["status"], "cancelled");
  EXPECT_EQ(runs[1]["run"], "3");
  EXPECT_EQ(runs[1]["status"], "failed");
  EXPECT_EQ(runs[3]["status"], "finished");

  const std::string audit = Audit();
  EXPECT_THAT(audit, HasSubstr("run_submitted"));
  EXPECT_THAT(audit, HasSubstr("run_cancelled"));
  EXPECT_THAT(audit, HasSubstr("run_stopped round 0: failed: stopped by alice: too few sites"));
  site.Kill(SIGTERM);
  EXPECT_EQ(site.Wait(), 0);
}

TEST_F(ControlApiTest, ARunChangesItsPoliciesWhileItRunsAndNothingElse) {
  const std::string toml = WriteSiteToml(dir_.path(), "site", port_, pki_.ca_cert,
                                         pki_.client_certs[0], pki_.client_keys[0]);
  ChildProcess site({FL_BINARY, "client", "--config", toml}, dir_.path() + "/site.log");
  // Three sites needed and one there: the run waits until an admin lowers what it needs.
  ASSERT_EQ(
      Run({"submit", RunFile("wait", "[run]\nmin_clients = 3\nmin_fit_clients = 3\n")}).exit_code,
      0);
  ASSERT_TRUE(WaitForText(server_log_, "waiting_for_clients"));
  FlResult encoding = Run({"update", "1", "--set", "update_encoding=int8"});
  EXPECT_EQ(encoding.exit_code, 1);
  EXPECT_THAT(encoding.out, HasSubstr("FAILED_PRECONDITION: run 1 cannot change update_encoding"));
  FlResult typo = Run({"update", "1", "--set", "min_client=1"});
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_THAT(typo.out, HasSubstr("unknown key 'run.min_client'"));

  FlResult update = Run(
      {"update", "1", "--set", "min_clients=1", "--set", "min_fit_clients=1", "--set", "rounds=3"});
  ASSERT_EQ(update.exit_code, 0) << update.out;
  EXPECT_THAT(update.out, HasSubstr("run 1: rounds: 2 -> 3"));
  EXPECT_THAT(update.out, HasSubstr("run 1: min_clients: 3 -> 1"));
  FlResult logs = Run({"logs", "1", "--follow"});
  EXPECT_EQ(Count(logs.out, "round_committed"), 3) << logs.out;
  EXPECT_THAT(logs.out, HasSubstr("run_updated            rounds: 2 -> 3 (by alice)"));
  FlResult late = Run({"update", "1", "--set", "rounds=4"});
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_THAT(late.out, HasSubstr("FAILED_PRECONDITION: run 1 is over (finished)"));
  site.Kill(SIGTERM);
  EXPECT_EQ(site.Wait(), 0);
}

// A one-shot server restarted with other values: the run's policies follow what this start
// gives (audited), what a run cannot change refuses the start, and nothing given is ignored.
TEST(ControlApiResumeTest, ARestartedServerAppliesTheValuesGivenOrRefusesToStart) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();
  const std::string data = dir.path() + "/data";
  const std::vector<std::string> flags = WaitingRunFlags();
  const std::string log1 = dir.path() + "/server-1.log";
  ASSERT_NO_FATAL_FAILURE(RunUntilWaitingThenStop(ServerCommand(pki, data, port, flags), log1));

  std::vector<std::string> refused = ServerCommand(pki, data, port, flags);
  refused.insert(refused.end(), {"--update-encoding", "int8"});
  FlResult no = RunFl(std::vector<std::string>(refused.begin() + 1, refused.end()), dir.path(),
                      "server-2.log");
  EXPECT_EQ(no.exit_code, 1);
  EXPECT_THAT(no.out, HasSubstr("resuming: run 1 cannot change update_encoding \"float32\" -> "
                                "\"int8\""));
  // The strategy is recorded with the run: a flag that changes it refuses the start.
  std::vector<std::string> other_strategy = ServerCommand(pki, data, port, flags);
  other_strategy.insert(other_strategy.end(), {"--strategy", "fedprox", "--proximal-mu", "0.5"});
  FlResult strategy =
      RunFl(std::vector<std::string>(other_strategy.begin() + 1, other_strategy.end()), dir.path(),
            "server-2b.log");
  EXPECT_EQ(strategy.exit_code, 1);
  EXPECT_THAT(strategy.out, HasSubstr("resuming: run 1 cannot change"));
  EXPECT_THAT(strategy.out, HasSubstr("strategy.name \"fedavg\" -> \"fedprox\""));

  // min_clients and min_fit_clients 1; served 3 s after the run so that the site hears DONE.
  std::vector<std::string> lowered = TinyRunFlags(2, 3);
  const std::string log3 = dir.path() + "/server-3.log";
  // A --config file's values serve new runs; they do not change the run resumed.
  const std::string config = dir.path() + "/server.toml";
  ASSERT_TRUE(WriteFileAtomic(config,
                              "[run]\nmax_round_retries = 7\n[strategy]\nname = \"fedprox\"\n"
                              "proximal_mu = 0.5\n")
                  .ok());
  std::vector<std::string> third_argv = ServerCommand(pki, data, port, lowered);
  third_argv.insert(third_argv.begin() + 2, {"--config", config});
  std::unique_ptr<ChildProcess> third = StartServer(third_argv, log3);
  const std::string toml =
      WriteSiteToml(dir.path(), "site", port, pki.ca_cert, pki.client_certs[0], pki.client_keys[0]);
  ChildProcess site({FL_BINARY, "client", "--once", "--config", toml}, dir.path() + "/site.log");
  EXPECT_EQ(site.Wait(), 0) << ReadFile(dir.path() + "/site.log").value_or("");
  EXPECT_EQ(third->Wait(), 0) << ReadFile(log3).value_or("");
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string audit = AuditText(**store);
  EXPECT_THAT(audit, HasSubstr("run_updated round 0: min_clients: 3 -> 1 (by this start's flags)"));
  EXPECT_THAT(audit, Not(HasSubstr("max_round_retries")));
  EXPECT_THAT(audit, Not(HasSubstr("strategy")));
  absl::StatusOr<std::vector<server::RunRecord>> runs = (*store)->Runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u) << "the run resumed; no new run";
  EXPECT_EQ((*runs)[0].status, server::RunStatus::kFinished);
  // ... nor its strategy: the run kept FedAvg, and its sites were never sent a proximal term.
  EXPECT_THAT((*runs)[0].config_json,
              HasSubstr("\"strategy\":{\"accept_failures\":true,\"beta_1\":0.9,"));
  EXPECT_THAT((*runs)[0].config_json, HasSubstr("\"name\":\"fedavg\""));
  EXPECT_THAT((*runs)[0].config_json, Not(HasSubstr("\"proximal_mu\":0.5")));
}

// A SCAFFOLD run (whose model carries control variates) resumes as SCAFFOLD when the restart's
// configuration names no strategy; naming another is refused.
TEST(ControlApiResumeTest, ARecordedStrategyIsResumedWhateverTheConfigurationSays) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();
  const std::string data = dir.path() + "/data";
  std::vector<std::string> scaffold = ServerCommand(pki, data, port, WaitingRunFlags());
  scaffold.insert(scaffold.end(), {"--strategy", "scaffold"});
  const std::string log1 = dir.path() + "/server-1.log";
  ASSERT_NO_FATAL_FAILURE(RunUntilWaitingThenStop(scaffold, log1));

  const std::string log2 = dir.path() + "/server-2.log";
  ASSERT_NO_FATAL_FAILURE(
      RunUntilWaitingThenStop(ServerCommand(pki, data, port, WaitingRunFlags()), log2));
  EXPECT_THAT(ReadFile(log2).value_or(""), HasSubstr("run_resumed run=1"));

  std::vector<std::string> fedavg = ServerCommand(pki, data, port, WaitingRunFlags());
  fedavg.insert(fedavg.end(), {"--strategy", "fedavg"});
  FlResult refused =
      RunFl(std::vector<std::string>(fedavg.begin() + 1, fedavg.end()), dir.path(), "server-3.log");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.out, HasSubstr("strategy.name \"scaffold\" -> \"fedavg\""));
}

// The way out when a configuration cannot resume the unfinished run: end it offline; never
// under a running server.
TEST(ControlApiResumeTest, AnUnfinishedRunEndsOfflineAndTheNextStartBeginsANewRun) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();
  const std::string data = dir.path() + "/data";
  const std::vector<std::string> flags = WaitingRunFlags();
  const std::string log1 = dir.path() + "/server-1.log";
  std::unique_ptr<ChildProcess> server = StartServer(ServerCommand(pki, data, port, flags), log1);
  FlResult busy =
      RunFl({"admin", "--data-dir", data, "end-run", "--reason", "new model"}, dir.path());
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_THAT(busy.out, HasSubstr("a server runs on " + data + ": end its run with fl run stop"));
  server->Kill(SIGTERM);
  ASSERT_EQ(server->Wait(), 0);

  FlResult ended = RunFl(
      {"admin", "--data-dir", data, "end-run", "--reason", "new model", "--fail"}, dir.path());
  ASSERT_EQ(ended.exit_code, 0) << ended.out;
  EXPECT_THAT(ended.out, HasSubstr("run 1: failed (ended by "));
  FlResult again = RunFl({"admin", "--data-dir", data, "end-run", "--reason", "x"}, dir.path());
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.out, HasSubstr("there is no unfinished run in"));

  const std::string log2 = dir.path() + "/server-2.log";
  server = StartServer(ServerCommand(pki, data, port, flags), log2);
  EXPECT_TRUE(WaitForText(log2, "run_created run=2"));
  server->Kill(SIGTERM);
  EXPECT_EQ(server->Wait(), 0);
}

// fl admin backup while the server runs a run; restoring is starting a server on the copy: it
// resumes the unfinished run, and the finished run's checkpoints are all there.
TEST_F(ControlApiTest, ABackupTakenWhileARunGoesOnRestoresToAServerThatResumesIt) {
  const std::string toml = WriteSiteToml(dir_.path(), "site", port_, pki_.ca_cert,
                                         pki_.client_certs[0], pki_.client_keys[0]);
  ChildProcess site({FL_BINARY, "client", "--config", toml}, dir_.path() + "/site.log");
  ASSERT_EQ(Run({"submit", RunFile("done", "[run]\nrounds = 3\n")}).exit_code, 0);
  ASSERT_EQ(Run({"logs", "q1", "--follow"}).exit_code, 0);
  ASSERT_EQ(
      Run({"submit", RunFile("waits", "[run]\nmin_clients = 2\nmin_fit_clients = 2\n")}).exit_code,
      0);
  ASSERT_TRUE(WaitForText(server_log_, "queued_run_started queue_id=2"));

  const std::string backup = dir_.path() + "/backup";
  FlResult copy = RunFl({"admin", "--data-dir", dir_.path() + "/data", "backup", "--out", backup},
                        dir_.path(), "backup.log");
  ASSERT_EQ(copy.exit_code, 0) << copy.out;
  EXPECT_THAT(copy.out, HasSubstr("2 runs, 3 committed rounds, 4 checkpoints"));
  FlResult again = RunFl({"admin", "--data-dir", dir_.path() + "/data", "backup", "--out", backup},
                         dir_.path(), "backup-2.log");
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.out, HasSubstr("exists and is not empty: a backup never overwrites"));

  // The data directory is lost; a server on the copy takes over.
  server_->Kill(SIGTERM);
  ASSERT_EQ(server_->Wait(), 0);
  std::filesystem::remove_all(dir_.path() + "/data");
  std::vector<std::string> argv = ServerCommand(pki_, backup, port_, TinyRunFlags(2, 0));
  argv.push_back("--stay-up");
  server_log_ = dir_.path() + "/restored.log";
  server_ = StartServer(argv, server_log_);
  EXPECT_THAT(ReadFile(server_log_).value_or(""), HasSubstr("run_resumed run=2"));
  ASSERT_EQ(Run({"update", "2", "--set", "min_clients=1", "--set", "min_fit_clients=1"}).exit_code,
            0);
  FlResult logs = Run({"logs", "2", "--follow"});
  EXPECT_EQ(Count(logs.out, "round_committed"), 2) << logs.out;
  EXPECT_THAT(logs.out, HasSubstr("run_finished"));
  FlResult exported = RunFl({"admin", "--data-dir", backup, "export", "--run", "1", "--round", "3",
                             "--out", dir_.path() + "/run1.safetensors"},
                            dir_.path(), "export.log");
  EXPECT_EQ(exported.exit_code, 0) << exported.out;
  site.Kill(SIGTERM);
  EXPECT_EQ(site.Wait(), 0);
}

// Certificates that expire within cert_warn_days are named at start, with the fix, counted in
// the metrics, and shown in fl admin clients.
TEST(CertificateExpiryTest, TheServerWarnsOfCertificatesAboutToExpire) {
  TempDir dir;
  FlResult certs =
      RunFl({"certs", "--out", dir.path() + "/certs", "--clients", "1", "--valid-days", "10"},
            dir.path());
  ASSERT_EQ(certs.exit_code, 0) << certs.out;
  ProvisionedFiles pki;
  pki.ca_cert = dir.path() + "/certs/ca.pem";
  pki.server_cert = dir.path() + "/certs/server.pem";
  pki.server_key = dir.path() + "/certs/server.key";
  pki.client_certs = {dir.path() + "/certs/clients/site-0.pem"};
  const int port = FreeLoopbackPort();
  std::vector<std::string> flags = TinyRunFlags(2, 0);
  flags.insert(flags.end(), {"--metrics-listen", "127.0.0.1:0"});
  const std::string log = dir.path() + "/server.log";
  std::unique_ptr<ChildProcess> server =
      StartServer(ServerCommand(pki, dir.path() + "/data", port, flags), log);
  ASSERT_TRUE(WaitForText(log, "certificate=\"site site-0\""));
  const std::string text = ReadFile(log).value_or("");
  EXPECT_THAT(text, HasSubstr("certificate_expiring certificate=server"));
  EXPECT_THAT(text, HasSubstr("certificate_expiring certificate=CA"));
  EXPECT_THAT(text, HasSubstr("then fl admin enroll the new certificate"));
  FlResult clients =
      RunFl({"admin", "--data-dir", dir.path() + "/data", "clients"}, dir.path(), "clients.log");
  EXPECT_THAT(clients.out, HasSubstr("CERT_EXPIRES"));
  server->Kill(SIGTERM);
  EXPECT_EQ(server->Wait(), 0);
}

TEST_F(ControlApiTest, ASiteCertificateIsRefusedAndAudited) {
  FlResult site = Run({"list"}, pki_.client_certs[0], pki_.client_keys[0]);
  EXPECT_EQ(site.exit_code, 1);
  EXPECT_THAT(site.out, HasSubstr("PERMISSION_DENIED: certificate CN=site-0 is not an admin "
                                  "certificate; the control API takes only those (fl certs "
                                  "--admin NAME"));
  EXPECT_THAT(Audit(), HasSubstr("control_refused round 0: ListRuns: PERMISSION_DENIED"));

  // A revoked admin certificate is refused from its next call, the server running.
  FlResult revoke = RunFl(
      {"admin", "--data-dir", dir_.path() + "/data", "revoke-admin", certs_ + "/admins/alice.pem"},
      dir_.path(), "revoke-admin.log");
  ASSERT_EQ(revoke.exit_code, 0) << revoke.out;
  FlResult revoked = Run({"list"});
  EXPECT_EQ(revoked.exit_code, 1);
  EXPECT_THAT(revoked.out, HasSubstr("PERMISSION_DENIED: admin certificate CN=alice was revoked"));

  // And the other way round: an admin's certificate does not make a site.
  const std::string toml =
      WriteSiteToml(dir_.path(), "admin-site", port_, pki_.ca_cert, certs_ + "/admins/alice.pem",
                    certs_ + "/admins/alice.key");
  FlResult as_site = RunFl({"client", "--once", "--config", toml}, dir_.path(), "as-site.log");
  EXPECT_NE(as_site.exit_code, 0);
  EXPECT_THAT(as_site.out, HasSubstr("certificate CN=alice is an admin certificate, for the "
                                     "control API (fl run)"));
}

TEST_F(ControlApiTest, ARunFileThatMakesNoRunIsRefusedWithItsKey) {
  FlResult server_table = Run({"submit", RunFile("bad", "[server]\nlisten = \"0.0.0.0:1\"\n")});
  EXPECT_EQ(server_table.exit_code, 1);
  EXPECT_THAT(server_table.out,
              HasSubstr("run file:1: table 'server' is the server's own configuration: a run "
                        "file sets [run], [fit], [strategy], [model], [privacy] and "
                        "[secure_aggregation]"));
  FlResult typo = Run({"submit", RunFile("typo", "[run]\nroundz = 2\n")});
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_THAT(typo.out, HasSubstr("run file:2: unknown key 'run.roundz'"));
  FlResult model = Run({"submit", RunFile("model", "[model]\nkind = \"transformer\"\n")});
  EXPECT_EQ(model.exit_code, 1);
  EXPECT_THAT(model.out, HasSubstr("INVALID_ARGUMENT: the run file does not make a run"));
  FlResult list = Run({"list"});
  EXPECT_EQ(Count(list.out, "\n"), 1) << "nothing was queued: " << list.out;
}

TEST_F(ControlApiTest, AWrongCaOrServerNameSaysSo) {
  ProvisionedFiles other = MakePki(dir_.path() + "/other", {"x"});
  FlResult wrong_ca =
      RunFl({"run", "--server", absl::StrCat("127.0.0.1:", port_), "--ca", other.ca_cert, "--cert",
             certs_ + "/admins/alice.pem", "--key", certs_ + "/admins/alice.key", "list"},
            dir_.path(), "wrong-ca.log");
  EXPECT_EQ(wrong_ca.exit_code, 1);
  EXPECT_THAT(wrong_ca.out, HasSubstr("cannot reach the server's control API"));
  EXPECT_THAT(wrong_ca.out, HasSubstr("give --ca the federation's ca.pem"));
  FlResult wrong_name = Run({"--server-name", "fl.example.org", "list"});
  EXPECT_EQ(wrong_name.exit_code, 1);
  EXPECT_THAT(wrong_name.out, HasSubstr("not for 'fl.example.org'"));
  FlResult nobody = Run({"--server", absl::StrCat("127.0.0.1:", FreeLoopbackPort()), "list"});
  EXPECT_EQ(nobody.exit_code, 1);
  EXPECT_THAT(nobody.out, HasSubstr("check --server and that fl server runs there"));
}

}  // namespace
}  // namespace fl::testing
