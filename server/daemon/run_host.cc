#include "server/daemon/run_host.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fl/aggregation/scaffold.h"
#include "fl/common/logging.h"
#include "server/daemon/config.h"

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
    const int64_t run_id = (*active)->run_id;
    // A submitted run resumes with its own run file, not the server's configuration. Its entry
    // may lack the run when the server stopped between creating the run and recording it.
    absl::StatusOr<std::optional<QueuedRun>> queued = queue_->ForRun(run_id);
    if (queued.ok() && !queued->has_value()) {
      queued = queue_->ClaimedWithoutRun();
      if (queued.ok() && queued->has_value()) {
        if (absl::Status s = queue_->SetRun((*queued)->queue_id, run_id); !s.ok()) return s;
      }
    }
    if (!queued.ok()) return queued.status();
    if (!queued->has_value()) {
      const aggregation::StrategyOptions strategy = initial.strategy;
      if (absl::Status s = StartRun(std::move(initial), ""); !s.ok()) return s;
      return TakeResumeChanges(strategy);
    }
    absl::StatusOr<RunSetup> setup = SetupOf(**queued);
    if (setup.ok()) return StartRun(*std::move(setup), "");
    if (!absl::IsInvalidArgument(setup.status())) return setup.status();  // e.g. a disk away
    // The server must come up (its control API is the way to act on runs): a submitted run whose
    // file no longer makes a run ends as failed, with the reason, and the queue goes on.
    const std::string reason = absl::StrCat(
        "cannot resume: its run file (q", (*queued)->queue_id,
        ") no longer makes a run over this server's configuration: ", setup.status().message());
    LogEvent(LogLevel::kError, "run_failed", {{"run", absl::StrCat(run_id)}, {"reason", reason}});
    if (absl::Status s = options_.store->FinishRun(run_id, RunStatus::kFailed, reason,
                                                   absl::ToUnixMillis(absl::Now()));
        !s.ok()) {
      return s;
    }
    served_.push_back(run_id);  // a one-shot server exits non-zero for it
  } else {
    // No run is active, so an entry claimed but without its run never got one (the server
    // stopped while making it): it did not start.
    for (;;) {
      absl::StatusOr<std::optional<QueuedRun>> orphan = queue_->ClaimedWithoutRun();
      if (!orphan.ok()) return orphan.status();
      if (!orphan->has_value()) break;
      if (absl::Status s = queue_->Abandon((*orphan)->queue_id,
                                           "the server stopped while starting it; submit it again");
          !s.ok()) {
        return s;
      }
    }
    if (!options_.server->stay_up) return StartRun(std::move(initial), "");
  }
  StartNextLocked();
  if (CurrentEngine() == nullptr) {
    LogEvent(LogLevel::kInfo, "server_idle", {{"waiting_for", "a run (fl run submit)"}});
  }
  return absl::OkStatus();
}

void RunHost::StartNextIfOver() {
  if (stopping_.load()) return;
  std::lock_guard switch_lock(switch_mu_);
  std::shared_ptr<RoundEngine> current = CurrentEngine();
  if (current != nullptr && !current->finished()) return;
  StartNextLocked();
}

void RunHost::StartNextLocked() {
  // Each entry is tried once: one that cannot start is cancelled with the reason. A store
  // error ends the attempt; the next tick tries again.
  while (!stopping_.load()) {
    absl::StatusOr<std::optional<QueuedRun>> next = queue_->Oldest();
    if (!next.ok()) {
      LogEvent(LogLevel::kError, "run_queue_unreadable", {{"error", next.status().ToString()}});
      return;
    }
    if (!next->has_value()) return;
    absl::StatusOr<bool> started = StartQueued(**next);
    if (!started.ok()) {
      LogEvent(LogLevel::kWarn, "queued_run_not_started", {{"error", started.status().ToString()}});
      return;
    }
    if (*started) return;
  }
}

bool RunHost::Idle() {
  std::lock_guard switch_lock(switch_mu_);
  std::shared_ptr<RoundEngine> current = CurrentEngine();
  if (current != nullptr && !current->finished()) return false;
  if (stopping_.load()) return true;
  absl::StatusOr<std::optional<QueuedRun>> next = queue_->Oldest();
  return !next.ok() || !next->has_value();
}

void RunHost::Drain() { stopping_ = true; }

void RunHost::Abort(const std::string& reason) {
  stopping_ = true;
  std::lock_guard switch_lock(switch_mu_);  // a run starting now finishes starting first
  if (std::shared_ptr<RoundEngine> current = CurrentEngine(); current != nullptr) {
    current->Abort(reason);
  }
}

std::vector<int64_t> RunHost::served_runs() {
  std::lock_guard switch_lock(switch_mu_);
  return served_;
}

absl::StatusOr<QueuedRun> RunHost::Submit(const std::string& run_toml, const std::string& name,
                                          const std::string& submitted_by) {
  if (!options_.server->run_factory) {
    return absl::FailedPreconditionError(
        "this server takes no submitted runs (it was started without a run factory)");
  }
  if (stopping_.load()) {
    return absl::FailedPreconditionError(
        "the server is finishing (it runs without --stay-up, and its runs are over); submit once "
        "it is started again, or run it with --stay-up");
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

absl::Status RunHost::TakeResumeChanges(const aggregation::StrategyOptions& strategy) {
  const std::string& toml = options_.server->resume_toml;
  if (toml.empty()) return absl::OkStatus();
  std::shared_ptr<RoundEngine> engine = CurrentEngine();
  if (engine->finished()) {
    // Its last round was committed before the server stopped: it ends as it was configured.
    LogEvent(LogLevel::kWarn, "resume_changes_ignored",
             {{"run", absl::StrCat(engine->run_id())}, {"reason", "the run is over"}});
    return absl::OkStatus();
  }
  ServerConfig config;
  config.server.engine = engine->options();
  config.server.strategy = config.server.engine.strategy.value_or(strategy);
  const std::string source = "this start's flags";
  if (absl::Status s = ApplyRunConfig(toml, source, config); !s.ok()) return s;
  if (config.server.engine.strategy.has_value()) {
    config.server.engine.strategy = config.server.strategy;  // a change is refused below
  }
  if (absl::StrContains(toml, "[strategy]")) {
    // The strategy's settings reach the sites in every fit task: a resumed run's must be its own.
    std::map<std::string, double>& extra = config.server.engine.fit.extra;
    if (config.server.strategy.name != "fedprox") extra.erase("proximal_mu");
    for (const auto& [key, value] : config.server.strategy.ClientConfig()) extra[key] = value;
  }
  absl::StatusOr<std::vector<std::string>> changes =
      engine->ChangePolicies(config.server.engine, source);
  if (!changes.ok()) {
    return absl::Status(changes.status().code(),
                        absl::StrCat("resuming: ", changes.status().message(),
                                     "; or start with the run's own values (fl admin status "
                                     "shows the run)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RunHost::UpdateRun(
    int64_t run_id, const std::map<std::string, std::string>& set, const std::string& by) {
  // One change at a time: each reads the run's options and writes them back whole.
  std::lock_guard update_lock(update_mu_);
  std::shared_ptr<RoundEngine> engine = CurrentEngine();
  if (engine == nullptr || engine->run_id() != run_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run ", run_id, " is not the server's active run; only a running run can change"));
  }
  constexpr size_t kMaxKeys = 32, kMaxKey = 64, kMaxValue = 256;
  if (set.empty() || set.size() > kMaxKeys) {
    return absl::InvalidArgumentError(absl::StrCat("give 1 to ", kMaxKeys, " keys to change"));
  }
  // The keys as a [run] table, read with the configuration's own key table: the same names,
  // types and ranges as server.toml.
  std::string toml = "[run]\n";
  for (const auto& [raw_key, value] : set) {
    const std::string key = absl::StartsWith(raw_key, "run.") ? raw_key.substr(4) : raw_key;
    const bool plain =
        !key.empty() && key.size() <= kMaxKey && std::all_of(key.begin(), key.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
        });
    if (!plain || value.empty() || value.size() > kMaxValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", raw_key, "=", value.substr(0, 64),
                       "' is not key=value of a [run] key (e.g. rounds=20, min_clients=3, "
                       "round_timeout_s=600)"));
    }
    double number = 0;
    const bool literal = absl::SimpleAtod(value, &number) || value == "true" || value == "false" ||
                         value.front() == '"';
    absl::StrAppend(&toml, key, " = ",
                    literal ? value : absl::StrCat("\"", absl::CEscape(value), "\""), "\n");
  }
  ServerConfig config;
  config.server.engine = engine->options();
  if (absl::Status s = ApplyRunConfig(toml, "update", config); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  return engine->ChangePolicies(config.server.engine, by);
}

absl::StatusOr<RunSetup> RunHost::SetupOf(const QueuedRun& queued) {
  if (!options_.server->run_factory) {
    return absl::FailedPreconditionError("this server was started without a run factory");
  }
  return options_.server->run_factory(queued.config_toml);
}

absl::StatusOr<bool> RunHost::StartQueued(const QueuedRun& queued) {
  // Never resume another run with this entry's settings: while the store shows a run active
  // (its end not recorded), nothing starts, and the next tick tries again.
  absl::StatusOr<std::optional<RunRecord>> active = options_.store->ActiveRun();
  if (!active.ok()) return active.status();
  if (active->has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run ", (*active)->run_id, " is still active in the store; q", queued.queue_id, " waits"));
  }
  // Claimed first: an entry being started can no longer be cancelled, nor started twice.
  if (absl::Status s = queue_->Claim(queued.queue_id); !s.ok()) {
    if (absl::IsFailedPrecondition(s)) return false;  // cancelled meanwhile
    return s;
  }
  absl::StatusOr<RunSetup> setup = SetupOf(queued);
  absl::Status why = setup.ok() ? StartRun(*std::move(setup), queued.name) : setup.status();
  if (!why.ok()) {
    LogEvent(LogLevel::kError, "queued_run_cancelled",
             {{"queue_id", absl::StrCat(queued.queue_id)}, {"reason", std::string(why.message())}});
    if (absl::Status s =
            queue_->Abandon(queued.queue_id, absl::StrCat("could not start: ", why.message()));
        !s.ok()) {
      return s;
    }
    return false;
  }
  const int64_t run_id = CurrentEngine()->run_id();
  LogEvent(LogLevel::kInfo, "queued_run_started",
           {{"queue_id", absl::StrCat(queued.queue_id)},
            {"run", absl::StrCat(run_id)},
            {"name", queued.name},
            {"by", queued.submitted_by}});
  if (absl::Status s = queue_->SetRun(queued.queue_id, run_id); !s.ok()) return s;
  return true;
}

absl::Status RunHost::StartRun(RunSetup setup, const std::string& run_name) {
  auto live = std::make_shared<LiveRun>();
  // A run that resumes keeps the strategy recorded with it, whatever this start's configuration
  // (or a run file's defaults over it) says; a flag that would change it is refused
  // (TakeResumeChanges). Runs from before the strategy was recorded take this start's.
  absl::StatusOr<std::optional<RunRecord>> active = options_.store->ActiveRun();
  if (!active.ok()) return active.status();
  if (active->has_value()) {
    absl::StatusOr<EngineOptions> stored = EngineOptions::FromJson((*active)->config_json);
    if (stored.ok() && stored->strategy.has_value()) {
      // SCAFFOLD's model carries control variates: the model this start made for its own
      // strategy gets them, or loses them, so that its spec is the run's.
      const bool had = setup.strategy.name == "scaffold";
      setup.strategy = *stored->strategy;
      const bool has = setup.strategy.name == "scaffold";
      if (has && !had) {
        setup.initial_model = aggregation::WithZeroControlVariates(setup.initial_model);
      } else if (had && !has) {
        setup.initial_model = aggregation::WithoutControlVariates(setup.initial_model);
      }
    }
  }
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> strategy = aggregation::MakeStrategy(
      setup.strategy, options_.enrolled_clients,
      aggregation::MakeFileSpill(options_.server->engine.spill_dir),
      setup.root_trainer ? setup.root_trainer : options_.server->root_trainer);
  if (!strategy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("strategy: ", strategy.status().message()));
  }
  if (absl::Status s = (*strategy)->CheckModel(setup.initial_model.spec()); !s.ok()) return s;
  live->strategy = *std::move(strategy);
  for (const auto& [key, value] : setup.strategy.ClientConfig()) {
    setup.engine.fit.extra[key] = value;
  }
  setup.strategy.server_learning_rate = aggregation::EffectiveServerLearningRate(setup.strategy);
  setup.engine.strategy = setup.strategy;  // recorded with the rate it runs with
  setup.engine.spill_dir = options_.server->engine.spill_dir;
  // The last upload of a round returns before its commit; not under a simulated clock, whose
  // driver must see the commit done before it moves time on (a commit takes no simulated time).
  setup.engine.commit_thread = options_.server->clock == nullptr;
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
  served_.push_back(live->engine->run_id());
  {
    std::lock_guard lock(live_mu_);
    live_.swap(live);
  }
  // The previous run goes here, or when its last call in flight returns.
  return absl::OkStatus();
}

}  // namespace fl::server
