// Internal to the engine: the state of one secure-aggregation attempt (SecAgg+, five stages:
// advertise keys, share keys, masked input, consistency, unmask), held by its RoundState.
//
// The server relays and sums, never opens: it holds public keys, the encrypted shares until the
// clients fetched them with their masked-input task, the masked inputs' running sum (inside the
// ServerSession) and, after unmasking, the sum of the survivors' encodings. Nothing here is
// persisted but RecordJson's summary; a restart aborts the attempt and runs a fresh one.
//
// Thread safety: guarded by the engine's mutex, except what RoundInput's comment says of its
// methods: Stage reads only the immutable parameters, and Fold calls the session's
// FoldMaskedWords and CompleteMaskedInput holding `fold_mu` (uploads at the masked-input stage,
// holding the round's gate shared: closing that stage takes the gate exclusively, so no fold is
// in flight).
#ifndef FL_SERVER_ENGINE_SECAGG_ROUND_H_
#define FL_SERVER_ENGINE_SECAGG_ROUND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/strategy.h"
#include "fl/server/engine.h"
#include "server/engine/round_input.h"

namespace fl::server::internal {

struct UploadState;

enum class SecAggStage {
  kAdvertise = 0,
  kShare = 1,
  kMaskedInput = 2,
  kConsistency = 3,
  kUnmask = 4
};

// "advertise keys", "share keys", "masked input", "consistency", "unmask".
const char* SecAggStageName(SecAggStage stage);
Task::Kind SecAggTaskKind(SecAggStage stage);

struct SecAggDrop {
  SecAggStage stage = SecAggStage::kAdvertise;
  // Declined, refused by the server, silent (offline, removed) or missing at the stage's close:
  // what the strategy is told (RoundAggregator::Failed).
  aggregation::SiteFailure::Kind kind = aggregation::SiteFailure::Kind::kDropped;
  std::string reason;
  bool refused() const {
    return kind == aggregation::SiteFailure::Kind::kRefused ||
           kind == aggregation::SiteFailure::Kind::kDeclined;
  }
};

// A secure round's input (round_input.h): masked inputs, verified whole, are summed in the
// session; the commit unmasks the survivors' sum and hands the strategy their mean as one update.
struct SecAggRound final : RoundInput {
  SecAggRound(aggregation::Strategy& strategy, std::shared_ptr<const Model> global)
      : strategy(&strategy), global(std::move(global)) {}

  // RoundInput. CheckUpdate: the encoding must be MASKED_UINT32 (or 64 for m = 64), the payload
  // (num_floats + 1) words, num_examples 0 and metrics empty. Stage takes whole words only.
  absl::Status CheckUpdate(const UpdateMeta& meta) const override;
  int64_t value_bytes() const override { return 4; }
  size_t scratch_values(int64_t payload_bytes) const override { return 0; }
  absl::StatusOr<StagedChunk> Stage(int64_t offset, std::string_view data,
                                    std::span<float> scratch) const override;
  absl::Status Fold(const UploadState& up, bool& spoiled) override;
  void NoteAccepted(absl::Duration since_start) override {
    last_input_ms = absl::ToInt64Milliseconds(since_start);
  }
  int num_accepted() const override { return u3; }
  absl::StatusOr<Model> Finish(std::span<const aggregation::SiteFailure> failures,
                               std::optional<Model>& state) override;
  void DropModels() override {
    session.reset();
    global.reset();
  }
  // The attempt as JSON for rounds.secagg_json: params, |U1|..|U3|, the unmask responders, who
  // dropped at which stage and why (client ids cut to 16 characters), relayed bytes and their
  // SHA-256; with `failed`, the stage it failed at; "revealed" once the server saw the sum (a
  // resumed run then stops rather than run the round again). No key, share, mask or update.
  std::string RecordJson(bool failed) const override;
  bool revealed() const override { return sum_revealed; }
  // RecordJson(false) with "unmasking": true and "summed": the survivors' full client ids.
  std::string UnmaskingRecordJson() const override;
  // The record both of the above give.
  std::string Record(bool failed, bool unmasking) const;

  // --- The stages, with the engine's mutex held (secagg_clients.cc). The engine keeps what is
  // its own: the clients' liveness, the uploads, the audit log and the round's end.

  // Why `client_id` takes no further part in round `round`: "dropped from round R at stage S:
  // reason"; nullopt while it does.
  std::optional<std::string> DroppedWhy(const std::string& client_id, int32_t round) const;
  // Records `client_id` dropped at the open stage; a client is dropped once, the first reason
  // kept.
  void Drop(const std::string& client_id, aggregation::SiteFailure::Kind kind, std::string reason);
  // The open stage's task for secagg id `sid`: its kind and what it carries (the parameters; the
  // neighbours' keys and the other entries' digests; the shares sent to it; the survivor set; the
  // unmask request). The masked-input stage's fit
  // settings are the engine's to add.
  void FillStageTask(int sid, Task& t) const;
  // A message of secagg id `sid` for the open stage, handed to the session; the client is then
  // counted as answered. An error is why the session or the stage refused it; `misdirected` is
  // set when it was a message the stage does not take at all (the masked input comes as an
  // upload), which does not drop the client.
  absl::Status Receive(int sid, const SecAggMessage& m, bool& misdirected);
  // Closes the open stage in the session (the key directory, the share bundles, the survivor
  // set, the unmask request, the responders) and counts who is left. Returns why the attempt cannot
  // go on (fewer than `min_fit_clients` left, fewer than distributed DP's planned survivors, what
  // the session refused, an aggregate `poisoned` by an unreadable spill), or an empty string. `why`
  // and `sampled` are for the message.
  std::string CloseStageInSession(const std::string& why, int32_t min_fit_clients, size_t sampled,
                                  bool poisoned);

  // Streams a verified masked upload (little-endian words of 2^params.modulus_bits) from its
  // staging into the session as `client`'s input: FoldMaskedWords piece by piece, then
  // CompleteMaskedInput, holding `fold_mu`. `partly_folded` is set once a piece went in.
  absl::Status FoldMasked(const UploadState& up, int client, bool& partly_folded);

  aggregation::Strategy* strategy;      // the run's, given the unmasked mean
  std::shared_ptr<const Model> global;  // the round's global model; the mean is a change from it

  // Public parameters of the attempt, and what the clients' tasks carry besides.
  secagg::SecAggParams params;
  secagg::SecAggRisk risk;  // of its graph, with the run's corrupt_fraction and max_dropout
  int64_t example_unit = 1;
  double dp_clip_norm = 0;  // distributed DP (0: off)
  double dp_noise_stddev = 0;
  int32_t dp_min_survivors = 0;  // n_min: the noise is planned for this many summed inputs
  size_t dimension = 0;          // of the model (global may be released before the record)
  // Immutable once the round opens: secagg id <-> client id (ids in sorted client-id order).
  std::map<std::string, int> id_of;
  std::vector<std::string> client_of;

  std::unique_ptr<secagg::ServerSession> session;
  std::mutex fold_mu;  // serialises FoldMaskedWords / CompleteMaskedInput

  SecAggStage stage = SecAggStage::kAdvertise;
  absl::Time stage_deadline;
  std::set<int> answered;             // who answered the open stage
  std::map<int, SecAggDrop> dropped;  // by secagg id; a client is dropped at most once
  // Sizes: advertised, shared, masked input, unmasked; and who signed the survivor set.
  int u1 = 0, u2 = 0, u3 = 0, u4 = 0;
  int signers = 0;
  bool signatures_verified = false;            // the session checks signatures (EngineHooks)
  std::map<int, secagg::ShareBundle> bundles;  // after stage 2, by recipient (RAM only)
  secagg::SurvivorList survivors;              // after stage 3
  secagg::UnmaskRequest unmask;                // after stage 4
  int64_t relay_bytes = 0;                     // ciphertext bytes relayed at stage 2
  std::string relay_sha256;  // over the relayed ciphertexts, by recipient then sender
  // Milliseconds from the round's start to the close of each stage so far, and to the last
  // masked input accepted (0: none), for the record (RecordJson).
  std::vector<int64_t> stage_closed_ms;
  int64_t last_input_ms = 0;
  // The survivors' sum was unmasked (by Finish): from here on the attempt must commit or end the
  // run (see EngineImpl::EndAttemptLocked).
  bool sum_revealed = false;
};

}  // namespace fl::server::internal

#endif  // FL_SERVER_ENGINE_SECAGG_ROUND_H_
