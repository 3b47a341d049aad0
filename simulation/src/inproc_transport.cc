#include "simulation/internal/inproc_transport.h"

#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/crypto.h"

namespace fl::simulation {
namespace {

using client::ClientTask;
using server::Task;

ClientTask::Kind ToClientKind(Task::Kind kind) {
  switch (kind) {
    case Task::Kind::kWait:
      return ClientTask::Kind::kWait;
    case Task::Kind::kFit:
      return ClientTask::Kind::kFit;
    case Task::Kind::kDone:
      return ClientTask::Kind::kDone;
    case Task::Kind::kEvaluate:
      return ClientTask::Kind::kEvaluate;
    case Task::Kind::kStatistics:
      return ClientTask::Kind::kStatistics;
    case Task::Kind::kSecAggAdvertise:
      return ClientTask::Kind::kSecAggAdvertise;
    case Task::Kind::kSecAggShare:
      return ClientTask::Kind::kSecAggShare;
    case Task::Kind::kSecAggMaskedInput:
      return ClientTask::Kind::kSecAggMaskedInput;
    case Task::Kind::kSecAggConsistency:
      return ClientTask::Kind::kSecAggConsistency;
    case Task::Kind::kSecAggUnmask:
      return ClientTask::Kind::kSecAggUnmask;
  }
  return ClientTask::Kind::kWait;
}

Task::Kind ToServerKind(ClientTask::Kind kind) {
  switch (kind) {
    case ClientTask::Kind::kSecAggAdvertise:
      return Task::Kind::kSecAggAdvertise;
    case ClientTask::Kind::kSecAggShare:
      return Task::Kind::kSecAggShare;
    case ClientTask::Kind::kSecAggMaskedInput:
      return Task::Kind::kSecAggMaskedInput;
    case ClientTask::Kind::kSecAggConsistency:
      return Task::Kind::kSecAggConsistency;
    case ClientTask::Kind::kSecAggUnmask:
      return Task::Kind::kSecAggUnmask;
    default:
      return Task::Kind::kWait;
  }
}

server::UpdateMeta::Encoding ToServerEncoding(client::UpdateHeader::Encoding e) {
  using E = client::UpdateHeader::Encoding;
  switch (e) {
    case E::kFloat32:
      return server::UpdateMeta::Encoding::kFloat32;
    case E::kMaskedUint32:
      return server::UpdateMeta::Encoding::kMaskedUint32;
    case E::kMaskedUint64:
      return server::UpdateMeta::Encoding::kMaskedUint64;
    case E::kFloat16:
      return server::UpdateMeta::Encoding::kFloat16;
    case E::kInt8:
      return server::UpdateMeta::Encoding::kInt8;
  }
  return server::UpdateMeta::Encoding::kFloat32;
}

template <typename T>
T Ids(int64_t run_id, int32_t round, const std::string& task_id) {
  T t;
  t.run_id = run_id;
  t.round = round;
  t.task_id = task_id;
  return t;
}

}  // namespace

ClientTask ToClientTask(const Task& task) {
  ClientTask t;
  t.kind = ToClientKind(task.kind);
  t.run_id = task.run_id;
  t.round = task.round;
  t.task_id = task.task_id;
  t.message = task.message;
  t.run_failed = task.run_status == server::RunStatus::kFailed;
  const bool trains = task.kind == Task::Kind::kFit || task.kind == Task::Kind::kSecAggMaskedInput;
  t.config.round = task.round;
  if (trains) {
    // What the gRPC service puts in a FitTask, the same way.
    t.config.local_epochs = task.fit.local_epochs;
    t.config.batch_size = task.fit.batch_size;
    t.config.learning_rate = task.fit.learning_rate;
    t.config.extra = task.fit.extra;
    t.config.extra[std::string(server::kScaffoldCommittedRoundKey)] = task.client_committed_round;
    t.config.model_name = task.fit.model_name;
    t.config.differential_privacy = task.fit.differential_privacy;
    t.update_encoding = task.update_encoding;
  }
  t.config.secure_aggregation = client::IsSecAgg(t.kind);
  if (trains || task.kind == Task::Kind::kEvaluate) {
    t.has_spec = !task.spec.tensors().empty();
    t.spec = task.spec;
    t.model_bytes = task.model_bytes;
    t.model_sha256 = task.model_sha256;
  }
  if (task.feature_statistics != nullptr) {
    t.feature_statistics.mean = task.feature_statistics->mean;
    t.feature_statistics.stddev = task.feature_statistics->stddev;
    t.feature_statistics_count = task.feature_statistics->count;
  }
  if (client::IsSecAgg(t.kind)) {
    const server::SecAggTaskInfo& s = task.secagg;
    t.secagg_id = s.secagg_id;
    t.secagg_params = s.round;
    t.directory = s.directory;
    t.bundle = s.bundle;
    t.survivors = s.survivors;
    t.unmask = s.unmask;
  }
  return t;
}

absl::Status InprocTransport::CheckCancelled() const {
  return cancelled_ ? absl::CancelledError("virtual client stopped") : absl::OkStatus();
}

absl::StatusOr<client::JoinAnswer> InprocTransport::Join(const client::JoinRequestInfo& request) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  server::SiteProfile profile;
  profile.model_spec = request.model_spec;
  profile.feature_columns = request.feature_columns;
  profile.feature_schema_sha256 = request.feature_schema_sha256;
  if (absl::Status s = engine_->Admit(client_id_, profile, request.dry_run); !s.ok()) return s;
  if (request.dry_run) return client::JoinAnswer{client_id_, engine_->run_id()};
  absl::StatusOr<int64_t> run = engine_->Join(client_id_, request.client_name);
  if (!run.ok()) return run.status();
  return client::JoinAnswer{client_id_, *run};
}

absl::StatusOr<client::ClientTask> InprocTransport::Poll(int64_t, absl::Duration) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return ToClientTask(engine_->Poll(client_id_));
}

absl::StatusOr<std::shared_ptr<const Model>> InprocTransport::Download(
    const client::ClientTask& task, const ModelSpec& spec) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  absl::StatusOr<server::GlobalModel> global =
      engine_->ModelForTask(client_id_, task.run_id, task.round, task.task_id);
  if (!global.ok()) return global.status();
  if (!(global->model->spec() == spec)) {
    return absl::InvalidArgumentError(absl::StrCat("the round's model ",
                                                   global->model->spec().ToJson(),
                                                   " is not the task's ", spec.ToJson()));
  }
  return global->model;
}

absl::Status InprocTransport::SubmitUpdate(const client::UpdateHeader& header,
                                           const client::ChunkSource& next_chunk) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  server::UpdateMeta meta = Ids<server::UpdateMeta>(header.run_id, header.round, header.task_id);
  meta.num_examples = header.num_examples;
  meta.metrics = header.metrics;
  meta.payload_bytes = header.payload_bytes;
  meta.spec = header.spec;
  meta.encoding = ToServerEncoding(header.encoding);
  absl::StatusOr<std::unique_ptr<server::Upload>> upload = engine_->BeginUpload(client_id_, meta);
  if (!upload.ok()) return upload.status();
  Sha256 sha;
  for (int64_t offset = 0; offset < header.payload_bytes;) {
    std::span<const std::byte> bytes = next_chunk(offset);
    sha.Update(bytes);
    std::string_view data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (absl::Status s = (*upload)->AddChunk(offset, data); !s.ok()) return s;
    offset += static_cast<int64_t>(bytes.size());
  }
  return (*upload)->Finish(sha.FinishHex());
}

absl::Status InprocTransport::Decline(const client::ClientTask& task, const std::string& reason) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return engine_->Decline(client_id_,
                          Ids<server::UpdateMeta>(task.run_id, task.round, task.task_id), reason);
}

absl::Status InprocTransport::SubmitEvaluation(const client::EvaluationReply& reply) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  server::EvaluationReport report =
      Ids<server::EvaluationReport>(reply.run_id, reply.round, reply.task_id);
  report.num_examples = reply.num_examples;
  report.loss = reply.loss;
  report.metrics = reply.metrics;
  report.error = reply.error;
  report.share_site_result = reply.share_site_result;
  if (reply.feature_sums.has_value()) {
    report.feature_sums.count = reply.feature_sums->count;
    report.feature_sums.sum = reply.feature_sums->sum;
    report.feature_sums.sum_squares = reply.feature_sums->sum_sq;
  }
  return engine_->SubmitEvaluation(client_id_, report);
}

absl::Status InprocTransport::SubmitSecAgg(const client::SecAggReply& reply) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  server::SecAggMessage message =
      Ids<server::SecAggMessage>(reply.run_id, reply.round, reply.task_id);
  message.stage = ToServerKind(reply.stage);
  message.keys = reply.keys;
  message.shares = reply.shares;
  message.survivor_signature = reply.survivor_signature;
  message.unmask = reply.unmask;
  message.decline_reason = reply.decline_reason;
  return engine_->SubmitSecAgg(client_id_, message);
}

absl::StatusOr<bool> InprocTransport::Heartbeat(const client::ClientTask& task,
                                                std::string* message) {
  const bool open = engine_->Heartbeat(client_id_, task.round, task.task_id);
  if (message != nullptr) *message = open ? "" : "the task is closed";
  return open;
}

}  // namespace fl::simulation
