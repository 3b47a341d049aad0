#include "server/service/federation_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/common/crypto.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"
#include "server/service/input_limits.h"
#include "server/service/model_chunks.h"
#include "server/service/secagg_serde.h"
#include "server/store/checkpoint_file.h"

namespace fl::server {
namespace {

// One DownloadModel call: writes the chunks of a shared set one at a time (the next only when
// the previous write is done, so gRPC's flow control holds at most one chunk per client), or
// finishes at once with a refusal. gRPC hands the reactor back in OnDone, where it is destroyed.
class ModelDownload final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  static ModelDownload* Refuse(grpc::Status status) {
    auto download = std::make_unique<ModelDownload>(nullptr);
    download->Finish(std::move(status));
    return download.release();
  }
  static ModelDownload* Stream(std::shared_ptr<const ModelChunks> chunks) {
    auto download = std::make_unique<ModelDownload>(std::move(chunks));
    download->WriteNext();
    return download.release();
  }

  explicit ModelDownload(std::shared_ptr<const ModelChunks> chunks) : chunks_(std::move(chunks)) {}

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away during the download"));
      return;
    }
    ++next_;
    WriteNext();
  }

  void OnDone() override { std::unique_ptr<ModelDownload> self(this); }

 private:
  void WriteNext() {
    const std::vector<grpc::ByteBuffer>& chunks = chunks_->chunks();
    if (next_ == chunks.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    // The set outlives the write (this reactor holds it); gRPC only references the slices.
    StartWrite(&chunks[next_]);
  }

  const std::shared_ptr<const ModelChunks> chunks_;
  size_t next_ = 0;
};

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

class FederationService final
    : public fl::v1::Federation::WithRawCallbackMethod_DownloadModel<fl::v1::Federation::Service> {
 public:
  FederationService(ServiceOptions options, EngineSource engines, Store* store)
      : options_(std::move(options)), engines_(std::move(engines)), store_(store) {}

  grpc::Status Join(grpc::ServerContext* ctx, const fl::v1::JoinRequest* req,
                    fl::v1::JoinReply* reply) override {
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ToGrpcStatus(id.status());
    if (engine == nullptr) {
      // Between runs of a server that stays up: the client asks again after its next-run poll.
      reply->set_client_id(*id);
      reply->set_run_id(0);
      return grpc::Status::OK;
    }
    if (absl::Status s = CheckJoinInput(*req, options_.limits); !s.ok()) {
      engine->AuditRefusal(*id, "join_refused", s);
      return ToGrpcStatus(s);
    }
    absl::StatusOr<SiteProfile> profile = SiteProfileFromProto(*req);
    if (!profile.ok()) {
      engine->AuditRefusal(*id, "join_refused", profile.status());
      return ToGrpcStatus(profile.status());
    }
    if (absl::Status s = engine->Admit(*id, *profile, req->dry_run()); !s.ok()) {
      return ToGrpcStatus(s);
    }
    if (req->dry_run()) {
      // Admission only (`fl client --preflight`): Identify checked the certificate and the
      // enrollment; the engine does not hear of this client. Checks of the request belong above.
      reply->set_client_id(*id);
      reply->set_run_id(engine->run_id());
      return grpc::Status::OK;
    }
    absl::StatusOr<int64_t> run = engine->Join(*id, req->client_name());
    if (!run.ok()) return ToGrpcStatus(run.status());
    reply->set_client_id(*id);
    reply->set_run_id(*run);
    return grpc::Status::OK;
  }

  grpc::Status PollTask(grpc::ServerContext* ctx, const fl::v1::PollRequest* req,
                        fl::v1::Task* reply) override {
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ToGrpcStatus(id.status());
    // A client of a run that is over (the server went on to the next) or of no run hears DONE
    // for it, and joins again.
    // A poll for run 0 came from a client that joined between runs: it joins the new one first
    // (admission checks its model and columns).
    if (engine == nullptr || req->run_id() != engine->run_id()) {
      return RunOver(req->run_id(), reply);
    }
    absl::Duration wait =
        std::min(absl::Milliseconds(std::max(0, req->wait_ms())), options_.max_poll_wait);
    const absl::Time deadline = absl::Now() + wait;
    Task task;
    while (true) {
      uint64_t seen = engine->version();
      task = engine->Poll(*id);
      absl::Duration left = deadline - absl::Now();
      if (task.kind != Task::Kind::kWait || left <= absl::ZeroDuration() || ctx->IsCancelled()) {
        break;
      }
      engine->WaitForChange(seen, std::min(left, absl::Seconds(1)));
    }
    reply->set_run_id(task.run_id);
    reply->set_round(task.round);
    reply->set_task_id(task.task_id);
    reply->set_message(task.message);
    reply->set_kind(ToProtoKind(task.kind));
    if (task.feature_statistics != nullptr) {
      fl::v1::FeatureStatistics* stats = reply->mutable_feature_statistics();
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
        reply->set_run_status(task.run_status == RunStatus::kFailed ? fl::v1::Task::RUN_FAILED
                                                                    : fl::v1::Task::RUN_FINISHED);
        break;
      case Task::Kind::kEvaluate: {
        fl::v1::FitTask* model = reply->mutable_fit();
        ToProto(task.spec, model->mutable_model_spec());
        model->set_model_bytes(task.model_bytes);
        model->set_model_sha256(task.model_sha256);
        break;
      }
      case Task::Kind::kFit:
      case Task::Kind::kSecAggMaskedInput: {
        fl::v1::FitTask* fit = reply->mutable_fit();
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
          SecAggTaskToProto(task.secagg, reply->mutable_secagg());
        }
        break;
      }
      case Task::Kind::kSecAggAdvertise:
      case Task::Kind::kSecAggShare:
      case Task::Kind::kSecAggConsistency:
      case Task::Kind::kSecAggUnmask:
        SecAggTaskToProto(task.secagg, reply->mutable_secagg());
        break;
    }
    return grpc::Status::OK;
  }

  // The global model of the task's round, streamed from the chunk set shared by every download
  // of that model (model_chunks.h): no per-client copy of the payload. A raw callback method, so
  // that the pre-serialized chunks go out as they are; the client's typed reader is unchanged.
  // Identify (a store lookup) and ModelForTask (the engine's lock) run on gRPC's callback thread,
  // as they ran on a sync thread before; both are short.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* DownloadModel(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) override {
    fl::v1::DownloadRequest req;
    grpc::ByteBuffer body(*request);  // Deserialize consumes its buffer; this copy only refs it
    if (grpc::Status parsed =
            grpc::SerializationTraits<fl::v1::DownloadRequest>::Deserialize(&body, &req);
        !parsed.ok()) {
      return ModelDownload::Refuse(std::move(parsed));
    }
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ModelDownload::Refuse(ToGrpcStatus(id.status()));
    if (engine == nullptr) return ModelDownload::Refuse(NoRun());
    if (absl::Status s = CheckName(req.task_id(), "task_id", options_.limits); !s.ok()) {
      engine->AuditRefusal(*id, "download_refused", s);
      return ModelDownload::Refuse(ToGrpcStatus(s));
    }
    absl::StatusOr<GlobalModel> global =
        engine->ModelForTask(*id, req.run_id(), req.round(), req.task_id());
    if (global.ok() && global->model == nullptr) {
      global = absl::InternalError("the engine has no global model for this task");
    }
    if (!global.ok()) {
      engine->AuditRefusal(*id, "download_refused", global.status());
      return ModelDownload::Refuse(ToGrpcStatus(global.status()));
    }
    return ModelDownload::Stream(chunk_cache_.Get(global->model, global->sha256));
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const fl::v1::HeartbeatRequest* req,
                         fl::v1::HeartbeatReply* reply) override {
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ToGrpcStatus(id.status());
    if (engine == nullptr) return NoRun();
    if (absl::Status s = CheckName(req->task_id(), "task_id", options_.limits); !s.ok()) {
      engine->AuditRefusal(*id, "heartbeat_refused", s);
      return ToGrpcStatus(s);
    }
    const bool open = engine->Heartbeat(*id, req->round(), req->task_id());
    reply->set_task_open(open);
    if (!open) reply->set_message("the task's round is closed, or this client was dropped from it");
    return grpc::Status::OK;
  }

  grpc::Status SubmitEvaluation(grpc::ServerContext* ctx, const fl::v1::EvaluationResult* req,
                                fl::v1::SubmitReply* reply) override {
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ToGrpcStatus(id.status());
    if (engine == nullptr) return NoRun();
    absl::Status bounded = CheckName(req->task_id(), "task_id", options_.limits);
    if (bounded.ok()) bounded = CheckMetrics(req->metrics(), "the evaluation's", options_.limits);
    if (!bounded.ok()) {
      engine->AuditRefusal(*id, "evaluation_refused", bounded);
      return ToGrpcStatus(bounded);
    }
    EvaluationReport report;
    report.run_id = req->run_id();
    report.round = req->round();
    report.task_id = req->task_id();
    report.num_examples = req->num_examples();
    report.loss = req->loss();
    report.metrics.insert(req->metrics().begin(), req->metrics().end());
    report.error = CutText(req->error(), options_.limits);
    report.share_site_result = req->share_site_result();
    if (req->has_feature_sums()) {
      // Bounded by the engine (CheckFeatureSums); the gRPC message limit bounds the copy.
      const fl::v1::FeatureSums& f = req->feature_sums();
      report.feature_sums.count = f.count();
      report.feature_sums.sum.assign(f.sum().begin(), f.sum().end());
      report.feature_sums.sum_squares.assign(f.sum_squares().begin(), f.sum_squares().end());
      report.num_examples = f.count();
    }
    absl::Status s = engine->SubmitEvaluation(*id, report);
    if (!s.ok()) return ToGrpcStatus(s);
    reply->set_accepted(report.error.empty());
    reply->set_message(report.error.empty() ? "evaluation recorded" : "decline recorded");
    return grpc::Status::OK;
  }

  grpc::Status SubmitSecAgg(grpc::ServerContext* ctx, const fl::v1::SecAggSubmission* req,
                            fl::v1::SubmitReply* reply) override {
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ToGrpcStatus(id.status());
    if (engine == nullptr) return NoRun();
    if (absl::Status s = CheckName(req->task_id(), "task_id", options_.limits); !s.ok()) {
      engine->AuditRefusal(*id, "secagg_refused", s);
      return ToGrpcStatus(s);
    }
    absl::StatusOr<SecAggMessage> message = SecAggMessageFromProto(*req);
    if (!message.ok()) {
      engine->AuditRefusal(*id, "secagg_refused", message.status());
      return ToGrpcStatus(message.status());
    }
    message->decline_reason = CutText(message->decline_reason, options_.limits);
    absl::Status s = engine->SubmitSecAgg(*id, *message);
    if (!s.ok()) return ToGrpcStatus(s);
    const bool declined = !message->decline_reason.empty();
    reply->set_accepted(!declined);
    reply->set_message(declined ? absl::StrCat("decline of task '", req->task_id(), "' recorded")
                                : absl::StrCat("stage ", fl::v1::Task::Kind_Name(req->stage()),
                                               " of round ", req->round(), " received"));
    return grpc::Status::OK;
  }

  grpc::Status SubmitUpdate(grpc::ServerContext* ctx,
                            grpc::ServerReader<fl::v1::UpdatePart>* reader,
                            fl::v1::SubmitReply* reply) override {
    const std::shared_ptr<RoundEngine> engine = engines_();
    absl::StatusOr<std::string> id = Identify(ctx, engine.get());
    if (!id.ok()) return ToGrpcStatus(id.status());
    if (engine == nullptr) return NoRun();
    fl::v1::UpdatePart part;
    if (!reader->Read(&part) || !part.has_metadata()) {
      absl::Status s =
          absl::InvalidArgumentError("the first message of an update must carry its metadata");
      engine->AuditRefusal(*id, "update_refused", s);
      return ToGrpcStatus(s);
    }
    const fl::v1::UpdateMetadata& m = part.metadata();
    absl::Status bounded = CheckName(m.task_id(), "task_id", options_.limits);
    if (bounded.ok()) bounded = CheckMetrics(m.metrics(), "the update's", options_.limits);
    if (bounded.ok() && m.has_model_spec()) {
      bounded = CheckSpecInput(m.model_spec(), "the update's");
    }
    if (!bounded.ok()) {
      engine->AuditRefusal(*id, "update_refused", bounded);
      return ToGrpcStatus(bounded);
    }
    UpdateMeta meta;
    meta.run_id = m.run_id();
    meta.round = m.round();
    meta.task_id = m.task_id();
    meta.num_examples = m.num_examples();
    meta.metrics.insert(m.metrics().begin(), m.metrics().end());
    meta.payload_bytes = m.payload_bytes();
    if (m.has_model_spec()) {
      absl::StatusOr<ModelSpec> spec = FromProto(m.model_spec());
      if (!spec.ok()) {
        absl::Status s = absl::InvalidArgumentError(
            absl::StrCat("update's model spec is invalid: ", spec.status().message()));
        engine->AuditRefusal(*id, "update_refused", s);
        return ToGrpcStatus(s);
      }
      meta.spec = *std::move(spec);
    }
    if (!m.decline_reason().empty()) {
      absl::Status s = engine->Decline(*id, meta, CutText(m.decline_reason(), options_.limits));
      if (!s.ok()) return ToGrpcStatus(s);
      reply->set_accepted(false);
      reply->set_message(absl::StrCat("decline of task '", meta.task_id, "' recorded"));
      return grpc::Status::OK;
    }
    // Which encoding a round takes is the engine's decision (the run's FLOAT32, FLOAT16 or INT8,
    // or masked words in a secure round); unknown ones stop here.
    if (std::optional<PayloadEncoding> e = FromProto(m.encoding()); e.has_value()) {
      meta.encoding = *e;
    } else {
      absl::Status s = absl::InvalidArgumentError(absl::StrCat(
          "update encoding ", fl::v1::UpdateMetadata::Encoding_Name(m.encoding()),
          " is not supported; send FLOAT32, FLOAT16, INT8, MASKED_UINT32 or MASKED_UINT64"));
      engine->AuditRefusal(*id, "update_refused", s);
      return ToGrpcStatus(s);
    }
    absl::StatusOr<std::unique_ptr<Upload>> upload = engine->BeginUpload(*id, meta);
    if (!upload.ok()) return ToGrpcStatus(upload.status());
    while (reader->Read(&part)) {
      switch (part.part_case()) {
        case fl::v1::UpdatePart::kChunk: {
          absl::Status s = (*upload)->AddChunk(part.chunk().offset(), part.chunk().data());
          if (!s.ok()) return ToGrpcStatus(s);
          break;
        }
        case fl::v1::UpdatePart::kSha256: {
          if (absl::Status bad = CheckSha256Input(part.sha256()); !bad.ok()) {
            return ToGrpcStatus((*upload)->Refuse(bad));
          }
          absl::Status s = (*upload)->Finish(part.sha256());
          if (!s.ok()) return ToGrpcStatus(s);
          reply->set_accepted(true);
          reply->set_message(absl::StrCat("update accepted for round ", meta.round));
          return grpc::Status::OK;
        }
        default:
          return ToGrpcStatus((*upload)->Refuse(
              absl::InvalidArgumentError("an update's metadata may only come first, once")));
      }
    }
    return ToGrpcStatus((*upload)->Abandon());
  }

 private:
  // The caller's identity: the fingerprint of its verified, enrolled certificate (or, in
  // plaintext mode, the name it sends). Refusals are audited here.
  absl::StatusOr<std::string> Identify(grpc::ServerContextBase* ctx, RoundEngine* engine) {
    if (options_.insecure_plaintext) {
      auto it = ctx->client_metadata().find(kClientNameHeader);
      if (it == ctx->client_metadata().end() || it->second.empty()) {
        return absl::UnauthenticatedError(
            "plaintext mode: send the client's name in the fl-client-name metadata");
      }
      if (static_cast<int64_t>(it->second.size()) > options_.limits.max_name_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("plaintext mode: the fl-client-name metadata is ", it->second.size(),
                         " bytes; the server takes at most ", options_.limits.max_name_bytes,
                         " (limits.max_name_bytes)"));
      }
      return absl::StrCat("plain:", std::string(it->second.data(), it->second.size()));
    }
    std::vector<grpc::string_ref> certs = ctx->auth_context()->FindPropertyValues("x509_pem_cert");
    if (certs.empty()) {
      absl::Status s = absl::UnauthenticatedError("no client certificate was presented");
      AuditRefusal(engine, "", "client_refused", s);
      return s;
    }
    std::string pem(certs.front().data(), certs.front().size());
    absl::StatusOr<std::string> fingerprint = VerifiedFingerprint(pem, engine);
    if (!fingerprint.ok()) return fingerprint.status();
    absl::StatusOr<bool> enrolled = store_->IsEnrolled(*fingerprint);
    if (!enrolled.ok()) return enrolled.status();
    if (!*enrolled) {
      absl::StatusOr<std::string> cn = CertificateCommonName(pem);
      absl::StatusOr<std::optional<ClientRecord>> record = store_->Client(*fingerprint);
      const bool revoked = record.ok() && record->has_value() && (*record)->revoked_at_ms != 0;
      absl::StatusOr<CertificateIdentity> identity = options_.verifier->Verify(pem);
      if (!revoked && identity.ok() && identity->admin) {
        absl::Status s = absl::PermissionDeniedError(absl::StrCat(
            "certificate CN=", identity->common_name,
            " is an admin certificate, for the control API (fl run); a site joins with its own "
            "(fl certs add-site NAME)"));
        AuditRefusal(engine, *fingerprint, "client_refused", s);
        return s;
      }
      absl::Status s = absl::PermissionDeniedError(absl::StrCat(
          "client certificate ", fingerprint->substr(0, 16), " (CN=", cn.ok() ? *cn : "?", ") ",
          revoked ? absl::StrCat("was revoked at ",
                                 absl::FormatTime("%Y-%m-%d %H:%M:%SZ",
                                                  absl::FromUnixMillis((*record)->revoked_at_ms),
                                                  absl::UTCTimeZone()),
                                 "; ask the federation's operator to enroll it again "
                                 "(fl admin enroll) if that was a mistake")
                  : "is not enrolled in this federation; ask the federation's operator to "
                    "enroll it (fl admin enroll)"));
      AuditRefusal(engine, *fingerprint, "client_refused", s);
      if (engine != nullptr) engine->ForgetClient(*fingerprint, "revoked or not enrolled");
      return s;
    }
    return *fingerprint;
  }

  // The fingerprint of a certificate that verifies against the federation's CA. Parsing and
  // verifying it on every call cost 30 % of the server's CPU in short rounds (10 sites, 100k
  // parameters: bench/flower_compare), so a certificate that verified is trusted by its exact
  // PEM for kVerifiedFor, then checked again (a certificate that expires is refused within that
  // long). Refusals are never cached, and enrollment is looked up on every call by the caller,
  // so a revoked site is refused at once. Refusals are audited here.
  absl::StatusOr<std::string> VerifiedFingerprint(const std::string& pem, RoundEngine* engine) {
    // A monotonic clock: a wall clock stepped back would stretch the trust.
    const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(verified_mu_);
      auto it = verified_.find(pem);
      if (it != verified_.end() && now - it->second.checked < kVerifiedFor) {
        return it->second.fingerprint;
      }
    }
    absl::StatusOr<CertificateIdentity> identity = options_.verifier->Verify(pem);
    if (!identity.ok()) {
      absl::StatusOr<std::string> fingerprint = CertificateFingerprint(pem);
      if (!fingerprint.ok()) {
        absl::Status s = absl::UnauthenticatedError(
            absl::StrCat("unreadable client certificate: ", fingerprint.status().message()));
        AuditRefusal(engine, "", "client_refused", s);
        return s;
      }
      AuditRefusal(engine, *fingerprint, "client_refused", identity.status());
      return identity.status();
    }
    std::lock_guard<std::mutex> lock(verified_mu_);
    // Bounded: a federation has far fewer certificates; past the bound, start over.
    if (verified_.size() >= kMaxVerified) verified_.clear();
    verified_[pem] = {identity->fingerprint, now};
    return std::move(identity->fingerprint);
  }

  // Audits a refusal through the engine (which also logs it and counts it), or straight into the
  // store while the server has no run.
  void AuditRefusal(RoundEngine* engine, const std::string& client_id, const std::string& event,
                    const absl::Status& status) {
    if (engine != nullptr) {
      engine->AuditRefusal(client_id, event, status);
      return;
    }
    AuditRecord record;
    record.at_ms = absl::ToUnixMillis(absl::Now());
    record.client_id = client_id;
    record.event = event;
    record.detail = std::string(status.message());
    (void)store_->Audit(record);
  }

  grpc::Status RunOver(int64_t run_id, fl::v1::Task* reply) {
    reply->set_run_id(run_id);
    reply->set_kind(fl::v1::Task::DONE);
    reply->set_run_status(fl::v1::Task::RUN_FINISHED);
    reply->set_message("no run is active on this server; it waits for the next one");
    if (run_id == 0) return grpc::Status::OK;
    absl::StatusOr<RunRecord> run = store_->GetRun(run_id);
    if (!run.ok()) {
      reply->set_message(absl::StrCat("run ", run_id, " is not this server's current run"));
      return grpc::Status::OK;
    }
    if (run->status == RunStatus::kFailed) reply->set_run_status(fl::v1::Task::RUN_FAILED);
    reply->set_message(absl::StrCat("run ", run_id, " is over (", ToString(run->status),
                                    run->reason.empty() ? "" : ": ", run->reason, ")"));
    return grpc::Status::OK;
  }

  static grpc::Status NoRun() {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "no run is active on this server: it waits for the next one (fl run submit); join again"));
  }

  static constexpr std::chrono::seconds kVerifiedFor{60};
  static constexpr size_t kMaxVerified = 100000;
  struct Verified {
    std::string fingerprint;
    std::chrono::steady_clock::time_point checked;
  };

  const ServiceOptions options_;
  const EngineSource engines_;
  Store* store_;
  ModelChunkCache chunk_cache_;
  std::mutex verified_mu_;
  absl::flat_hash_map<std::string, Verified> verified_;  // by the certificate's PEM
};

}  // namespace

std::unique_ptr<fl::v1::Federation::Service> MakeFederationService(ServiceOptions options,
                                                                   EngineSource engines,
                                                                   Store* store) {
  return std::make_unique<FederationService>(std::move(options), std::move(engines), store);
}

}  // namespace fl::server
