// Updates: registering a client's one update for the round, checking its metadata, streaming and
// staging its chunks, folding it into the aggregate once verified whole; and declined tasks.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/common/chunking.h"
#include "fl/common/crash_point.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "fl/common/text.h"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

namespace {

// Names the first tensor whose name or shape differs between an update and the model.
std::string SpecMismatch(const ModelSpec& got, const ModelSpec& want) {
  auto shape = [](const TensorSpec& t) {
    std::string out = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) absl::StrAppend(&out, i ? "," : "", t.shape[i]);
    return out + "]";
  };
  const size_t n = std::min(got.tensors().size(), want.tensors().size());
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& g = got.tensors()[i];
    const TensorSpec& w = want.tensors()[i];
    if (g.name != w.name) {
      return absl::StrCat("update's tensor ", i, " is '", g.name, "' but the model's is '", w.name,
                          "'");
    }
    if (g.shape != w.shape) {
      return absl::StrCat("update's tensor '", g.name, "' has shape ", shape(g),
                          " but the model's has shape ", shape(w));
    }
  }
  return absl::StrCat("update has ", got.tensors().size(), " tensors but the model has ",
                      want.tensors().size());
}

}  // namespace

std::string CapClientText(std::string_view text) { return CutUtf8(text, kMaxClientTextBytes); }

std::shared_ptr<RoundState> EngineImpl::RegisterUploadLocked(const std::string& client_id,
                                                             const UpdateMeta& meta,
                                                             std::shared_ptr<UploadState> state,
                                                             absl::Status& refusal) {
  clients_[client_id].last_seen = clock_->Now();
  refusal = CheckTaskLocked(client_id, meta.run_id, meta.round, meta.task_id);
  if (!refusal.ok()) return nullptr;
  if (auto it = current_->uploads.find(client_id);
      it != current_->uploads.end() && it->second->phase == Phase::kAborted) {
    refusal = absl::FailedPreconditionError(
        absl::StrCat("this client was dropped from round ", meta.round, ": ", it->second->reason));
    return nullptr;
  }
  if (refusal = CheckSecAggUploadLocked(client_id, meta); !refusal.ok()) return nullptr;
  if (current_->uploads.count(client_id) != 0) {
    // The first update keeps its place; this one is not the round's business.
    refusal = absl::AlreadyExistsError(absl::StrCat(
        "an update for task '", meta.task_id, "' was already received in round ", meta.round));
    return nullptr;
  }
  current_->uploads[client_id] = std::move(state);
  return current_;
}

absl::Status EngineImpl::CheckUpdateLocked(const UpdateMeta& meta) const {
  if (meta.spec.has_value() && !(*meta.spec == global_->spec())) {
    return absl::InvalidArgumentError(SpecMismatch(*meta.spec, global_->spec()));
  }
  // The encoding, size, examples and metrics this round takes (round_input.h).
  return current_->input->CheckUpdate(meta);
}

absl::StatusOr<std::unique_ptr<Upload>> EngineImpl::BeginUpload(const std::string& client_id,
                                                                const UpdateMeta& meta) {
  auto state = std::make_shared<UploadState>();
  state->client_id = client_id;
  state->task_id = meta.task_id;
  state->num_examples = meta.num_examples;
  state->metrics = meta.metrics;
  absl::Status refusal;
  std::shared_ptr<RoundState> round;
  {
    absl::MutexLock lock(&mu_);
    round = RegisterUploadLocked(client_id, meta, state, refusal);
    if (round != nullptr) {
      // Registered: from here on the client's one update for this task is spent, whether it is
      // accepted or refused, and the round need not wait for it.
      refusal = CheckUpdateLocked(meta);
      if (refusal.ok()) {
        // One upload per client per attempt: the name is unique to them.
        absl::StatusOr<std::unique_ptr<StagedUpload>> staged =
            staging_->Create(absl::StrCat(run_.run_id, "-", round->round, "-", round->attempt, "-",
                                          fl::Sha256Hex(client_id).substr(0, 32)));
        if (staged.ok()) {
          state->staged = *std::move(staged);
        } else {
          refusal = staged.status();
        }
      }
      if (!refusal.ok()) {
        std::shared_lock<std::shared_mutex> gate(round->gate);
        state->reason = std::string(refusal.message());
        state->phase = Phase::kRefused;
      }
    }
  }
  if (!refusal.ok()) {
    if (round != nullptr) {
      OnUploadEnded(round, *state, refusal);
    } else {
      AuditRefusal(client_id, "update_refused", refusal);
    }
    return refusal;
  }
  return std::make_unique<UploadImpl>(this, std::move(round), std::move(state), meta.payload_bytes);
}

absl::Status EngineImpl::Decline(const std::string& client_id, const UpdateMeta& meta,
                                 const std::string& reason) {
  auto state = std::make_shared<UploadState>();
  state->client_id = client_id;
  state->task_id = meta.task_id;
  state->failure = aggregation::SiteFailure::Kind::kDeclined;
  state->phase = Phase::kRefused;
  state->reason = absl::StrCat("the client declined the task: ", CapClientText(reason));
  absl::Status refusal;
  std::shared_ptr<RoundState> round;
  {
    absl::MutexLock lock(&mu_);
    round = RegisterUploadLocked(client_id, meta, state, refusal);
    // Left out under the same lock, before anything can close the round on this decline and
    // draw the next one.
    if (round != nullptr && PermanentDecline(reason)) {
      ExcludeFromRunLocked(client_id, round->round, reason);
    }
  }
  if (round == nullptr) {
    AuditRefusal(client_id, "decline_refused", refusal);
    return refusal;
  }
  OnUploadEnded(round, *state, absl::FailedPreconditionError(state->reason), "task_declined");
  return absl::OkStatus();
}

bool PermanentDecline(std::string_view reason) {
  for (std::string_view code : {"INVALID_ARGUMENT:", "FAILED_PRECONDITION:", "UNIMPLEMENTED:",
                                "OUT_OF_RANGE:", "PERMISSION_DENIED:"}) {
    if (reason.starts_with(code)) return true;
  }
  return false;
}

void EngineImpl::ExcludeFromRunLocked(const std::string& client_id, int32_t round,
                                      const std::string& reason) {
  if (!excluded_.emplace(client_id, CapClientText(reason)).second) return;
  std::string name;
  if (auto it = clients_.find(client_id); it != clients_.end()) name = it->second.name;
  BumpLocked();
  AuditRecord rec;
  rec.at_ms = ToMs(clock_->Now());
  rec.client_id = client_id;
  rec.event = "client_excluded";
  rec.detail = absl::StrCat("client '", name, "' declined round ", round,
                            " for a reason this run will not change (", CapClientText(reason),
                            "); it is left out of sampling until the run ends");
  rec.run_id = run_id_;
  rec.round = round;
  (void)store_->Audit(rec);
  LogEvent(LogLevel::kWarn, "client_excluded",
           {{"client", client_id.substr(0, 16)},
            {"name", name},
            {"round", absl::StrCat(round)},
            {"reason", CapClientText(reason)}});
}

void EngineImpl::OnUploadEnded(const std::shared_ptr<RoundState>& round, const UploadState& up,
                               const absl::Status& refusal, const std::string& event) {
  if (refusal.ok() && hooks_.on_update) hooks_.on_update(refusal, up.bytes_received);
  if (!refusal.ok()) {
    AuditRoundRefusal(up.client_id, event, refusal, round->round);
    ParticipationRecord p = ParticipationFor(*round, up);
    (void)store_->RecordParticipation(p);
  } else {
    LogEvent(LogLevel::kInfo, "update_accepted",
             {{"client", up.client_id.substr(0, 16)},
              {"round", absl::StrCat(round->round)},
              {"examples", absl::StrCat(up.num_examples)}});
  }
  {
    absl::MutexLock lock(&mu_);
    if (refusal.ok()) round->input->NoteAccepted(clock_->Now() - round->started);
    MaybeAdvanceLocked();
    BumpLocked();
  }
  AfterUnlock();
}

ParticipationRecord EngineImpl::ParticipationFor(const RoundState& round,
                                                 const UploadState& up) const {
  ParticipationRecord p;
  p.run_id = run_id_;
  p.round = round.round;
  p.attempt = round.attempt;
  p.client_id = up.client_id;
  p.task_id = up.task_id;
  p.num_examples = up.num_examples;
  p.bytes_received = up.bytes_received;
  p.metrics_json = MetricsJson(up.metrics);
  p.reason = up.reason;
  switch (up.phase) {
    case Phase::kAccepted:
      p.status = ParticipationStatus::kAccepted;
      break;
    case Phase::kRefused:
      p.status = ParticipationStatus::kRefused;
      break;
    case Phase::kAborted:
      p.status = ParticipationStatus::kDropped;
      break;
    case Phase::kStreaming:
      p.status = ParticipationStatus::kAssigned;
      break;
  }
  return p;
}

UploadImpl::~UploadImpl() {
  if (!done_) (void)Abandon();
}

absl::Status UploadImpl::Refuse(absl::Status why) {
  {
    std::shared_lock<std::shared_mutex> gate(round_->gate);
    done_ = true;
    if (state_->phase != Phase::kStreaming) {
      return absl::FailedPreconditionError(
          absl::StrCat("update no longer accepted: ", state_->reason));
    }
    (void)RefuseLocked(why);
  }
  engine_->OnUploadEnded(round_, *state_, why);
  return why;
}

absl::Status UploadImpl::RefuseLocked(absl::Status why) {
  state_->reason = std::string(why.message());
  state_->phase = Phase::kRefused;
  state_->RemoveSpill();
  done_ = true;
  return why;
}

absl::Status UploadImpl::NoLongerAccepted() {
  done_ = true;
  std::shared_lock<std::shared_mutex> gate(round_->gate);
  return absl::FailedPreconditionError(
      absl::StrCat("update no longer accepted: ",
                   state_->reason.empty() ? "the round is closing" : state_->reason));
}

absl::Status UploadImpl::AddChunk(int64_t offset, std::string_view data) {
  if (round_->closing.load()) return NoLongerAccepted();
  absl::Status why;
  {
    std::shared_lock<std::shared_mutex> gate(round_->gate);
    if (state_->phase != Phase::kStreaming) {
      done_ = true;
      return absl::FailedPreconditionError(
          absl::StrCat("update no longer accepted: ", state_->reason));
    }
    why = assembler_.Add(offset, data);
    // What goes into the spill: the chunk as it came (float32 weights, masked words), or the
    // weights decoded from a float16 / int8 change (round_input.h).
    StagedChunk staged;
    if (why.ok()) {
      absl::StatusOr<StagedChunk> checked =
          round_->input->Stage(offset, data, std::span<float>(buffer_.get(), buffer_values_));
      if (checked.ok()) {
        staged = *checked;
      } else {
        why = checked.status();
      }
    }
    if (why.ok()) {
      why = state_->staged == nullptr
                ? absl::InternalError("the update's staging is gone")
                : state_->staged->Write(
                      staged.offset,
                      std::as_bytes(std::span<const char>(staged.data.data(), staged.data.size())));
    }
    if (why.ok()) {
      state_->bytes_received += static_cast<int64_t>(data.size());
      state_->staged_bytes += static_cast<int64_t>(staged.data.size());
      CrashPoint("mid_upload");
      return absl::OkStatus();
    }
    (void)RefuseLocked(why);
  }
  engine_->OnUploadEnded(round_, *state_, why);
  return why;
}

absl::Status UploadImpl::Finish(std::string_view sha256_hex) {
  if (round_->closing.load()) return NoLongerAccepted();
  absl::Status why;
  {
    std::shared_lock<std::shared_mutex> gate(round_->gate);
    done_ = true;
    if (state_->phase != Phase::kStreaming) {
      return absl::FailedPreconditionError(
          absl::StrCat("update no longer accepted: ", state_->reason));
    }
    why = assembler_.Finish(sha256_hex);
    if (why.ok()) {
      // Verified whole: only now does it touch the aggregate (and is accepted there).
      bool spoiled = false;
      why = round_->input->Fold(*state_, spoiled);
      if (spoiled) round_->poisoned = true;
    }
    if (why.ok()) {
      state_->phase = Phase::kAccepted;
      state_->RemoveSpill();
    } else {
      (void)RefuseLocked(why);
    }
  }
  engine_->OnUploadEnded(round_, *state_, why);
  return why;
}

UploadState::~UploadState() = default;

void UploadState::RemoveSpill() { staged.reset(); }

}  // namespace fl::server::internal
