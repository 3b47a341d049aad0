#include "server/service/control_service.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fl/common/logging.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"

namespace fl::server {
namespace {

// Bounds on what an admin sends: a run file, a name, a reason.
constexpr size_t kMaxRunFile = 256 * 1024;
constexpr size_t kMaxName = 128;
constexpr size_t kMaxReason = 1024;

class ControlService final : public fl::v1::Control::Service {
 public:
  ControlService(ControlServiceOptions options, RunDirectory* runs, Store* store)
      : options_(std::move(options)), runs_(runs), store_(store) {}

  grpc::Status SubmitRun(grpc::ServerContext* ctx, const fl::v1::SubmitRunRequest* req,
                         fl::v1::RunInfo* reply) override {
    absl::StatusOr<CertificateIdentity> admin = Authorize(ctx, "SubmitRun");
    if (!admin.ok()) return ToGrpcStatus(admin.status());
    if (req->config_toml().size() > kMaxRunFile || req->name().size() > kMaxName) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("the run file is at most ", kMaxRunFile, " bytes and the name ", kMaxName)));
    }
    absl::StatusOr<QueuedRun> queued =
        runs_->Submit(req->config_toml(), req->name(), admin->common_name);
    if (!queued.ok()) return ToGrpcStatus(queued.status());
    Audit(*admin, "run_submitted",
          absl::StrCat("queued run ", queued->queue_id, " '", queued->name, "'"), 0);
    *reply = QueuedInfo(*queued);
    return grpc::Status::OK;
  }

  grpc::Status ListRuns(grpc::ServerContext* ctx, const fl::v1::ListRunsRequest*,
                        fl::v1::ListRunsReply* reply) override {
    absl::StatusOr<CertificateIdentity> admin = Authorize(ctx, "ListRuns");
    if (!admin.ok()) return ToGrpcStatus(admin.status());
    absl::StatusOr<std::vector<QueuedRun>> queue = runs_->queue().List();
    if (!queue.ok()) return ToGrpcStatus(queue.status());
    for (const QueuedRun& q : *queue) {
      if (q.status != QueuedRun::Status::kStarted) *reply->add_runs() = QueuedInfo(q);
    }
    absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
    if (!runs.ok()) return ToGrpcStatus(runs.status());
    std::vector<RunRecord> newest_first = *std::move(runs);
    std::sort(newest_first.begin(), newest_first.end(),
              [](const RunRecord& a, const RunRecord& b) { return a.run_id > b.run_id; });
    for (const RunRecord& r : newest_first) {
      absl::StatusOr<fl::v1::RunInfo> info = Info(r, /*with_config=*/false);
      if (!info.ok()) return ToGrpcStatus(info.status());
      *reply->add_runs() = *std::move(info);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetRun(grpc::ServerContext* ctx, const fl::v1::GetRunRequest* req,
                      fl::v1::RunInfo* reply) override {
    absl::StatusOr<CertificateIdentity> admin = Authorize(ctx, "GetRun");
    if (!admin.ok()) return ToGrpcStatus(admin.status());
    int64_t run_id = req->run_id();
    if (req->queue_id() != 0) {
      absl::StatusOr<QueuedRun> q = runs_->queue().Get(req->queue_id());
      if (!q.ok()) return ToGrpcStatus(q.status());
      if (q->run_id == 0) {  // still queued, cancelled, or starting
        *reply = QueuedInfo(*q);
        reply->set_config_toml(q->config_toml);
        return grpc::Status::OK;
      }
      run_id = q->run_id;  // it became a run: show the run
    }
    absl::StatusOr<RunRecord> run = FindRun(run_id);
    if (!run.ok()) return ToGrpcStatus(run.status());
    absl::StatusOr<fl::v1::RunInfo> info = Info(*run, /*with_config=*/true);
    if (!info.ok()) return ToGrpcStatus(info.status());
    *reply = *std::move(info);
    return grpc::Status::OK;
  }

  grpc::Status StopRun(grpc::ServerContext* ctx, const fl::v1::StopRunRequest* req,
                       fl::v1::RunInfo* reply) override {
    absl::StatusOr<CertificateIdentity> admin = Authorize(ctx, "StopRun");
    if (!admin.ok()) return ToGrpcStatus(admin.status());
    if (req->reason().size() > kMaxReason) {
      return ToGrpcStatus(
          absl::InvalidArgumentError(absl::StrCat("the reason is at most ", kMaxReason, " bytes")));
    }
    const std::string reason = absl::StrCat("stopped by ", admin->common_name,
                                            req->reason().empty() ? "" : ": ", req->reason());
    if (req->queue_id() != 0) {
      if (absl::Status s = runs_->queue().Cancel(req->queue_id(), reason); !s.ok()) {
        return ToGrpcStatus(s);
      }
      Audit(*admin, "run_cancelled", absl::StrCat("queued run ", req->queue_id(), ": ", reason), 0);
      absl::StatusOr<QueuedRun> q = runs_->queue().Get(req->queue_id());
      if (!q.ok()) return ToGrpcStatus(q.status());
      *reply = QueuedInfo(*q);
      return grpc::Status::OK;
    }
    std::shared_ptr<RoundEngine> engine = runs_->CurrentEngine();
    if (engine == nullptr || engine->run_id() != req->run_id()) {
      absl::StatusOr<RunRecord> run = FindRun(req->run_id());
      if (!run.ok()) return ToGrpcStatus(run.status());
      return ToGrpcStatus(absl::FailedPreconditionError(
          absl::StrCat("run ", run->run_id, " is not the server's active run (it is ",
                       ToString(run->status), "); fl run list shows which runs are")));
    }
    if (absl::Status s =
            engine->Stop(req->fail() ? RunStatus::kFailed : RunStatus::kFinished, reason);
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    LogEvent(
        LogLevel::kInfo, "run_stopped",
        {{"run", absl::StrCat(req->run_id())}, {"by", admin->common_name}, {"reason", reason}});
    absl::StatusOr<RunRecord> run = store_->GetRun(req->run_id());
    if (!run.ok()) return ToGrpcStatus(run.status());
    absl::StatusOr<fl::v1::RunInfo> info = Info(*run, false);
    if (!info.ok()) return ToGrpcStatus(info.status());
    *reply = *std::move(info);
    return grpc::Status::OK;
  }

  grpc::Status UpdateRun(grpc::ServerContext* ctx, const fl::v1::UpdateRunRequest* req,
                         fl::v1::UpdateRunReply* reply) override {
    absl::StatusOr<CertificateIdentity> admin = Authorize(ctx, "UpdateRun");
    if (!admin.ok()) return ToGrpcStatus(admin.status());
    const std::map<std::string, std::string> set(req->set().begin(), req->set().end());
    absl::StatusOr<std::vector<std::string>> changes =
        runs_->UpdateRun(req->run_id(), set, admin->common_name);
    if (!changes.ok()) return ToGrpcStatus(changes.status());
    for (const std::string& change : *changes) reply->add_changes(change);
    absl::StatusOr<RunRecord> run = store_->GetRun(req->run_id());
    if (!run.ok()) return ToGrpcStatus(run.status());
    absl::StatusOr<fl::v1::RunInfo> info = Info(*run, false);
    if (!info.ok()) return ToGrpcStatus(info.status());
    *reply->mutable_run() = *std::move(info);
    return grpc::Status::OK;
  }

  grpc::Status FollowRun(grpc::ServerContext* ctx, const fl::v1::FollowRunRequest* req,
                         grpc::ServerWriter<fl::v1::RunEvent>* writer) override {
    absl::StatusOr<CertificateIdentity> admin = Authorize(ctx, "FollowRun");
    if (!admin.ok()) return ToGrpcStatus(admin.status());
    int64_t run_id = req->run_id();
    if (req->queue_id() != 0) {
      absl::StatusOr<int64_t> started =
          WaitUntilStarted(ctx, req->queue_id(), req->follow(), writer);
      if (!started.ok()) return ToGrpcStatus(started.status());
      if (*started == 0) return grpc::Status::OK;  // the caller went away
      run_id = *started;
    } else if (run_id == 0) {
      std::shared_ptr<RoundEngine> engine = runs_->CurrentEngine();
      if (engine == nullptr) {
        return ToGrpcStatus(absl::FailedPreconditionError(
            "no run is active on this server; name one (fl run list shows them)"));
      }
      run_id = engine->run_id();
    }
    absl::StatusOr<RunRecord> run = FindRun(run_id);
    if (!run.ok()) return ToGrpcStatus(run.status());
    EventCursor cursor;
    fl::v1::RunEvent created;
    created.set_at_ms(run->created_at_ms);
    created.set_kind("run_started");
    created.set_text(absl::StrCat("run ", run_id, " '", run->name, "'"));
    if (!writer->Write(created)) return grpc::Status::OK;
    while (true) {
      absl::StatusOr<RunRecord> now = store_->GetRun(run_id);
      if (!now.ok()) return ToGrpcStatus(now.status());
      absl::StatusOr<std::vector<fl::v1::RunEvent>> events = NewEvents(run_id, cursor);
      if (!events.ok()) return ToGrpcStatus(events.status());
      for (const fl::v1::RunEvent& e : *events) {
        if (!writer->Write(e)) return grpc::Status::OK;  // the caller went away
      }
      if (now->status != RunStatus::kRunning) {
        fl::v1::RunEvent end;
        end.set_at_ms(now->ended_at_ms);
        end.set_kind(now->status == RunStatus::kFailed ? "run_failed" : "run_finished");
        end.set_text(now->reason.empty() ? "all rounds committed" : now->reason);
        writer->Write(end);
        return grpc::Status::OK;
      }
      if (!req->follow()) return grpc::Status::OK;
      const absl::Time next = absl::Now() + options_.follow_interval;
      while (absl::Now() < next) {
        if (ctx->IsCancelled()) return grpc::Status::OK;
        absl::SleepFor(std::min(absl::Milliseconds(50), options_.follow_interval));
      }
    }
  }

 private:
  // The run a queued entry became, waiting for it with `follow` (one "queued" event first); 0
  // when the caller went away. FAILED_PRECONDITION for an entry cancelled, or not started
  // without `follow`.
  absl::StatusOr<int64_t> WaitUntilStarted(grpc::ServerContext* ctx, int64_t queue_id, bool follow,
                                           grpc::ServerWriter<fl::v1::RunEvent>* writer) {
    bool told = false;
    while (true) {
      absl::StatusOr<QueuedRun> q = runs_->queue().Get(queue_id);
      if (!q.ok()) return q.status();
      switch (q->status) {
        case QueuedRun::Status::kStarted:
          return q->run_id;
        case QueuedRun::Status::kCancelled:
          return absl::FailedPreconditionError(
              absl::StrCat("q", queue_id, " was cancelled: ", q->reason));
        case QueuedRun::Status::kQueued:
          break;
      }
      if (!follow) {
        return absl::FailedPreconditionError(absl::StrCat(
            "q", queue_id, " has not started, so it has no events yet (--follow waits for it)"));
      }
      if (!told) {
        fl::v1::RunEvent e;
        e.set_at_ms(q->submitted_at_ms);
        e.set_kind("queued");
        e.set_text(absl::StrCat("q", queue_id, " '", q->name, "' waits for the runs before it"));
        if (!writer->Write(e)) return 0;
        told = true;
      }
      if (ctx->IsCancelled()) return 0;
      absl::SleepFor(options_.follow_interval);
    }
  }

  // What FollowRun has sent of a run: audit records up to an id, round attempts that ended.
  struct EventCursor {
    int64_t audit_id = 0;
    std::set<std::pair<int32_t, int32_t>> rounds;  // (round, attempt)
  };

  absl::StatusOr<std::vector<fl::v1::RunEvent>> NewEvents(int64_t run_id, EventCursor& cursor) {
    std::vector<fl::v1::RunEvent> events;
    absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run_id);
    if (!rounds.ok()) return rounds.status();
    for (const RoundRecord& r : *rounds) {
      if (r.status == RoundStatus::kRunning || !cursor.rounds.insert({r.round, r.attempt}).second) {
        continue;
      }
      fl::v1::RunEvent e;
      e.set_at_ms(r.ended_at_ms);
      e.set_round(r.round);
      e.set_kind(absl::StrCat("round_", ToString(r.status)));
      e.set_text(r.status == RoundStatus::kCommitted
                     ? absl::StrCat(r.num_reported, " of ", r.num_sampled, " sites reported; ",
                                    r.metrics_json)
                     : absl::StrCat("attempt ", r.attempt + 1, ": ", r.reason));
      events.push_back(std::move(e));
    }
    absl::StatusOr<std::vector<AuditRecord>> audit =
        store_->RunAuditLog(run_id, cursor.audit_id, 10000);
    if (!audit.ok()) return audit.status();
    for (const AuditRecord& a : *audit) {
      cursor.audit_id = std::max(cursor.audit_id, a.id);
      fl::v1::RunEvent e;
      e.set_at_ms(a.at_ms);
      e.set_round(a.round);
      e.set_kind(a.event);
      e.set_text(a.detail);
      e.set_client(a.client_id.substr(0, 16));
      events.push_back(std::move(e));
    }
    std::stable_sort(
        events.begin(), events.end(),
        [](const fl::v1::RunEvent& a, const fl::v1::RunEvent& b) { return a.at_ms() < b.at_ms(); });
    return events;
  }

  absl::StatusOr<RunRecord> FindRun(int64_t run_id) {
    absl::StatusOr<RunRecord> run = store_->GetRun(run_id);
    if (absl::IsNotFound(run.status())) {
      return absl::NotFoundError(
          absl::StrCat("no run ", run_id, " on this server; fl run list shows the runs"));
    }
    return run;
  }

  fl::v1::RunInfo QueuedInfo(const QueuedRun& q) {
    fl::v1::RunInfo info;
    info.set_queue_id(q.queue_id);
    info.set_run_id(q.run_id);
    info.set_name(q.name);
    info.set_status(std::string(QueuedRunStatusName(q.status)));
    info.set_reason(q.reason);
    info.set_created_at_ms(q.submitted_at_ms);
    info.set_submitted_by(q.submitted_by);
    return info;
  }

  absl::StatusOr<fl::v1::RunInfo> Info(const RunRecord& r, bool with_config) {
    fl::v1::RunInfo info;
    info.set_run_id(r.run_id);
    info.set_name(r.name);
    info.set_status(ToString(r.status));
    info.set_reason(r.reason);
    info.set_created_at_ms(r.created_at_ms);
    info.set_ended_at_ms(r.ended_at_ms);
    absl::StatusOr<EngineOptions> options = EngineOptions::FromJson(r.config_json);
    if (options.ok()) {
      info.set_num_rounds(options->num_rounds);
      if (options->strategy.has_value()) info.set_strategy(options->strategy->name);
    }
    absl::StatusOr<std::optional<RoundRecord>> last = store_->LastCommittedRound(r.run_id);
    if (!last.ok()) return last.status();
    if (last->has_value()) {
      info.set_committed_round((*last)->round);
      info.set_last_metrics_json((*last)->metrics_json);
    }
    absl::StatusOr<std::optional<QueuedRun>> queued = runs_->queue().ForRun(r.run_id);
    if (!queued.ok()) return queued.status();
    if (queued->has_value()) {
      info.set_queue_id((*queued)->queue_id);
      info.set_submitted_by((*queued)->submitted_by);
      if (with_config) info.set_config_toml((*queued)->config_toml);
    }
    std::shared_ptr<RoundEngine> engine = runs_->CurrentEngine();
    if (engine != nullptr && engine->run_id() == r.run_id && r.status == RunStatus::kRunning) {
      info.set_state(RunStateOf(engine->Activity(), runs_->Now(), runs_->stall_after()).name);
      info.set_committed_round(engine->committed_round());
    }
    return info;
  }

  // The caller's name when its certificate chains to the federation's CA and carries the admin
  // role. Every refusal is audited as control_refused.
  absl::StatusOr<CertificateIdentity> Authorize(grpc::ServerContext* ctx, const char* method) {
    if (options_.insecure_plaintext) {
      return Refuse("", method,
                    absl::FailedPreconditionError(
                        "the control API needs mutual TLS; this server runs in plaintext mode"));
    }
    std::vector<grpc::string_ref> certs = ctx->auth_context()->FindPropertyValues("x509_pem_cert");
    if (certs.empty()) {
      return Refuse("", method, absl::UnauthenticatedError("no client certificate was presented"));
    }
    const std::string pem(certs.front().data(), certs.front().size());
    absl::StatusOr<CertificateIdentity> identity = options_.verifier->Verify(pem);
    if (!identity.ok()) return Refuse("", method, identity.status());
    if (!identity->admin) {
      return Refuse(identity->fingerprint, method,
                    absl::PermissionDeniedError(absl::StrCat(
                        "certificate CN=", identity->common_name,
                        " is not an admin certificate; the control API takes only those (fl "
                        "certs --admin NAME --out <the federation's certs directory>)")));
    }
    absl::StatusOr<std::optional<int64_t>> revoked =
        store_->CertificateRevokedAt(identity->fingerprint);
    if (!revoked.ok()) return revoked.status();
    if (revoked->has_value()) {
      return Refuse(identity->fingerprint, method,
                    absl::PermissionDeniedError(absl::StrCat(
                        "admin certificate CN=", identity->common_name, " was revoked at ",
                        absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixMillis(**revoked),
                                         absl::UTCTimeZone()),
                        "; ask for a new one (fl certs renew NAME --admin)")));
    }
    return *std::move(identity);
  }

  absl::Status Refuse(const std::string& fingerprint, const char* method, absl::Status why) {
    LogEvent(LogLevel::kWarn, "control_refused",
             {{"method", method},
              {"client", fingerprint.substr(0, 16)},
              {"reason", std::string(why.message())}});
    AuditRecord record;
    record.at_ms = absl::ToUnixMillis(absl::Now());
    record.client_id = fingerprint;
    record.event = "control_refused";
    record.detail =
        absl::StrCat(method, ": ", absl::StatusCodeToString(why.code()), ": ", why.message());
    (void)store_->Audit(record);
    return why;
  }

  void Audit(const CertificateIdentity& admin, const std::string& event, const std::string& detail,
             int64_t run_id) {
    AuditRecord record;
    record.at_ms = absl::ToUnixMillis(absl::Now());
    record.client_id = admin.fingerprint;  // which certificate, should a name be reused
    record.event = event;
    record.detail = absl::StrCat(detail, " (by ", admin.common_name, ")");
    record.run_id = run_id;
    (void)store_->Audit(record);
  }

  const ControlServiceOptions options_;
  RunDirectory* runs_;
  Store* store_;
};

}  // namespace

std::unique_ptr<fl::v1::Control::Service> MakeControlService(ControlServiceOptions options,
                                                             RunDirectory* runs, Store* store) {
  return std::make_unique<ControlService>(std::move(options), runs, store);
}

}  // namespace fl::server
