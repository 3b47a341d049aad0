// The server's runs over its life: the current run (its strategy and engine), the queue of runs
// submitted through the control API, and the move from one to the next. The federation and
// control services reach the current engine through it; a call in flight keeps the engine it
// began with alive (shared ownership) while the host moves on. Thread-safe.
#ifndef FL_SERVER_DAEMON_RUN_HOST_H_
#define FL_SERVER_DAEMON_RUN_HOST_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/aggregation/strategies.h"
#include "fl/server/server.h"
#include "server/service/control_service.h"
#include "server/store/run_queue.h"

namespace fl::server {

struct RunHostOptions {
  const ServerOptions* server = nullptr;  // spill_dir, clock, stay_up, run_factory, stall_after
  Store* store = nullptr;
  // The enrolled, unrevoked clients (SCAFFOLD's N).
  std::function<int64_t()> enrolled_clients;
  // Wraps each run's hooks (the server's metrics).
  std::function<EngineHooks(EngineHooks)> wrap_hooks;
  // Called with each new current engine, before the previous one is let go.
  std::function<void(RoundEngine*)> on_switch;
};

class RunHost final : public RunDirectory {
 public:
  static absl::StatusOr<std::unique_ptr<RunHost>> Create(RunHostOptions options);

  // Resumes the unfinished run (with its own run file when it was submitted), else starts
  // `initial` (without stay_up) or the oldest queued run (with it); with stay_up and nothing
  // queued the server waits for a submission.
  absl::Status Start(RunSetup initial);
  // When the current run is over, starts the oldest queued run (a queued run that does not make
  // a run any more is cancelled with the reason, and the next one tried). From the tick loop.
  void StartNextIfOver();
  // The current run is over (or there is none) and nothing is queued, or the host drains.
  bool Idle();
  // A server without stay_up is finishing: no queued run starts any more, and Submit refuses.
  void Drain();
  // The server shuts down: as Drain, and the current run's round in flight is aborted.
  void Abort(const std::string& reason);
  // The runs this process started or resumed, in order.
  std::vector<int64_t> served_runs();

  std::shared_ptr<RoundEngine> CurrentEngine() override;
  absl::StatusOr<QueuedRun> Submit(const std::string& run_toml, const std::string& name,
                                   const std::string& submitted_by) override;
  absl::StatusOr<std::vector<std::string>> UpdateRun(int64_t run_id,
                                                     const std::map<std::string, std::string>& set,
                                                     const std::string& by) override;
  RunQueue& queue() override { return *queue_; }
  absl::Time Now() override;
  absl::Duration stall_after() const override { return options_.server->stall_after; }

 private:
  struct LiveRun {
    std::unique_ptr<aggregation::Strategy> strategy;
    std::unique_ptr<RoundEngine> engine;  // after the strategy: destroyed before it
  };

  RunHost(RunHostOptions options, std::unique_ptr<RunQueue> queue)
      : options_(std::move(options)), queue_(std::move(queue)) {}
  // Makes the strategy and engine of `setup` (the engine resumes the store's unfinished run, if
  // any) and makes it current.
  absl::Status StartRun(RunSetup setup, const std::string& run_name);
  // Claims and starts the entry: true when it runs; false when it could not start (it is
  // cancelled with the reason) or was cancelled meanwhile; an error when the store failed.
  absl::StatusOr<bool> StartQueued(const QueuedRun& queued);
  void StartNextLocked();  // under switch_mu_
  absl::StatusOr<RunSetup> SetupOf(const QueuedRun& queued);
  // A resumed run that was not submitted takes what this start gave (ServerOptions::
  // resume_toml, over `strategy`, this start's): its policies change, audited; anything else
  // that differs refuses the start.
  absl::Status TakeResumeChanges(const aggregation::StrategyOptions& strategy);

  const RunHostOptions options_;
  const std::unique_ptr<RunQueue> queue_;
  std::mutex update_mu_;  // UpdateRun: one change at a time
  std::mutex switch_mu_;  // one move to the next run at a time; Idle waits for it
  std::mutex live_mu_;
  std::shared_ptr<LiveRun> live_;      // guarded by live_mu_
  std::atomic<bool> stopping_{false};  // Drain or Abort: no run starts any more
  std::vector<int64_t> served_;        // guarded by switch_mu_
};

}  // namespace fl::server

#endif  // FL_SERVER_DAEMON_RUN_HOST_H_
