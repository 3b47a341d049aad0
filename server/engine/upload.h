// Internal to the engine: the state of one round attempt and of each update streaming into it.
//
// Chunks are folded into the round's aggregator as they arrive and also staged in a spill file,
// so that an update refused later (bad SHA-256, truncated stream, NaN in a late chunk) or cut off
// by the round's deadline can be folded out again: the aggregate only ever holds whole, verified
// updates. Each round has a gate (a shared mutex): uploads hold it shared while they touch the
// aggregator; closing the round holds it exclusively, so no update is half in and half out.
#ifndef FL_SERVER_ENGINE_UPLOAD_H_
#define FL_SERVER_ENGINE_UPLOAD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fl/aggregation/strategy.h"
#include "fl/server/store.h"

namespace fl::server::internal {

struct UploadState {
  enum class Phase { kStreaming, kAccepted, kRefused, kAborted };

  std::string client_id;
  std::string task_id;
  int64_t num_examples = 0;
  std::map<std::string, double> metrics;
  // Guarded by the round's gate: written by the upload's thread holding it shared, or by the
  // round's close holding it exclusively.
  Phase phase = Phase::kStreaming;
  std::string reason;  // why refused or aborted
  int64_t bytes_folded = 0;
  int spill_fd = -1;
  std::string spill_path;

  ~UploadState();
  // Folds the spilled bytes [0, bytes_folded) back out of `aggregator` and removes the spill.
  // Returns an error only when the spill cannot be read (the aggregate is then unusable).
  absl::Status FoldOut(aggregation::RoundAggregator& aggregator);
  void RemoveSpill();
};

struct RoundState {
  int32_t round = 0;
  int32_t attempt = 0;
  absl::Time started;
  absl::Time deadline;
  std::vector<std::string> sampled;
  std::map<std::string, std::string> task_of;  // client id -> task id
  std::unique_ptr<aggregation::RoundAggregator> aggregator;
  std::shared_mutex gate;
  // One upload per sampled client at most; guarded by the engine's mutex.
  std::map<std::string, std::shared_ptr<UploadState>> uploads;
  // Set when the aggregate became unusable (a spill could not be read back).
  bool poisoned = false;
};

}  // namespace fl::server::internal

#endif  // FL_SERVER_ENGINE_UPLOAD_H_
