#include "cli/admin_command.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/command_util.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "server/admin/admin.h"
#include "server/admin/backup.h"
#include "server/admin/export.h"

namespace fl::cli {
namespace {

// "user@host" of whoever runs the command, for the audit log.
std::string OperatorName() {
  std::string user;
  if (const passwd* pw = getpwuid(geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    user = pw->pw_name;
  } else if (const char* env = std::getenv("USER"); env != nullptr) {
    user = env;
  } else {
    user = absl::StrCat("uid ", geteuid());
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') {
    absl::StrAppend(&user, "@", host);
  }
  return user;
}

int PrintReport(const absl::StatusOr<std::string>& report, const std::string& out) {
  if (!report.ok()) return Fail(report.status());
  if (out.empty()) {
    std::fwrite(report->data(), 1, report->size(), stdout);
    return 0;
  }
  if (absl::Status s = fl::WriteFileAtomic(out, *report); !s.ok()) return Fail(s);
  std::printf("wrote %s (%zu bytes)\n", out.c_str(), report->size());
  return 0;
}

int RunAdminEnroll(fl::server::Store& store, const AdminArgs& a, int64_t now_ms) {
  absl::StatusOr<std::string> cert = fl::ReadFile(a.cert);
  if (!cert.ok()) return Fail(cert.status());
  absl::StatusOr<std::string> ca = fl::ReadFile(a.ca);
  if (!ca.ok()) return Fail(ca.status());
  absl::StatusOr<fl::server::admin::Enrollment> enrolled =
      fl::server::admin::EnrollCertificate(store, *cert, *ca, a.name, OperatorName(), now_ms);
  if (!enrolled.ok()) {
    return Fail(absl::Status(enrolled.status().code(),
                             absl::StrCat(a.cert, ": ", std::string(enrolled.status().message()))));
  }
  std::printf("%s client '%s'\nfingerprint %s\n",
              enrolled->changed ? "enrolled" : "already enrolled:", enrolled->name.c_str(),
              enrolled->client_id.c_str());
  return 0;
}

int RunAdminRevoke(fl::server::Store& store, const AdminArgs& a, int64_t now_ms) {
  absl::StatusOr<fl::server::admin::Revocation> revoked =
      fl::server::admin::RevokeClient(store, a.client, OperatorName(), now_ms);
  if (!revoked.ok()) return Fail(revoked.status());
  const fl::server::ClientRecord& c = revoked->client;
  if (revoked->already_revoked) {
    std::printf("client '%s' was already revoked at %s\nfingerprint %s\n", c.name.c_str(),
                absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixMillis(c.revoked_at_ms),
                                 absl::UTCTimeZone())
                    .c_str(),
                c.client_id.c_str());
    return 0;
  }
  std::printf("revoked client '%s'; the server refuses its next call\nfingerprint %s\n",
              c.name.c_str(), c.client_id.c_str());
  return 0;
}

int RunAdminExport(fl::server::Store& store, const AdminArgs& a) {
  fl::server::admin::ExportRequest request;
  if (a.run_id > 0) request.run_id = a.run_id;
  if (a.round >= 0) request.round = a.round;
  request.with_server_state = a.with_server_state;
  absl::StatusOr<fl::server::admin::ExportedModel> exported =
      fl::server::admin::ExportModel(store, request, a.out);
  if (!exported.ok()) return Fail(exported.status());
  std::printf(
      "wrote %s: run %lld %s, %zu tensors, %lld parameters\n", a.out.c_str(),
      static_cast<long long>(exported->run_id),
      exported->round == 0 ? "initial model" : absl::StrCat("round ", exported->round).c_str(),
      exported->model.spec().tensors().size(),
      static_cast<long long>(exported->model.spec().NumFloats()));
  return 0;
}

}  // namespace

CLI::App* AddAdminCommand(CLI::App& app, AdminArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "admin", "Operator reports and client enrollment on a server's data directory");
  cmd->require_subcommand(1);
  cmd->fallthrough();  // --data-dir may also follow the subcommand
  cmd->add_option("--data-dir", a.data_dir,
                  "The server's data directory, or the federation.db file in it")
      ->capture_default_str();
  auto add_report = [&a](CLI::App* sub, bool with_out) {
    sub->add_option("--format", a.format, "table, csv or json")->capture_default_str();
    if (with_out) sub->add_option("--out", a.out, "Write to this file instead of stdout");
  };
  a.status = cmd->add_subcommand(
      "status", "Runs, their rounds and last metrics, and how many clients are enrolled and seen");
  add_report(a.status, true);
  a.rounds = cmd->add_subcommand("rounds", "Every round attempt of a run");
  a.rounds->add_option("--run", a.run_id, "Run id (default: the newest run)")
      ->check(CLI::PositiveNumber);
  add_report(a.rounds, true);
  a.clients = cmd->add_subcommand("clients", "Clients with their participations");
  add_report(a.clients, true);
  a.audit = cmd->add_subcommand("audit", "The newest audit log records, oldest first");
  a.audit->add_option("--limit", a.limit, "How many records")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_report(a.audit, true);
  a.enroll = cmd->add_subcommand(
      "enroll", "Check a client certificate against the federation CA and enroll it");
  a.enroll->add_option("cert", a.cert, "The client's certificate (PEM)")->required();
  a.enroll->add_option("--ca", a.ca, "The federation CA certificate (PEM)")->required();
  a.enroll->add_option("--name", a.name, "Site name (default: the certificate's common name)");
  a.revoke = cmd->add_subcommand("revoke", "Revoke a client; the server refuses its next call");
  a.revoke
      ->add_option("client", a.client,
                   "The client's name, its fingerprint, or a unique prefix of at least 8 hex "
                   "digits of it")
      ->required();
  a.export_model =
      cmd->add_subcommand("export", "Write a committed round's global model as a safetensors file");
  a.export_model->add_option("--run", a.run_id, "Run id (default: the newest run)")
      ->check(CLI::PositiveNumber);
  a.export_model
      ->add_option("--round", a.round,
                   "Round (default: the last committed one; 0: the run's initial model)")
      ->check(CLI::NonNegativeNumber);
  a.export_model->add_option("--out", a.out, "The safetensors file to write")->required();
  a.export_model->add_flag("--with-server-state", a.with_server_state,
                           "Keep SCAFFOLD's control variates (scaffold.c.* tensors)");
  a.columns = cmd->add_subcommand(
      "columns", "The data columns a run's sites must have (fixed by the first site to join)");
  a.columns->add_option("--run", a.run_id, "Run id (default: the newest run)")
      ->check(CLI::PositiveNumber);
  a.columns->add_flag("--reset", a.reset,
                      "Forget them: the next site to join fixes them anew (after a "
                      "misconfigured first site)");
  a.revoke_admin =
      cmd->add_subcommand("revoke-admin",
                          "Revoke an admin's certificate: the control API (fl run) refuses it from "
                          "its next call");
  a.revoke_admin->add_option("cert", a.cert, "The admin's certificate (admins/NAME.pem)")
      ->required();
  a.evals = cmd->add_subcommand(
      "evals", "A run's evaluations: the server's, the sites' mean, and each site's own");
  a.evals->add_option("--run", a.run_id, "Run id (default: the newest run)")
      ->check(CLI::PositiveNumber);
  a.evals->add_option("--round", a.round, "Only this round")->check(CLI::PositiveNumber);
  add_report(a.evals, true);
  a.backup = cmd->add_subcommand(
      "backup",
      "Copy the data directory (SQLite file and checkpoints) consistently, also while "
      "the server runs; restore: start a server on the copy");
  a.backup->add_option("--out", a.out, "A new or empty directory")->required();
  a.end_run = cmd->add_subcommand(
      "end-run",
      "End the unfinished run while no server runs on the data directory (e.g. one a "
      "new configuration cannot resume); a running server's: fl run stop");
  a.end_run->add_option("--run", a.run_id, "Run id (default: the unfinished run)")
      ->check(CLI::PositiveNumber);
  a.end_run->add_option("--reason", a.reason, "Recorded with the run")->required();
  a.end_run->add_flag("--fail", a.fail, "Record it as failed (default: finished)");
  return cmd;
}

namespace {

// `fl admin columns [--reset]`: shows, or forgets, the run's feature schema.
int RunAdminColumns(const AdminArgs& a, const std::string& data_dir, int64_t now_ms) {
  absl::StatusOr<std::unique_ptr<fl::server::Store>> store =
      a.reset ? fl::server::Store::Open(data_dir, {.remove_stale_temp_files = false})
              : fl::server::Store::OpenReadOnly(data_dir);
  if (!store.ok()) return Fail(store.status());
  std::optional<int64_t> run_id;
  if (a.run_id > 0) run_id = a.run_id;
  absl::StatusOr<fl::server::RunRecord> run = fl::server::admin::ResolveRun(**store, run_id);
  if (!run.ok()) return Fail(run.status());
  absl::StatusOr<std::string> schema = (*store)->ClaimFeatureSchema(run->run_id, "");
  if (!schema.ok()) return Fail(schema.status());
  if (!a.reset) {
    std::printf("run %lld: %s\n", static_cast<long long>(run->run_id),
                schema->empty() ? "no columns yet (the first site to join with columns fixes them)"
                                : schema->c_str());
    return 0;
  }
  if (absl::Status s = (*store)->ResetFeatureSchema(run->run_id); !s.ok()) return Fail(s);
  fl::server::AuditRecord rec;
  rec.at_ms = now_ms;
  rec.event = "feature_schema_reset";
  rec.run_id = run->run_id;
  rec.detail = absl::StrCat("by ", OperatorName(), "; was ", schema->empty() ? "none" : *schema);
  if (absl::Status s = (*store)->Audit(rec); !s.ok()) return Fail(s);
  std::printf("run %lld: columns forgotten; the next site to join fixes them\n",
              static_cast<long long>(run->run_id));
  return 0;
}

}  // namespace

namespace {

// `fl admin end-run`: only while no server holds the data directory's lock, which is kept for
// the admin's write, so that a server started meanwhile waits for it.
int RunAdminEndRun(const AdminArgs& a, const std::string& data_dir, int64_t now_ms) {
  const std::string lock_path = data_dir + "/server.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Fail(absl::PermissionDeniedError(
        absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno))));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "a server runs on ", data_dir, ": end its run with fl run stop, or stop the server")));
  }
  absl::StatusOr<std::unique_ptr<fl::server::Store>> store =
      fl::server::Store::Open(data_dir, {.remove_stale_temp_files = false});
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<std::optional<fl::server::RunRecord>> active = (*store)->ActiveRun();
  if (!active.ok()) return Fail(active.status());
  if (!active->has_value() || (a.run_id > 0 && (*active)->run_id != a.run_id)) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat(a.run_id > 0 ? absl::StrCat("run ", a.run_id, " is not the unfinished run")
                                  : "there is no unfinished run",
                     " in ", data_dir, "; fl admin status lists the runs")));
  }
  const int64_t run_id = (*active)->run_id;
  if (absl::StatusOr<int> aborted = (*store)->AbortInFlightRounds(run_id, now_ms); !aborted.ok()) {
    return Fail(aborted.status());
  }
  const std::string reason = absl::StrCat("ended by ", OperatorName(), ": ", a.reason);
  const fl::server::RunStatus status =
      a.fail ? fl::server::RunStatus::kFailed : fl::server::RunStatus::kFinished;
  if (absl::Status s = (*store)->FinishRun(run_id, status, reason, now_ms); !s.ok()) {
    return Fail(s);
  }
  fl::server::AuditRecord rec;
  rec.at_ms = now_ms;
  rec.event = "run_stopped";
  rec.run_id = run_id;
  rec.detail = absl::StrCat(a.fail ? "failed" : "finished", ": ", reason, " (fl admin end-run)");
  if (absl::Status s = (*store)->Audit(rec); !s.ok()) return Fail(s);
  std::printf("run %lld: %s (%s); the next server start begins a new run\n",
              static_cast<long long>(run_id), fl::server::ToString(status), reason.c_str());
  return 0;
}

}  // namespace

int RunAdmin(const AdminArgs& a) {
  namespace admin = fl::server::admin;
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  absl::StatusOr<admin::Format> format = admin::ParseFormat(a.format);
  if (!format.ok()) return Fail(format.status());
  // Even enroll and revoke need an existing database: a mistyped --data-dir must not start a new
  // federation.
  absl::StatusOr<std::string> data_dir = DataDirOf(a.data_dir);
  if (!data_dir.ok()) return Fail(data_dir.status());
  absl::StatusOr<std::unique_ptr<fl::server::Store>> store =
      fl::server::Store::OpenReadOnly(*data_dir);
  if (!store.ok()) return Fail(store.status());
  if (a.columns->parsed()) return RunAdminColumns(a, *data_dir, now_ms);
  if (a.backup->parsed()) {
    absl::StatusOr<fl::server::admin::BackupSummary> copy =
        fl::server::admin::BackupDataDirectory(*data_dir, a.out);
    if (!copy.ok()) return Fail(copy.status());
    std::printf(
        "backed up %s to %s: %lld runs, %lld committed rounds, %lld checkpoints (%lld bytes)\n"
        "restore: stop the server, put %s in place of %s, start the server\n",
        data_dir->c_str(), a.out.c_str(), static_cast<long long>(copy->runs),
        static_cast<long long>(copy->rounds), static_cast<long long>(copy->checkpoints),
        static_cast<long long>(copy->bytes), a.out.c_str(), data_dir->c_str());
    return 0;
  }
  if (a.end_run->parsed()) {
    store->reset();
    return RunAdminEndRun(a, *data_dir, now_ms);
  }
  if (a.revoke_admin->parsed()) {
    absl::StatusOr<std::string> pem = fl::ReadFile(a.cert);
    if (!pem.ok()) return Fail(pem.status());
    absl::StatusOr<std::string> fingerprint = fl::CertificateFingerprint(*pem);
    if (!fingerprint.ok()) return Fail(fingerprint.status());
    const std::string name = fl::CertificateCommonName(*pem).value_or("?");
    store->reset();
    store = fl::server::Store::Open(*data_dir, {.remove_stale_temp_files = false});
    if (!store.ok()) return Fail(store.status());
    if (absl::Status s = (*store)->RevokeCertificate(*fingerprint, name, now_ms); !s.ok()) {
      return Fail(s);
    }
    fl::server::AuditRecord rec;
    rec.at_ms = now_ms;
    rec.client_id = *fingerprint;
    rec.event = "admin_revoked";
    rec.detail = absl::StrCat("admin certificate CN=", name, " revoked by ", OperatorName());
    if (absl::Status s = (*store)->Audit(rec); !s.ok()) return Fail(s);
    std::printf("revoked admin certificate CN=%s (%s): the control API refuses it from now\n",
                name.c_str(), fingerprint->c_str());
    return 0;
  }
  if (a.enroll->parsed() || a.revoke->parsed()) {
    store->reset();
    store = fl::server::Store::Open(*data_dir, {.remove_stale_temp_files = false});
    if (!store.ok()) return Fail(store.status());
    return a.enroll->parsed() ? RunAdminEnroll(**store, a, now_ms)
                              : RunAdminRevoke(**store, a, now_ms);
  }
  if (a.export_model->parsed()) return RunAdminExport(**store, a);
  if (a.status->parsed()) {
    return PrintReport(admin::StatusReport(**store, now_ms, *format), a.out);
  }
  if (a.rounds->parsed()) {
    std::optional<int64_t> run;
    if (a.run_id > 0) run = a.run_id;
    return PrintReport(admin::RoundsReport(**store, run, *format), a.out);
  }
  if (a.clients->parsed()) return PrintReport(admin::ClientsReport(**store, *format), a.out);
  if (a.evals->parsed()) {
    std::optional<int64_t> run;
    if (a.run_id > 0) run = a.run_id;
    std::optional<int32_t> round;
    if (a.round > 0) round = a.round;
    return PrintReport(admin::EvalsReport(**store, run, round, *format), a.out);
  }
  if (a.audit->parsed()) return PrintReport(admin::AuditReport(**store, a.limit, *format), a.out);
  return 1;
}

}  // namespace fl::cli
