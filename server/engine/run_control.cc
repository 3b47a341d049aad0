// What an operator does to a running run through the control API (stop it, change its
// policies), and the run's state as operators see it.
#include <algorithm>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/logging.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

absl::Status EngineImpl::Stop(RunStatus status, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (!finished_ && commit_ != nullptr) {
      // A round whose updates are all in is committed first; nothing starts after it.
      aborted_ = true;
      WaitForCommitLocked();
    }
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
  AfterUnlock();
  return absl::OkStatus();
}

namespace {

// The policies a run may change while it runs, by their key in EngineOptions::ToJson, with the
// name an operator knows them by (the [run] key); durations are shown in seconds.
struct MutablePolicy {
  const char* json;
  const char* name;
};
constexpr MutablePolicy kMutablePolicies[] = {
    {"num_rounds", "rounds"},
    {"min_clients", "min_clients"},
    {"min_fit_clients", "min_fit_clients"},
    {"sample_fraction", "sample_fraction"},
    {"round_timeout_ms", "round_timeout_s"},
    {"client_timeout_ms", "client_timeout_s"},
    {"task_pickup_timeout_ms", "task_pickup_timeout_s"},
    {"max_round_retries", "max_round_retries"},
    {"retry_backoff_ms", "retry_backoff_s"},
    {"wait_timeout_ms", "wait_timeout_s"},
    {"eval_every", "eval_every"},
    {"eval_fraction", "eval_fraction"},
    {"eval_timeout_ms", "eval_timeout_s"},
    {"stop_metric", "stop_metric"},
    {"stop_threshold", "stop_threshold"},
    {"stop_when_below", "stop_when_below"},
};

std::string Shown(const nlohmann::json& v, bool millis) {
  if (millis && v.is_number()) return absl::StrCat(v.get<double>() / 1000.0);
  return v.dump();
}

absl::Status CheckPolicies(const EngineOptions& o) {
  if (o.num_rounds < 1) return absl::InvalidArgumentError("rounds must be at least 1");
  if (o.min_fit_clients < 1 || o.min_clients < o.min_fit_clients) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 1 <= min_fit_clients <= min_clients; got min_fit_clients=", o.min_fit_clients,
        ", min_clients=", o.min_clients));
  }
  if (!(o.sample_fraction > 0 && o.sample_fraction <= 1) ||
      !(o.eval_fraction > 0 && o.eval_fraction <= 1)) {
    return absl::InvalidArgumentError("sample_fraction and eval_fraction must be in (0, 1]");
  }
  for (absl::Duration d : {o.round_timeout, o.client_timeout, o.wait_timeout, o.eval_timeout,
                           o.task_pickup_timeout}) {
    if (d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("timeouts must be positive");
    }
  }
  if (o.max_round_retries < 0 || o.eval_every < 0 || o.retry_backoff < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "max_round_retries, eval_every and retry_backoff_s must not be negative");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> EngineImpl::ChangePolicies(const EngineOptions& wanted,
                                                                    const std::string& by) {
  std::vector<std::string> changes;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "run ", run_.run_id, " is over (", ToString(run_.status), "); nothing to change"));
    }
    if (absl::Status s = CheckPolicies(wanted); !s.ok()) return s;
    if (wanted.secure_aggregation.enabled) {
      // The next round's parameters must exist for the new min_clients, or the run could not
      // resume after a restart.
      if (absl::Status s = wanted.secure_aggregation.ParamsFor(wanted.min_clients, 0).status();
          !s.ok()) {
        return absl::InvalidArgumentError(s.message());
      }
    }
    const nlohmann::json now = nlohmann::json::parse(options_.ToJson());
    const nlohmann::json want = nlohmann::json::parse(wanted.ToJson());
    std::vector<std::string> refused;
    for (const auto& [key, value] : want.items()) {
      if (key == "run_name" || now.value(key, nlohmann::json()) == value) continue;
      const bool changeable =
          std::any_of(std::begin(kMutablePolicies), std::end(kMutablePolicies),
                      [&name = key](const MutablePolicy& p) { return name == p.json; });
      if (changeable) continue;
      const nlohmann::json was = now.value(key, nlohmann::json());
      if (was.is_object() && value.is_object()) {  // strategy, privacy, ...: the keys that differ
        nlohmann::json subkeys = was;
        subkeys.update(value);
        for (const auto& [sub, unused] : subkeys.items()) {
          const nlohmann::json w = was.value(sub, nlohmann::json());
          const nlohmann::json v = value.value(sub, nlohmann::json());
          if (w != v) {
            refused.push_back(absl::StrCat(key, ".", sub, " ", w.dump(), " -> ", v.dump()));
          }
        }
      } else {
        refused.push_back(absl::StrCat(key, " ", was.dump(), " -> ", value.dump()));
      }
    }
    if (!refused.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "run ", run_.run_id, " cannot change ", absl::StrJoin(refused, ", "),
          ": a run keeps its model, strategy, privacy, secure aggregation, encoding and local "
          "training from start to end, or its rounds would be two experiments; end it (fl run "
          "stop, or fl admin end-run while no server runs) and start a new run instead. A run "
          "may change: rounds, min_clients, "
          "min_fit_clients, sample_fraction, the timeouts, retries, eval_every/fraction and the "
          "stopping rule"));
    }
    for (const MutablePolicy& p : kMutablePolicies) {
      if (now.at(p.json) == want.at(p.json)) continue;
      const bool millis = absl::EndsWith(p.json, "_ms");
      changes.push_back(absl::StrCat(p.name, ": ", Shown(now.at(p.json), millis), " -> ",
                                     Shown(want.at(p.json), millis)));
    }
    if (changes.empty()) return changes;
    EngineOptions next = options_;
    next.num_rounds = wanted.num_rounds;
    next.min_clients = wanted.min_clients;
    next.min_fit_clients = wanted.min_fit_clients;
    next.sample_fraction = wanted.sample_fraction;
    next.round_timeout = wanted.round_timeout;
    next.client_timeout = wanted.client_timeout;
    next.task_pickup_timeout = wanted.task_pickup_timeout;
    next.max_round_retries = wanted.max_round_retries;
    next.retry_backoff = wanted.retry_backoff;
    next.wait_timeout = wanted.wait_timeout;
    next.eval_every = wanted.eval_every;
    next.eval_fraction = wanted.eval_fraction;
    next.eval_timeout = wanted.eval_timeout;
    next.stop_metric = wanted.stop_metric;
    next.stop_threshold = wanted.stop_threshold;
    next.stop_when_below = wanted.stop_when_below;
    // Written first: a change the store did not keep would be undone by the next restart.
    if (absl::Status s = store_->UpdateRunConfig(run_.run_id, next.ToJson()); !s.ok()) return s;
    options_ = std::move(next);
    for (const std::string& change : changes) {
      AuditRecord rec;
      rec.at_ms = ToMs(clock_->Now());
      rec.event = "run_updated";
      rec.detail = absl::StrCat(change, " (by ", by, ")");
      rec.run_id = run_.run_id;
      rec.round = committed_round_;
      (void)store_->Audit(rec);
      LogEvent(LogLevel::kWarn, "run_updated",
               {{"run", absl::StrCat(run_.run_id)}, {"change", change}, {"by", by}});
    }
    // Fewer rounds than already committed: the run is over once no round is in flight (a round
    // in flight that fails is not retried: MaybeAdvanceLocked ends the run instead).
    if (committed_round_ >= options_.num_rounds) {
      const std::string why = absl::StrCat("rounds lowered to ", options_.num_rounds, " by ", by);
      if (eval_ != nullptr) {
        if (!finish_after_eval_.has_value()) finish_after_eval_ = why;
      } else if (current_ == nullptr && commit_ == nullptr) {
        FinishRunLocked(why);
      }
    }
    BumpLocked();
  }
  AfterUnlock();
  return changes;
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
