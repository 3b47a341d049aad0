// Internal to the engine: the state of one round attempt and of each update streaming into it.
//
// Chunks are checked as they arrive (order, size, finite values, running SHA-256) and staged in a
// spill file; once the whole payload checked out, the update is folded into the round's
// aggregator in one pass over the spill. A refused or cut-off update therefore never touches the
// aggregate (folding out again in floating point would not be exact). Each round has a gate (a
// shared mutex): uploads hold it shared while they stage or fold; closing the round sets
// `closing` and then holds it exclusively, so no update is half in.
#ifndef FL_SERVER_ENGINE_UPLOAD_H_
#define FL_SERVER_ENGINE_UPLOAD_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/update_codec.h"
#include "fl/server/staging.h"
#include "fl/server/store.h"

namespace fl::server::internal {

struct SecAggRound;  // secagg_round.h

struct UploadState {
  enum class Phase { kStreaming, kAccepted, kRefused, kAborted };

  std::string client_id;
  std::string task_id;
  int64_t num_examples = 0;
  std::map<std::string, double> metrics;
  // Written by the upload's thread holding the round's gate shared, or by the round's close
  // holding it exclusively; atomic because the engine also reads it holding the gate shared.
  // `reason` is written before `phase` leaves kStreaming and read only after.
  std::atomic<Phase> phase{Phase::kStreaming};
  std::string reason;  // why refused or aborted
  // What the strategy is told when the update does not count (RoundAggregator::Failed): set
  // with `reason` where the phase leaves kStreaming for anything but kAccepted.
  aggregation::SiteFailure::Kind failure = aggregation::SiteFailure::Kind::kRefused;
  int64_t bytes_received = 0;  // on the wire (encoded)
  // Bytes in the spill: float32 weights (float16 / int8 updates are staged decoded, with the
  // round's global model added back), or a secure round's masked words.
  int64_t staged_bytes = 0;
  std::unique_ptr<StagedUpload> staged;  // the payload so far (staging.h); null once removed

  ~UploadState();
  // Folds the staged payload into `aggregator` with this update's weight. With `clip_global` set
  // (the strategy's update_norm_bound: central DP, a norm bound), the update's change from it is
  // first measured (a first pass over the spill) and folded clipped to norm `clip_norm`
  // (aggregation/dp/clipping.h's StreamingClip). Once
  // written whole it is accepted (UpdateSink::Accept). An error (the spill could not be read,
  // the aggregator's own spill not written) leaves a streaming aggregate partly folded.
  // `touched` (may be null) tells whether any piece reached the aggregator (a refusal at
  // BeginUpdate, e.g. a missing metric, touches nothing).
  absl::Status FoldInto(aggregation::RoundAggregator& aggregator,
                        const Model* clip_global = nullptr, double clip_norm = 0,
                        bool* touched = nullptr) const;
  void RemoveSpill();
};

struct RoundState {
  int32_t round = 0;
  int32_t attempt = 0;
  absl::Time started;
  absl::Time deadline;
  // No sampled client still owing an update can have been silent for client_timeout before
  // this time (the earliest last_seen + client_timeout among them when last looked; last_seen
  // only moves on): until then the check for silent clients is skipped. checked_silence_at:
  // when that was computed, so that a clock stepped back makes it look again.
  absl::Time no_silence_until = absl::InfinitePast();
  absl::Time checked_silence_at = absl::InfinitePast();
  std::vector<std::string> sampled;
  std::map<std::string, std::string> task_of;  // client id -> task id
  // What the strategy's ConfigureFit added to the fit tasks: for every site, and per site.
  std::map<std::string, double> fit_config;
  std::map<std::string, std::map<std::string, double>> site_config;
  std::unique_ptr<aggregation::RoundAggregator> aggregator;
  std::shared_mutex gate;
  // Set before the close takes the gate, so that streaming uploads stop asking for it (glibc's
  // shared_mutex prefers readers and would otherwise let a steady stream starve the close).
  std::atomic<bool> closing{false};
  // One upload per sampled client at most; guarded by the engine's mutex.
  std::map<std::string, std::shared_ptr<UploadState>> uploads;
  // The strategy's bound on each update's change (null / 0 without: see
  // Strategy::update_norm_bound): the round's global model and the norm; and differential
  // privacy's sampling rate q (sampled / online clients). Set before the round opens.
  std::shared_ptr<const Model> clip_global;
  double clip_norm = 0;
  // The run's update encoding, and the round's global model (float16 / int8 updates are changes
  // from it). Set before the round opens.
  UpdateEncoding encoding = UpdateEncoding::kFloat32;
  std::shared_ptr<const Model> global;
  double dp_sampling_rate = 0;
  // Set when the aggregate became unusable (a spill could not be read back mid-fold). Guarded by
  // the gate like the phases.
  bool poisoned = false;
  // Secure aggregation (null for plain rounds): the four stages' state; `aggregator` is then
  // null and verified masked inputs are summed in its session. Set before the round opens.
  std::unique_ptr<SecAggRound> secagg;

  RoundState();
  ~RoundState();  // out of line: SecAggRound is incomplete here
};

}  // namespace fl::server::internal

#endif  // FL_SERVER_ENGINE_UPLOAD_H_
