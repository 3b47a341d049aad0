// What an operator does to a running run through the control API (stop it), and the run's
// state as operators see it.
#include <algorithm>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "fl/common/logging.h"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

absl::Status EngineImpl::Stop(RunStatus status, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) {
      return absl::FailedPreconditionError(
          absl::StrCat("run ", run_.run_id, " is already over (", ToString(run_.status),
                       run_.reason.empty() ? "" : ": ", run_.reason, ")"));
    }
    AbortInFlightLocked(reason);
    AuditRecord rec;
    rec.at_ms = ToMs(clock_->Now());
    rec.event = "run_stopped";
    rec.detail = absl::StrCat(status == RunStatus::kFailed ? "failed" : "finished", ": ", reason);
    rec.run_id = run_.run_id;
    rec.round = committed_round_;
    (void)store_->Audit(rec);
    EndRunLocked(status == RunStatus::kFailed ? RunStatus::kFailed : RunStatus::kFinished, reason);
  }
  FlushSummaries();
  return absl::OkStatus();
}

}  // namespace fl::server::internal

namespace fl::server {

RunStateView RunStateOf(const RunActivity& a, absl::Time now, absl::Duration stall_after) {
  const absl::Duration idle = std::max(absl::ZeroDuration(), now - a.last_progress);
  using Phase = RunActivity::Phase;
  const bool over = a.phase == Phase::kFinished || a.phase == Phase::kFailed;
  if (!over && idle > stall_after) return {"stalled", 3, idle};
  switch (a.phase) {
    case Phase::kWaiting:
      return {"waiting", 0, idle};
    case Phase::kTraining:
      return {"training", 1, idle};
    case Phase::kEvaluating:
      return {"evaluating", 2, idle};
    case Phase::kFinished:
      return {"finished", 4, idle};
    case Phase::kFailed:
      return {"failed", 5, idle};
  }
  return {"waiting", 0, idle};
}

}  // namespace fl::server
