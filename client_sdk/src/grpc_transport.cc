// GrpcTransport: the SDK's production transport (client_sdk/internal/transport.h) over the
// fl.v1.Federation service, with mutual TLS. The one place in the SDK's loop where protobuf
// meets the domain types: tasks in, updates, evaluations and secure-aggregation messages out.
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client_sdk/internal/transport.h"
#include "client_sdk/src/grpc_wire.h"
#include "fl/common/chunking.h"
#include "fl/common/crypto.h"
#include "fl/v1/federation.grpc.pb.h"
#include "fl/wire/proto_serde.h"
#include "fl/wire/secagg_serde.h"
#include "grpcpp/grpcpp.h"

namespace fl::client {
namespace {

// A deadline for moving `bytes` of model: generous (1 MB/s), but never infinite, so that a
// transfer stuck on a connection that no longer leads anywhere ends in a retry.
absl::Duration TransferTimeout(int64_t bytes) {
  return absl::Seconds(60) + absl::Microseconds(bytes);
}

ClientTask::Kind KindFromProto(fl::v1::Task::Kind kind) {
  switch (kind) {
    case fl::v1::Task::FIT:
      return ClientTask::Kind::kFit;
    case fl::v1::Task::DONE:
      return ClientTask::Kind::kDone;
    case fl::v1::Task::EVALUATE:
      return ClientTask::Kind::kEvaluate;
    case fl::v1::Task::STATISTICS:
      return ClientTask::Kind::kStatistics;
    case fl::v1::Task::SECAGG_ADVERTISE_KEYS:
      return ClientTask::Kind::kSecAggAdvertise;
    case fl::v1::Task::SECAGG_SHARE_KEYS:
      return ClientTask::Kind::kSecAggShare;
    case fl::v1::Task::SECAGG_MASKED_INPUT:
      return ClientTask::Kind::kSecAggMaskedInput;
    case fl::v1::Task::SECAGG_CONSISTENCY:
      return ClientTask::Kind::kSecAggConsistency;
    case fl::v1::Task::SECAGG_UNMASK:
      return ClientTask::Kind::kSecAggUnmask;
    default:
      return ClientTask::Kind::kWait;  // WAIT, and kinds of a newer server: poll again
  }
}

fl::v1::Task::Kind KindToProto(ClientTask::Kind kind) {
  switch (kind) {
    case ClientTask::Kind::kSecAggAdvertise:
      return fl::v1::Task::SECAGG_ADVERTISE_KEYS;
    case ClientTask::Kind::kSecAggShare:
      return fl::v1::Task::SECAGG_SHARE_KEYS;
    case ClientTask::Kind::kSecAggMaskedInput:
      return fl::v1::Task::SECAGG_MASKED_INPUT;
    case ClientTask::Kind::kSecAggConsistency:
      return fl::v1::Task::SECAGG_CONSISTENCY;
    case ClientTask::Kind::kSecAggUnmask:
      return fl::v1::Task::SECAGG_UNMASK;
    default:
      return fl::v1::Task::KIND_UNSPECIFIED;
  }
}

}  // namespace

ClientTask internal::TaskFromProto(const fl::v1::Task& in) {
  ClientTask t;
  t.kind = KindFromProto(in.kind());
  t.run_id = in.run_id();
  t.round = in.round();
  t.task_id = in.task_id();
  t.message = in.message();
  t.run_failed = in.run_status() == fl::v1::Task::RUN_FAILED;
  const fl::v1::FitTask& fit = in.fit();
  t.config.round = in.round();
  t.config.local_epochs = fit.local_epochs();
  t.config.batch_size = fit.batch_size();
  t.config.learning_rate = fit.learning_rate();
  t.config.extra.insert(fit.config().begin(), fit.config().end());
  t.config.model_name = fit.model_name();
  t.config.differential_privacy = fit.differential_privacy();
  t.config.secure_aggregation = IsSecAgg(t.kind);
  t.has_spec = fit.model_spec().tensors_size() > 0;
  t.spec = FromProto(fit.model_spec());
  t.model_bytes = fit.model_bytes();
  t.model_sha256 = fit.model_sha256();
  t.update_encoding = FitEncodingFromProto(fit.update_encoding());
  if (!t.update_encoding.has_value()) {
    // A value this SDK's protocol does not know has no name: say its number.
    const std::string& name = fl::v1::UpdateMetadata::Encoding_Name(fit.update_encoding());
    t.encoding_name =
        name.empty() ? absl::StrCat("number ", static_cast<int>(fit.update_encoding())) : name;
  }
  if (in.has_feature_statistics()) {
    const fl::v1::FeatureStatistics& stats = in.feature_statistics();
    t.feature_statistics.mean.assign(stats.mean().begin(), stats.mean().end());
    t.feature_statistics.stddev.assign(stats.stddev().begin(), stats.stddev().end());
    t.feature_statistics_count = stats.count();
  }
  if (IsSecAgg(t.kind)) {
    t.secagg_id = in.secagg().secagg_id();
    t.secagg_params = wire::ParamsFromProto(in.secagg().params());
    if (t.kind == ClientTask::Kind::kSecAggShare) {
      t.directory = wire::DirectoryFromProto(in.secagg());
    }
    if (t.kind == ClientTask::Kind::kSecAggMaskedInput) {
      t.bundle = wire::BundleFromProto(in.secagg());
    }
    if (t.kind == ClientTask::Kind::kSecAggConsistency) {
      t.survivors = wire::SurvivorListFromProto(in.secagg());
    }
    if (t.kind == ClientTask::Kind::kSecAggUnmask) {
      t.unmask = wire::UnmaskRequestFromProto(in.secagg());
    }
  }
  return t;
}

namespace {

template <typename Message>
void SetIds(int64_t run_id, int32_t round, const std::string& task_id, Message& m) {
  m.set_run_id(run_id);
  m.set_round(round);
  m.set_task_id(task_id);
}

class GrpcTransport final : public Transport {
 public:
  GrpcTransport(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel)
      : name_(options.name),
        plaintext_(options.insecure_plaintext),
        channel_(std::move(channel)),
        stub_(fl::v1::Federation::NewStub(channel_)) {}

  absl::StatusOr<JoinAnswer> Join(const JoinRequestInfo& info) override {
    Call call(this, absl::Seconds(30));
    fl::v1::JoinRequest req;
    req.set_client_name(info.client_name);
    req.set_sdk_version("0.1.0");
    for (const std::string& c : info.capabilities) req.add_capabilities(c);
    if (info.model_spec.has_value()) ToProto(*info.model_spec, req.mutable_model_spec());
    for (const std::string& column : info.feature_columns) req.add_feature_columns(column);
    req.set_feature_schema_sha256(info.feature_schema_sha256);
    req.set_dry_run(info.dry_run);
    fl::v1::JoinReply reply;
    if (absl::Status s = FromGrpcStatus(stub_->Join(&call.ctx, req, &reply)); !s.ok()) return s;
    return JoinAnswer{.client_id = reply.client_id(), .run_id = reply.run_id()};
  }

  absl::StatusOr<ClientTask> Poll(int64_t run_id, absl::Duration wait) override {
    Call call(this, wait + absl::Seconds(15));
    fl::v1::PollRequest req;
    req.set_run_id(run_id);
    req.set_wait_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(wait)));
    fl::v1::Task task;
    if (absl::Status s = FromGrpcStatus(stub_->PollTask(&call.ctx, req, &task)); !s.ok()) {
      return s;
    }
    return internal::TaskFromProto(task);
  }

  absl::StatusOr<std::shared_ptr<const Model>> Download(const ClientTask& task,
                                                        const ModelSpec& spec) override {
    Call call(this, TransferTimeout(task.model_bytes));
    fl::v1::DownloadRequest req;
    SetIds(task.run_id, task.round, task.task_id, req);
    auto model = std::make_shared<Model>(spec);
    if (model->NumBytes() != task.model_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("task announces ", task.model_bytes,
                                                     " model bytes but its spec has ",
                                                     model->NumBytes()));
    }
    ChunkAssembler assembler(model->NumBytes());
    auto* dst = reinterpret_cast<char*>(model->data().data());
    std::unique_ptr<grpc::ClientReader<fl::v1::ModelChunk>> reader =
        stub_->DownloadModel(&call.ctx, req);
    fl::v1::ModelChunk chunk;
    std::string last_sha;
    while (reader->Read(&chunk)) {
      if (absl::Status s = assembler.Add(chunk.offset(), chunk.data()); !s.ok()) return s;
      std::memcpy(dst + chunk.offset(), chunk.data().data(), chunk.data().size());
      if (!chunk.sha256().empty()) last_sha = chunk.sha256();
    }
    if (absl::Status s = FromGrpcStatus(reader->Finish()); !s.ok()) return s;
    if (last_sha != task.model_sha256) {
      return absl::DataLossError(
          "downloaded model's final chunk names another SHA-256 than the task");
    }
    if (absl::Status s = assembler.Finish(task.model_sha256); !s.ok()) return s;
    return std::shared_ptr<const Model>(std::move(model));
  }

  absl::Status SubmitUpdate(const UpdateHeader& header, const ChunkSource& next_chunk) override {
    static_assert(kMaxChunkBytes % 8 == 0, "chunks must hold whole words of every encoding");
    Call call(this, TransferTimeout(header.payload_bytes));
    fl::v1::SubmitReply reply;
    std::unique_ptr<grpc::ClientWriter<fl::v1::UpdatePart>> writer =
        stub_->SubmitUpdate(&call.ctx, &reply);
    fl::v1::UpdatePart part;
    fl::v1::UpdateMetadata* meta = part.mutable_metadata();
    SetIds(header.run_id, header.round, header.task_id, *meta);
    meta->set_num_examples(header.num_examples);
    for (const auto& [k, v] : header.metrics) (*meta->mutable_metrics())[k] = v;
    if (header.spec.has_value()) ToProto(*header.spec, meta->mutable_model_spec());
    meta->set_encoding(ToProto(header.encoding));
    meta->set_payload_bytes(header.payload_bytes);
    bool ok = writer->Write(part);
    Sha256 sha;
    fl::v1::UpdatePart c;
    for (int64_t offset = 0; ok && offset < header.payload_bytes;) {
      std::span<const std::byte> bytes = next_chunk(offset);
      sha.Update(bytes);
      c.mutable_chunk()->set_offset(offset);
      c.mutable_chunk()->set_data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      ok = writer->Write(c);
      offset += static_cast<int64_t>(bytes.size());
    }
    if (ok) {
      part.Clear();
      part.set_sha256(sha.FinishHex());
      ok = writer->Write(part);
    }
    if (ok) writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  absl::Status Decline(const ClientTask& task, const std::string& reason) override {
    Call call(this, absl::Seconds(30));
    fl::v1::SubmitReply reply;
    std::unique_ptr<grpc::ClientWriter<fl::v1::UpdatePart>> writer =
        stub_->SubmitUpdate(&call.ctx, &reply);
    fl::v1::UpdatePart part;
    fl::v1::UpdateMetadata* meta = part.mutable_metadata();
    SetIds(task.run_id, task.round, task.task_id, *meta);
    meta->set_decline_reason(reason);
    if (writer->Write(part)) writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  absl::Status SubmitEvaluation(const EvaluationReply& in) override {
    fl::v1::EvaluationResult result;
    SetIds(in.run_id, in.round, in.task_id, result);
    result.set_num_examples(in.num_examples);
    result.set_loss(in.loss);
    for (const auto& [k, v] : in.metrics) (*result.mutable_metrics())[k] = v;
    result.set_error(in.error);
    result.set_share_site_result(in.share_site_result);
    if (in.feature_sums.has_value()) {
      fl::v1::FeatureSums* out = result.mutable_feature_sums();
      out->set_count(in.feature_sums->count);
      out->mutable_sum()->Add(in.feature_sums->sum.begin(), in.feature_sums->sum.end());
      out->mutable_sum_squares()->Add(in.feature_sums->sum_sq.begin(),
                                      in.feature_sums->sum_sq.end());
    }
    Call call(this, absl::Seconds(30));
    fl::v1::SubmitReply reply;
    return FromGrpcStatus(stub_->SubmitEvaluation(&call.ctx, result, &reply));
  }

  absl::Status SubmitSecAgg(const SecAggReply& in) override {
    fl::v1::SecAggSubmission message;
    SetIds(in.run_id, in.round, in.task_id, message);
    message.set_stage(KindToProto(in.stage));
    if (!in.decline_reason.empty()) {
      message.set_decline_reason(in.decline_reason);
    } else if (in.keys.has_value()) {
      wire::KeysToProto(*in.keys, message.mutable_keys());
    } else if (in.shares.has_value()) {
      wire::SharesToProto(*in.shares, message.mutable_shares());
    } else if (in.survivor_signature.has_value()) {
      const secagg::Bytes& signature = in.survivor_signature->signature;
      message.set_survivor_signature(
          std::string(reinterpret_cast<const char*>(signature.data()), signature.size()));
    } else if (in.unmask.has_value()) {
      wire::UnmaskToProto(*in.unmask, message.mutable_unmask());
    }
    Call call(this, absl::Seconds(30));
    fl::v1::SubmitReply reply;
    return FromGrpcStatus(stub_->SubmitSecAgg(&call.ctx, message, &reply));
  }

  absl::StatusOr<bool> Heartbeat(const ClientTask& task, std::string* message) override {
    grpc::ClientContext ctx;  // not registered: a heartbeat is not the call Cancel ends
    if (plaintext_) ctx.AddMetadata(kClientNameHeader, name_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    fl::v1::HeartbeatRequest req;
    SetIds(task.run_id, task.round, task.task_id, req);
    fl::v1::HeartbeatReply reply;
    if (absl::Status s = FromGrpcStatus(stub_->Heartbeat(&ctx, req, &reply)); !s.ok()) return s;
    if (message != nullptr) *message = reply.message();
    return reply.task_open();
  }

  // Waiting on the channel is what drives its connection attempts: a blocked sleep would leave
  // them to gRPC's 5-second backup poller.
  bool WaitForServer(absl::Duration d) override {
    const absl::Time until = absl::Now() + d;
    while (!stopping_ && absl::Now() < until) {
      const absl::Time step = std::min(until, absl::Now() + absl::Milliseconds(100));
      if (channel_->WaitForConnected(absl::ToChronoTime(step))) break;
    }
    return !stopping_;
  }

  void Cancel() override {
    absl::MutexLock lock(&ctx_mu_);
    stopping_ = true;
    if (active_ctx_ != nullptr) active_ctx_->TryCancel();
  }

 private:
  // A ClientContext registered so that Cancel can end the call in flight.
  class Call {
   public:
    Call(GrpcTransport* t, absl::Duration timeout) : t_(t) {
      if (t_->plaintext_) ctx.AddMetadata(kClientNameHeader, t_->name_);
      if (timeout != absl::InfiniteDuration()) {
        ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
      }
      absl::MutexLock lock(&t_->ctx_mu_);
      t_->active_ctx_ = &ctx;
      if (t_->stopping_) ctx.TryCancel();  // Cancel came before this call registered
    }
    ~Call() {
      absl::MutexLock lock(&t_->ctx_mu_);
      t_->active_ctx_ = nullptr;
    }
    grpc::ClientContext ctx;

   private:
    GrpcTransport* t_;
  };

  const std::string name_;
  const bool plaintext_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fl::v1::Federation::Stub> stub_;
  std::atomic<bool> stopping_{false};
  absl::Mutex ctx_mu_;
  grpc::ClientContext* active_ctx_ ABSL_GUARDED_BY(ctx_mu_) = nullptr;
};

}  // namespace

class SharedConnection {
 public:
  explicit SharedConnection(std::shared_ptr<grpc::Channel> channel)
      : channel_(std::move(channel)) {}
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
};

absl::StatusOr<std::shared_ptr<SharedConnection>> MakeSharedConnection(ClientOptions& options) {
  if (!options.insecure_plaintext) {
    return absl::InvalidArgumentError(
        "a shared connection is for plaintext only: with TLS each site's certificate needs its "
        "own connection");
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = internal::MakeChannel(options);
  if (!channel.ok()) return channel.status();
  return std::make_shared<SharedConnection>(*std::move(channel));
}

absl::StatusOr<std::unique_ptr<Transport>> MakeGrpcTransport(
    ClientOptions& options, std::shared_ptr<SharedConnection> connection) {
  if (!options.insecure_plaintext || connection == nullptr) {
    return absl::InvalidArgumentError(
        "a transport over a shared connection needs plaintext and the connection");
  }
  return std::unique_ptr<Transport>(
      std::make_unique<GrpcTransport>(options, connection->channel()));
}

absl::StatusOr<std::unique_ptr<Transport>> MakeGrpcTransport(ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = internal::MakeChannel(options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<Transport>(std::make_unique<GrpcTransport>(options, *std::move(channel)));
}

}  // namespace fl::client
