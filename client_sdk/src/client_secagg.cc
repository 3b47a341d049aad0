// Client::Impl's side of a secure-aggregation round: one method per stage task, the masked
// upload, and the declines (see client_impl.h and secagg_client.h).
#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "client_sdk/src/client_impl.h"
#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/secagg/ddg_encoding.h"
#include "fl/common/logging.h"

namespace fl::client {
std::string StageName(ClientTask::Kind kind) {
  switch (kind) {
    case ClientTask::Kind::kSecAggAdvertise:
      return "secagg_advertise_keys";
    case ClientTask::Kind::kSecAggShare:
      return "secagg_share_keys";
    case ClientTask::Kind::kSecAggMaskedInput:
      return "secagg_masked_input";
    case ClientTask::Kind::kSecAggConsistency:
      return "secagg_consistency";
    case ClientTask::Kind::kSecAggUnmask:
      return "secagg_unmask";
    default:
      return "fit";
  }
}

namespace {

// The round's noise against this site's input of `dimension` values. With the discrete Gaussian
// (which the session applies whatever the dp_* fields say) the clip norm counted is the one the
// rounding enforces, RoundedL2Bound(C / gamma) steps of gamma, and the noise the site's own
// sigma: its noise alone is an exact discrete Gaussian, whose RDP is the Gaussian's for that
// norm (Kairouz et al.'s Proposition 14 with tau = 0 for one site).
SecureRoundNoise NoiseOf(const SecAggRoundParams& p, int64_t dimension) {
  SecureRoundNoise noise{.num_sites = p.secagg.num_clients,
                         .num_neighbors = p.secagg.num_neighbors,
                         .threshold = p.secagg.threshold,
                         .clip_norm = p.dp_clip_norm,
                         .noise_stddev = p.dp_noise_stddev,
                         .corrupt_fraction = p.secagg.corrupt_fraction};
  if (secagg::UsesDdg(p.secagg)) {
    const secagg::DdgEncoding& e = p.secagg.ddg;
    const auto padded = static_cast<int64_t>(
        secagg::DdgPaddedDimension(static_cast<size_t>(std::max<int64_t>(dimension, 1))));
    noise.clip_norm = aggregation::dp::RoundedL2Bound(e.clip_norm / e.granularity, e.beta, padded) *
                      e.granularity;
    noise.noise_stddev = e.site_stddev;
  }
  return noise;
}

}  // namespace

bool IsSecAgg(ClientTask::Kind kind) {
  return kind == ClientTask::Kind::kSecAggAdvertise || kind == ClientTask::Kind::kSecAggShare ||
         kind == ClientTask::Kind::kSecAggMaskedInput ||
         kind == ClientTask::Kind::kSecAggConsistency || kind == ClientTask::Kind::kSecAggUnmask;
}

absl::Status Client::Impl::SecAggStage(const ClientTask& task, TaskReport& report) {
  const bool again = secagg_.Answered(task);
  absl::StatusOr<SecAggReply> message = absl::UnknownError("no message");
  switch (task.kind) {
    case ClientTask::Kind::kSecAggAdvertise: {
      // When the task names the round's model, the round is judged here, before any key is
      // made (limits and model); otherwise the trainer's model sets the dimension and the
      // masked-input stage, which always names the model, judges it.
      absl::StatusOr<ModelSpec> spec = trainer_->spec();
      if (task.has_spec) spec = AcceptFitTask(task);
      // The noise this site enforces, before any key is made.
      if (absl::Status noise = CheckSecureRoundNoise(task); spec.ok() && !noise.ok()) {
        spec = noise;
      }
      if (spec.ok()) {
        message = secagg_.AdvertiseKeys(task, static_cast<size_t>(spec->NumFloats()));
      } else {
        message = spec.status();
      }
      break;
    }
    case ClientTask::Kind::kSecAggShare:
      message = secagg_.ShareKeys(task);
      break;
    case ClientTask::Kind::kSecAggMaskedInput: {
      absl::Status decline;  // not transport trouble: this client leaves the round
      absl::Status s = MaskedInput(task, report, decline);
      if (!decline.ok()) {
        DeclineSecAgg(task, decline);
        return decline;
      }
      return s;
    }
    case ClientTask::Kind::kSecAggConsistency:
    case ClientTask::Kind::kSecAggUnmask: {
      const bool sign = task.kind == ClientTask::Kind::kSecAggConsistency;
      const size_t listed = sign ? (task.survivors.ok() ? task.survivors->survivors.size() : 0)
                                 : (task.unmask.ok() ? task.unmask->survivors.size() : 0);
      const bool readable = sign ? task.survivors.ok() : task.unmask.ok();
      if (const int32_t least = options_.limits.min_sum_size;
          least > 0 && readable && static_cast<int32_t>(listed) < least) {
        // The server would unmask a sum smaller than this site allows: it signs no such set
        // and no share leaves it. ABORTED: a refusal of this round's sum, not of the run.
        message = absl::AbortedError(
            absl::StrCat("the ", sign ? "survivor set" : "unmasking", " lists ", listed,
                         " inputs in the sum; this site reveals shares only for sums of at least ",
                         least, " (limits.min_sum_size)"));
      } else {
        message = sign ? secagg_.SignSurvivors(task) : secagg_.Unmask(task);
      }
      if (!message.ok()) {
        LogEvent(LogLevel::kError, "secagg_refused",
                 {{"name", options_.name},
                  {"round", absl::StrCat(task.round)},
                  {"why", message.status().ToString()}});
      }
      break;
    }
    default:
      return absl::InternalError("not a secure-aggregation task");
  }
  if (!message.ok()) {
    DeclineSecAgg(task, message.status());
    return message.status();
  }
  if (stopping_) return absl::CancelledError("client stopped");
  return SendSecAgg(*message, again);
}

absl::Status Client::Impl::MaskedInput(const ClientTask& task, TaskReport& report,
                                       absl::Status& decline) {
  HeartbeatThread heartbeats(this, task);
  const internal::MaskedUpload* upload = secagg_.SavedUpload(task);
  const bool again = upload != nullptr;
  if (upload == nullptr) {
    const FitConfig& config = task.config;
    absl::StatusOr<ModelSpec> spec = AcceptFitTask(task);
    if (absl::Status session = secagg_.CheckSession(task); spec.ok() && !session.ok()) {
      spec = session;  // no keys shared in this round: nothing to mask with
    }
    if (absl::Status noise = CheckSecureRoundNoise(task); spec.ok() && !noise.ok()) spec = noise;
    if (!spec.ok()) {
      decline = spec.status();
      return decline;
    }
    absl::StatusOr<std::shared_ptr<const Model>> global = transport_->Download(task, *spec);
    if (!global.ok()) return global.status();  // transport trouble: the task is offered again
    const absl::Time start = absl::Now();
    absl::StatusOr<FitResult> result = trainer_->FitShared(*global, config);
    report.train_time = absl::Now() - start;
    if (result.ok() && !(result->model.spec() == *spec)) {
      result =
          absl::InternalError("the trainer returned a model of another spec than it was given");
    }
    if (!result.ok()) {
      decline = result.status();
      return decline;
    }
    report.num_examples = result->num_examples;
    // The change from the global model is what is clipped, quantized and masked.
    std::span<float> change = result->model.data();
    std::span<const float> base = (*global)->data();
    for (size_t i = 0; i < change.size(); ++i) change[i] -= base[i];
    absl::StatusOr<const internal::MaskedUpload*> masked =
        secagg_.MaskInput(task, change, result->num_examples);
    if (!masked.ok()) {
      decline = masked.status();
      return decline;
    }
    // Counted once masked, whether or not the upload gets through: the noise is in it. With a
    // ledger, the input leaves only once the ledger holds it.
    const SecAggRoundParams* p = secagg_.params(task);
    if (p == nullptr && ledger_.has_value()) {
      // Fail closed: an input the ledger cannot count is not sent.
      secagg_.Reset();
      decline = absl::InternalError("the masked input's round parameters are gone; not sent");
      return decline;
    }
    if (p != nullptr) {
      const double z = WorstCaseNoiseMultiplier(NoiseOf(*p, trainer_->spec().NumFloats()));
      if (ledger_.has_value()) {
        if (absl::Status s = ledger_->Record(z, absl::StrCat("run ", task.run_id, " round ",
                                                             task.round, " task ", task.task_id));
            !s.ok()) {
          secagg_.Reset();  // the masked input is not sent: the session cannot go on
          decline = s;
          return decline;
        }
      }
      inputs_masked_.push_back(z);
    }
    upload = *masked;
  }
  if (stopping_) return absl::CancelledError("client stopped");
  // Nothing in the clear but the shape: no example count, no metrics.
  UpdateHeader meta = ReplyTo<UpdateHeader>(task);
  meta.encoding = upload->encoding;
  meta.payload_bytes = static_cast<int64_t>(upload->payload.size());
  if (task.spec.ok()) meta.spec = *task.spec;
  absl::Status s = SubmitPayload(meta, upload->payload);
  return again && absl::IsAlreadyExists(s) ? absl::OkStatus() : s;
}

absl::Status Client::Impl::OpenPrivacyLedger() {
  const SiteLimits& limits = options_.limits;
  if (limits.privacy_ledger.empty()) {
    if (limits.max_epsilon > 0) {
      LogEvent(LogLevel::kWarn, "privacy_ledger_missing",
               {{"name", options_.name},
                {"why",
                 "limits.max_epsilon counts this process's masked inputs only; set "
                 "limits.privacy_ledger to count them across restarts"}});
    }
    return absl::OkStatus();
  }
  absl::StatusOr<internal::PrivacyLedger> ledger =
      internal::PrivacyLedger::Open(limits.privacy_ledger);
  if (!ledger.ok()) return ledger.status();
  inputs_masked_ = ledger->noise_multipliers();
  ledger_.emplace(*std::move(ledger));
  if (!inputs_masked_.empty()) {
    LogEvent(
        LogLevel::kInfo, "privacy_ledger_read",
        {{"path", limits.privacy_ledger}, {"masked_inputs", absl::StrCat(inputs_masked_.size())}});
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::CheckSecureRoundNoise(const ClientTask& task) const {
  // The round's parameters as this site's session took them at the first stage (what its noise
  // is made with), else as the task states them.
  const SecAggRoundParams* p = secagg_.params(task);
  if (p == nullptr) {
    if (!task.secagg_params.ok()) return task.secagg_params.status();
    p = &*task.secagg_params;
  }
  return CheckSecureRoundLimits(options_.limits, NoiseOf(*p, trainer_->spec().NumFloats()),
                                inputs_masked_);
}

absl::Status Client::Impl::SendSecAgg(const SecAggReply& message, bool again) {
  absl::Status s = transport_->SubmitSecAgg(message);
  // A message sent again after transport trouble may have arrived the first time.
  return again && absl::IsAlreadyExists(s) ? absl::OkStatus() : s;
}

void Client::Impl::DeclineSecAgg(const ClientTask& task, const absl::Status& why) {
  secagg_.Reset();
  SecAggReply message = ReplyTo<SecAggReply>(task);
  message.stage = task.kind;
  message.decline_reason = why.ToString();
  absl::Status s = transport_->SubmitSecAgg(message);
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "task_declined",
           {{"name", options_.name},
            {"round", absl::StrCat(task.round)},
            {"stage", StageName(task.kind)},
            {"why", why.ToString()},
            {"server", s.ok() ? "recorded" : s.ToString()}});
}

}  // namespace fl::client
