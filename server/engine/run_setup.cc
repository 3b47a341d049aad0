// Creating a run or resuming the store's unfinished one (the rounds in flight marked aborted, the
// accountant and the stopping rule replayed), and what a run sets up once: its unique name, its
// update encoding, its privacy.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/central_dp.h"
#include "fl/common/logging.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

absl::Status EngineImpl::Init(Model initial_model) {
  // Before the engine is shared, but under mu_ as every other writer of its state, so that the
  // thread-safety analysis checks Init as it checks them.
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::optional<RunRecord>> active = store_->ActiveRun();
  if (!active.ok()) return active.status();
  waiting_since_ = clock_->Now();
  last_progress_ = waiting_since_;
  last_seen_flushed_ = waiting_since_;
  const int64_t now_ms = ToMs(waiting_since_);
  if (active->has_value()) {
    run_ = **active;
    run_id_ = run_.run_id;
    const EngineOptions process = options_;  // this process's settings, not the run's
    absl::StatusOr<EngineOptions> stored = EngineOptions::FromJson(run_.config_json);
    if (!stored.ok()) return stored.status();
    options_ = *stored;
    options_.spill_dir = process.spill_dir;
    options_.last_seen_flush = process.last_seen_flush;
    options_.commit_thread = process.commit_thread;
    if (absl::Status s = SetUpPrivacy(); !s.ok()) return s;
    if (absl::Status s = LoadFeatureStatistics(); !s.ok()) return s;
    if (run_.model_spec_json != initial_model.spec().ToJson()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the unfinished run ", run_.run_id, " in this data directory trains a model of spec ",
          run_.model_spec_json, ", not ", initial_model.spec().ToJson(),
          "; start with the run's model, or end the run first (fl admin end-run --reason TEXT "
          "--data-dir DIR) and a new run starts"));
    }
    absl::StatusOr<int> aborted = store_->AbortInFlightRounds(run_.run_id, now_ms);
    if (!aborted.ok()) return aborted.status();
    absl::StatusOr<std::optional<RoundRecord>> last = store_->LastCommittedRound(run_.run_id);
    if (!last.ok()) return last.status();
    std::string sha = run_.initial_checkpoint;
    if (last->has_value()) {
      committed_round_ = (*last)->round;
      sha = (*last)->checkpoint;
    }
    absl::StatusOr<Model> model = store_->ReadCheckpoint(sha);
    if (!model.ok()) return model.status();
    global_ = std::make_shared<const Model>(*std::move(model));
    global_sha_ = sha;
    if (last->has_value() && !(*last)->state_checkpoint.empty()) {
      // The strategy continues from the server state committed with the last round.
      absl::StatusOr<Model> state = store_->ReadCheckpoint((*last)->state_checkpoint);
      if (!state.ok()) return state.status();
      if (absl::Status s = strategy_->AdoptState(*std::move(state)); !s.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the unfinished run ", run_.run_id,
                         " cannot resume its strategy's state: ", s.message()));
      }
    }
    absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run_.run_id);
    if (!rounds.ok()) return rounds.status();
    std::optional<RoundRecord> revealed;  // the next round's attempt unmasked but not committed
    for (const RoundRecord& r : *rounds) {
      // The accountant replays the committed rounds' sampling rates.
      if (accountant_.has_value() && r.status == RoundStatus::kCommitted &&
          r.dp_sampling_rate > 0) {
        absl::StatusOr<std::vector<double>> rdp = RoundRdpLocked(r.dp_sampling_rate, r.num_sampled);
        if (!rdp.ok()) return rdp.status();
        if (absl::Status s = accountant_->AddRdp(*rdp); !s.ok()) return s;
      }
      if (r.status == RoundStatus::kCommitted) {
        // The clients whose updates this round folded in (its committed attempt's accepted ones).
        absl::StatusOr<std::vector<ParticipationRecord>> parts =
            store_->Participations(run_.run_id, r.round);
        if (!parts.ok()) return parts.status();
        std::vector<ParticipationRecord> summed;
        for (const ParticipationRecord& p : *parts) {
          if (p.attempt == r.attempt && p.status == ParticipationStatus::kAccepted) {
            client_committed_round_[p.client_id] = r.round;
            summed.push_back(p);
          }
        }
        ReplayServerExposureLocked(r, summed);
      }
      if (r.round != committed_round_ + 1) continue;
      next_attempt_ = std::max(next_attempt_, r.attempt + 1);
      if (r.status == RoundStatus::kFailed) ++failed_attempts_;
      // An attempt whose secure sum was unmasked (or was being unmasked when the server died:
      // aborted since) but not committed ended the run; a restart must not run the round again.
      if (r.status != RoundStatus::kCommitted && !r.secagg_json.empty()) {
        nlohmann::json j = nlohmann::json::parse(r.secagg_json, nullptr, false);
        if (j.is_object() && (j.value("revealed", false) || j.value("unmasking", false))) {
          revealed = r;
        }
      }
    }
    LogEvent(LogLevel::kInfo, "run_resumed",
             {{"run", absl::StrCat(run_.run_id)},
              {"committed_round", absl::StrCat(committed_round_)},
              {"aborted_in_flight", absl::StrCat(*aborted)}});
    if (revealed.has_value()) {
      const std::string counted = CountInterruptedReleaseLocked(*revealed);
      FailRunLocked(absl::StrCat(
          "round ", committed_round_ + 1, " attempt ", revealed->attempt,
          ": the secure sum was unmasked (or being unmasked when the server stopped) but not "
          "committed; the run stops rather than run the "
          "round again from the same model, where two sums over different sites could reveal one "
          "site's update",
          counted));
    } else if (committed_round_ >= options_.num_rounds) {
      FinishRunLocked("");
    } else if (last->has_value()) {
      // A crash between a commit and the end of the run must not lose the stopping rule's
      // decision: check it again on the last committed round's recorded metrics.
      std::map<std::string, double> metrics;
      nlohmann::json m = nlohmann::json::parse((*last)->metrics_json, nullptr, false);
      if (m.is_object()) {
        for (const auto& [k, v] : m.items()) {
          if (v.is_number()) metrics[k] = v.get<double>();
        }
      }
      // The round's federated evaluation, if it finished before the crash, counts too.
      absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(run_.run_id);
      if (!evals.ok()) return evals.status();
      for (const EvaluationRecord& e : *evals) {
        if (e.source != "federated" || e.round != committed_round_) continue;
        std::map<std::string, double> federated = e.metrics;
        if (federated.empty()) federated["accuracy"] = e.accuracy;  // a row of schema 1
        for (const auto& [k, v] : FederatedStopMetrics(e.loss, federated)) metrics[k] = v;
      }
      if (std::string why = StoppingRuleMet(metrics); !why.empty()) FinishRunLocked(why);
    }
    return absl::OkStatus();
  }
  if (absl::Status s = initial_model.spec().Validate(); !s.ok()) return s;
  if (absl::Status s = SetUpPrivacy(); !s.ok()) return s;
  absl::StatusOr<std::string> sha = store_->WriteCheckpoint(initial_model);
  if (!sha.ok()) return sha.status();
  absl::StatusOr<std::string> name = UniqueRunNameLocked(options_.run_name);
  if (!name.ok()) return name.status();
  run_.name = *std::move(name);
  run_.config_json = options_.ToJson();
  run_.model_spec_json = initial_model.spec().ToJson();
  run_.initial_checkpoint = *sha;
  run_.status = RunStatus::kRunning;
  run_.created_at_ms = now_ms;
  absl::StatusOr<int64_t> id = store_->CreateRun(run_);
  if (!id.ok()) return id.status();
  run_.run_id = *id;
  run_id_ = run_.run_id;
  global_ = std::make_shared<const Model>(std::move(initial_model));
  global_sha_ = *sha;
  LogEvent(LogLevel::kInfo, "run_created",
           {{"run", absl::StrCat(run_.run_id)},
            {"name", run_.name},
            {"rounds", absl::StrCat(options_.num_rounds)},
            {"parameters", absl::StrCat(global_->spec().NumFloats())}});
  return absl::OkStatus();
}

absl::StatusOr<std::string> EngineImpl::UniqueRunNameLocked(const std::string& wanted) {
  absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
  if (!runs.ok()) return runs.status();
  absl::flat_hash_map<std::string, int64_t> taken;  // name -> the run that has it
  for (const RunRecord& r : *runs) taken.emplace(r.name, r.run_id);
  auto it = taken.find(wanted);
  if (it == taken.end()) return wanted;
  std::string name;
  for (int i = 2; name.empty() || taken.contains(name); ++i) name = absl::StrCat(wanted, "-", i);
  LogEvent(LogLevel::kWarn, "run_renamed",
           {{"wanted", wanted},
            {"name", name},
            {"reason", absl::StrCat("run ", it->second, " is named ", wanted,
                                    "; set [run] name in the configuration to choose another")}});
  return name;
}

absl::Status EngineImpl::SetUpUpdateEncoding() {
  absl::StatusOr<UpdateEncoding> e = ParseUpdateEncoding(options_.update_encoding);
  if (!e.ok()) return e.status();
  if (*e != UpdateEncoding::kFloat32 && options_.secure_aggregation.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "update_encoding \"", options_.update_encoding,
        "\" cannot be used with secure aggregation, whose rounds send masked words; use float32"));
  }
  update_encoding_ = *e;
  return absl::OkStatus();
}

absl::Status EngineImpl::SetUpPrivacy() {
  if (absl::Status s = SetUpUpdateEncoding(); !s.ok()) return s;
  const PrivacyOptions& p = options_.privacy;
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  if (absl::Status s = CheckSecureAggregation(); !s.ok()) return s;
  if (absl::Status s =
          strategy_->CheckPlan({.min_updates = options_.min_fit_clients,
                                .secure_aggregation = options_.secure_aggregation.enabled,
                                .central_dp = p.enabled() && !p.distributed()});
      !s.ok()) {
    return s;
  }
  if (options_.secure_aggregation.enabled && strategy_->update_norm_bound() > 0) {
    // A wrapper's CheckPlan refuses this itself; a strategy that does not must not lose its bound.
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy '", strategy_->name(), "' bounds each update's norm (",
        strategy_->update_norm_bound(),
        "), which the server cannot do under secure aggregation: it sees only masked updates"));
  }
  // Distributed DP: the clients clip and add the noise (their secure-aggregation task says how);
  // the server only accounts.
  options_.fit.differential_privacy = p.accounted();
  if (p.distributed()) return MakeAccountant();
  if (!p.enabled()) return absl::OkStatus();
  aggregation::dp::CentralDpOptions dp;
  dp.noise_multiplier = p.noise_multiplier;
  dp.clip_norm = p.clip_norm;
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> wrapped =
      aggregation::dp::MakeCentralDp(*strategy_, dp);
  if (!wrapped.ok()) return wrapped.status();
  dp_strategy_ = *std::move(wrapped);
  strategy_ = dp_strategy_.get();
  return MakeAccountant();
}

absl::Status EngineImpl::MakeAccountant() {
  absl::StatusOr<aggregation::dp::RdpAccountant> accountant =
      aggregation::dp::RdpAccountant::Create();
  if (!accountant.ok()) return accountant.status();
  accountant_ = *std::move(accountant);
  return absl::OkStatus();
}

}  // namespace fl::server::internal
