// The engine's life cycle: advancing a run, starting and closing rounds, and ending the run
// (finished, failed or aborted). Creating or resuming it is run_setup.cc's.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fl/aggregation/dp/central_dp.h"
#include "fl/common/crash_point.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "fl/server/engine.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

std::string MetricsJson(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : metrics) j[k] = v;
  return j.dump();
}

std::map<std::string, double> FederatedStopMetrics(double loss,
                                                   const std::map<std::string, double>& metrics) {
  std::map<std::string, double> named = {{"eval_loss", loss}};
  for (const auto& [k, v] : metrics) named[absl::StrCat("eval_", k)] = v;
  return named;
}

void EngineImpl::MaybeAdvanceLocked() {
  // While a closed round commits, nothing starts (its commit calls this again when done).
  if (finished_ || commit_ != nullptr || closing_) return;
  const absl::Time now = clock_->Now();
  if (eval_ != nullptr) {
    // A sampled evaluator silent for client_timeout is offline: count it as declined.
    for (const std::string& id : eval_->sampled) {
      if (eval_->reports.count(id) != 0) continue;
      auto client = clients_.find(id);  // find: a forgotten evaluator must not come back
      const absl::Duration silent =
          client == clients_.end() ? absl::InfiniteDuration() : now - client->second.last_seen;
      if (silent <= options_.client_timeout) continue;
      EvaluationReport offline;
      offline.error = absl::StrCat("offline: no poll or heartbeat for ",
                                   absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1))));
      eval_->reports[id] = offline;
    }
    if (eval_->reports.size() < eval_->sampled.size() && now < eval_->deadline) return;
    FinishEvaluationLocked(now);
    if (finished_) return;
  }
  if (current_ != nullptr && current_->secagg != nullptr) {
    AdvanceSecAggLocked(now);
  } else if (current_ != nullptr) {
    DropOfflineClientsLocked(now);
    bool all_final = true;
    {
      std::shared_lock<std::shared_mutex> gate(current_->gate);
      for (const std::string& id : current_->sampled) {
        auto it = current_->uploads.find(id);
        if (it == current_->uploads.end() || it->second->phase == Phase::kStreaming) {
          all_final = false;
          break;
        }
      }
    }
    if (all_final) {
      CloseRoundLocked("every sampled client reported");
    } else if (now >= current_->deadline) {
      CloseRoundLocked("deadline reached");
    }
  }
  // A closed round is followed at once by the next, when enough clients are still online.
  if (current_ == nullptr && commit_ == nullptr && eval_ == nullptr && !finished_ && !aborted_ &&
      committed_round_ >= options_.num_rounds) {
    // An operator lowered the rounds under those committed while a round was open or failed.
    FinishRunLocked(absl::StrCat("rounds lowered to ", options_.num_rounds, "; ", committed_round_,
                                 " committed"));
  }
  if (current_ == nullptr && commit_ == nullptr && eval_ == nullptr && !finished_ && !aborted_ &&
      now >= retry_not_before_) {
    // With fewer clients known than min_clients none can start: skip listing who is online, so
    // that each of 100,000 joins stays O(log n) rather than O(n). Clients left out for the run
    // (excluded_) count as online for min_clients but are not drawn; a round needs enough others
    // to reach min_fit_clients.
    std::vector<const std::string*> eligible;
    int64_t online = 0;
    if (static_cast<int64_t>(clients_.size()) >= options_.min_clients) {
      eligible = OnlineByNameLocked(now, &online);
    }
    const int64_t least =
        std::max<int64_t>(options_.min_fit_clients, options_.secure_aggregation.enabled ? 3 : 1);
    if (online >= options_.min_clients && static_cast<int64_t>(eligible.size()) >= least) {
      if (NeedsStatisticsLocked()) {
        StartStatisticsLocked(OnlineLocked(now), now);
      } else {
        StartRoundLocked(std::move(eligible));
      }
    } else if (now - waiting_since_ > options_.wait_timeout) {
      if (static_cast<int64_t>(clients_.size()) < options_.min_clients) {
        online = CountOnlineLocked(now);
      }
      std::string left_out;
      if (!excluded_.empty()) {
        std::vector<std::string> names;
        for (const auto& [id, why] : excluded_) {
          auto c = clients_.find(id);
          names.push_back(absl::StrCat(c != clients_.end() ? c->second.name : id.substr(0, 16),
                                       " (", why, ")"));
        }
        left_out =
            absl::StrCat("; left out for declining this run's tasks: ", absl::StrJoin(names, "; "));
      }
      FailRunLocked(online < options_.min_clients
                        ? absl::StrCat("only ", online, " of the ", options_.min_clients,
                                       " clients needed (min_clients) came online within ",
                                       absl::FormatDuration(options_.wait_timeout), left_out)
                        : absl::StrCat("only ", eligible.size(), " of the ", online,
                                       " clients online may still be sampled, fewer than the ",
                                       least, " a round needs (min_fit_clients), for ",
                                       absl::FormatDuration(options_.wait_timeout), left_out));
    } else {
      LogWaitingLocked(now, online, static_cast<int64_t>(eligible.size()), least);
    }
  }
}

absl::Status CheckRoundPlan(const aggregation::RoundPlan& plan,
                            const aggregation::RoundContext& ctx) {
  absl::flat_hash_set<std::string_view> available(ctx.available.begin(), ctx.available.end());
  absl::flat_hash_set<std::string_view> chosen;
  for (const std::string& site : plan.sites) {
    if (!available.contains(site)) {
      return absl::InvalidArgumentError(
          absl::StrCat("it chose site ", site.substr(0, 16), ", which is not available"));
    }
    if (!chosen.insert(site).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("it chose site ", site.substr(0, 16), " twice"));
    }
  }
  if (static_cast<int32_t>(plan.sites.size()) < ctx.min_sites) {
    return absl::InvalidArgumentError(absl::StrCat("it chose ", plan.sites.size(),
                                                   plan.sites.size() == 1 ? " site" : " sites",
                                                   "; at least ", ctx.min_sites, " are needed"));
  }
  for (const auto& [site, config] : plan.site_config) {
    if (!chosen.contains(site)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "its site_config names site ", site.substr(0, 16), ", which it did not choose"));
    }
  }
  return absl::OkStatus();
}

void EngineImpl::StartRoundLocked(std::vector<const std::string*> by_name) {
  auto round = std::make_shared<RoundState>();
  round->round = committed_round_ + 1;
  round->attempt = next_attempt_;
  round->started = clock_->Now();
  round->deadline = round->started + options_.round_timeout;
  const int32_t n = static_cast<int32_t>(by_name.size());
  // The epsilon keeps 0.07 * 100 = 7.000000000000001 from sampling 8.
  int32_t k = static_cast<int32_t>(std::ceil(options_.sample_fraction * n - 1e-9));
  // Secure aggregation needs 3 clients (the sum of 2 reveals each); n >= min_clients >= 3.
  const int32_t least =
      std::max(options_.min_fit_clients, options_.secure_aggregation.enabled ? 3 : 1);
  k = std::clamp(std::max(k, least), 1, n);
  // The strategy chooses the sites and what they are told (by default the seeded draw).
  std::vector<std::string_view> available;
  available.reserve(by_name.size());
  for (const std::string* id : by_name) available.push_back(*id);
  uint64_t seed = options_.seed * 1000003u + static_cast<uint64_t>(round->round) * 7919u +
                  static_cast<uint64_t>(round->attempt);
  if (accountant_.has_value()) {
    // Under DP the draw is secret (EngineHooks::dp_draw_seed): not replayable from the run.
    absl::StatusOr<uint64_t> secret = hooks_.dp_draw_seed
                                          ? absl::StatusOr<uint64_t>(hooks_.dp_draw_seed())
                                          : SecureRandomUint64();
    if (!secret.ok()) {
      FailRunLocked(
          absl::StrCat("differential privacy's secret draw: ", secret.status().message()));
      return;
    }
    seed = *secret;
  }
  const aggregation::RoundContext ctx{.round = round->round,
                                      .attempt = round->attempt,
                                      .available = available,
                                      .num_to_sample = k,
                                      .min_sites = least,
                                      .seed = seed};
  absl::StatusOr<aggregation::RoundPlan> plan = strategy_->ConfigureFit(ctx);
  if (plan.ok()) {
    if (absl::Status s = CheckRoundPlan(*plan, ctx); !s.ok()) plan = s;
  }
  // A plan the engine will not run: logged (at `level`) and audited with why.
  auto not_configured = [&](LogLevel level, const std::string& why) {
    LogEvent(level, "round_not_configured",
             {{"round", absl::StrCat(round->round)}, {"reason", why}});
    AuditRecord rec;
    rec.at_ms = ToMs(round->started);
    rec.event = "round_not_configured";
    rec.detail = why;
    rec.run_id = run_id_;
    rec.round = round->round;
    (void)store_->Audit(rec);
  };
  if (!plan.ok()) {
    const absl::Duration retry_in = std::max(options_.retry_backoff, absl::Seconds(1));
    retry_not_before_ = round->started + retry_in;
    const std::string why =
        absl::StrCat("strategy '", strategy_->name(), "' could not configure round ", round->round,
                     ": ", plan.status().message());
    if (why != configure_failure_) {  // logged and audited once per reason, not every retry
      configure_failure_ = why;
      not_configured(LogLevel::kWarn,
                     absl::StrCat(why, "; asked again every ", absl::FormatDuration(retry_in)));
    }
    // As long as the run would wait for its sites, and no longer.
    if (round->started - waiting_since_ > options_.wait_timeout) {
      FailRunLocked(absl::StrCat(why, " (for longer than wait_timeout, ",
                                 absl::FormatDuration(options_.wait_timeout), ")"));
    }
    return;
  }
  configure_failure_.clear();
  // Under differential privacy the accountant's amplification by sampling holds only for the
  // secret uniform draw of k sites (round_privacy.cc): a plan must take those sites (its values
  // per site may differ).
  std::sort(plan->sites.begin(), plan->sites.end());
  if (accountant_.has_value() && plan->sites != aggregation::SampleSites(ctx)) {
    const std::string why = absl::StrCat(
        "strategy '", strategy_->name(), "' chose other sites than the uniform draw in round ",
        round->round, ", which differential privacy's accounting needs (privacy.mode ",
        options_.privacy.mode, "): use the default ConfigureFit, or turn DP off");
    not_configured(LogLevel::kError, why);
    FailRunLocked(why);
    return;
  }
  k = static_cast<int32_t>(plan->sites.size());
  std::vector<std::string> online = std::move(plan->sites);
  round->fit_config = std::move(plan->config);
  round->site_config = std::move(plan->site_config);
  if (accountant_.has_value()) {
    const PrivacyOptions& p = options_.privacy;
    const double q = static_cast<double>(k) / n;
    absl::StatusOr<std::vector<double>> rdp = RoundRdpLocked(q, k);
    absl::StatusOr<aggregation::dp::PrivacySpent> after =
        rdp.ok() ? accountant_->SpentAfterRdp(*rdp, p.delta)
                 : absl::StatusOr<aggregation::dp::PrivacySpent>(rdp.status());
    if (!after.ok()) {
      FailRunLocked(absl::StrCat("privacy accountant: ", after.status().message()));
      return;
    }
    if (p.epsilon_budget > 0 && after->epsilon > p.epsilon_budget) {
      FinishRunLocked(absl::StrCat(
          "privacy budget spent: round ", round->round, " would bring epsilon to ", after->epsilon,
          ", over epsilon_budget ", p.epsilon_budget, " (delta ", p.delta, ")"));
      return;
    }
    round->dp_sampling_rate = q;
    round->dp_rdp = *std::move(rdp);
  }
  round->sampled = online;
  for (const std::string& id : round->sampled) {
    round->task_of[id] =
        absl::StrFormat("r%d.a%d.%s", round->round, round->attempt, id.substr(0, 12));
  }
  // A secure round's input is set up with its stages, below (StartSecAggLocked).
  if (!options_.secure_aggregation.enabled) {
    round->input = MakePlainInput(*strategy_, global_, update_encoding_);
  }

  CrashPoint("round_start");
  RoundRecord rec;
  rec.run_id = run_.run_id;
  rec.round = round->round;
  rec.attempt = round->attempt;
  rec.status = RoundStatus::kRunning;
  rec.started_at_ms = ToMs(round->started);
  rec.num_sampled = k;
  if (absl::Status s = store_->BeginRound(rec); !s.ok()) {
    // The store cannot record the round (a full disk, say): tried again after the retry backoff,
    // not at the next poll, and logged once per cause rather than at every try.
    const absl::Duration retry_in = std::max(options_.retry_backoff, absl::Seconds(1));
    retry_not_before_ = round->started + retry_in;
    if (s.ToString() != begin_failure_) {
      begin_failure_ = s.ToString();
      LogEvent(LogLevel::kError, "round_begin_failed",
               {{"round", absl::StrCat(round->round)},
                {"error", begin_failure_},
                {"retry_every", absl::FormatDuration(retry_in)}});
    }
    // A store that stays unable to record (a disk that stays full) fails the run once it has
    // kept the run from its rounds for wait_timeout, counted from its first refusal, as sites
    // that do not come do, rather than being retried for ever while the sites hear only that
    // they wait.
    if (begin_failing_since_ == absl::InfinitePast()) begin_failing_since_ = round->started;
    if (round->started - begin_failing_since_ > options_.wait_timeout) {
      FailRunLocked(absl::StrCat(
          "the store could not record round ", round->round, " for longer than wait_timeout (",
          absl::FormatDuration(options_.wait_timeout), "): ", s.message(),
          "; make room in the data directory (the committed rounds and their "
          "checkpoints are kept)"));
    }
    return;
  }
  begin_failure_.clear();
  begin_failing_since_ = absl::InfinitePast();
  for (const std::string& id : round->sampled) {
    ParticipationRecord p;
    p.run_id = run_.run_id;
    p.round = round->round;
    p.attempt = round->attempt;
    p.client_id = id;
    p.task_id = round->task_of[id];
    (void)store_->RecordParticipation(p);
  }
  LogEvent(LogLevel::kInfo, "round_started",
           {{"run", absl::StrCat(run_.run_id)},
            {"round", absl::StrCat(round->round)},
            {"attempt", absl::StrCat(round->attempt)},
            {"sampled", absl::StrCat(k)},
            {"online", absl::StrCat(n)}});
  current_ = std::move(round);
  if (options_.secure_aggregation.enabled) {
    if (absl::Status s = StartSecAggLocked(*current_, n); !s.ok()) {
      FailSecAggRoundLocked(std::string(s.message()), clock_->Now());
      return;
    }
  }
  BumpLocked();
}

void EngineImpl::CutOffUploadsLocked(RoundState& round, const std::string& reason) {
  round.closing = true;
  std::unique_lock<std::shared_mutex> gate(round.gate);
  for (auto& [id, up] : round.uploads) {
    if (up->phase != Phase::kStreaming) continue;
    up->reason = reason;
    up->failure = aggregation::SiteFailure::Kind::kMissing;
    up->phase = Phase::kAborted;
    up->RemoveSpill();
  }
}

void EngineImpl::CloseRoundLocked(const std::string& why) {
  std::shared_ptr<RoundState> round = std::move(current_);
  current_ = nullptr;
  const absl::Time now = clock_->Now();
  std::vector<ParticipationRecord> participations;
  std::vector<aggregation::SiteFailure> failures;  // for the strategy (RoundAggregator::Failed)
  // Each training metric is the example-weighted mean over the sites that reported it, as the
  // federated evaluation's: a site without it neither counts as 0 nor adds its examples.
  std::map<std::string, double> metric_sums;
  std::map<std::string, double> metric_weights;
  CutOffUploadsLocked(*round,
                      absl::StrCat("round closed (", why, ") before the update was complete"));
  {
    std::shared_lock<std::shared_mutex> gate(round->gate);
    for (const std::string& id : round->sampled) {
      auto it = round->uploads.find(id);
      if (it == round->uploads.end()) {
        ParticipationRecord p;
        p.run_id = run_.run_id;
        p.round = round->round;
        p.attempt = round->attempt;
        p.client_id = id;
        p.task_id = round->task_of[id];
        p.status = ParticipationStatus::kDropped;
        p.reason = absl::StrCat("no update before the round closed (", why, ")");
        failures.push_back(
            {.site = id, .kind = aggregation::SiteFailure::Kind::kMissing, .reason = p.reason});
        participations.push_back(std::move(p));
        continue;
      }
      const UploadState& up = *it->second;
      participations.push_back(ParticipationFor(*round, up));
      if (up.phase != Phase::kAccepted) {
        failures.push_back({.site = id, .kind = up.failure, .reason = up.reason});
      } else {
        for (const auto& [k, v] : up.metrics) {
          metric_sums[k] += v * static_cast<double>(up.num_examples);
          metric_weights[k] += static_cast<double>(up.num_examples);
        }
      }
    }
  }
  RoundSummary summary;
  summary.num_accepted = round->input->num_accepted();
  for (const auto& [k, v] : metric_sums) {
    if (metric_weights[k] > 0) summary.metrics["train_" + k] = v / metric_weights[k];
  }

  std::string failure;
  if (round->poisoned) {
    failure = "a refused update could not be folded out of the aggregate (spill unreadable)";
  } else if (summary.num_accepted < options_.min_fit_clients) {
    failure = absl::StrCat("only ", summary.num_accepted, " of ", round->sampled.size(),
                           " sampled clients delivered an accepted update (", why,
                           "); min_fit_clients is ", options_.min_fit_clients);
    // Why the server refused or dropped sites, so that the round's record says more than a
    // count (a full disk refuses every update, each naming its own spill file): the most common
    // reason, the first in sampling order on a tie. A site's own decline text is left out: this
    // reason reaches the run's record and every site's DONE message.
    std::vector<std::pair<std::string, int>> reasons;  // in order of first appearance
    for (const aggregation::SiteFailure& f : failures) {
      if (f.reason.empty() || f.kind == aggregation::SiteFailure::Kind::kDeclined) continue;
      auto it = std::find_if(reasons.begin(), reasons.end(),
                             [&](const auto& r) { return r.first == f.reason; });
      if (it == reasons.end()) {
        reasons.emplace_back(f.reason, 1);
      } else {
        ++it->second;
      }
    }
    auto most = std::max_element(reasons.begin(), reasons.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most != reasons.end()) {
      std::string reason = CapClientText(most->first);
      for (char& c : reason) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
      }
      absl::StrAppend(&failure, "; ",
                      most->second >= 2 ? absl::StrCat(most->second, " of them for: ")
                                        : std::string("one for: "),
                      reason);
    }
  }
  if (!failure.empty()) {
    EndAttemptLocked(std::move(round), std::move(participations), std::move(summary),
                     CommitInputs{absl::AbortedError(failure)}, now);
    return;
  }
  ScheduleCommitLocked(PendingCommit{std::move(round), std::move(participations),
                                     std::move(summary), std::move(failures)});
}

void EngineImpl::LogWaitingLocked(absl::Time now, int64_t online, int64_t eligible, int64_t least) {
  constexpr absl::Duration kWaitingLogInterval = absl::Minutes(1);
  static constexpr size_t kNamesShown = 10;
  if (now - last_waiting_log_ < kWaitingLogInterval) return;
  last_waiting_log_ = now;
  if (static_cast<int64_t>(clients_.size()) < options_.min_clients) online = CountOnlineLocked(now);
  std::vector<std::string> connected, missing;
  for (const auto& [id, c] : clients_) {
    std::vector<std::string>& list =
        now - c.last_seen <= options_.client_timeout ? connected : missing;
    list.push_back(c.name.empty() ? id.substr(0, 16) : c.name);
  }
  auto shown = [](std::vector<std::string>& names) {
    std::sort(names.begin(), names.end());
    std::string text =
        absl::StrJoin(names.begin(), names.begin() + std::min(names.size(), kNamesShown), ",");
    if (names.size() > kNamesShown) absl::StrAppend(&text, ",... (", names.size(), " in all)");
    return names.empty() ? std::string("-") : text;
  };
  const std::string waiting_for =
      online < options_.min_clients
          ? absl::StrCat(options_.min_clients - online, " more clients online (min_clients ",
                         options_.min_clients, ")")
          : absl::StrCat(least - eligible, " more clients that may be sampled (min_fit_clients ",
                         least, "; ", excluded_.size(), " left out for the run)");
  LogEvent(LogLevel::kInfo, "waiting_for_clients",
           {{"round", absl::StrCat(committed_round_ + 1)},
            {"online", absl::StrCat(online)},
            {"waiting_for", waiting_for},
            {"connected", shown(connected)},
            {"missing", shown(missing)},
            {"fails_in", absl::FormatDuration(absl::Trunc(
                             options_.wait_timeout - (now - waiting_since_), absl::Seconds(1)))}});
}

RunActivity EngineImpl::Activity() const {
  absl::MutexLock lock(&mu_);
  RunActivity a;
  a.last_progress = last_progress_;
  a.needed = options_.min_clients;
  if (finished_) {
    a.phase = run_.status == RunStatus::kFailed ? RunActivity::Phase::kFailed
                                                : RunActivity::Phase::kFinished;
    if (a.phase == RunActivity::Phase::kFailed) a.failure = run_.reason;
  } else if (current_ != nullptr || commit_ != nullptr) {
    a.phase = RunActivity::Phase::kTraining;
  } else if (eval_ != nullptr) {
    a.phase = RunActivity::Phase::kEvaluating;
  } else {
    a.phase = RunActivity::Phase::kWaiting;
  }
  return a;
}

void EngineImpl::FinishRunLocked(const std::string& reason) {
  EndRunLocked(RunStatus::kFinished, reason);
}

void EngineImpl::FailRunLocked(const std::string& reason) {
  EndRunLocked(RunStatus::kFailed, reason);
}

void EngineImpl::EndRunLocked(RunStatus status, const std::string& reason) {
  finished_ = true;
  run_.status = status;
  run_.reason = reason;
  (void)store_->FinishRun(run_.run_id, status, reason, ToMs(clock_->Now()));
  const bool failed = status == RunStatus::kFailed;
  LogEvent(failed ? LogLevel::kError : LogLevel::kInfo, failed ? "run_failed" : "run_finished",
           {{"run", absl::StrCat(run_.run_id)},
            {"rounds", absl::StrCat(committed_round_)},
            {"reason", reason.empty() ? "all rounds committed" : reason}});
  BumpLocked();
}

std::string EngineImpl::StoppingRuleMet(const std::map<std::string, double>& metrics) const {
  if (options_.stop_metric.empty()) return "";
  auto it = metrics.find(options_.stop_metric);
  if (it == metrics.end()) return "";
  const bool met = options_.stop_when_below ? it->second <= options_.stop_threshold
                                            : it->second >= options_.stop_threshold;
  if (!met) return "";
  return absl::StrCat("stopping rule met after round ", committed_round_, ": ",
                      options_.stop_metric, " = ", it->second,
                      options_.stop_when_below ? " <= " : " >= ", options_.stop_threshold);
}

void EngineImpl::Abort(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  // A round whose updates are all in is committed, not thrown away: wait for its commit.
  WaitForCommitLocked();
  AbortInFlightLocked(reason);
}

void EngineImpl::AbortInFlightLocked(const std::string& reason) {
  if (eval_ != nullptr) {
    LogEvent(LogLevel::kInfo, "evaluation_aborted",
             {{"round", absl::StrCat(eval_->round)}, {"reason", reason}});
    eval_.reset();
    finish_after_eval_.reset();
  }
  if (current_ != nullptr) {
    std::shared_ptr<RoundState> round = std::move(current_);
    current_ = nullptr;
    CutOffUploadsLocked(*round, absl::StrCat("round aborted: ", reason));
    // A secure round's record; nothing secret is kept: the session (keys, sums) goes with the
    // round state.
    if (std::string json = round->input->RecordJson(/*failed=*/false); !json.empty()) {
      (void)store_->SetRoundSecAgg(run_.run_id, round->round, round->attempt, json, {});
    }
    (void)store_->EndRound(run_.run_id, round->round, round->attempt, RoundStatus::kAborted, reason,
                           ToMs(clock_->Now()));
    LogEvent(LogLevel::kInfo, "round_aborted",
             {{"round", absl::StrCat(round->round)}, {"reason", reason}});
  }
  BumpLocked();
}

}  // namespace fl::server::internal

namespace fl::server {

absl::StatusOr<std::unique_ptr<RoundEngine>> RoundEngine::Create(EngineOptions options,
                                                                 Store* store,
                                                                 aggregation::Strategy* strategy,
                                                                 Clock* clock, Model initial_model,
                                                                 EngineHooks hooks) {
  if (options.min_fit_clients < 1 || options.min_clients < options.min_fit_clients) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 1 <= min_fit_clients <= min_clients; got min_fit_clients=", options.min_fit_clients,
        ", min_clients=", options.min_clients));
  }
  if (options.num_rounds < 1) return absl::InvalidArgumentError("num_rounds must be at least 1");
  if (!(options.sample_fraction > 0 && options.sample_fraction <= 1)) {
    return absl::InvalidArgumentError("sample_fraction must be in (0, 1]");
  }
  if (options.spill_dir.empty()) return absl::InvalidArgumentError("spill_dir is not set");
  const FitSettings& fit = options.fit;
  if (fit.local_epochs < 1 || fit.batch_size < 1 || !(fit.learning_rate > 0) ||
      !std::isfinite(fit.learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("need local_epochs >= 1, batch_size >= 1 and a finite learning_rate > 0; got ",
                     fit.local_epochs, ", ", fit.batch_size, ", ", fit.learning_rate));
  }
  for (auto [name, d] : {std::pair{"round_timeout", options.round_timeout},
                         std::pair{"client_timeout", options.client_timeout},
                         std::pair{"task_pickup_timeout", options.task_pickup_timeout},
                         std::pair{"wait_timeout", options.wait_timeout},
                         std::pair{"eval_timeout", options.eval_timeout}}) {
    if (d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be positive, got ", absl::FormatDuration(d)));
    }
  }
  if (options.max_round_retries < 0 || options.eval_every < 0 ||
      !(options.eval_fraction > 0 && options.eval_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "need max_round_retries >= 0, eval_every >= 0 and eval_fraction in (0, 1]");
  }
  if (options.retry_backoff < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("retry_backoff must be >= 0");
  }
  auto engine = std::make_unique<internal::EngineImpl>(std::move(options), store, strategy, clock,
                                                       std::move(hooks));
  if (absl::Status s = engine->Init(std::move(initial_model)); !s.ok()) return s;
  engine->StartCommitThread();
  return engine;
}

}  // namespace fl::server
