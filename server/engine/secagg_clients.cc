// Secure-aggregation rounds, the clients' side: their stage tasks, their messages
// (SubmitSecAgg), the checks of their masked uploads and the fold of a verified one.

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/chunking.h"
#include "server/engine/engine_impl.h"
#include "server/engine/secagg_round.h"

namespace fl::server::internal {

namespace {

const char* StageNameOfKind(Task::Kind kind) {
  switch (kind) {
    case Task::Kind::kSecAggAdvertise:
      return SecAggStageName(SecAggStage::kAdvertise);
    case Task::Kind::kSecAggShare:
      return SecAggStageName(SecAggStage::kShare);
    case Task::Kind::kSecAggMaskedInput:
      return SecAggStageName(SecAggStage::kMaskedInput);
    case Task::Kind::kSecAggConsistency:
      return SecAggStageName(SecAggStage::kConsistency);
    case Task::Kind::kSecAggUnmask:
      return SecAggStageName(SecAggStage::kUnmask);
    default:
      return "no secure-aggregation stage";
  }
}

}  // namespace

absl::StatusOr<StagedChunk> SecAggRound::Stage(int64_t offset, std::string_view data,
                                               std::span<float> scratch) const {
  // Masked words: every value of the word size is < 2^m; only whole words.
  const size_t word = static_cast<size_t>(params.modulus_bits / 8);
  if (data.size() % word != 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk at offset ", offset, " has ", data.size(),
                                                   " bytes, not whole ", word, "-byte words"));
  }
  return StagedChunk{.offset = offset, .data = data};
}

absl::Status SecAggRound::Fold(const UploadState& up, bool& spoiled) {
  // Verified whole: into the masked sum (the client is then in U3).
  bool partly_folded = false;
  absl::Status s = FoldMasked(up, id_of.at(up.client_id), partly_folded);
  spoiled = !s.ok() && partly_folded;
  return s;
}

absl::Status SecAggRound::FoldMasked(const UploadState& up, int client, bool& partly_folded) {
  SecAggRound& s = *this;
  const size_t word = s.params.modulus_bits / 8;
  std::vector<uint8_t> bytes(static_cast<size_t>(kMaxChunkBytes));
  std::vector<uint64_t> words(bytes.size() / word);
  std::lock_guard<std::mutex> fold(s.fold_mu);
  for (int64_t off = 0; off < up.staged_bytes;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kMaxChunkBytes, up.staged_bytes - off));
    if (up.staged == nullptr) return absl::InternalError("the update's staging is gone");
    if (absl::Status st =
            up.staged->Read(off, std::as_writable_bytes(std::span<uint8_t>(bytes.data(), n)));
        !st.ok()) {
      return st;
    }
    const size_t count = n / word;
    for (size_t i = 0; i < count; ++i) {  // little-endian words
      uint64_t w = 0;
      for (size_t b = 0; b < word; ++b) w |= static_cast<uint64_t>(bytes[i * word + b]) << (8 * b);
      words[i] = w;
    }
    if (absl::Status st =
            s.session->FoldMaskedWords(client, static_cast<size_t>(off) / word,
                                       std::span<const uint64_t>(words.data(), count));
        !st.ok()) {
      return st;
    }
    partly_folded = true;
    off += static_cast<int64_t>(n);
  }
  return s.session->CompleteMaskedInput(client);
}

std::optional<std::string> SecAggRound::DroppedWhy(const std::string& client_id,
                                                   int32_t round) const {
  auto d = dropped.find(id_of.at(client_id));
  if (d == dropped.end()) return std::nullopt;
  return absl::StrCat("dropped from round ", round, " at stage ", SecAggStageName(d->second.stage),
                      ": ", d->second.reason);
}

void SecAggRound::Drop(const std::string& client_id, aggregation::SiteFailure::Kind kind,
                       std::string reason) {
  dropped.try_emplace(id_of.at(client_id),
                      SecAggDrop{.stage = stage, .kind = kind, .reason = std::move(reason)});
}

void SecAggRound::FillStageTask(int sid, Task& t) const {
  t.kind = SecAggTaskKind(stage);
  SecAggTaskInfo& info = t.secagg;
  info.round = {.secagg = params,
                .example_unit = example_unit,
                .dp_clip_norm = dp_clip_norm,
                .dp_noise_stddev = dp_noise_stddev};
  info.secagg_id = sid;
  switch (stage) {
    case SecAggStage::kAdvertise:
      break;
    case SecAggStage::kShare:
      // Its own entry and its neighbours' (those that advertised) in full, O(k) certificates;
      // the others' 32-byte digests, from which it computes the session's hash.
      info.directory = session->DirectoryFor(sid);
      break;
    case SecAggStage::kMaskedInput:
      if (auto b = bundles.find(sid); b != bundles.end()) info.bundle = b->second;
      break;
    case SecAggStage::kConsistency:
      info.survivors = survivors;
      break;
    case SecAggStage::kUnmask:
      info.unmask = unmask;
      break;
  }
}

absl::Status SecAggRound::Receive(int sid, const SecAggMessage& m, bool& misdirected) {
  misdirected = false;
  // The stage's body, under the sender's id as the server knows it, to the session.
  auto pass = [&](const auto& body, const char* what, auto receive) -> absl::Status {
    if (!body.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", SecAggStageName(stage), " takes ", what));
    }
    auto from_sid = *body;
    from_sid.client = sid;
    return receive(from_sid);
  };
  absl::Status refusal;
  switch (stage) {
    case SecAggStage::kAdvertise:
      refusal = pass(m.keys, "keys", [&](const auto& b) { return session->ReceiveKeys(b); });
      break;
    case SecAggStage::kShare:
      refusal = pass(m.shares, "encrypted shares",
                     [&](const auto& b) { return session->ReceiveShares(b); });
      break;
    case SecAggStage::kMaskedInput:
      misdirected = true;  // not a protocol violation
      return absl::FailedPreconditionError(
          "stage masked input takes the masked update through SubmitUpdate");
    case SecAggStage::kConsistency:
      refusal = pass(m.survivor_signature, "a signature over the survivors",
                     [&](const auto& b) { return session->ReceiveSurvivorSignature(b); });
      break;
    case SecAggStage::kUnmask:
      refusal = pass(m.unmask, "unmasking shares",
                     [&](const auto& b) { return session->ReceiveUnmask(b); });
      break;
  }
  if (refusal.ok()) answered.insert(sid);
  return refusal;
}

Task EngineImpl::SecAggTaskLocked(const std::string& client_id, Task t) const {
  const RoundState& r = *current_;
  const SecAggRound& s = *r.secagg;
  const int sid = s.id_of.at(client_id);
  if (std::optional<std::string> why = s.DroppedWhy(client_id, r.round)) {
    t.message = *std::move(why);
    return t;
  }
  const bool answered = s.stage == SecAggStage::kMaskedInput ? r.uploads.count(client_id) != 0
                                                             : s.answered.count(sid) != 0;
  if (answered) {
    t.message = absl::StrCat("answered stage ", SecAggStageName(s.stage), " of round ", r.round,
                             "; waiting for it to close");
    return t;
  }
  t.task_id = r.task_of.at(client_id);
  s.FillStageTask(sid, t);
  if (s.stage == SecAggStage::kMaskedInput) FillFitLocked(client_id, t);
  return t;
}

absl::Status EngineImpl::CheckSecAggUploadLocked(const std::string& client_id,
                                                 const UpdateMeta& meta) const {
  if (current_->secagg == nullptr) return absl::OkStatus();
  const SecAggRound& s = *current_->secagg;
  if (std::optional<std::string> why = s.DroppedWhy(client_id, meta.round)) {
    return absl::FailedPreconditionError(absl::StrCat("this client was ", *why));
  }
  if (s.stage != SecAggStage::kMaskedInput) {
    return absl::FailedPreconditionError(
        absl::StrCat("round ", meta.round, " is at stage ", SecAggStageName(s.stage),
                     "; an update is taken only at stage masked input"));
  }
  return absl::OkStatus();
}

absl::Status SecAggRound::CheckUpdate(const UpdateMeta& meta) const {
  using Encoding = UpdateMeta::Encoding;
  const int32_t round = meta.round;
  const int64_t num_floats = global->spec().NumFloats();
  const bool wide = params.modulus_bits == 64;
  const char* want = wide ? "MASKED_UINT64" : "MASKED_UINT32";
  if (meta.encoding != (wide ? Encoding::kMaskedUint64 : Encoding::kMaskedUint32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("round ", round, " uses secure aggregation; send ", want));
  }
  const int64_t word = wide ? 8 : 4;
  const auto words =
      static_cast<int64_t>(secagg::EncodedWords(params, static_cast<size_t>(num_floats)));
  const int64_t expected = words * word;
  if (meta.payload_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "masked update payload is ", meta.payload_bytes, " bytes but the model's ", num_floats,
        " parameters", secagg::UsesDdg(params) ? " (padded to a power of two)" : "",
        " and the weight take ", words, " words of ", word, " bytes (", expected, " bytes)"));
  }
  if (meta.num_examples != 0 || !meta.metrics.empty()) {
    return absl::InvalidArgumentError(
        "secure aggregation: the update must not carry num_examples or metrics in the clear");
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::SubmitSecAgg(const std::string& client_id, const SecAggMessage& m) {
  absl::Status refusal;
  std::string event = "secagg_refused";
  int32_t round = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    clients_[client_id].last_seen = now;
    refusal = CheckTaskLocked(client_id, m.run_id, m.round, m.task_id);
    if (refusal.ok() && current_->secagg == nullptr) {
      refusal = absl::FailedPreconditionError(
          absl::StrCat("round ", m.round, " does not use secure aggregation"));
    }
    if (refusal.ok()) {
      round = current_->round;
      SecAggRound& s = *current_->secagg;
      const int sid = s.id_of.at(client_id);
      const std::string stage = SecAggStageName(s.stage);
      if (std::optional<std::string> why = s.DroppedWhy(client_id, m.round)) {
        refusal = absl::FailedPreconditionError(absl::StrCat("this client was ", *why));
      } else if (m.stage != SecAggTaskKind(s.stage)) {
        refusal = absl::FailedPreconditionError(absl::StrCat("round ", m.round, " is at stage ",
                                                             stage, "; this message is for ",
                                                             StageNameOfKind(m.stage)));
      } else if (s.answered.count(sid) != 0 ||
                 (s.stage == SecAggStage::kMaskedInput && current_->uploads.count(client_id))) {
        refusal = absl::AlreadyExistsError(
            absl::StrCat("this client already answered stage ", stage, " of round ", m.round));
      } else if (!m.malformed.empty()) {
        s.Drop(client_id, aggregation::SiteFailure::Kind::kRefused,
               absl::StrCat("its ", stage,
                            " message could not be read: ", CapClientText(m.malformed)));
        refusal = absl::InvalidArgumentError(m.malformed);
      } else if (!m.decline_reason.empty()) {
        const std::string reason = CapClientText(m.decline_reason);
        // As a plain round's decline: a reason the run will not change leaves the site out.
        if (PermanentDecline(reason)) ExcludeFromRunLocked(client_id, m.round, reason);
        s.Drop(client_id, aggregation::SiteFailure::Kind::kDeclined,
               absl::StrCat("the client declined: ", reason));
        refusal = absl::FailedPreconditionError(reason);
        event = "task_declined";
      } else {
        bool misdirected = false;
        refusal = s.Receive(sid, m, misdirected);
        if (!refusal.ok() && !misdirected) {
          // What the library refuses (or a message without its body) drops the client.
          s.Drop(client_id, aggregation::SiteFailure::Kind::kRefused,
                 std::string(refusal.message()));
        }
      }
    }
    MaybeAdvanceLocked();
    BumpLocked();
  }
  AfterUnlock();
  if (event == "task_declined") {
    AuditRoundRefusal(client_id, event, refusal, round);
    return absl::OkStatus();
  }
  if (!refusal.ok()) AuditRoundRefusal(client_id, event, refusal, round);
  return refusal;
}

}  // namespace fl::server::internal
