#include "server/service/model_download.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/v1/federation.pb.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/service/input_limits.h"

namespace fl::server {
namespace {

class ModelDownload final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ModelDownload(ServiceCore* core, grpc::CallbackServerContext* ctx,
                const grpc::ByteBuffer* request)
      : core_(core), ctx_(ctx), request_(*request) {}

  // On gRPC's thread: the checks go to the service's threads.
  void Start() {
    if (!core_->pool.Post([this] { Begin(); })) Finish(ServiceBusy());
  }

  void OnWriteDone(bool ok) override {
    if (!watched_->PeerMoved() || !ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "client went away during the download"));
      return;
    }
    ++next_;
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  // On a service thread: who asks, for what; then the first chunk.
  void Begin() {
    fl::v1::DownloadRequest req;
    // Deserialize consumes its buffer; request_ only references the request's slices.
    if (grpc::Status parsed =
            grpc::SerializationTraits<fl::v1::DownloadRequest>::Deserialize(&request_, &req);
        !parsed.ok()) {
      Finish(std::move(parsed));
      return;
    }
    absl::StatusOr<ServiceCore::Caller> caller = core_->Enter(ctx_, /*upload=*/false);
    if (!caller.ok()) {
      Finish(ToGrpcStatus(caller.status()));
      return;
    }
    caller_ = *std::move(caller);
    RoundEngine* engine = caller_.engine.get();
    if (engine == nullptr) {
      End(ToGrpcStatus(NoRunActive()));
      return;
    }
    if (absl::Status s = CheckName(req.task_id(), "task_id", core_->options.limits); !s.ok()) {
      engine->AuditRefusal(caller_.id, "download_refused", s);
      End(ToGrpcStatus(s));
      return;
    }
    absl::StatusOr<GlobalModel> global =
        engine->ModelForTask(caller_.id, req.run_id(), req.round(), req.task_id());
    if (global.ok() && global->model == nullptr) {
      global = absl::InternalError("the engine has no global model for this task");
    }
    if (!global.ok()) {
      engine->AuditRefusal(caller_.id, "download_refused", global.status());
      End(ToGrpcStatus(global.status()));
      return;
    }
    chunks_ = core_->chunk_cache.Get(global->model, global->sha256);
    grpc::CallbackServerContext* ctx = ctx_;
    watched_ =
        core_->watch.Watch(core_->options.limits.stream_idle_timeout, [ctx] { ctx->TryCancel(); });
    WriteNext();
  }

  void WriteNext() {
    const std::vector<grpc::ByteBuffer>& chunks = chunks_->chunks();
    if (next_ == chunks.size()) {
      End(grpc::Status::OK);
      return;
    }
    // The set outlives the write (this reactor holds it); gRPC only references the slices.
    watched_->WaitForPeer();
    StartWrite(&chunks[next_]);
  }

  // Ends the call; the reactor may be gone once Finish returns.
  void End(grpc::Status status) {
    if (watched_ != nullptr) {
      watched_->Release();
      if (std::string why = watched_->cut_reason(); !why.empty()) {
        status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              absl::StrCat("the server cut this download: ", why));
        // The audit writes to the store: not on gRPC's thread.
        core_->pool.Continue([engine = caller_.engine, id = caller_.id,
                              s = absl::DeadlineExceededError(status.error_message())] {
          engine->AuditRefusal(id, "download_cut", s);
        });
      }
    }
    caller_.lease.Release();
    Finish(std::move(status));
  }

  ServiceCore* const core_;
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer request_;
  ServiceCore::Caller caller_;
  std::shared_ptr<const ModelChunks> chunks_;
  size_t next_ = 0;
  std::shared_ptr<StreamWatch::Watched> watched_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartModelDownload(ServiceCore* core,
                                                               grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request) {
  auto* download = new ModelDownload(core, ctx, request);
  download->Start();
  return download;
}

}  // namespace fl::server
