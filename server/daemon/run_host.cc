#include "server/daemon/run_host.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/logging.h"

namespace fl::server {

absl::StatusOr<std::unique_ptr<RunHost>> RunHost::Create(RunHostOptions options) {
  absl::StatusOr<std::unique_ptr<RunQueue>> queue = RunQueue::Open(options.store->db_path());
  if (!queue.ok()) return queue.status();
  return std::unique_ptr<RunHost>(new RunHost(std::move(options), *std::move(queue)));
}

absl::Time RunHost::Now() {
  return (options_.server->clock != nullptr ? options_.server->clock : Clock::Real())->Now();
}

std::shared_ptr<RoundEngine> RunHost::CurrentEngine() {
  std::lock_guard lock(live_mu_);
  if (live_ == nullptr) return nullptr;
  return std::shared_ptr<RoundEngine>(live_, live_->engine.get());
}

absl::Status RunHost::Start(RunSetup initial) {
  std::lock_guard switch_lock(switch_mu_);
  absl::StatusOr<std::optional<RunRecord>> active = options_.store->ActiveRun();
  if (!active.ok()) return active.status();
  if (active->has_value()) {
    // A submitted run resumes with its own run file, not the server's configuration.
    absl::StatusOr<std::optional<QueuedRun>> queued = queue_->ForRun((*active)->run_id);
    if (!queued.ok()) return queued.status();
    if (queued->has_value()) {
      absl::StatusOr<RunSetup> setup = SetupOf(**queued);
      if (!setup.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot resume run ", (*active)->run_id, ": its run file (queued run ",
            (*queued)->queue_id, ") no longer makes a run over this server's configuration: ",
            setup.status().message()));
      }
      return StartRun(*std::move(setup), "");
    }
    return StartRun(std::move(initial), "");
  }
  if (!options_.server->stay_up) return StartRun(std::move(initial), "");
  absl::StatusOr<std::optional<QueuedRun>> next = queue_->Oldest();
  if (!next.ok()) return next.status();
  if (next->has_value()) {
    if (absl::Status s = StartQueued(**next); !s.ok()) {
      (void)queue_->Cancel((*next)->queue_id, absl::StrCat("could not start: ", s.message()));
      LogEvent(
          LogLevel::kError, "queued_run_cancelled",
          {{"queue_id", absl::StrCat((*next)->queue_id)}, {"reason", std::string(s.message())}});
    }
    return absl::OkStatus();
  }
  LogEvent(LogLevel::kInfo, "server_idle", {{"waiting_for", "a run (fl run submit)"}});
  return absl::OkStatus();
}

void RunHost::StartNextIfOver() {
  std::lock_guard switch_lock(switch_mu_);
  if (aborted_) return;
  std::shared_ptr<RoundEngine> current = CurrentEngine();
  if (current != nullptr && !current->finished()) return;
  while (true) {
    absl::StatusOr<std::optional<QueuedRun>> next = queue_->Oldest();
    if (!next.ok()) {
      LogEvent(LogLevel::kError, "run_queue_unreadable", {{"error", next.status().ToString()}});
      return;
    }
    if (!next->has_value()) return;
    absl::Status s = StartQueued(**next);
    if (s.ok()) return;
    (void)queue_->Cancel((*next)->queue_id, absl::StrCat("could not start: ", s.message()));
    LogEvent(LogLevel::kError, "queued_run_cancelled",
             {{"queue_id", absl::StrCat((*next)->queue_id)}, {"reason", std::string(s.message())}});
  }
}

bool RunHost::Idle() {
  std::lock_guard switch_lock(switch_mu_);
  std::shared_ptr<RoundEngine> current = CurrentEngine();
  if (current != nullptr && !current->finished()) return false;
  if (aborted_) return true;
  absl::StatusOr<std::optional<QueuedRun>> next = queue_->Oldest();
  return !next.ok() || !next->has_value();
}

void RunHost::Abort(const std::string& reason) {
  {
    std::lock_guard switch_lock(switch_mu_);
    aborted_ = true;
  }
  if (std::shared_ptr<RoundEngine> current = CurrentEngine(); current != nullptr) {
    current->Abort(reason);
  }
}

absl::StatusOr<QueuedRun> RunHost::Submit(const std::string& run_toml, const std::string& name,
                                          const std::string& submitted_by) {
  if (!options_.server->run_factory) {
    return absl::FailedPreconditionError(
        "this server takes no submitted runs (it was started without a run factory)");
  }
  // Checked now, so that a wrong key is the submitter's error, not a cancelled run later.
  absl::StatusOr<RunSetup> setup = options_.server->run_factory(run_toml);
  if (!setup.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the run file does not make a run: ", setup.status().message()));
  }
  const std::string run_name = name.empty() ? setup->engine.run_name : name;
  absl::StatusOr<int64_t> id =
      queue_->Enqueue(run_name, run_toml, submitted_by, absl::ToUnixMillis(absl::Now()));
  if (!id.ok()) return id.status();
  LogEvent(LogLevel::kInfo, "run_queued",
           {{"queue_id", absl::StrCat(*id)}, {"name", run_name}, {"by", submitted_by}});
  return queue_->Get(*id);
}

absl::StatusOr<RunSetup> RunHost::SetupOf(const QueuedRun& queued) {
  if (!options_.server->run_factory) {
    return absl::FailedPreconditionError("this server was started without a run factory");
  }
  return options_.server->run_factory(queued.config_toml);
}

absl::Status RunHost::StartQueued(const QueuedRun& queued) {
  absl::StatusOr<RunSetup> setup = SetupOf(queued);
  if (!setup.ok()) return setup.status();
  if (absl::Status s = StartRun(*std::move(setup), queued.name); !s.ok()) return s;
  const int64_t run_id = CurrentEngine()->run_id();
  LogEvent(LogLevel::kInfo, "queued_run_started",
           {{"queue_id", absl::StrCat(queued.queue_id)},
            {"run", absl::StrCat(run_id)},
            {"name", queued.name},
            {"by", queued.submitted_by}});
  return queue_->MarkStarted(queued.queue_id, run_id);
}

absl::Status RunHost::StartRun(RunSetup setup, const std::string& run_name) {
  auto live = std::make_shared<LiveRun>();
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> strategy =
      aggregation::MakeStrategy(setup.strategy, options_.enrolled_clients);
  if (!strategy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("strategy: ", strategy.status().message()));
  }
  if (absl::Status s = (*strategy)->CheckModel(setup.initial_model.spec()); !s.ok()) return s;
  live->strategy = *std::move(strategy);
  for (const auto& [key, value] : setup.strategy.ClientConfig()) {
    setup.engine.fit.extra[key] = value;
  }
  setup.engine.spill_dir = options_.server->engine.spill_dir;
  if (!run_name.empty()) setup.engine.run_name = run_name;
  Clock* clock = options_.server->clock != nullptr ? options_.server->clock : Clock::Real();
  EngineHooks hooks =
      options_.wrap_hooks ? options_.wrap_hooks(std::move(setup.hooks)) : std::move(setup.hooks);
  absl::StatusOr<std::unique_ptr<RoundEngine>> engine =
      RoundEngine::Create(std::move(setup.engine), options_.store, live->strategy.get(), clock,
                          std::move(setup.initial_model), std::move(hooks));
  if (!engine.ok()) return engine.status();
  live->engine = *std::move(engine);
  if (options_.on_switch) options_.on_switch(live->engine.get());
  {
    std::lock_guard lock(live_mu_);
    live_.swap(live);
  }
  // The previous run goes here, or when its last call in flight returns.
  return absl::OkStatus();
}

}  // namespace fl::server
