#include "fl/client/client.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <span>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client_sdk/src/client_impl.h"
#include "fl/client/dataset.h"
#include "fl/common/chunking.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "fl/common/proto_serde.h"
#include "fl/common/update_codec.h"
#include "fl/v1/federation.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "openssl/rand.h"

namespace fl::client {
namespace internal {

absl::Duration TransferTimeout(int64_t bytes) {
  return absl::Seconds(60) + absl::Microseconds(bytes);
}

FitConfig FitConfigOf(const fl::v1::Task& task) {
  FitConfig config;
  config.round = task.round();
  config.local_epochs = task.fit().local_epochs();
  config.batch_size = task.fit().batch_size();
  config.learning_rate = task.fit().learning_rate();
  config.extra.insert(task.fit().config().begin(), task.fit().config().end());
  config.model_name = task.fit().model_name();
  config.differential_privacy = task.fit().differential_privacy();
  config.secure_aggregation = IsSecAgg(task.kind());
  return config;
}

}  // namespace internal

namespace {

// A server that is shutting down cancels the calls in flight (a long poll gets CANCELLED, not
// UNAVAILABLE); unless this client is stopping itself (checked first), that is the server going
// away, and the client waits for it like any other outage.
bool IsRetryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s);
}

}  // namespace

absl::Status CheckSiteLimits(const SiteLimits& limits, const FitConfig& config) {
  if (limits.max_local_epochs > 0 && config.local_epochs > limits.max_local_epochs) {
    return absl::PermissionDeniedError(absl::StrCat(
        "task asks for ", config.local_epochs, " local epochs; this site allows at most ",
        limits.max_local_epochs, " (limits.max_local_epochs)"));
  }
  // "logistic" is softmax regression by another name; servers name it "softmax".
  auto canonical = [](std::string_view name) {
    return name == "logistic" ? std::string_view("softmax") : name;
  };
  if (!limits.allowed_models.empty() &&
      std::none_of(limits.allowed_models.begin(), limits.allowed_models.end(),
                   [&](const std::string& allowed) {
                     return canonical(allowed) == canonical(config.model_name);
                   })) {
    const std::string asked = config.model_name.empty()
                                  ? std::string("a model it does not name")
                                  : absl::StrCat("model '", config.model_name, "'");
    return absl::PermissionDeniedError(
        absl::StrCat("task asks for ", asked, "; this site allows only ",
                     absl::StrJoin(limits.allowed_models, ", "), " (limits.allowed_models)"));
  }
  if (limits.require_differential_privacy && !config.differential_privacy) {
    return absl::PermissionDeniedError(
        "task runs without differential privacy; this site requires it "
        "(limits.require_differential_privacy)");
  }
  if (limits.require_secure_aggregation && !config.secure_aggregation) {
    return absl::PermissionDeniedError(
        "task runs without secure aggregation; this site requires it "
        "(limits.require_secure_aggregation)");
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::Join() {
  Call call(this, absl::Seconds(30));
  fl::v1::JoinRequest req;
  req.set_client_name(options_.name);
  req.set_sdk_version("0.1.0");
  req.add_capabilities("cpu");
  req.add_capabilities("fp32");
  req.add_capabilities("fp16");
  req.add_capabilities("int8");
  internal::DescribeSite(options_, trainer_, req);
  fl::v1::JoinReply reply;
  absl::Status s = FromGrpcStatus(stub_->Join(&call.ctx, req, &reply));
  if (!s.ok()) return s;
  run_id_ = reply.run_id();
  std::lock_guard<std::mutex> lock(id_mu_);
  client_id_ = reply.client_id();
  return absl::OkStatus();
}

absl::Status Client::Impl::Poll(fl::v1::Task* task) {
  Call call(this, options_.poll_wait + absl::Seconds(15));
  fl::v1::PollRequest req;
  req.set_run_id(run_id_);
  req.set_wait_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(options_.poll_wait)));
  return FromGrpcStatus(stub_->PollTask(&call.ctx, req, task));
}

absl::StatusOr<Model> Client::Impl::Download(const fl::v1::Task& task, const ModelSpec& spec) {
  Call call(this, internal::TransferTimeout(task.fit().model_bytes()));
  fl::v1::DownloadRequest req;
  req.set_run_id(task.run_id());
  req.set_round(task.round());
  req.set_task_id(task.task_id());
  Model model(spec);
  if (model.NumBytes() != task.fit().model_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("task announces ", task.fit().model_bytes(),
                                                   " model bytes but its spec has ",
                                                   model.NumBytes()));
  }
  ChunkAssembler assembler(model.NumBytes());
  auto* dst = reinterpret_cast<char*>(model.data().data());
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
  if (last_sha != task.fit().model_sha256()) {
    return absl::DataLossError(
        "downloaded model's final chunk names another SHA-256 than the task");
  }
  if (absl::Status s = assembler.Finish(task.fit().model_sha256()); !s.ok()) return s;
  return model;
}

absl::Status Client::Impl::Submit(const fl::v1::Task& task, const FitResult& result,
                                  const Model& global) {
  fl::v1::UpdateMetadata meta;
  internal::SetTaskIds(task, meta);
  meta.set_num_examples(result.num_examples);
  for (const auto& [k, v] : result.metrics) (*meta.mutable_metrics())[k] = v;
  ToProto(result.model.spec(), meta.mutable_model_spec());
  const fl::v1::UpdateMetadata::Encoding wanted = task.fit().update_encoding();
  if (wanted == fl::v1::UpdateMetadata::ENCODING_UNSPECIFIED ||
      wanted == fl::v1::UpdateMetadata::FLOAT32) {
    meta.set_encoding(fl::v1::UpdateMetadata::FLOAT32);
    meta.set_payload_bytes(result.model.NumBytes());
    return SubmitPayload(meta, result.model.bytes());
  }
  if (wanted != fl::v1::UpdateMetadata::FLOAT16 && wanted != fl::v1::UpdateMetadata::INT8) {
    absl::Status s = absl::UnimplementedError(absl::StrCat(
        "task asks for update encoding ", fl::v1::UpdateMetadata::Encoding_Name(wanted),
        "; this SDK sends FLOAT32, FLOAT16 or INT8"));
    Decline(task, s);
    return s;
  }
  // int8's stochastic rounding draws from a generator seeded per task from the OS (OpenSSL's
  // RAND_bytes): no two sites or rounds share their rounding noise.
  uint32_t seed_words[4] = {};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(seed_words), sizeof(seed_words)) != 1) {
    return absl::InternalError("RAND_bytes failed to seed the update's stochastic rounding");
  }
  std::seed_seq seq(std::begin(seed_words), std::end(seed_words));
  std::mt19937_64 rng(seq);
  const UpdateEncoding encoding =
      wanted == fl::v1::UpdateMetadata::FLOAT16 ? UpdateEncoding::kFloat16 : UpdateEncoding::kInt8;
  // The change is computed and encoded one codec chunk at a time as the chunks go out, so a
  // site never holds a copy of the model for it. A first pass checks that all of it can be
  // encoded, so that an update that cannot is declined before any byte is sent.
  std::span<const float> w = result.model.data();
  std::span<const float> g = global.data();
  const int64_t n = static_cast<int64_t>(w.size());
  const int64_t per = ValuesPerChunk(encoding);
  std::vector<float> delta(static_cast<size_t>(std::min(per, n)));
  auto change_from = [&](int64_t first) -> std::span<const float> {
    const size_t count = static_cast<size_t>(std::min(per, n - first));
    for (size_t i = 0; i < count; ++i) delta[i] = w[first + i] - g[first + i];
    return {delta.data(), count};
  };
  for (int64_t first = 0; first < n; first += per) {
    if (absl::Status why = CheckEncodable(encoding, change_from(first), first); !why.ok()) {
      absl::Status s = absl::InvalidArgumentError(absl::StrCat(
          "cannot encode the update in ", UpdateEncodingName(encoding), ": ", why.message()));
      Decline(task, s);
      return s;
    }
  }
  meta.set_encoding(wanted);
  meta.set_payload_bytes(EncodedBytes(encoding, n));
  std::vector<std::byte> encoded(static_cast<size_t>(kMaxChunkBytes));
  // A full codec chunk is kMaxChunkBytes of every encoding (update_codec.h), and each wire chunk
  // is one codec chunk, so a chunk's offset gives its first parameter.
  return SubmitChunks(meta, meta.payload_bytes(), [&](int64_t offset) {
    std::span<const float> change = change_from(offset / kMaxChunkBytes * per);
    std::span<std::byte> out(encoded.data(),
                             static_cast<size_t>(EncodedChunkBytes(
                                 encoding, static_cast<int64_t>(change.size()))));
    EncodeChunk(encoding, change, rng, out);
    return std::span<const std::byte>(out);
  });
}

absl::Status Client::Impl::SubmitPayload(const fl::v1::UpdateMetadata& meta,
                                         std::span<const std::byte> payload) {
  const int64_t size = static_cast<int64_t>(payload.size());
  return SubmitChunks(meta, size, [&](int64_t offset) {
    return payload.subspan(static_cast<size_t>(offset),
                           static_cast<size_t>(std::min(kMaxChunkBytes, size - offset)));
  });
}

absl::Status Client::Impl::SubmitChunks(const fl::v1::UpdateMetadata& meta, int64_t payload_bytes,
                                        const ChunkSource& next_chunk) {
  static_assert(kMaxChunkBytes % 8 == 0, "chunks must hold whole words of every encoding");
  Call call(this, internal::TransferTimeout(payload_bytes));
  fl::v1::SubmitReply reply;
  std::unique_ptr<grpc::ClientWriter<fl::v1::UpdatePart>> writer =
      stub_->SubmitUpdate(&call.ctx, &reply);
  fl::v1::UpdatePart part;
  *part.mutable_metadata() = meta;
  bool ok = writer->Write(part);
  Sha256 sha;
  fl::v1::UpdatePart c;
  for (int64_t offset = 0; ok && offset < payload_bytes;) {
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

void Client::Impl::Decline(const fl::v1::Task& task, const absl::Status& why) {
  Call call(this, absl::Seconds(30));
  fl::v1::SubmitReply reply;
  std::unique_ptr<grpc::ClientWriter<fl::v1::UpdatePart>> writer =
      stub_->SubmitUpdate(&call.ctx, &reply);
  fl::v1::UpdatePart part;
  fl::v1::UpdateMetadata* meta = part.mutable_metadata();
  internal::SetTaskIds(task, *meta);
  meta->set_decline_reason(why.ToString());
  if (writer->Write(part)) writer->WritesDone();
  absl::Status s = FromGrpcStatus(writer->Finish());
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "task_declined",
           {{"name", options_.name},
            {"round", absl::StrCat(task.round())},
            {"why", why.ToString()},
            {"server", s.ok() ? "recorded" : s.ToString()}});
}

absl::Status Client::Impl::Fit(const fl::v1::Task& task, TaskReport& report) {
  HeartbeatThread heartbeats(this, task);
  const FitConfig config = internal::FitConfigOf(task);
  absl::StatusOr<ModelSpec> spec = AcceptFitTask(task, config);
  if (!spec.ok()) {
    Decline(task, spec.status());
    return spec.status();
  }
  if (absl::Status s = ApplyStatistics(task); !s.ok()) {
    Decline(task, s);
    return s;
  }
  absl::StatusOr<Model> global = Download(task, *spec);
  if (!global.ok()) return global.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<FitResult> result = trainer_->Fit(*global, config);
  report.train_time = absl::Now() - start;
  if (!result.ok()) {
    Decline(task, result.status());
    return result.status();
  }
  if (!(result->model.spec() == *spec)) {
    absl::Status s =
        absl::InternalError("the trainer returned a model of another spec than it was given");
    Decline(task, s);
    return s;
  }
  if (stopping_) return absl::CancelledError("client stopped");
  report.num_examples = result->num_examples;
  return Submit(task, *result, *global);
}

absl::StatusOr<ModelSpec> Client::Impl::AcceptFitTask(const fl::v1::Task& task,
                                                      const FitConfig& config) {
  // The site's limits come before any byte of the model: a task outside them is declined.
  if (absl::Status s = CheckSiteLimits(options_.limits, config); !s.ok()) return s;
  absl::StatusOr<ModelSpec> spec = FromProto(task.fit().model_spec());
  if (!spec.ok()) return spec.status();
  if (!(*spec == trainer_->spec())) {
    return absl::FailedPreconditionError(absl::StrCat("the server's model ", spec->ToJson(),
                                                      " is not the model this site trains (",
                                                      trainer_->spec().ToJson(), ")"));
  }
  return spec;
}

absl::Status Client::Impl::Evaluate(const fl::v1::Task& task) {
  HeartbeatThread heartbeats(this, task);
  fl::v1::EvaluationResult result;
  internal::SetTaskIds(task, result);
  absl::StatusOr<ModelSpec> spec = FromProto(task.fit().model_spec());
  absl::Status failure;
  std::string summary;  // "loss 0.41 accuracy 0.83 auc 0.9 on 120 examples", for the log
  if (!spec.ok()) {
    failure = spec.status();
  } else if (!(*spec == trainer_->spec())) {
    failure = absl::FailedPreconditionError("the server's model is not the model this site trains");
  } else {
    failure = ApplyStatistics(task);
  }
  if (failure.ok()) {
    absl::StatusOr<Model> global = Download(task, *spec);
    if (!global.ok()) return global.status();  // transport trouble: the task is offered again
    absl::StatusOr<EvalResult> eval = trainer_->Evaluate(*global);
    if (eval.ok()) {
      result.set_num_examples(eval->num_examples);
      result.set_loss(eval->loss);
      summary = absl::StrCat("loss ", eval->loss);
      for (const auto& [k, v] : eval->metrics) {
        (*result.mutable_metrics())[k] = v;
        absl::StrAppend(&summary, " ", k, " ", v);
      }
      absl::StrAppend(&summary, " on ", eval->num_examples, " examples");
    } else {
      failure = eval.status();
    }
  }
  if (!failure.ok()) result.set_error(failure.ToString());
  Call call(this, absl::Seconds(30));
  fl::v1::SubmitReply reply;
  absl::Status s = FromGrpcStatus(stub_->SubmitEvaluation(&call.ctx, result, &reply));
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "evaluate_task",
           {{"name", options_.name},
            {"round", absl::StrCat(task.round())},
            {"result", failure.ok() ? summary : absl::StrCat("declined: ", failure.ToString())},
            {"server", s.ok() ? "recorded" : s.ToString()}});
  return s;
}

absl::Status Client::Impl::Run() {
  absl::Duration backoff = options_.initial_backoff;
  absl::Duration fit_backoff = options_.initial_backoff;
  absl::Time unreachable_since = absl::InfinitePast();
  int attempt = 0;  // retries in this outage
  bool joined = false;
  bool live = false;  // a task other than DONE came: the run was not over when this call joined
  // Waits after a retryable failure; an error once the server has been unreachable too long.
  auto retry = [&](const absl::Status& s) -> absl::Status {
    const absl::Time now = absl::Now();
    if (unreachable_since == absl::InfinitePast()) unreachable_since = now;
    if (now - unreachable_since > options_.reconnect_timeout) {
      std::string hint = options_.insecure_plaintext
                             ? " (if the server requires TLS, give the CA, certificate and key)"
                             : "";
      return absl::UnavailableError(
          absl::StrCat("server ", options_.server_address, " unreachable for ",
                       absl::FormatDuration(now - unreachable_since), ": ", s.message(), hint));
    }
    LogEvent(LogLevel::kWarn, "client_retry",
             {{"name", options_.name},
              {"attempt", absl::StrCat(++attempt)},
              {"delay", absl::FormatDuration(backoff)},
              {"call", joined ? "poll" : "join"},
              {"code", absl::StatusCodeToString(s.code())},
              {"error", std::string(s.message())}});
    if (!WaitForServer(backoff)) return absl::CancelledError("client stopped");
    backoff = std::min(backoff * 2, options_.max_backoff);
    return absl::OkStatus();
  };
  while (!stopping_) {
    absl::Status s = joined ? absl::OkStatus() : Join();
    fl::v1::Task task;
    if (s.ok()) {
      joined = true;
      s = Poll(&task);
    }
    if (stopping_) break;
    if (!s.ok()) {
      if (!IsRetryable(s)) {
        LogEvent(LogLevel::kError, "client_gave_up",
                 {{"name", options_.name}, {"error", s.ToString()}});
        return s;
      }
      if (absl::Status give_up = retry(s); !give_up.ok()) return give_up;
      continue;
    }
    if (attempt > 0) {
      LogEvent(LogLevel::kInfo, "client_reconnected",
               {{"name", options_.name},
                {"attempts", absl::StrCat(attempt)},
                {"after", absl::FormatDuration(absl::Trunc(absl::Now() - unreachable_since,
                                                           absl::Milliseconds(1)))}});
    }
    attempt = 0;
    backoff = options_.initial_backoff;
    unreachable_since = absl::InfinitePast();
    run_id_ = task.run_id();
    if (task.kind() != fl::v1::Task::DONE) live = true;
    // A task of another run or with another id ends this client's secure-aggregation round, if
    // one was open.
    if (task.kind() == fl::v1::Task::DONE) {
      secagg_.Reset();
    } else if (task.kind() != fl::v1::Task::WAIT) {
      secagg_.KeepOnly(task.run_id(), task.task_id());
    }
    switch (task.kind()) {
      case fl::v1::Task::DONE: {
        std::lock_guard<std::mutex> lock(id_mu_);
        last_run_ = {.run_id = task.run_id(),
                     .failed = task.run_status() == fl::v1::Task::RUN_FAILED,
                     .message = task.message(),
                     .was_live = live};
        // A run that was over before this call joined is news only the first time.
        LogEvent(live ? LogLevel::kInfo : LogLevel::kDebug, "client_done",
                 {{"name", options_.name}, {"why", task.message()}});
        return absl::OkStatus();
      }
      case fl::v1::Task::STATISTICS:
      case fl::v1::Task::EVALUATE: {
        const bool statistics = task.kind() == fl::v1::Task::STATISTICS;
        absl::Status s = statistics ? Statistics(task) : Evaluate(task);
        if (!s.ok()) {
          LogEvent(LogLevel::kWarn, statistics ? "statistics_task_failed" : "evaluate_task_failed",
                   {{"name", options_.name},
                    {"round", absl::StrCat(task.round())},
                    {"delay", absl::FormatDuration(fit_backoff)},
                    {"error", s.ToString()}});
          if (!SleepUnlessStopped(fit_backoff)) return absl::CancelledError("client stopped");
        }
        fit_backoff =
            s.ok() ? options_.initial_backoff : std::min(fit_backoff * 2, options_.max_backoff);
        break;
      }
      case fl::v1::Task::FIT: {
        TaskReport report;
        report.round = task.round();
        report.task_id = task.task_id();
        report.status = Fit(task, report);
        if (on_task_) on_task_(report);
        if (report.status.ok()) {
          fit_backoff = options_.initial_backoff;
          break;
        }
        LogEvent(LogLevel::kWarn, "fit_task_failed",
                 {{"name", options_.name},
                  {"round", absl::StrCat(task.round())},
                  {"delay", absl::FormatDuration(fit_backoff)},
                  {"error", report.status.ToString()}});
        // A declined task is not offered again; anything else (a download or upload cut
        // short) is, so do not hammer the server with it.
        if (!SleepUnlessStopped(fit_backoff)) return absl::CancelledError("client stopped");
        fit_backoff = std::min(fit_backoff * 2, options_.max_backoff);
        break;
      }
      case fl::v1::Task::SECAGG_ADVERTISE_KEYS:
      case fl::v1::Task::SECAGG_SHARE_KEYS:
      case fl::v1::Task::SECAGG_MASKED_INPUT:
      case fl::v1::Task::SECAGG_UNMASK: {
        TaskReport report;
        report.round = task.round();
        report.task_id = task.task_id();
        report.stage = internal::StageName(task.kind());
        report.status = SecAggStage(task, report);
        if (on_task_) on_task_(report);
        if (report.status.ok()) {
          fit_backoff = options_.initial_backoff;
          break;
        }
        LogEvent(LogLevel::kWarn, "secagg_stage_failed",
                 {{"name", options_.name},
                  {"round", absl::StrCat(task.round())},
                  {"stage", report.stage},
                  {"delay", absl::FormatDuration(fit_backoff)},
                  {"error", report.status.ToString()}});
        if (!SleepUnlessStopped(fit_backoff)) return absl::CancelledError("client stopped");
        fit_backoff = std::min(fit_backoff * 2, options_.max_backoff);
        break;
      }
      default:
        break;
    }
  }
  return absl::CancelledError("client stopped");
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options, Trainer* trainer) {
  if (trainer == nullptr) return absl::InvalidArgumentError("a client needs a trainer");
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = internal::MakeChannel(options);
  if (!channel.ok()) return channel.status();
  return std::make_unique<Client>(
      std::make_unique<Impl>(std::move(options), trainer, *std::move(channel)));
}

absl::Status Client::Run() { return impl_->Run(); }
void Client::Stop() { impl_->Stop(); }
void Client::set_on_task(std::function<void(const TaskReport&)> fn) {
  impl_->on_task_ = std::move(fn);
}
RunEnd Client::last_run() const {
  std::lock_guard<std::mutex> lock(impl_->id_mu_);
  return impl_->last_run_;
}
std::string Client::client_id() const {
  std::lock_guard<std::mutex> lock(impl_->id_mu_);
  return impl_->client_id_;
}

}  // namespace fl::client
