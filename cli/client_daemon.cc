#include "cli/client_daemon.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/exit_codes.h"
#include "cli/site_trainer.h"
#include "fl/common/logging.h"
#include "grpc/support/log.h"

namespace fl::cli {
namespace {

// gRPC's own log lines in a site's process: a failed TLS handshake is reported by the client's
// own error (client_retry, or the exit naming the cause), so gRPC's line for each attempt is
// debug; the rest of gRPC's errors go through the site's log as warnings.
void SiteGrpcLog(gpr_log_func_args* args) {
  const bool handshake = std::strstr(args->message, "Handshake failed") != nullptr;
  if (handshake ? LogEnabled(LogLevel::kDebug)
                : args->severity == GPR_LOG_SEVERITY_ERROR || LogEnabled(LogLevel::kDebug)) {
    LogEvent(handshake ? LogLevel::kDebug : LogLevel::kWarn, "grpc",
             {{"file", args->file}, {"message", args->message}});
  }
}

// Prints the one-line error of an exit code and returns the code.
int Exit(int code, const std::string& cause, const std::string& fix) {
  std::fprintf(stderr, "error: %s%s%s\n", cause.c_str(), fix.empty() ? "" : "; ", fix.c_str());
  return code;
}

// FAILED_PRECONDITION comes from Join only: a model or data columns that are not the run's.
bool IsRefusal(const absl::Status& s) {
  return absl::IsUnauthenticated(s) || absl::IsPermissionDenied(s) || absl::IsFailedPrecondition(s);
}

std::string RefusalFix(const absl::Status& s) {
  if (absl::IsFailedPrecondition(s)) {
    return "train the run's model on the run's columns (the server names what differs); fl "
           "client --preflight checks it";
  }
  return absl::IsPermissionDenied(s)
             ? "ask the federation's operator to enroll this site's certificate (fl admin "
               "enroll); fl client --preflight checks it"
             : "give the certificate and key the federation's CA issued for this site "
               "(server.cert, server.key); fl client --preflight checks them";
}

}  // namespace

void SiteDaemon::Stop(int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stopping_) signal_ = signal;
  stopping_ = true;
  if (client_ != nullptr) client_->Stop();
  cv_.notify_all();
}

bool SiteDaemon::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

bool SiteDaemon::SleepUnlessStopped(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoMilliseconds(d), [this] { return stopping_; });
  return !stopping_;
}

int SiteDaemon::Stopped() {
  int signal = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    signal = signal_;
    client_ = nullptr;
  }
  LogEvent(LogLevel::kInfo, "client_stopped", {{"signal", absl::StrCat(signal)}});
  return kExitOk;
}

int SiteDaemon::Run() {
  gpr_set_log_function(SiteGrpcLog);
  absl::StatusOr<SiteTrainer> site = BuildSiteTrainer(config_);
  if (!site.ok()) return Exit(kExitConfig, site.status().ToString(), "");
  fl::client::ClientOptions options = config_.client;
  options.feature_columns = site->feature_columns;
  absl::StatusOr<std::unique_ptr<fl::client::Client>> client =
      fl::client::Client::Create(options, site->trainer.get());
  if (!client.ok()) return Exit(kExitConfig, client.status().ToString(), "");
  LogEvent(LogLevel::kInfo, "client_ready",
           {{"model", config_.model.kind},
            {"features", absl::StrCat(site->arch.num_features)},
            {"classes", absl::StrCat(site->arch.num_classes)},
            {"train_examples", absl::StrCat(site->train_examples)},
            {"test_examples", absl::StrCat(site->test_examples)},
            {"server", config_.client.server_address},
            {"mode", config_.service.once ? "once" : "serve"}});
  (*client)->set_on_task([](const fl::client::TaskReport& r) {
    LogEvent(LogLevel::kInfo, "fit_task",
             {{"round", absl::StrCat(r.round)},
              {"stage", r.stage},
              {"examples", absl::StrCat(r.num_examples)},
              {"train_time", absl::FormatDuration(r.train_time)},
              {"status", r.status.ok() ? "accepted" : r.status.ToString()}});
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      // Stop came while the data loaded: the client never ran.
      (*client)->Stop();
    }
    client_ = client->get();
  }
  return Serve(**client);
}

int SiteDaemon::Serve(fl::client::Client& client) {
  const bool once = config_.service.once;
  const absl::Duration max_wait = config_.service.next_run_poll;
  const absl::Duration first_wait = std::min(absl::Seconds(1), max_wait);
  absl::Duration wait = first_wait;
  int checks = 0;  // since the last run this client saw end
  while (true) {
    const absl::Status s = client.Run();
    if (stopping()) return Stopped();
    if (absl::IsUnauthenticated(s) &&
        absl::StartsWith(s.message(), fl::client::kServerTrustPrefix)) {
      LogEvent(LogLevel::kError, "server_untrusted",
               {{"server", config_.client.server_address}, {"error", std::string(s.message())}});
      if (once) {
        return Exit(kExitConfig, std::string(s.message()), "fix server.ca or server.address");
      }
      // Serving: said once per attempt at the next-run pace, not in a flood; a certificate the
      // operator renews (or a clock set right) lets the site in again without a restart.
      if (!SleepUnlessStopped(max_wait)) return Stopped();
      continue;
    }
    if (IsRefusal(s)) {
      LogEvent(LogLevel::kError, "client_refused",
               {{"server", config_.client.server_address}, {"error", s.ToString()}});
      return Exit(kExitRefused, absl::StrCat("the server refused this site: ", s.ToString()),
                  RefusalFix(s));
    }
    if (s.ok()) {
      const fl::client::RunEnd end = client.last_run();
      // Run 0 is no run (a server between runs): a --once site waits for a run to take part in.
      if (end.was_live || (once && end.run_id != 0)) {
        LogEvent(end.failed ? LogLevel::kWarn : LogLevel::kInfo, "run_ended",
                 {{"run", absl::StrCat(end.run_id)},
                  {"status", end.failed ? "failed" : "finished"},
                  {"why", end.message}});
        if (once) {
          if (!end.failed) return kExitOk;
          return Exit(
              kExitRunFailed,
              absl::StrCat("the server ended run ", end.run_id, " as failed (", end.message, ")"),
              "the server's log and `fl admin status` say why");
        }
        checks = 0;
        wait = first_wait;
      }
      LogEvent(LogLevel::kInfo, "waiting_for_next_run",
               {{"run_over", absl::StrCat(end.run_id)},
                {"attempt", absl::StrCat(++checks)},
                {"delay", absl::FormatDuration(wait)}});
      if (!SleepUnlessStopped(wait)) return Stopped();
      wait = std::min(wait * 2, max_wait);
      continue;
    }
    if (once) {
      if (absl::IsUnavailable(s)) {
        return Exit(kExitUnreachable, s.ToString(),
                    "check server.address (--server) and that the server runs; fl client "
                    "--preflight checks the way to it");
      }
      return Exit(kExitError, s.ToString(), "");
    }
    // Serving: an unreachable server is waited for (Run already logged each retry), anything
    // else retried after next_run_poll.
    if (absl::IsUnavailable(s)) {
      LogEvent(LogLevel::kWarn, "server_unreachable",
               {{"server", config_.client.server_address},
                {"error", std::string(s.message())},
                {"next", "still retrying"}});
      continue;
    }
    LogEvent(LogLevel::kWarn, "client_error",
             {{"error", s.ToString()}, {"delay", absl::FormatDuration(max_wait)}});
    if (!SleepUnlessStopped(max_wait)) return Stopped();
  }
}

}  // namespace fl::cli
