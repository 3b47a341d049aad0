// Internal to the engine: how one round attempt takes its sites' updates and makes the next global
// model of them. Streaming and folding an upload (uploads.cc) and the commit (commit.cc) speak to
// a round only through this; the two kinds of round are its two implementations:
//
//   a plain round     (plain_input.cc, MakePlainInput)  the strategy's RoundAggregator, fed each
//                     update's weights (float16 / int8 changes decoded, each change clipped when
//                     the strategy bounds its norm)
//   a secure round    (secagg_round.h, SecAggRound)     masked words summed in the SecAgg+ server
//                     session; at the commit the survivors' sum is unmasked and handed to the
//                     strategy as one update
//
// What differs in a secure round beyond this (its five stages, their tasks and messages) is the
// SecAggRound's own, in secagg_round.cc and secagg_clients.cc.
//
// Thread safety: CheckUpdate, NoteAccepted, RecordJson and revealed are called with the engine's
// mutex held; Stage and Fold by uploads holding the round's gate shared (thread-safe among
// themselves); num_accepted once the round's close took the gate; Finish and DropModels by the
// commit, after the round closed, alone.
#ifndef FL_SERVER_ENGINE_ROUND_INPUT_H_
#define FL_SERVER_ENGINE_ROUND_INPUT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/model.h"
#include "fl/common/update_codec.h"
#include "fl/server/engine.h"

namespace fl::server::internal {

struct UploadState;  // upload.h

// The largest example count an update may claim (its FedAvg weight): far above any site's data,
// small enough that one client cannot swamp the float64 sum.
inline constexpr int64_t kMaxExamples = int64_t{1} << 40;

// A chunk of an update as it goes into the spill (RoundInput::Stage).
struct StagedChunk {
  int64_t offset = 0;     // in the staged payload, bytes
  std::string_view data;  // the chunk itself, or its decoded weights in the caller's scratch
};

class RoundInput {
 public:
  virtual ~RoundInput() = default;

  // What an update's metadata must be for this round, beyond the model's spec: its encoding, its
  // payload's size, its example count and metrics (a plain round also asks the strategy, e.g.
  // q-FedAvg's initial_loss). INVALID_ARGUMENT naming what is wrong.
  virtual absl::Status CheckUpdate(const UpdateMeta& meta) const = 0;

  // The bytes of one value on the wire (the chunk assembler's unit): 4 for float32 and masked
  // words (a secure round checks its words itself), 2 for float16, 1 for int8's codec chunks.
  virtual int64_t value_bytes() const = 0;
  // The floats of scratch an upload of `payload_bytes` needs for Stage: one decoded chunk at
  // most, none for updates staged as they come.
  virtual size_t scratch_values(int64_t payload_bytes) const = 0;

  // Checks one chunk of the payload at `offset` (finite weights, whole masked words) and says what
  // to stage for it: the chunk as it came, or a float16 / int8 change decoded into `scratch` with
  // the round's global model added back. INVALID_ARGUMENT naming what is wrong.
  virtual absl::StatusOr<StagedChunk> Stage(int64_t offset, std::string_view data,
                                            std::span<float> scratch) const = 0;

  // Folds a whole, verified update from its staging into the aggregate, where it is then
  // accepted. On an error `spoiled` tells whether the aggregate took part of it and cannot give it
  // back (the round must fail); an update refused before any part went in leaves it as it was.
  virtual absl::Status Fold(const UploadState& up, bool& spoiled) = 0;

  // An update was accepted, `since_start` after the round began (for the record).
  virtual void NoteAccepted(absl::Duration since_start) {}

  // Updates in the aggregate so far; read before DropModels.
  virtual int num_accepted() const = 0;

  // The next global model, once the round closed: the sampled sites whose update does not count
  // are told to the strategy first (RoundAggregator::Failed). `state`: the strategy's server
  // state after the round, when it keeps one.
  virtual absl::StatusOr<Model> Finish(std::span<const aggregation::SiteFailure> failures,
                                       std::optional<Model>& state) = 0;

  // Drops the model-sized parts (the aggregate, the round's global model) once the commit is
  // done with them: an upload call still returning may keep the round alive a while longer.
  virtual void DropModels() = 0;

  // What the round's record keeps of the protocol (rounds.secagg_json); empty for a plain round.
  // `failed`: the attempt could not get past the stage it had reached (recorded as failed_at).
  virtual std::string RecordJson(bool failed) const { return ""; }

  // Whether the server has seen the sum of this attempt's updates in the clear although they
  // were masked: a secure attempt that fails after that must end the run, not be retried.
  virtual bool revealed() const { return false; }

  // What the round's record says while the commit removes the masks (written before Finish):
  // a server that dies before the attempt is recorded leaves it, and the restart stops the run
  // rather than run the round again. Empty for a plain round.
  virtual std::string UnmaskingRecordJson() const { return ""; }
};

// A plain round's input: `strategy`'s aggregator for `global`, taking updates in `encoding`, each
// change from `global` clipped to the strategy's update_norm_bound() when it has one.
std::unique_ptr<RoundInput> MakePlainInput(aggregation::Strategy& strategy,
                                           std::shared_ptr<const Model> global,
                                           UpdateEncoding encoding);

}  // namespace fl::server::internal

#endif  // FL_SERVER_ENGINE_ROUND_INPUT_H_
