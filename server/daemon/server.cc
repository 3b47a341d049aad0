#include "fl/server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/aggregation/strategies.h"
#include "fl/common/address.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "grpc/support/log.h"
#include "grpcpp/grpcpp.h"
#include "server/daemon/config.h"
#include "server/daemon/http_endpoint.h"
#include "server/daemon/metrics.h"
#include "server/daemon/run_host.h"
#include "server/service/control_service.h"
#include "server/service/federation_service.h"

namespace fl::server {
namespace {

// A certificate's identity without checking it: plaintext mode has no CA to check against.
absl::StatusOr<CertificateIdentity> UncheckedIdentity(const std::string& pem) {
  absl::StatusOr<std::string> fingerprint = CertificateFingerprint(pem);
  if (!fingerprint.ok()) return fingerprint.status();
  absl::StatusOr<std::string> common_name = CertificateCommonName(pem);
  return CertificateIdentity{*std::move(fingerprint), common_name.ok() ? *common_name : ""};
}

// gRPC reports TLS handshakes that fail before any call (a plaintext client, a client without a
// certificate) only in its log. The serving engine, if any, audits them from there.
std::mutex g_log_mu;
RoundEngine* g_audit_engine = nullptr;

void GrpcLogToAudit(gpr_log_func_args* args) {
  const char* msg = args->message;
  if (std::strstr(msg, "Handshake failed") != nullptr) {
    std::lock_guard<std::mutex> lock(g_log_mu);
    if (g_audit_engine != nullptr) {
      g_audit_engine->AuditRefusal(
          "", "tls_handshake_refused",
          absl::UnauthenticatedError(absl::StrCat(
              "TLS handshake failed (a plaintext client, or no client certificate?): ", msg)));
      return;
    }
  }
  if (args->severity == GPR_LOG_SEVERITY_ERROR || LogEnabled(LogLevel::kDebug)) {
    LogEvent(LogLevel::kWarn, "grpc", {{"file", args->file}, {"message", msg}});
  }
}

class ServerImpl final : public Server {
 public:
  ~ServerImpl() override {
    Shutdown();
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  absl::Status Init(ServerOptions options, Model initial_model, EngineHooks hooks) {
    options_ = std::move(options);
    // Refused before anything is opened: the first run's strategy and model.
    if (absl::StatusOr<std::unique_ptr<aggregation::Strategy>> strategy = aggregation::MakeStrategy(
            options_.strategy, [] { return int64_t{0}; }, nullptr, options_.root_trainer);
        !strategy.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("strategy: ", strategy.status().message()));
    } else if (absl::Status s = (*strategy)->CheckModel(initial_model.spec()); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckListenAddress(options_.listen_address); !s.ok()) return s;
    if (options_.insecure_plaintext && !IsLoopbackAddress(options_.listen_address)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plaintext is allowed only on a loopback address, not on ",
                       options_.listen_address, "; give the CA, certificate and key for TLS"));
    }
    std::string ca_pem, cert_pem, key_pem;
    if (!options_.insecure_plaintext) {
      if (options_.ca_cert_path.empty() || options_.cert_path.empty() ||
          options_.key_path.empty()) {
        return absl::InvalidArgumentError(
            "mutual TLS needs the federation CA certificate, the server certificate and its key "
            "(or an explicit plaintext flag, on loopback only)");
      }
      for (auto [path, out] :
           {std::pair{&options_.ca_cert_path, &ca_pem}, std::pair{&options_.cert_path, &cert_pem},
            std::pair{&options_.key_path, &key_pem}}) {
        absl::StatusOr<std::string> text = ReadFile(*path);
        if (!text.ok()) return text.status();
        *out = *std::move(text);
      }
      if (absl::StatusOr<int64_t> expiry = CertificateNotAfterMs(cert_pem); expiry.ok()) {
        server_cert_not_after_ms_ = *expiry;
      }
      if (absl::StatusOr<int64_t> expiry = CertificateNotAfterMs(ca_pem); expiry.ok()) {
        ca_not_after_ms_ = *expiry;
      }
      if (absl::Status s = CheckServerCertificate(cert_pem, key_pem, ca_pem); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(s.message(), " (certificate ", options_.cert_path, ", key ",
                         options_.key_path, ", CA ", options_.ca_cert_path, ")"));
      }
    }
    // `fl sim` and `fl report` print the SQLite file's path: take it for its directory.
    absl::StatusOr<std::string> data_dir = DataDirectoryOf(options_.data_dir);
    if (!data_dir.ok()) return absl::InvalidArgumentError(data_dir.status().message());
    options_.data_dir = *std::move(data_dir);
    if (absl::Status s = MakeDirectories(options_.data_dir); !s.ok()) return s;
    // One server per data directory: a second one would resume the same run beside the first.
    const std::string lock_path = options_.data_dir + "/server.lock";
    lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0) {
      const int error = errno;
      const char* fix = error == EROFS ? "; it is on a read-only file system: choose another"
                        : error == EACCES || error == EPERM
                            ? "; make the data directory writable by the user running the server "
                              "(check its owner and mode) or choose another"
                            : "";
      return absl::Status(
          error == ENOENT || error == ENOTDIR ? absl::StatusCode::kNotFound
                                              : absl::StatusCode::kPermissionDenied,
          absl::StrCat("cannot create ", lock_path, ": ", std::strerror(error), fix));
    }
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot lock ", lock_path, ": ", std::strerror(errno)));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("another server is running on the data directory ", options_.data_dir, " (",
                       lock_path, " is locked; or fl admin end-run is writing to it: try again)"));
    }
    if (options_.engine.spill_dir.empty()) options_.engine.spill_dir = options_.data_dir + "/spill";
    if (absl::Status s = MakeDirectories(options_.engine.spill_dir); !s.ok()) return s;
    // Spills of uploads that were in flight when a previous process died are worthless now.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(options_.engine.spill_dir, ec)) {
      if (entry.path().extension() == ".part") std::filesystem::remove(entry.path(), ec);
    }

    StoreOpenOptions store_options;
    store_options.durable = options_.durable;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.data_dir, store_options);
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    if (struct stat st{}; ::stat(store_->db_path().c_str(), &st) == 0) {
      db_identity_ = {st.st_dev, st.st_ino};
    }
    std::shared_ptr<const ClientCertificateVerifier> verifier;
    if (!options_.insecure_plaintext) {
      absl::StatusOr<ClientCertificateVerifier> made = ClientCertificateVerifier::Create(ca_pem);
      if (!made.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(options_.ca_cert_path, ": ", made.status().message()));
      }
      verifier = std::make_shared<const ClientCertificateVerifier>(*std::move(made));
      // Secure aggregation: the sites' signed keys and survivor signatures are checked against
      // the same CA as they arrive (a bad one drops its sender, not the round).
      absl::StatusOr<std::unique_ptr<secagg::IdentityVerifier>> secagg_verifier =
          secagg::MakeX509Verifier(ca_pem);
      if (!secagg_verifier.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(options_.ca_cert_path, ": ", secagg_verifier.status().message()));
      }
      secagg_verifier_ = *std::move(secagg_verifier);
    }
    // A certificate listed in the configuration must not undo `fl admin revoke` at the next
    // restart: a revoked client stays revoked until an operator enrolls it again by hand.
    absl::flat_hash_set<std::string> revoked_ids;
    if (!options_.enroll_cert_paths.empty()) {
      absl::StatusOr<std::vector<ClientRecord>> known = store_->Clients();
      if (!known.ok()) return known.status();
      for (const ClientRecord& c : *known) {
        if (c.revoked_at_ms != 0) revoked_ids.insert(c.client_id);
      }
    }
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    for (const std::string& path : options_.enroll_cert_paths) {
      absl::StatusOr<std::string> pem = ReadFile(path);
      if (!pem.ok()) return pem.status();
      absl::StatusOr<CertificateIdentity> identity =
          verifier != nullptr ? verifier->Verify(*pem) : UncheckedIdentity(*pem);
      if (!identity.ok()) {
        if (!verifier) return identity.status();
        return absl::InvalidArgumentError(
            absl::StrCat("cannot enroll ", path, ": ", identity.status().message()));
      }
      if (identity->admin) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot enroll ", path,
                         ": it is an admin certificate, for the control API (fl run); a site "
                         "needs its own (fl certs add-site NAME)"));
      }
      if (revoked_ids.contains(identity->fingerprint)) {
        LogEvent(LogLevel::kWarn, "enroll_skipped",
                 {{"certificate", path},
                  {"reason",
                   "the client was revoked; `fl admin enroll` "
                   "re-admits it"}});
        continue;
      }
      const std::string& name = identity->common_name.empty() ? path : identity->common_name;
      if (absl::Status s = store_->EnrollClient(identity->fingerprint, name, now_ms); !s.ok()) {
        return s;
      }
      if (identity->not_after_ms > 0) {
        if (absl::Status s =
                store_->SetClientCertificateExpiry(identity->fingerprint, identity->not_after_ms);
            !s.ok()) {
          return s;
        }
      }
    }

    metrics_ = std::make_unique<ServerMetrics>();
    RunHostOptions host_options;
    host_options.server = &options_;
    host_options.store = store_.get();
    // SCAFFOLD's N, unless configured: the clients enrolled and not revoked, at each round.
    host_options.enrolled_clients = [this] { return EnrolledClients(); };
    host_options.wrap_hooks = [this](EngineHooks h) {
      if (h.secagg_verifier == nullptr) h.secagg_verifier = secagg_verifier_;
      return WithMetrics(std::move(h));
    };
    if (!options_.insecure_plaintext) {
      host_options.on_switch = [](RoundEngine* engine) {
        std::lock_guard<std::mutex> lock(g_log_mu);
        g_audit_engine = engine;
      };
    }
    absl::StatusOr<std::unique_ptr<RunHost>> host = RunHost::Create(std::move(host_options));
    if (!host.ok()) return host.status();
    host_ = *std::move(host);
    RunSetup first{options_.engine, options_.strategy, std::move(initial_model), std::move(hooks),
                   options_.root_trainer};
    if (absl::Status s = host_->Start(std::move(first)); !s.ok()) return s;

    ServiceOptions service_options;
    service_options.insecure_plaintext = options_.insecure_plaintext;
    service_options.verifier = verifier;
    service_options.max_poll_wait = options_.max_poll_wait;
    service_options.limits = options_.client_limits;
    service_options.threads = options_.service_threads;
    service_ = MakeFederationService(
        service_options, [host = host_.get()] { return host->CurrentEngine(); }, store_.get());
    ControlServiceOptions control_options;
    control_options.insecure_plaintext = options_.insecure_plaintext;
    control_options.verifier = verifier;
    control_ = MakeControlService(control_options, host_.get(), store_.get());

    std::shared_ptr<grpc::ServerCredentials> creds;
    if (options_.insecure_plaintext) {
      creds = grpc::InsecureServerCredentials();
    } else {
      grpc::SslServerCredentialsOptions ssl(
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
      ssl.pem_root_certs = ca_pem;
      ssl.pem_key_cert_pairs.push_back({key_pem, cert_pem});
      creds = grpc::SslServerCredentials(ssl);
      gpr_set_log_function(GrpcLogToAudit);
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.listen_address, creds, &port_);
    builder.RegisterService(service_.get());
    builder.RegisterService(control_.get());
    builder.SetMaxReceiveMessageSize(2 * static_cast<int>(kMaxChunkBytes));
    // gRPC sets SO_REUSEPORT by default, which lets a second server bind the same port and take
    // half the connections; a port in use must be an error instead.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // Clients ping every 30 s to notice dead connections during long polls and transfers.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 15000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // What one call's headers may hold ([limits] max_metadata_bytes): gRPC refuses past it.
    builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                               options_.client_limits.max_metadata_bytes);
    // Bounded buffering per stream: gRPC's default grows each stream's flow-control window with
    // its bandwidth-delay probe, and a server busy verifying and folding then holds many MiB of
    // every client's unread chunks (measured: 30-60 MiB more peak memory per uploading client).
    // A fixed window (4 chunks by default) makes the memory of N concurrent uploads N x the
    // window, whatever their size. 0 keeps gRPC's probe-tuned window (faster for one upload,
    // see ServerOptions). No other bound works here: a gRPC resource quota small enough to
    // matter cancels uploads mid-stream when it runs out (seen with 8 sites and 64 MiB).
    for (const auto& [name, value] : UploadWindowChannelArgs(options_.stream_window_mib)) {
      builder.AddChannelArgument(name, value);
    }
    grpc_server_ = builder.BuildAndStart();
    if (grpc_server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen_address));
    }
    LogEvent(LogLevel::kInfo, "server_listening",
             {{"address", options_.listen_address},
              {"port", absl::StrCat(port_)},
              {"tls", options_.insecure_plaintext ? "off (plaintext, loopback)" : "mutual"},
              {"strategy", options_.stay_up ? "per run" : options_.strategy.name},
              {"db", store_->db_path()}});
    if (!options_.metrics_address.empty()) {
      absl::Status s = StartMetricsEndpoint();
      if (!s.ok()) return s;
    }
    ticker_ = std::thread([this] { TickLoop(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  int metrics_port() const override { return http_ == nullptr ? 0 : http_->port(); }
  std::shared_ptr<RoundEngine> current_engine() override { return host_->CurrentEngine(); }
  std::vector<int64_t> served_runs() override { return host_->served_runs(); }
  Store& store() override { return *store_; }
  absl::Status fatal_error() const override {
    std::lock_guard<std::mutex> lock(fatal_mu_);
    return fatal_;
  }

  void WaitUntilFinished(absl::Duration grace) override {
    while (!stopping_.load() && (options_.stay_up || !host_->Idle())) {
      if (std::shared_ptr<RoundEngine> engine = host_->CurrentEngine(); engine != nullptr) {
        engine->WaitForChange(engine->version(), absl::Milliseconds(200));
      } else {
        std::unique_lock<std::mutex> lock(stop_mu_);
        stop_cv_.wait_for(lock, std::chrono::milliseconds(200),
                          [this] { return stopping_.load(); });
      }
    }
    // Finishing: a run submitted now would only be aborted at the end of the grace period.
    host_->Drain();
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(grace), [this] { return stopping_.load(); });
  }

  void Shutdown() override {
    // Every caller returns only once the server is down (a signal thread and main may race).
    std::call_once(shutdown_once_, [this] { ShutdownOnce(); });
  }

 private:
  // Clients enrolled and not revoked (0 when the store cannot say; SCAFFOLD then counts the
  // round's accepted updates).
  int64_t EnrolledClients() {
    absl::StatusOr<std::vector<ClientRecord>> clients = store_->Clients();
    if (!clients.ok()) return 0;
    int64_t n = 0;
    for (const ClientRecord& c : *clients) n += c.revoked_at_ms == 0 ? 1 : 0;
    return n;
  }

  void ShutdownOnce() {
    // The round in flight is recorded as aborted, so a restarted server runs it again.
    if (host_ != nullptr) host_->Abort("server shutting down");
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    if (http_ != nullptr) http_->Stop();
    if (grpc_server_ != nullptr)
      grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    std::lock_guard<std::mutex> lock(g_log_mu);
    if (host_ != nullptr && g_audit_engine == host_->CurrentEngine().get())
      g_audit_engine = nullptr;
  }

  // Feeds the Prometheus metrics from the engine's hooks, then calls the caller's.
  EngineHooks WithMetrics(EngineHooks hooks) {
    ServerMetrics* m = metrics_.get();
    hooks.on_round_end = [this, m, next = std::move(hooks.on_round_end)](const RoundSummary& r) {
      if (r.committed) {
        m->RoundCommitted(r.duration);
        m->SetCurrentRound(r.round + 1);
        PruneCheckpoints();
      } else {
        m->RoundFailed();
      }
      if (next) next(r);
    };
    hooks.on_update = [m, next = std::move(hooks.on_update)](const absl::Status& s, int64_t bytes) {
      if (s.ok()) {
        m->UpdateAccepted();
        m->BytesReceived(bytes);
      } else {
        m->UpdateRefused(s.code());
      }
      if (next) next(s, bytes);
    };
    return hooks;
  }

  // Certificates that expire within cert_warn_days (the CA's, the server's, enrolled sites'):
  // one warning each when `warn` (at start, then daily), and the metrics (hourly). Sites revoked,
  // or enrolled before their expiry was recorded, are left out.
  void CheckCertificates(bool warn) {
    constexpr int64_t kDayMs = int64_t{24} * 3600 * 1000;
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    const int64_t window_ms = int64_t{options_.cert_warn_days} * kDayMs;
    auto report = [&](const std::string& who, int64_t not_after_ms, const std::string& fix) {
      if (!warn) return;
      const int64_t left_ms = not_after_ms - now_ms;
      const int64_t days = left_ms >= 0 ? left_ms / kDayMs : -((-left_ms + kDayMs - 1) / kDayMs);
      LogEvent(
          LogLevel::kWarn, left_ms <= 0 ? "certificate_expired" : "certificate_expiring",
          {{"certificate", who},
           {"expires", absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixMillis(not_after_ms),
                                        absl::UTCTimeZone())},
           {"days_left", absl::StrCat(days)},
           {"fix", fix}});
    };
    if (ca_not_after_ms_ > 0 && ca_not_after_ms_ - now_ms < window_ms) {
      report("CA", ca_not_after_ms_,
             "every certificate it issued stops verifying with it: make a new federation CA (fl "
             "certs --out NEWDIR), issue the server's and the sites' certificates from it, and "
             "enroll them");
    }
    if (server_cert_not_after_ms_ > 0 && server_cert_not_after_ms_ - now_ms < window_ms) {
      report("server", server_cert_not_after_ms_, "fl certs renew --server, then restart");
    }
    int expiring = 0;
    if (absl::StatusOr<std::vector<ClientRecord>> clients = store_->Clients(); clients.ok()) {
      for (const ClientRecord& c : *clients) {
        if (c.revoked_at_ms != 0 || c.cert_not_after_ms == 0 ||
            c.cert_not_after_ms - now_ms >= window_ms) {
          continue;
        }
        ++expiring;
        report(absl::StrCat("site ", c.name), c.cert_not_after_ms,
               "fl certs renew <site> (a site with its own key: sign its new request with fl "
               "certs sign --replace), then fl admin enroll the new certificate");
      }
    }
    metrics_->SetCertificates(static_cast<double>(server_cert_not_after_ms_) / 1000.0, expiring);
  }

  // The retention policy, after each commit (outside the engine's lock).
  void PruneCheckpoints() {
    if (options_.checkpoints_keep_last <= 0) return;
    absl::StatusOr<int64_t> removed =
        store_->PruneCheckpoints(options_.checkpoints_keep_last, options_.checkpoints_keep_every);
    if (!removed.ok()) {
      LogEvent(LogLevel::kWarn, "checkpoints_not_pruned", {{"error", removed.status().ToString()}});
    } else if (*removed > 0) {
      LogEvent(LogLevel::kInfo, "checkpoints_pruned",
               {{"removed", absl::StrCat(*removed)},
                {"keep_last", absl::StrCat(options_.checkpoints_keep_last)},
                {"keep_every", absl::StrCat(options_.checkpoints_keep_every)}});
    }
  }

  absl::Status StartMetricsEndpoint() {
    const std::string& address = options_.metrics_address;
    const size_t colon = address.rfind(':');
    int port = -1;
    if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics address '", address, "' is not host:port"));
    }
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    Store* store = store_.get();
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> http =
        HttpEndpoint::Start(host, port, metrics_.get(), [this, store]() -> HealthReport {
          HealthReport h;
          const std::shared_ptr<RoundEngine> engine = host_->CurrentEngine();
          if (engine == nullptr) {
            h.healthy = true;
            h.state = "idle";
            return h;
          }
          h.run_id = engine->run_id();
          h.round = engine->committed_round();
          h.clients_online = engine->clients_online();
          h.healthy = true;
          const RunActivity activity = engine->Activity();
          const RunStateView state = RunStateOf(activity, EngineNow(), options_.stall_after);
          h.state = state.name;
          h.seconds_since_progress = absl::ToInt64Seconds(state.idle);
          if (state.name == "stalled") {
            h.healthy = false;
            h.reason = absl::StrCat(
                "run ", h.run_id, " has made no progress for ",
                absl::FormatDuration(absl::Trunc(state.idle, absl::Seconds(1))), " (stall_after_s ",
                absl::ToInt64Seconds(options_.stall_after), "): ", h.clients_online, " of the ",
                activity.needed,
                " clients needed are online; see the server's waiting_for_clients lines");
          }
          absl::StatusOr<RunRecord> run = store->GetRun(h.run_id);
          if (!run.ok()) {
            h.healthy = false;
            h.reason = absl::StrCat("cannot read the run from the store: ", run.status().message());
          } else if (run->status == RunStatus::kFailed) {
            h.healthy = false;
            h.reason = absl::StrCat("run ", h.run_id, " failed: ", run->reason);
          } else if (activity.phase == RunActivity::Phase::kFailed) {
            // Failed, but the store could not record it (the store's failure may be the cause).
            h.healthy = false;
            h.reason = absl::StrCat("run ", h.run_id,
                                    " failed (not recorded in the store): ", activity.failure);
          }
          return h;
        });
    if (!http.ok()) return http.status();
    http_ = *std::move(http);
    LogEvent(LogLevel::kInfo, "metrics_listening",
             {{"address", absl::StrCat(host, ":", http_->port())}});
    return absl::OkStatus();
  }

  // The engine's time: its injected clock's (a simulation's) or the system's.
  absl::Time EngineNow() const {
    return (options_.clock != nullptr ? options_.clock : Clock::Real())->Now();
  }

  // The SQLite file is still the one the server opened. When its directory was removed (or the
  // file replaced) under the running server, the server writes on into a file nobody can see:
  // nothing it commits from then on would survive it. It stops instead, saying why
  // (fatal_error(), `fl server`'s exit), with the run recorded as aborted where it still can be.
  void CheckDataDirectory() {
    if (db_identity_.first == 0 && db_identity_.second == 0) return;
    struct stat st {};
    errno = 0;
    const bool found = ::stat(store_->db_path().c_str(), &st) == 0;
    // Gone (ENOENT, ENOTDIR) or another file: an error of another kind (EIO, ESTALE, EACCES on a
    // network file system) says nothing about the file and is only logged.
    const bool gone = found ? st.st_dev != db_identity_.first || st.st_ino != db_identity_.second
                            : errno == ENOENT || errno == ENOTDIR;
    if (!gone) {
      if (!found) {
        LogEvent(LogLevel::kWarn, "data_directory_unreadable",
                 {{"path", store_->db_path()}, {"error", std::strerror(errno)}});
      }
      data_dir_gone_checks_ = 0;
      return;
    }
    // Twice in a row (a second apart), so that a file being moved back is not taken for gone.
    if (++data_dir_gone_checks_ < 2) return;
    const absl::Status fatal = absl::FailedPreconditionError(absl::StrCat(
        "the SQLite file ", store_->db_path(),
        " was removed or replaced while the server ran (its data directory deleted or moved?); "
        "nothing the server committed from now on could be kept, so it stopped. Restore the "
        "data directory from a backup (fl admin backup) or start it afresh"));
    LogEvent(LogLevel::kError, "data_directory_gone", {{"error", std::string(fatal.message())}});
    {
      std::lock_guard<std::mutex> lock(fatal_mu_);
      fatal_ = fatal;
    }
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
  }

  void TickLoop() {
    std::unique_lock<std::mutex> lock(stop_mu_);
    absl::Time next_queue_check = absl::InfinitePast();
    absl::Time next_cert_check = absl::InfinitePast();
    absl::Time next_cert_warning = absl::InfinitePast();
    absl::Time next_store_check = absl::InfinitePast();
    while (!stopping_.load()) {
      lock.unlock();
      // A run that is over gives way to the oldest queued one (looked for a few times a second).
      if (const absl::Time now = absl::Now(); now >= next_queue_check) {
        host_->StartNextIfOver();
        next_queue_check = now + absl::Milliseconds(250);
      }
      if (const absl::Time now = absl::Now(); now >= next_cert_check) {
        const bool warn = now >= next_cert_warning;
        CheckCertificates(warn);
        next_cert_check = now + absl::Hours(1);
        if (warn) next_cert_warning = now + absl::Hours(24);
      }
      if (const absl::Time now = absl::Now(); now >= next_store_check) {
        CheckDataDirectory();
        next_store_check = now + absl::Seconds(1);
      }
      if (const std::shared_ptr<RoundEngine> engine = host_->CurrentEngine(); engine != nullptr) {
        engine->Tick();
        metrics_->SetClientsOnline(engine->clients_online());
        const RunStateView state =
            RunStateOf(engine->Activity(), EngineNow(), options_.stall_after);
        metrics_->SetRunState(state.value, absl::ToDoubleSeconds(state.idle));
      } else {
        metrics_->SetClientsOnline(0);
        metrics_->SetRunState(6, 0);
      }
      lock.lock();
      stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.tick_interval),
                        [this] { return stopping_.load(); });
    }
  }

  ServerOptions options_;
  int lock_fd_ = -1;  // flock'ed for the server's life
  std::unique_ptr<ServerMetrics> metrics_;
  std::shared_ptr<const secagg::IdentityVerifier> secagg_verifier_;  // null in plaintext
  std::unique_ptr<HttpEndpoint> http_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<RunHost> host_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<fl::v1::Control::Service> control_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  int64_t server_cert_not_after_ms_ = 0;  // 0: plaintext or unknown
  int64_t ca_not_after_ms_ = 0;
  std::thread ticker_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stopping_{false};
  std::once_flag shutdown_once_;
  std::pair<dev_t, ino_t> db_identity_{0, 0};  // of the SQLite file as opened
  int data_dir_gone_checks_ = 0;               // the ticker's thread only
  mutable std::mutex fatal_mu_;
  absl::Status fatal_;  // guarded by fatal_mu_
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, Model initial_model,
                                                      EngineHooks hooks) {
  if (absl::Status s = options.client_limits.Validate(); !s.ok()) return s;
  auto server = std::make_unique<ServerImpl>();
  if (absl::Status s = server->Init(std::move(options), std::move(initial_model), std::move(hooks));
      !s.ok()) {
    return s;
  }
  return server;
}

}  // namespace fl::server
