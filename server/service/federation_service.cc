#include "server/service/federation_service.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"
#include "server/service/input_limits.h"
#include "server/service/model_download.h"
#include "server/service/secagg_serde.h"
#include "server/service/service_core.h"
#include "server/service/update_upload.h"

namespace fl::server {
namespace {

// What a site says about itself at join, bounded: INVALID_ARGUMENT naming what is too large.
absl::StatusOr<SiteProfile> SiteProfileFromProto(const fl::v1::JoinRequest& req) {
  constexpr int kMaxColumns = 65536;
  constexpr size_t kMaxColumnName = 256;
  SiteProfile profile;
  if (req.has_model_spec()) {
    absl::StatusOr<ModelSpec> spec = FromProto(req.model_spec());
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the join's model spec is malformed: ", spec.status().message()));
    }
    profile.model_spec = *std::move(spec);
  }
  if (req.feature_columns_size() > kMaxColumns) {
    return absl::InvalidArgumentError(absl::StrCat("the join names ", req.feature_columns_size(),
                                                   " feature columns; at most ", kMaxColumns));
  }
  for (const std::string& column : req.feature_columns()) {
    if (column.size() > kMaxColumnName) {
      return absl::InvalidArgumentError(absl::StrCat("a feature column name of ", column.size(),
                                                     " bytes; at most ", kMaxColumnName));
    }
    profile.feature_columns.push_back(column);
  }
  // The server recomputes the hash: a site cannot fix the run's columns with a hash that is not
  // that of the names it shows, nor send one without the other.
  if (req.feature_schema_sha256().empty() != profile.feature_columns.empty()) {
    return absl::InvalidArgumentError(
        "the join sends feature columns without their SHA-256, or a SHA-256 without columns");
  }
  if (!req.feature_schema_sha256().empty() &&
      req.feature_schema_sha256() != NameListSha256(profile.feature_columns)) {
    return absl::InvalidArgumentError(
        "feature_schema_sha256 is not the SHA-256 of the feature columns the join names");
  }
  profile.feature_schema_sha256 = req.feature_schema_sha256();
  return profile;
}

// The task the engine hands a client, as the client reads it.
void TaskToProto(const Task& task, fl::v1::Task* out) {
  out->set_run_id(task.run_id);
  out->set_round(task.round);
  out->set_task_id(task.task_id);
  out->set_message(task.message);
  out->set_kind(ToProtoKind(task.kind));
  if (task.feature_statistics != nullptr) {
    fl::v1::FeatureStatistics* stats = out->mutable_feature_statistics();
    stats->mutable_mean()->Add(task.feature_statistics->mean.begin(),
                               task.feature_statistics->mean.end());
    stats->mutable_stddev()->Add(task.feature_statistics->stddev.begin(),
                                 task.feature_statistics->stddev.end());
    stats->set_count(task.feature_statistics->count);
  }
  switch (task.kind) {
    case Task::Kind::kWait:
    case Task::Kind::kStatistics:
      break;
    case Task::Kind::kDone:
      out->set_run_status(task.run_status == RunStatus::kFailed ? fl::v1::Task::RUN_FAILED
                                                                : fl::v1::Task::RUN_FINISHED);
      break;
    case Task::Kind::kEvaluate: {
      fl::v1::FitTask* model = out->mutable_fit();
      ToProto(task.spec, model->mutable_model_spec());
      model->set_model_bytes(task.model_bytes);
      model->set_model_sha256(task.model_sha256);
      break;
    }
    case Task::Kind::kFit:
    case Task::Kind::kSecAggMaskedInput: {
      fl::v1::FitTask* fit = out->mutable_fit();
      fit->set_local_epochs(task.fit.local_epochs);
      fit->set_batch_size(task.fit.batch_size);
      fit->set_learning_rate(task.fit.learning_rate);
      fit->set_model_name(task.fit.model_name);
      fit->set_differential_privacy(task.fit.differential_privacy);
      fit->set_update_encoding(ToProto(task.update_encoding));
      fit->mutable_config()->insert(task.fit.extra.begin(), task.fit.extra.end());
      (*fit->mutable_config())[std::string(kScaffoldCommittedRoundKey)] =
          task.client_committed_round;
      ToProto(task.spec, fit->mutable_model_spec());
      fit->set_model_bytes(task.model_bytes);
      fit->set_model_sha256(task.model_sha256);
      if (task.kind == Task::Kind::kSecAggMaskedInput) {
        SecAggTaskToProto(task.secagg, out->mutable_secagg());
      }
      break;
    }
    case Task::Kind::kSecAggAdvertise:
    case Task::Kind::kSecAggShare:
    case Task::Kind::kSecAggConsistency:
    case Task::Kind::kSecAggUnmask:
      SecAggTaskToProto(task.secagg, out->mutable_secagg());
      break;
  }
}

// The callback API for every method: a call waits without a thread (a parked poll, a stream
// between messages), and its work runs on the service's own threads (work_pool.h).
using CallbackBase =
    fl::v1::Federation::WithCallbackMethod_Join<fl::v1::Federation::WithCallbackMethod_PollTask<
        fl::v1::Federation::WithRawCallbackMethod_DownloadModel<
            fl::v1::Federation::WithCallbackMethod_SubmitUpdate<
                fl::v1::Federation::WithCallbackMethod_Heartbeat<
                    fl::v1::Federation::WithCallbackMethod_SubmitEvaluation<
                        fl::v1::Federation::WithCallbackMethod_SubmitSecAgg<
                            fl::v1::Federation::Service>>>>>>>;

class FederationService final : public CallbackBase {
 public:
  FederationService(ServiceOptions options, EngineSource engines, Store* store)
      : core_(std::move(options), std::move(engines), store) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const fl::v1::JoinRequest* req,
                                 fl::v1::JoinReply* reply) override {
    return Unary(ctx, [=, this] { return DoJoin(ctx, req, reply); });
  }

  grpc::ServerUnaryReactor* PollTask(grpc::CallbackServerContext* ctx,
                                     const fl::v1::PollRequest* req, fl::v1::Task* reply) override {
    auto call = std::make_shared<PollCall>();
    call->ctx = ctx;
    call->req = req;
    call->reply = reply;
    call->reactor = ctx->DefaultReactor();
    if (!core_.pool.Post([this, call] { BeginPoll(call); })) call->reactor->Finish(ServiceBusy());
    return call->reactor;
  }

  // The global model of the task's round, streamed from the chunk set shared by every download
  // of that model (model_chunks.h): no per-client copy of the payload. A raw method, so that the
  // pre-serialized chunks go out as they are; the client's typed reader is unchanged.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* DownloadModel(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) override {
    return StartModelDownload(&core_, ctx, request);
  }

  grpc::ServerReadReactor<fl::v1::UpdatePart>* SubmitUpdate(grpc::CallbackServerContext* ctx,
                                                            fl::v1::SubmitReply* reply) override {
    return StartUpdateUpload(&core_, ctx, reply);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const fl::v1::HeartbeatRequest* req,
                                      fl::v1::HeartbeatReply* reply) override {
    return Unary(ctx, [=, this] { return DoHeartbeat(ctx, req, reply); });
  }

  grpc::ServerUnaryReactor* SubmitEvaluation(grpc::CallbackServerContext* ctx,
                                             const fl::v1::EvaluationResult* req,
                                             fl::v1::SubmitReply* reply) override {
    return Unary(ctx, [=, this] { return DoSubmitEvaluation(ctx, req, reply); });
  }

  grpc::ServerUnaryReactor* SubmitSecAgg(grpc::CallbackServerContext* ctx,
                                         const fl::v1::SecAggSubmission* req,
                                         fl::v1::SubmitReply* reply) override {
    return Unary(ctx, [=, this] { return DoSubmitSecAgg(ctx, req, reply); });
  }

 private:
  // Runs `handle` on a service thread and finishes the call with the status it returns; a call
  // its client gave up on while it waited for a thread is not run.
  template <typename Handle>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Handle handle) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!core_.pool.Post([ctx, reactor, handle = std::move(handle)] {
          if (ctx->IsCancelled()) {
            reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
            return;
          }
          reactor->Finish(handle());
        })) {
      reactor->Finish(ServiceBusy());
    }
    return reactor;
  }

  grpc::Status DoJoin(grpc::CallbackServerContext* ctx, const fl::v1::JoinRequest* req,
                      fl::v1::JoinReply* reply) {
    absl::StatusOr<ServiceCore::Caller> entered = core_.Enter(ctx, /*upload=*/false);
    if (!entered.ok()) return ToGrpcStatus(entered.status());
    ServiceCore::Caller& caller = *entered;
    if (caller.engine == nullptr) {
      // Between runs of a server that stays up: the client asks again after its next-run poll.
      reply->set_client_id(caller.id);
      reply->set_run_id(0);
      return grpc::Status::OK;
    }
    if (absl::Status s = CheckJoinInput(*req, core_.options.limits); !s.ok()) {
      caller.engine->AuditRefusal(caller.id, "join_refused", s);
      return ToGrpcStatus(s);
    }
    absl::StatusOr<SiteProfile> profile = SiteProfileFromProto(*req);
    if (!profile.ok()) {
      caller.engine->AuditRefusal(caller.id, "join_refused", profile.status());
      return ToGrpcStatus(profile.status());
    }
    if (absl::Status s = caller.engine->Admit(caller.id, *profile, req->dry_run()); !s.ok()) {
      return ToGrpcStatus(s);
    }
    if (req->dry_run()) {
      // Admission only (`fl client --preflight`): Identify checked the certificate and the
      // enrollment; the engine does not hear of this client. Checks of the request belong above.
      reply->set_client_id(caller.id);
      reply->set_run_id(caller.engine->run_id());
      return grpc::Status::OK;
    }
    absl::StatusOr<int64_t> run = caller.engine->Join(caller.id, req->client_name());
    if (!run.ok()) return ToGrpcStatus(run.status());
    reply->set_client_id(caller.id);
    reply->set_run_id(*run);
    return grpc::Status::OK;
  }

  // A long poll: the caller, counted for as long as the poll waits; parked (poll_parking.h)
  // between looks at the engine.
  struct PollCall {
    grpc::CallbackServerContext* ctx = nullptr;
    const fl::v1::PollRequest* req = nullptr;
    fl::v1::Task* reply = nullptr;
    grpc::ServerUnaryReactor* reactor = nullptr;
    ServiceCore::Caller caller;
    absl::Time deadline;
  };

  void BeginPoll(const std::shared_ptr<PollCall>& call) {
    absl::StatusOr<ServiceCore::Caller> caller = core_.Enter(call->ctx, /*upload=*/false);
    if (!caller.ok()) {
      call->reactor->Finish(ToGrpcStatus(caller.status()));
      return;
    }
    call->caller = *std::move(caller);
    const std::shared_ptr<RoundEngine>& engine = call->caller.engine;
    // A client of a run that is over (the server went on to the next) or of no run hears DONE
    // for it, and joins again. A poll for run 0 came from a client that joined between runs: it
    // joins the new one first (admission checks its model and columns).
    if (engine == nullptr || call->req->run_id() != engine->run_id()) {
      grpc::Status status = RunOver(call->req->run_id(), call->reply);
      call->caller.lease.Release();
      call->reactor->Finish(std::move(status));
      return;
    }
    const absl::Duration wait = std::min(absl::Milliseconds(std::max(0, call->req->wait_ms())),
                                         core_.options.max_poll_wait);
    call->deadline = absl::Now() + wait;
    ContinuePoll(call);
  }

  // Looks for a task; parks the poll while there is none and it may still wait.
  void ContinuePoll(const std::shared_ptr<PollCall>& call) {
    const std::shared_ptr<RoundEngine>& engine = call->caller.engine;
    const uint64_t seen = engine->version();
    const Task task = engine->Poll(call->caller.id);
    if (task.kind == Task::Kind::kWait && absl::Now() < call->deadline &&
        !call->ctx->IsCancelled()) {
      core_.parking.Park(engine, call->caller.id, seen, call->deadline, call->ctx,
                         [this, call] { ContinuePoll(call); });
      return;
    }
    TaskToProto(task, call->reply);
    call->caller.lease.Release();
    call->reactor->Finish(grpc::Status::OK);
  }

  grpc::Status DoHeartbeat(grpc::CallbackServerContext* ctx, const fl::v1::HeartbeatRequest* req,
                           fl::v1::HeartbeatReply* reply) {
    absl::StatusOr<ServiceCore::Caller> entered = core_.Enter(ctx, /*upload=*/false);
    if (!entered.ok()) return ToGrpcStatus(entered.status());
    ServiceCore::Caller& caller = *entered;
    if (caller.engine == nullptr) return NoRun();
    if (absl::Status s = CheckName(req->task_id(), "task_id", core_.options.limits); !s.ok()) {
      caller.engine->AuditRefusal(caller.id, "heartbeat_refused", s);
      return ToGrpcStatus(s);
    }
    const bool open = caller.engine->Heartbeat(caller.id, req->round(), req->task_id());
    reply->set_task_open(open);
    if (!open) reply->set_message("the task's round is closed, or this client was dropped from it");
    return grpc::Status::OK;
  }

  grpc::Status DoSubmitEvaluation(grpc::CallbackServerContext* ctx,
                                  const fl::v1::EvaluationResult* req, fl::v1::SubmitReply* reply) {
    absl::StatusOr<ServiceCore::Caller> entered = core_.Enter(ctx, /*upload=*/false);
    if (!entered.ok()) return ToGrpcStatus(entered.status());
    ServiceCore::Caller& caller = *entered;
    if (caller.engine == nullptr) return NoRun();
    absl::Status bounded = CheckName(req->task_id(), "task_id", core_.options.limits);
    if (bounded.ok()) {
      bounded = CheckMetrics(req->metrics(), "the evaluation's", core_.options.limits);
    }
    if (!bounded.ok()) {
      caller.engine->AuditRefusal(caller.id, "evaluation_refused", bounded);
      return ToGrpcStatus(bounded);
    }
    EvaluationReport report;
    report.run_id = req->run_id();
    report.round = req->round();
    report.task_id = req->task_id();
    report.num_examples = req->num_examples();
    report.loss = req->loss();
    report.metrics.insert(req->metrics().begin(), req->metrics().end());
    report.error = CutText(req->error(), core_.options.limits);
    report.share_site_result = req->share_site_result();
    if (req->has_feature_sums()) {
      // Bounded by the engine (CheckFeatureSums); the gRPC message limit bounds the copy.
      const fl::v1::FeatureSums& f = req->feature_sums();
      report.feature_sums.count = f.count();
      report.feature_sums.sum.assign(f.sum().begin(), f.sum().end());
      report.feature_sums.sum_squares.assign(f.sum_squares().begin(), f.sum_squares().end());
      report.num_examples = f.count();
    }
    absl::Status s = caller.engine->SubmitEvaluation(caller.id, report);
    if (!s.ok()) return ToGrpcStatus(s);
    reply->set_accepted(report.error.empty());
    reply->set_message(report.error.empty() ? "evaluation recorded" : "decline recorded");
    return grpc::Status::OK;
  }

  grpc::Status DoSubmitSecAgg(grpc::CallbackServerContext* ctx, const fl::v1::SecAggSubmission* req,
                              fl::v1::SubmitReply* reply) {
    absl::StatusOr<ServiceCore::Caller> entered = core_.Enter(ctx, /*upload=*/false);
    if (!entered.ok()) return ToGrpcStatus(entered.status());
    ServiceCore::Caller& caller = *entered;
    if (caller.engine == nullptr) return NoRun();
    if (absl::Status s = CheckName(req->task_id(), "task_id", core_.options.limits); !s.ok()) {
      caller.engine->AuditRefusal(caller.id, "secagg_refused", s);
      return ToGrpcStatus(s);
    }
    absl::StatusOr<SecAggMessage> message = SecAggMessageFromProto(*req);
    if (!message.ok()) {
      caller.engine->AuditRefusal(caller.id, "secagg_refused", message.status());
      return ToGrpcStatus(message.status());
    }
    message->decline_reason = CutText(message->decline_reason, core_.options.limits);
    absl::Status s = caller.engine->SubmitSecAgg(caller.id, *message);
    if (!s.ok()) return ToGrpcStatus(s);
    const bool declined = !message->decline_reason.empty();
    reply->set_accepted(!declined);
    reply->set_message(declined ? absl::StrCat("decline of task '", req->task_id(), "' recorded")
                                : absl::StrCat("stage ", fl::v1::Task::Kind_Name(req->stage()),
                                               " of round ", req->round(), " received"));
    return grpc::Status::OK;
  }

  grpc::Status RunOver(int64_t run_id, fl::v1::Task* reply) {
    reply->set_run_id(run_id);
    reply->set_kind(fl::v1::Task::DONE);
    reply->set_run_status(fl::v1::Task::RUN_FINISHED);
    reply->set_message("no run is active on this server; it waits for the next one");
    if (run_id == 0) return grpc::Status::OK;
    absl::StatusOr<RunRecord> run = core_.store->GetRun(run_id);
    if (!run.ok()) {
      reply->set_message(absl::StrCat("run ", run_id, " is not this server's current run"));
      return grpc::Status::OK;
    }
    if (run->status == RunStatus::kFailed) reply->set_run_status(fl::v1::Task::RUN_FAILED);
    reply->set_message(absl::StrCat("run ", run_id, " is over (", ToString(run->status),
                                    run->reason.empty() ? "" : ": ", run->reason, ")"));
    return grpc::Status::OK;
  }

  static grpc::Status NoRun() { return ToGrpcStatus(NoRunActive()); }

  ServiceCore core_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeFederationService(ServiceOptions options, EngineSource engines,
                                                     Store* store) {
  return std::make_unique<FederationService>(std::move(options), std::move(engines), store);
}

}  // namespace fl::server
