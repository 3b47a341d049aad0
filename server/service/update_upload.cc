#include "server/service/update_upload.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/wire/proto_serde.h"
#include "server/service/input_limits.h"

namespace fl::server {
namespace {

class UpdateUpload final : public grpc::ServerReadReactor<fl::v1::UpdatePart> {
 public:
  UpdateUpload(ServiceCore* core, grpc::CallbackServerContext* ctx, fl::v1::SubmitReply* reply)
      : core_(core), ctx_(ctx), reply_(reply) {}

  // On gRPC's thread: the caller's checks go to the service's threads.
  void Start() {
    if (!core_->pool.Post([this] { Begin(); })) Finish(ServiceBusy());
  }

  // On gRPC's thread: the message is handled on a service thread, and the next read starts only
  // once it is (one message of a stream at a time, in order).
  void OnReadDone(bool ok) override {
    // A message that came as the stream was cut is not handled: the call is being cancelled.
    const bool live = watched_->PeerMoved() && ok;
    core_->pool.Continue([this, live] { Handle(live); });
  }

  void OnDone() override { delete this; }

 private:
  // Who uploads; then the first read (the metadata).
  void Begin() {
    absl::StatusOr<ServiceCore::Caller> caller = core_->Enter(ctx_, /*upload=*/true);
    if (!caller.ok()) {
      Finish(ToGrpcStatus(caller.status()));
      return;
    }
    caller_ = *std::move(caller);
    if (caller_.engine == nullptr) {
      End(NoRunActive());
      return;
    }
    grpc::CallbackServerContext* ctx = ctx_;
    watched_ = core_->watch.Watch(
        core_->options.limits.stream_idle_timeout, [ctx] { ctx->TryCancel(); },
        // Asked only while the stream waits for the client, never while Handle runs.
        [this] { return upload_ != nullptr && upload_->RoundClosing(); });
    Read();
  }

  // Reads the next message; the watch's idle clock runs until it comes.
  void Read() {
    watched_->WaitForPeer();
    StartRead(&part_);
  }

  void Handle(bool ok) {
    if (!ok) {
      Ended();
      return;
    }
    std::optional<absl::Status> end = upload_ == nullptr ? Metadata() : Part();
    if (end.has_value()) {
      End(*end);
      return;
    }
    Read();
  }

  // The stream ended before the SHA-256: cut by the server (why is recorded), or by the client.
  void Ended() {
    watched_->Release();
    const std::string cut = watched_->cut_reason();
    RoundEngine* engine = caller_.engine.get();
    if (upload_ == nullptr) {
      absl::Status s =
          cut.empty()
              ? absl::InvalidArgumentError("the first message of an update must carry its metadata")
              : absl::DeadlineExceededError(
                    absl::StrCat("the server cut this upload before its metadata: ", cut));
      engine->AuditRefusal(caller_.id, cut.empty() ? "update_refused" : "upload_cut", s);
      End(s);
      return;
    }
    if (cut.empty()) {
      End(upload_->Abandon());
      return;
    }
    End(upload_->Refuse(
        absl::DeadlineExceededError(absl::StrCat("the server cut this upload: ", cut))));
  }

  // The first message: the update's metadata, checked and begun. A value: the call ends.
  std::optional<absl::Status> Metadata() {
    RoundEngine* engine = caller_.engine.get();
    if (!part_.has_metadata()) {
      absl::Status s =
          absl::InvalidArgumentError("the first message of an update must carry its metadata");
      engine->AuditRefusal(caller_.id, "update_refused", s);
      return s;
    }
    const fl::v1::UpdateMetadata& m = part_.metadata();
    const ClientInputLimits& limits = core_->options.limits;
    absl::Status bounded = CheckName(m.task_id(), "task_id", limits);
    if (bounded.ok()) bounded = CheckMetrics(m.metrics(), "the update's", limits);
    if (bounded.ok() && m.has_model_spec()) {
      bounded = CheckSpecInput(m.model_spec(), "the update's");
    }
    if (!bounded.ok()) {
      engine->AuditRefusal(caller_.id, "update_refused", bounded);
      return bounded;
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
        engine->AuditRefusal(caller_.id, "update_refused", s);
        return s;
      }
      meta.spec = *std::move(spec);
    }
    if (!m.decline_reason().empty()) {
      absl::Status s = engine->Decline(caller_.id, meta, CutText(m.decline_reason(), limits));
      if (!s.ok()) return s;
      reply_->set_accepted(false);
      reply_->set_message(absl::StrCat("decline of task '", meta.task_id, "' recorded"));
      return absl::OkStatus();
    }
    // Which encoding a round takes is the engine's decision (the run's FLOAT32, FLOAT16 or INT8,
    // or masked words in a secure round); unknown ones stop here.
    if (std::optional<PayloadEncoding> e = FromProto(m.encoding()); e.has_value()) {
      meta.encoding = *e;
    } else {
      absl::Status s = absl::InvalidArgumentError(absl::StrCat(
          "update encoding ", fl::v1::UpdateMetadata::Encoding_Name(m.encoding()),
          " is not supported; send FLOAT32, FLOAT16, INT8, MASKED_UINT32 or MASKED_UINT64"));
      engine->AuditRefusal(caller_.id, "update_refused", s);
      return s;
    }
    absl::StatusOr<std::unique_ptr<Upload>> upload = engine->BeginUpload(caller_.id, meta);
    if (!upload.ok()) return upload.status();
    upload_ = *std::move(upload);
    round_ = meta.round;
    return std::nullopt;
  }

  // A chunk or the closing SHA-256. A value: the call ends.
  std::optional<absl::Status> Part() {
    switch (part_.part_case()) {
      case fl::v1::UpdatePart::kChunk: {
        absl::Status s = upload_->AddChunk(part_.chunk().offset(), part_.chunk().data());
        if (!s.ok()) return s;
        return std::nullopt;
      }
      case fl::v1::UpdatePart::kSha256: {
        if (absl::Status bad = CheckSha256Input(part_.sha256()); !bad.ok()) {
          return upload_->Refuse(bad);
        }
        absl::Status s = upload_->Finish(part_.sha256());
        if (!s.ok()) return s;
        reply_->set_accepted(true);
        reply_->set_message(absl::StrCat("update accepted for round ", round_));
        return absl::OkStatus();
      }
      default:
        return upload_->Refuse(
            absl::InvalidArgumentError("an update's metadata may only come first, once"));
    }
  }

  // Ends the call; the reactor may be gone once Finish returns.
  void End(const absl::Status& status) {
    if (watched_ != nullptr) watched_->Release();
    upload_.reset();
    caller_.lease.Release();
    Finish(ToGrpcStatus(status));
  }

  ServiceCore* const core_;
  grpc::CallbackServerContext* const ctx_;
  fl::v1::SubmitReply* const reply_;
  ServiceCore::Caller caller_;
  fl::v1::UpdatePart part_;
  std::shared_ptr<StreamWatch::Watched> watched_;
  std::unique_ptr<Upload> upload_;
  int32_t round_ = 0;
};

}  // namespace

grpc::ServerReadReactor<fl::v1::UpdatePart>* StartUpdateUpload(ServiceCore* core,
                                                               grpc::CallbackServerContext* ctx,
                                                               fl::v1::SubmitReply* reply) {
  auto* upload = new UpdateUpload(core, ctx, reply);
  upload->Start();
  return upload;
}

}  // namespace fl::server
