// Internal to the engine: the state of one round attempt and of each update streaming into it.
//
// Chunks are checked as they arrive (order, size, finite values, running SHA-256) and staged in a
// spill file; once the whole payload checked out, the update is folded into the round's input
// (round_input.h) in one pass over the spill. A refused or cut-off update therefore never touches
// the aggregate (folding out again in floating point would not be exact). Each round has a gate (a
// shared mutex): uploads hold it shared while they stage or fold; closing the round sets
// `closing` and then holds it exclusively, so no update is half in.
#ifndef FL_SERVER_ENGINE_UPLOAD_H_
#define FL_SERVER_ENGINE_UPLOAD_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
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
#include "server/engine/round_input.h"

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
  // The sampled clients that were handed their fit task (a poll answered FIT), and when the
  // others last heartbeated an older task (still at work on it: they ask for this one once done,
  // so the pickup timeout runs from then).
  std::set<std::string> picked_up;
  std::map<std::string, absl::Time> busy_heard;
  // What the strategy's ConfigureFit added to the fit tasks: for every site, and per site.
  std::map<std::string, double> fit_config;
  std::map<std::string, std::map<std::string, double>> site_config;
  // How the round takes its updates and makes the next model of them (round_input.h): a plain
  // round's strategy aggregator or a secure round's masked sum. Set before the round opens, never
  // replaced.
  std::unique_ptr<RoundInput> input;
  // A secure round's stages (secagg_round.h): the same object as `input`, null in a plain round.
  SecAggRound* secagg = nullptr;
  std::shared_mutex gate;
  // Set before the close takes the gate, so that streaming uploads stop asking for it (glibc's
  // shared_mutex prefers readers and would otherwise let a steady stream starve the close).
  std::atomic<bool> closing{false};
  // One upload per sampled client at most; guarded by the engine's mutex.
  std::map<std::string, std::shared_ptr<UploadState>> uploads;
  // Differential privacy's sampling rate q (sampled / online clients). Set before the round
  // opens.
  double dp_sampling_rate = 0;
  // What the round adds to the accountant (EngineImpl::RoundRdpLocked), at its orders.
  std::vector<double> dp_rdp;
  // Set when the aggregate became unusable (a spill could not be read back mid-fold). Guarded by
  // the gate like the phases.
  bool poisoned = false;

  RoundState();
  ~RoundState();
};

}  // namespace fl::server::internal

#endif  // FL_SERVER_ENGINE_UPLOAD_H_
