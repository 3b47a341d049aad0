// SecAggParticipant: this client's side of one secure-aggregation round (SecAgg+ with double
// masking and the consistency check, fl/aggregation/secagg/protocol.h), driven by the five
// SECAGG_* task kinds.
//
// It owns the round's fl::secagg::ClientSession (private keys, the self-mask seed, the shares it
// holds), keyed by (run id, task id): task ids such as "r1.a0.<id>" repeat across runs, so a task
// of another run never reaches the session or the saved messages of this one. The session lives
// in memory only, is created by the advertise stage and dropped when a task with another key
// comes (or on Reset). Each stage returns the
// message to send; the transport (Client::Impl) sends it. A stage whose answer was made but not
// delivered (transport trouble) cannot be answered again by the library, so the participant keeps
// the last stage's message until the next stage and hands it back when the same stage is offered
// again.
//
// Errors: FAILED_PRECONDITION for a stage without a session for its task (a client that restarted
// or skipped a stage) and for the library's refusals (out of order, too few neighbours, asked to
// reveal both shares of a peer); INVALID_ARGUMENT for what the task carries that the library or
// the transport could not read; DATA_LOSS for a share that does not decrypt. Messages never
// hold a key, a seed, a share or an update. Not thread-safe: one caller (the client's Run thread).
#ifndef FL_CLIENT_SRC_SECAGG_CLIENT_H_
#define FL_CLIENT_SRC_SECAGG_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client_sdk/internal/transport.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"

namespace fl::client::internal {

// A masked input ready for SubmitUpdate: dimension + 1 little-endian words of 4 (modulus 2^32)
// or 8 (2^64) bytes; the last word is the masked weight.
struct MaskedUpload {
  UpdateHeader::Encoding encoding = UpdateHeader::Encoding::kMaskedUint32;
  size_t word_bytes = 4;
  std::vector<std::byte> payload;
};

// clamp(ceil(num_examples / example_unit), 1, max_weight); example_unit >= 1.
uint32_t SecAggWeight(int64_t num_examples, int64_t example_unit, uint32_t max_weight);

class SecAggParticipant {
 public:
  // Where secrets come from; tests inject seeded sources. Defaults: OpenSSL's RAND_bytes.
  struct Randomness {
    std::function<std::unique_ptr<secagg::RandomSource>()> protocol = secagg::MakeOsRandomSource;
    std::function<std::unique_ptr<aggregation::dp::BitSource>()> noise =
        aggregation::dp::MakeSecureBitSource;
  };

  SecAggParticipant() = default;
  explicit SecAggParticipant(Randomness randomness) : randomness_(std::move(randomness)) {}

  // The site's identity for the rounds to come (fl/aggregation/secagg/identity.h): with a signer
  // it signs its keys and the survivor set; with a verifier it checks its neighbours' keys and
  // refuses to unmask unless a majority of the round's sites (ConsistencyThreshold) signed the
  // set it signed, which keeps a malicious server from collecting one site's update from honest
  // sites. Without (plaintext mode) it trusts the server.
  void SetIdentity(std::shared_ptr<const secagg::IdentitySigner> signer,
                   std::shared_ptr<const secagg::IdentityVerifier> verifier) {
    signer_ = std::move(signer);
    verifier_ = std::move(verifier);
  }
  // Overwrites the shares of its last unmasking answer (kept to resend it) before they go.
  ~SecAggParticipant();

  // Forgets the session unless it belongs to (`run_id`, `task_id`) (a task of another run or with
  // another id ends the round for this client). An empty id (WAIT, DONE) keeps it.
  void KeepOnly(int64_t run_id, const std::string& task_id);
  // Forgets the session (the client declined or was refused).
  void Reset();
  // Whether this task's stage was already answered by the session of its (run id, task id) (its
  // message is kept).
  bool Answered(const ClientTask& task) const {
    return HasSessionFor(task) && answered_ == task.kind;
  }
  // OK when a session exists for the task's (run id, task id) and this client holds its secagg
  // id; else FAILED_PRECONDITION saying why.
  absl::Status CheckSession(const ClientTask& task) const;

  // Stage 1: a new session for the task (client id secagg_id, dimension `dimension`), and its
  // public keys as a submission. The same task's stage 1 again: the saved submission.
  absl::StatusOr<SecAggReply> AdvertiseKeys(const ClientTask& task, size_t dimension);
  // Stage 2: shares for the neighbours in the task's directory, by recipient.
  absl::StatusOr<SecAggReply> ShareKeys(const ClientTask& task);
  // The round's parameters (valid once stage 1 succeeded for `task`), nullptr without a session.
  const SecAggRoundParams* params(const ClientTask& task) const;
  // Stage 3, already answered for this task: the saved upload (to send again), else nullptr.
  const MaskedUpload* SavedUpload(const ClientTask& task) const;
  // Stage 3: `change` (trained - global, modified in place) is clipped and noised under
  // distributed DP (weight 1), else weighted by SecAggWeight(num_examples); then masked with the
  // task's bundle. The result stays valid until the next call on this object.
  absl::StatusOr<const MaskedUpload*> MaskInput(const ClientTask& task, std::span<float> change,
                                                int64_t num_examples);
  // Stage 4: this site's signature over the survivor set. A refusal (FAILED_PRECONDITION: a set
  // it will not sign) ends the session.
  absl::StatusOr<SecAggReply> SignSurvivors(const ClientTask& task);
  // Stage 5: the shares the server asks for. A refusal (FAILED_PRECONDITION) ends the session.
  absl::StatusOr<SecAggReply> Unmask(const ClientTask& task);

 private:
  SecAggReply NewSubmission(const ClientTask& task) const;
  // Overwrites the shares in saved_'s unmasking answer (fl::secagg::Wipe).
  void WipeSavedShares();
  bool HasSessionFor(const ClientTask& task) const {
    return session_ != nullptr && task.run_id == run_id_ && task.task_id == task_id_;
  }

  Randomness randomness_;
  std::shared_ptr<const secagg::IdentitySigner> signer_;
  std::shared_ptr<const secagg::IdentityVerifier> verifier_;
  int64_t run_id_ = 0;  // with task_id_, the key of the session and the saved messages
  std::string task_id_;
  int32_t secagg_id_ = -1;
  SecAggRoundParams params_;
  std::unique_ptr<secagg::ClientSession> session_;
  ClientTask::Kind answered_ = ClientTask::Kind::kWait;  // the last stage answered
  SecAggReply saved_;                                    // its message (stages 1, 2, 4, 5)
  MaskedUpload saved_upload_;                            // stage 3
};

}  // namespace fl::client::internal

#endif  // FL_CLIENT_SRC_SECAGG_CLIENT_H_
