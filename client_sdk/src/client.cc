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
#include "fl/aggregation/secagg/identity.h"
#include "fl/client/dataset.h"
#include "fl/common/chunking.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/update_codec.h"
#include "openssl/rand.h"

namespace fl::client {
namespace {

// A server that is shutting down cancels the calls in flight (a long poll gets CANCELLED, not
// UNAVAILABLE); unless this client is stopping itself (checked first), that is the server going
// away, and the client waits for it like any other outage.
// RESOURCE_EXHAUSTED only when it is the server's per-client call quota or its full queue ("the
// server is busy"), which pass once calls end; gRPC's own (a message past a size limit) does not.
bool IsRetryable(const absl::Status& s) {
  if (absl::IsResourceExhausted(s)) {
    for (absl::string_view passing : {"(limits.max_streams_per_client)",
                                      "(limits.max_uploads_per_client)", "the server is busy"}) {
      if (absl::StrContains(s.message(), passing)) return true;
    }
    return false;
  }
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s);
}

// A failed connection whose cause will not pass: this site does not trust the server's
// certificate (another CA than server.ca, or not valid for the address dialled). gRPC reports it
// as UNAVAILABLE, like an outage; retrying it for reconnect_timeout only floods the log. OK when
// `s` is anything else.
absl::Status ServerTrustProblem(const absl::Status& s, const ClientOptions& options) {
  if (!absl::IsUnavailable(s) || options.insecure_plaintext) return absl::OkStatus();
  const absl::string_view m = s.message();
  const bool untrusted = absl::StrContains(m, "certificate verify failed") ||
                         absl::StrContains(m, "CERTIFICATE_VERIFY_FAILED");
  const bool wrong_name =
      absl::StrContains(m, "Peer name") || absl::StrContains(m, "not in peer certificate");
  if (!untrusted && !wrong_name) return absl::OkStatus();
  return absl::UnauthenticatedError(absl::StrCat(
      kServerTrustPrefix, options.server_address, ": ",
      wrong_name
          ? "its certificate is not valid for the address dialled"
          : "its certificate does not verify against this site's CA (" + options.ca_cert_path +
                "): another CA, or a certificate expired or not yet valid (check both machines' "
                "clocks)",
      "; give the federation's ca.pem (server.ca) and an address its certificate lists "
      "(server.address); fl client --preflight shows which (gRPC: ",
      m, ")"));
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
  if ((limits.min_noise_multiplier > 0 || limits.max_epsilon > 0) && !config.secure_aggregation) {
    // The server would read the update: no noise of the site's counts against it.
    return absl::PermissionDeniedError(absl::StrCat(
        "task runs without secure aggregation, so the server would read this update; this site "
        "limits what the server learns (limits.",
        limits.min_noise_multiplier > 0 ? "min_noise_multiplier" : "max_epsilon", ")"));
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::Join() {
  JoinRequestInfo req;
  req.client_name = options_.name;
  req.capabilities = {"cpu", "fp32", "fp16", "int8"};
  req.model_spec = trainer_->spec();
  req.feature_columns = options_.feature_columns;
  if (!req.feature_columns.empty()) {
    req.feature_schema_sha256 = FeatureSchemaSha256(options_.feature_columns);
  }
  absl::StatusOr<JoinAnswer> reply = transport_->Join(req);
  if (!reply.ok()) return reply.status();
  run_id_ = reply->run_id;
  live_ = false;
  absl::MutexLock lock(&id_mu_);
  client_id_ = reply->client_id;
  return absl::OkStatus();
}

absl::Status Client::Impl::Submit(const ClientTask& task, const FitResult& result,
                                  const Model& global) {
  UpdateHeader meta = ReplyTo<UpdateHeader>(task);
  meta.num_examples = result.num_examples;
  meta.metrics = result.metrics;
  meta.spec = result.model.spec();
  if (!task.update_encoding.has_value()) {
    absl::Status s =
        absl::UnimplementedError(absl::StrCat("task asks for update encoding ", task.encoding_name,
                                              "; this SDK sends FLOAT32, FLOAT16 or INT8"));
    Decline(task, s);
    return s;
  }
  const UpdateEncoding encoding = *task.update_encoding;
  if (encoding == UpdateEncoding::kFloat32) {
    meta.encoding = UpdateHeader::Encoding::kFloat32;
    meta.payload_bytes = result.model.NumBytes();
    return SubmitPayload(meta, result.model.bytes());
  }
  // int8's stochastic rounding draws from a generator seeded per task from the OS (OpenSSL's
  // RAND_bytes): no two sites or rounds share their rounding noise.
  uint32_t seed_words[4] = {};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(seed_words), sizeof(seed_words)) != 1) {
    return absl::InternalError("RAND_bytes failed to seed the update's stochastic rounding");
  }
  std::seed_seq seq(std::begin(seed_words), std::end(seed_words));
  std::mt19937_64 rng(seq);
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
      // ABORTED: this round's change does not fit the encoding; another round's may (the server
      // keeps the site in the draw for a reason that is not permanent).
      absl::Status s = absl::AbortedError(absl::StrCat(
          "cannot encode the update in ", UpdateEncodingName(encoding), ": ", why.message()));
      Decline(task, s);
      return s;
    }
  }
  meta.encoding = encoding == UpdateEncoding::kFloat16 ? UpdateHeader::Encoding::kFloat16
                                                       : UpdateHeader::Encoding::kInt8;
  meta.payload_bytes = EncodedBytes(encoding, n);
  std::vector<std::byte> encoded(static_cast<size_t>(kMaxChunkBytes));
  // A full codec chunk is kMaxChunkBytes of every encoding (update_codec.h), and each wire chunk
  // is one codec chunk, so a chunk's offset gives its first parameter.
  return transport_->SubmitUpdate(meta, [&](int64_t offset) {
    std::span<const float> change = change_from(offset / kMaxChunkBytes * per);
    std::span<std::byte> out(encoded.data(), static_cast<size_t>(EncodedChunkBytes(
                                                 encoding, static_cast<int64_t>(change.size()))));
    EncodeChunk(encoding, change, rng, out);
    return std::span<const std::byte>(out);
  });
}

absl::Status Client::Impl::SubmitPayload(const UpdateHeader& header,
                                         std::span<const std::byte> payload) {
  const int64_t size = static_cast<int64_t>(payload.size());
  return transport_->SubmitUpdate(header, [&](int64_t offset) {
    return payload.subspan(static_cast<size_t>(offset),
                           static_cast<size_t>(std::min(kMaxChunkBytes, size - offset)));
  });
}

void Client::Impl::Decline(const ClientTask& task, const absl::Status& why) {
  absl::Status s = transport_->Decline(task, why.ToString());
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "task_declined",
           {{"name", options_.name},
            {"round", absl::StrCat(task.round)},
            {"why", why.ToString()},
            {"server", s.ok() ? "recorded" : s.ToString()}});
}

absl::Status Client::Impl::Fit(const ClientTask& task, TaskReport& report) {
  HeartbeatThread heartbeats(this, task);
  const FitConfig& config = task.config;
  absl::StatusOr<ModelSpec> spec = AcceptFitTask(task);
  if (!spec.ok()) {
    Decline(task, spec.status());
    return spec.status();
  }
  if (absl::Status s = ApplyStatistics(task); !s.ok()) {
    Decline(task, s);
    return s;
  }
  absl::StatusOr<std::shared_ptr<const Model>> global = transport_->Download(task, *spec);
  if (!global.ok()) return global.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<FitResult> result = trainer_->FitShared(*global, config);
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
  return Submit(task, *result, **global);
}

absl::StatusOr<ModelSpec> Client::Impl::AcceptFitTask(const ClientTask& task) {
  // The site's limits come before any byte of the model: a task outside them is declined.
  if (absl::Status s = CheckSiteLimits(options_.limits, task.config); !s.ok()) return s;
  const absl::StatusOr<ModelSpec>& spec = task.spec;
  if (!spec.ok()) return spec.status();
  if (!(*spec == trainer_->spec())) {
    return absl::FailedPreconditionError(absl::StrCat("the server's model ", spec->ToJson(),
                                                      " is not the model this site trains (",
                                                      trainer_->spec().ToJson(), ")"));
  }
  return spec;
}

absl::Status Client::Impl::Evaluate(const ClientTask& task) {
  HeartbeatThread heartbeats(this, task);
  EvaluationReply result = ReplyTo<EvaluationReply>(task);
  const absl::StatusOr<ModelSpec>& spec = task.spec;
  absl::Status failure;
  std::string summary;  // "loss 0.41 accuracy 0.83 auc 0.9 on 120 examples", for the log
  if (options_.limits.require_secure_aggregation && !options_.share_site_evaluation) {
    // The server would read this site's loss, metrics and example count in the clear, which a
    // site that takes part only under secure aggregation does not allow unless it says so: a
    // server that claims to withhold them cannot be checked from here.
    failure = absl::PermissionDeniedError(
        "this site requires secure aggregation (limits.require_secure_aggregation) and keeps its "
        "evaluation results: the server would read them in the clear; set share_site_evaluation "
        "to send them");
  } else if (!spec.ok()) {
    failure = spec.status();
  } else if (!(*spec == trainer_->spec())) {
    failure = absl::FailedPreconditionError("the server's model is not the model this site trains");
  } else {
    failure = ApplyStatistics(task);
  }
  if (failure.ok()) {
    absl::StatusOr<std::shared_ptr<const Model>> global = transport_->Download(task, *spec);
    if (!global.ok()) return global.status();  // transport trouble: the task is offered again
    absl::StatusOr<EvalResult> eval = trainer_->EvaluateShared(*global);
    if (eval.ok()) {
      result.num_examples = eval->num_examples;
      result.loss = eval->loss;
      summary = absl::StrCat("loss ", eval->loss);
      for (const auto& [k, v] : eval->metrics) {
        result.metrics[k] = v;
        absl::StrAppend(&summary, " ", k, " ", v);
      }
      absl::StrAppend(&summary, " on ", eval->num_examples, " examples");
    } else {
      failure = eval.status();
    }
  }
  if (!failure.ok()) result.error = failure.ToString();
  result.share_site_result = options_.share_site_evaluation;
  absl::Status s = transport_->SubmitEvaluation(result);
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "evaluate_task",
           {{"name", options_.name},
            {"round", absl::StrCat(task.round)},
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
    if (!transport_->WaitForServer(backoff)) return absl::CancelledError("client stopped");
    backoff = std::min(backoff * 2, options_.max_backoff);
    return absl::OkStatus();
  };
  while (!stopping_) {
    absl::Status s = joined ? absl::OkStatus() : Join();
    ClientTask task;
    if (s.ok()) {
      joined = true;
      absl::StatusOr<ClientTask> polled = transport_->Poll(run_id_, options_.poll_wait);
      if (polled.ok()) {
        task = *std::move(polled);
      } else {
        s = polled.status();
      }
    }
    if (stopping_) break;
    if (!s.ok()) {
      if (absl::Status trust = ServerTrustProblem(s, options_); !trust.ok()) s = trust;
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
    const absl::Status outcome = RunTask(task);
    if (task.kind == ClientTask::Kind::kDone) return absl::OkStatus();
    if (task.kind == ClientTask::Kind::kWait) continue;
    if (outcome.ok()) {
      fit_backoff = options_.initial_backoff;
      continue;
    }
    // A declined task is not offered again; anything else (a download or upload cut short)
    // is, so do not hammer the server with it.
    const char* event = task.kind == ClientTask::Kind::kStatistics ? "statistics_task_failed"
                        : task.kind == ClientTask::Kind::kEvaluate ? "evaluate_task_failed"
                        : task.kind == ClientTask::Kind::kFit      ? "fit_task_failed"
                                                                   : "secagg_stage_failed";
    const std::string round = absl::StrCat(task.round);
    const std::string delay = absl::FormatDuration(fit_backoff);
    if (IsSecAgg(task.kind)) {
      LogEvent(LogLevel::kWarn, event,
               {{"name", options_.name},
                {"round", round},
                {"stage", StageName(task.kind)},
                {"delay", delay},
                {"error", outcome.ToString()}});
    } else {
      LogEvent(LogLevel::kWarn, event,
               {{"name", options_.name},
                {"round", round},
                {"delay", delay},
                {"error", outcome.ToString()}});
    }
    if (!SleepUnlessStopped(fit_backoff)) return absl::CancelledError("client stopped");
    fit_backoff = std::min(fit_backoff * 2, options_.max_backoff);
  }
  return absl::CancelledError("client stopped");
}

absl::Status Client::Impl::RunTask(const ClientTask& task) {
  run_id_ = task.run_id;
  if (task.kind != ClientTask::Kind::kDone) live_ = true;
  // A task of another run or with another id ends this client's secure-aggregation round, if
  // one was open.
  if (task.kind == ClientTask::Kind::kDone) {
    secagg_.Reset();
  } else if (task.kind != ClientTask::Kind::kWait) {
    secagg_.KeepOnly(task.run_id, task.task_id);
  }
  switch (task.kind) {
    case ClientTask::Kind::kWait:
      return absl::OkStatus();
    case ClientTask::Kind::kDone: {
      bool was_live = false;
      {
        absl::MutexLock lock(&id_mu_);
        last_run_ = {.run_id = task.run_id,
                     .failed = task.run_failed,
                     .message = task.message,
                     .was_live = live_};
        was_live = live_;
      }
      // A run that was over before this call joined is news only the first time. Logged with
      // no lock held: a log sink may wait for a lock of its own (the Python SDK's GIL) that a
      // thread asking for last_run() or client_id() holds.
      LogEvent(was_live ? LogLevel::kInfo : LogLevel::kDebug, "client_done",
               {{"name", options_.name}, {"why", task.message}});
      return absl::OkStatus();
    }
    case ClientTask::Kind::kStatistics:
      return Statistics(task);
    case ClientTask::Kind::kEvaluate:
      return Evaluate(task);
    case ClientTask::Kind::kFit:
    case ClientTask::Kind::kSecAggAdvertise:
    case ClientTask::Kind::kSecAggShare:
    case ClientTask::Kind::kSecAggMaskedInput:
    case ClientTask::Kind::kSecAggConsistency:
    case ClientTask::Kind::kSecAggUnmask: {
      TaskReport report;
      report.round = task.round;
      report.task_id = task.task_id;
      report.stage = StageName(task.kind);
      const absl::Time start = absl::Now();
      report.status = IsSecAgg(task.kind) ? SecAggStage(task, report) : Fit(task, report);
      report.task_time = absl::Now() - start;
      if (on_task_) on_task_(report);
      return report.status;
    }
  }
  return absl::OkStatus();
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

namespace {

// With mutual TLS, the site signs its secure-aggregation messages with its certificate's key and
// checks its peers' against the federation's CA (the files the channel uses).
absl::Status SetSecAggIdentity(const ClientOptions& options, internal::SecAggParticipant& p) {
  if (options.insecure_plaintext || options.cert_path.empty() || options.key_path.empty() ||
      options.ca_cert_path.empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> cert = ReadFile(options.cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(options.key_path);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadFile(options.ca_cert_path);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::unique_ptr<secagg::IdentitySigner>> signer =
      secagg::MakeX509Signer(*std::move(cert), *key);
  if (!signer.ok()) {
    return absl::Status(signer.status().code(),
                        absl::StrCat("the site's certificate ", options.cert_path, " and key ",
                                     options.key_path, ": ", signer.status().message()));
  }
  absl::StatusOr<std::unique_ptr<secagg::IdentityVerifier>> verifier =
      secagg::MakeX509Verifier(*ca);
  if (!verifier.ok()) {
    return absl::Status(verifier.status().code(),
                        absl::StrCat("the federation's CA ", options.ca_cert_path, ": ",
                                     verifier.status().message()));
  }
  p.SetIdentity(*std::move(signer), *std::move(verifier));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options, Trainer* trainer) {
  if (trainer == nullptr) return absl::InvalidArgumentError("a client needs a trainer");
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeGrpcTransport(options);
  if (!transport.ok()) return transport.status();
  auto impl = std::make_unique<Impl>(std::move(options), trainer, *std::move(transport));
  if (absl::Status s = SetSecAggIdentity(impl->options(), impl->secagg()); !s.ok()) return s;
  if (absl::Status s = impl->OpenPrivacyLedger(); !s.ok()) return s;
  return std::make_unique<Client>(std::move(impl));
}

namespace internal {

absl::StatusOr<std::unique_ptr<Client>> MakeClient(ClientOptions options, Trainer* trainer,
                                                   std::unique_ptr<Transport> transport,
                                                   SecAggIdentity identity) {
  if (trainer == nullptr) return absl::InvalidArgumentError("a client needs a trainer");
  if (transport == nullptr) return absl::InvalidArgumentError("a client needs a transport");
  auto impl = std::make_unique<Client::Impl>(std::move(options), trainer, std::move(transport));
  if (identity.signer != nullptr || identity.verifier != nullptr) {
    impl->secagg().SetIdentity(std::move(identity.signer), std::move(identity.verifier));
  } else if (absl::Status s = SetSecAggIdentity(impl->options(), impl->secagg()); !s.ok()) {
    return s;
  }
  if (absl::Status s = impl->OpenPrivacyLedger(); !s.ok()) return s;
  return std::make_unique<Client>(std::move(impl));
}

struct ClientAccess {
  static Client::Impl& Of(Client& client) { return *client.impl_; }
};

absl::Status JoinOnce(Client& client) { return ClientAccess::Of(client).Join(); }
absl::Status RunTask(Client& client, const ClientTask& task) {
  return ClientAccess::Of(client).RunTask(task);
}

}  // namespace internal

absl::Status Client::Run() { return impl_->Run(); }
void Client::Stop() { impl_->Stop(); }
void Client::set_on_task(std::function<void(const TaskReport&)> fn) {
  impl_->on_task_ = std::move(fn);
}
RunEnd Client::last_run() const {
  absl::MutexLock lock(&impl_->id_mu_);
  return impl_->last_run_;
}
std::string Client::client_id() const {
  absl::MutexLock lock(&impl_->id_mu_);
  return impl_->client_id_;
}

}  // namespace fl::client
