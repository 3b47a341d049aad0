#include "client_sdk/src/secagg_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/clipping.h"

namespace fl::client::internal {
namespace {

// Words as little-endian bytes, whatever the host's byte order.
std::vector<std::byte> WordsToBytes(std::span<const uint64_t> words, size_t word_bytes) {
  std::vector<std::byte> out(words.size() * word_bytes);
  std::byte* p = out.data();
  for (uint64_t w : words) {
    for (size_t b = 0; b < word_bytes; ++b) *p++ = static_cast<std::byte>((w >> (8 * b)) & 0xff);
  }
  return out;
}

}  // namespace

uint32_t SecAggWeight(int64_t num_examples, int64_t example_unit, uint32_t max_weight) {
  if (num_examples <= 0 || example_unit < 1) return 1;
  const int64_t units = num_examples / example_unit + (num_examples % example_unit != 0 ? 1 : 0);
  return static_cast<uint32_t>(std::clamp<int64_t>(units, 1, std::max<uint32_t>(max_weight, 1)));
}

void SecAggParticipant::KeepOnly(int64_t run_id, const std::string& task_id) {
  if (!task_id.empty() && (run_id != run_id_ || task_id != task_id_)) Reset();
}

void SecAggParticipant::Reset() {
  session_.reset();  // the session overwrites its keys, seed and shares (fl::secagg::Wipe)
  run_id_ = 0;
  task_id_.clear();
  secagg_id_ = -1;
  answered_ = ClientTask::Kind::kWait;
  WipeSavedShares();
  saved_ = SecAggReply();
  saved_upload_ = MaskedUpload();
}

SecAggParticipant::~SecAggParticipant() { WipeSavedShares(); }

void SecAggParticipant::WipeSavedShares() {
  if (!saved_.unmask.has_value()) return;
  for (auto* shares : {&saved_.unmask->self_seed_shares, &saved_.unmask->mask_key_shares}) {
    for (auto& [owner, share] : *shares) {
      secagg::Wipe(std::span<uint8_t>(reinterpret_cast<uint8_t*>(share.y.data()), sizeof(share.y)));
    }
  }
}

SecAggReply SecAggParticipant::NewSubmission(const ClientTask& task) const {
  SecAggReply out = ReplyTo<SecAggReply>(task);
  out.stage = task.kind;
  return out;
}

absl::Status SecAggParticipant::CheckSession(const ClientTask& task) const {
  if (!HasSessionFor(task)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no secure-aggregation session for task ", task.task_id, " of run ", task.run_id,
        " (this client did not advertise keys in it, or restarted since)"));
  }
  if (task.secagg_id != secagg_id_) {
    return absl::FailedPreconditionError(absl::StrCat("task ", task.task_id, " names secagg id ",
                                                      task.secagg_id, ", this client is ",
                                                      secagg_id_));
  }
  return absl::OkStatus();
}

const SecAggRoundParams* SecAggParticipant::params(const ClientTask& task) const {
  return CheckSession(task).ok() ? &params_ : nullptr;
}

absl::StatusOr<SecAggReply> SecAggParticipant::AdvertiseKeys(const ClientTask& task,
                                                             size_t dimension) {
  if (Answered(task)) return saved_;
  Reset();
  const absl::StatusOr<SecAggRoundParams>& params = task.secagg_params;
  if (!params.ok()) return params.status();
  secagg::SessionIdentity identity;
  identity.context = secagg::SessionContext(task.run_id, task.round, task.task_id);
  identity.signer = signer_;
  identity.verifier = verifier_;
  absl::StatusOr<std::unique_ptr<secagg::ClientSession>> session = secagg::ClientSession::Create(
      params->secagg, task.secagg_id, dimension, randomness_.protocol(), std::move(identity));
  if (!session.ok()) return session.status();
  absl::StatusOr<secagg::KeyAdvertisement> keys = (*session)->AdvertiseKeys();
  if (!keys.ok()) return keys.status();
  session_ = *std::move(session);
  params_ = *params;
  run_id_ = task.run_id;
  task_id_ = task.task_id;
  secagg_id_ = task.secagg_id;
  answered_ = task.kind;
  saved_ = NewSubmission(task);
  saved_.keys = *std::move(keys);
  return saved_;
}

absl::StatusOr<SecAggReply> SecAggParticipant::ShareKeys(const ClientTask& task) {
  if (Answered(task)) return saved_;
  if (absl::Status s = CheckSession(task); !s.ok()) return s;
  const absl::StatusOr<secagg::KeyDirectory>& directory = task.directory;
  if (!directory.ok()) return directory.status();
  absl::StatusOr<secagg::EncryptedShares> shares = session_->ShareKeys(*directory);
  if (!shares.ok()) return shares.status();
  answered_ = task.kind;
  saved_ = NewSubmission(task);
  saved_.shares = *std::move(shares);
  return saved_;
}

const MaskedUpload* SecAggParticipant::SavedUpload(const ClientTask& task) const {
  return Answered(task) ? &saved_upload_ : nullptr;
}

absl::StatusOr<const MaskedUpload*> SecAggParticipant::MaskInput(const ClientTask& task,
                                                                 std::span<float> change,
                                                                 int64_t num_examples) {
  if (Answered(task)) return &saved_upload_;
  if (absl::Status s = CheckSession(task); !s.ok()) return s;
  const absl::StatusOr<secagg::ShareBundle>& bundle = task.bundle;
  if (!bundle.ok()) return bundle.status();
  uint32_t weight = 1;
  if (secagg::UsesDdg(params_.secagg)) {
    // The discrete Gaussian: the session's encoding clips, rounds and noises (weight 1).
  } else if (params_.dp_clip_norm > 0) {
    // Distributed DP: every client clips and noises its own change; weights are equal.
    absl::StatusOr<double> norm = aggregation::dp::ClipL2(change, params_.dp_clip_norm);
    if (!norm.ok()) return norm.status();
    std::unique_ptr<aggregation::dp::BitSource> bits = randomness_.noise();
    aggregation::dp::GaussianSampler sampler(*bits);
    if (absl::Status s =
            aggregation::dp::AddGaussianNoise(change, params_.dp_noise_stddev, sampler);
        !s.ok()) {
      return s;
    }
  } else {
    weight = SecAggWeight(num_examples, params_.example_unit, params_.secagg.max_weight);
  }
  absl::StatusOr<secagg::MaskedInput> masked = session_->MaskUpdate(*bundle, change, weight);
  if (!masked.ok()) return masked.status();
  const bool wide = params_.secagg.modulus_bits == 64;
  saved_upload_.encoding =
      wide ? UpdateHeader::Encoding::kMaskedUint64 : UpdateHeader::Encoding::kMaskedUint32;
  saved_upload_.word_bytes = wide ? 8 : 4;
  saved_upload_.payload = WordsToBytes(masked->words, saved_upload_.word_bytes);
  answered_ = task.kind;
  saved_ = SecAggReply();
  return &saved_upload_;
}

absl::StatusOr<SecAggReply> SecAggParticipant::SignSurvivors(const ClientTask& task) {
  if (Answered(task)) return saved_;
  if (absl::Status s = CheckSession(task); !s.ok()) return s;
  const absl::StatusOr<secagg::SurvivorList>& list = task.survivors;
  if (!list.ok()) return list.status();
  absl::StatusOr<secagg::SurvivorSignature> signature = session_->SignSurvivors(*list);
  if (!signature.ok()) return signature.status();
  answered_ = task.kind;
  saved_upload_ = MaskedUpload();
  saved_ = NewSubmission(task);
  saved_.survivor_signature = *std::move(signature);
  return saved_;
}

absl::StatusOr<SecAggReply> SecAggParticipant::Unmask(const ClientTask& task) {
  if (Answered(task)) return saved_;
  if (absl::Status s = CheckSession(task); !s.ok()) return s;
  const absl::StatusOr<secagg::UnmaskRequest>& request = task.unmask;
  if (!request.ok()) return request.status();
  absl::StatusOr<secagg::UnmaskResponse> response = session_->Unmask(*request);
  if (!response.ok()) return response.status();
  answered_ = task.kind;
  saved_upload_ = MaskedUpload();
  saved_ = NewSubmission(task);
  saved_.unmask = *std::move(response);
  return saved_;
}

}  // namespace fl::client::internal
