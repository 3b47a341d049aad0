// Federated evaluation between rounds: sampling the evaluators, collecting their reports and
// recording the example-weighted result.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fl/common/logging.h"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

void EngineImpl::StartEvaluationLocked(absl::Time now) {
  std::vector<const std::string*> online = OnlineByNameLocked(now);
  if (online.empty()) {
    LogEvent(LogLevel::kWarn, "evaluation_skipped",
             {{"round", absl::StrCat(committed_round_)}, {"reason", "no client online"}});
    if (finish_after_eval_.has_value()) FinishRunLocked(*finish_after_eval_);
    finish_after_eval_.reset();
    return;
  }
  auto eval = std::make_unique<EvalState>();
  eval->round = committed_round_;
  eval->deadline = now + options_.eval_timeout;
  const int32_t n = static_cast<int32_t>(online.size());
  const int32_t k =
      std::clamp(static_cast<int32_t>(std::ceil(options_.eval_fraction * n - 1e-9)), 1, n);
  std::vector<std::string_view> available;
  available.reserve(online.size());
  for (const std::string* id : online) available.push_back(*id);
  const aggregation::RoundContext ctx{
      .round = eval->round,
      .available = available,
      .num_to_sample = k,
      .min_sites = 1,
      .seed = options_.seed * 1000003u + static_cast<uint64_t>(eval->round) * 7919u + 0x65766131u};
  absl::StatusOr<aggregation::RoundPlan> plan = strategy_->ConfigureEvaluate(ctx);
  if (plan.ok()) {
    if (absl::Status s = CheckRoundPlan(*plan, ctx); !s.ok()) plan = s;
  }
  if (!plan.ok()) {
    LogEvent(LogLevel::kWarn, "evaluation_skipped",
             {{"round", absl::StrCat(committed_round_)},
              {"reason",
               absl::StrCat("strategy '", strategy_->name(),
                            "' could not configure the evaluation: ", plan.status().message())}});
    if (finish_after_eval_.has_value()) FinishRunLocked(*finish_after_eval_);
    finish_after_eval_.reset();
    return;
  }
  eval->sampled = std::move(plan->sites);
  std::sort(eval->sampled.begin(), eval->sampled.end());
  for (const std::string& id : eval->sampled) {
    eval->task_of[id] = absl::StrFormat("e%d.%s", eval->round, id.substr(0, 12));
  }
  LogEvent(LogLevel::kInfo, "evaluation_started",
           {{"round", absl::StrCat(eval->round)}, {"sampled", absl::StrCat(eval->sampled.size())}});
  eval_ = std::move(eval);
  BumpLocked();
}

void EngineImpl::FinishEvaluationLocked(absl::Time now) {
  std::unique_ptr<EvalState> eval = std::move(eval_);
  if (eval->statistics) {
    FinishStatisticsLocked(std::move(eval), now);
    BumpLocked();
    return;
  }
  // The strategy's AggregateEvaluate (by default example-weighted means) over the reports;
  // declines, silent sites and sites that never answered are its failures.
  std::vector<aggregation::SiteEvaluation> results;
  std::vector<aggregation::SiteFailure> failures;
  for (const std::string& id : eval->sampled) {
    auto r = eval->reports.find(id);
    if (r == eval->reports.end()) {
      failures.push_back({.site = id,
                          .kind = aggregation::SiteFailure::Kind::kMissing,
                          .reason = "no evaluation before the deadline"});
    } else if (!r->second.error.empty()) {
      failures.push_back({.site = id,
                          .kind = absl::StartsWith(r->second.error, "offline:")
                                      ? aggregation::SiteFailure::Kind::kDropped
                                      : aggregation::SiteFailure::Kind::kDeclined,
                          .reason = r->second.error});
    } else {
      results.push_back({.site = id,
                         .num_examples = r->second.num_examples,
                         .loss = r->second.loss,
                         .metrics = r->second.metrics});
    }
  }
  absl::StatusOr<aggregation::EvaluationSummary> summary =
      strategy_->AggregateEvaluate(eval->round, results, failures);
  if (summary.ok()) {
    double loss = summary->loss;
    const double examples = static_cast<double>(summary->num_examples);
    std::map<std::string, double> metrics = std::move(summary->metrics);
    // Finite reports can still sum past the largest double (a site reporting 1e300); such a
    // mean is dropped, by name, rather than costing the round its whole evaluation row.
    if (!std::isfinite(loss)) loss = std::numeric_limits<double>::quiet_NaN();
    for (auto it = metrics.begin(); it != metrics.end();) {
      if (std::isfinite(it->second)) {
        ++it;
        continue;
      }
      LogEvent(LogLevel::kWarn, "evaluation_metric_dropped",
               {{"round", absl::StrCat(eval->round)}, {"metric", it->first}});
      it = metrics.erase(it);
    }
    const double accuracy = metrics.count("accuracy") ? metrics["accuracy"] : 0.0;
    if (absl::Status s =
            std::isfinite(loss)
                ? store_->RecordEvaluation(run_.run_id, eval->round, "federated", loss, accuracy,
                                           static_cast<int64_t>(examples), ToMs(now), metrics)
                : absl::InvalidArgumentError("the mean loss overflows a double");
        !s.ok()) {
      LogEvent(LogLevel::kError, "evaluation_not_recorded",
               {{"round", absl::StrCat(eval->round)}, {"reason", std::string(s.message())}});
    }
    LogEvent(
        LogLevel::kInfo, "evaluation_finished",
        {{"round", absl::StrCat(eval->round)},
         {"clients", absl::StrCat(results.size(), "/", eval->sampled.size())},
         {"examples", absl::StrCat(static_cast<int64_t>(examples))},
         {"loss", absl::StrCat(loss)},
         {"accuracy", absl::StrCat(accuracy)},
         {"metrics", metrics.empty() ? std::string("-")
                                     : absl::StrJoin(metrics, " ", absl::PairFormatter("="))}});
    RecordSiteEvaluationsLocked(*eval, now);
    WarnIfLossDivergesLocked(eval->round, loss);
    // The stopping rule sees the federated results as "eval_loss" and "eval_<metric>"; a run
    // already ending (its last round) ends with its own reason.
    if (!finish_after_eval_.has_value()) {
      std::string why = StoppingRuleMet(FederatedStopMetrics(loss, metrics));
      if (!why.empty()) finish_after_eval_ = why;
    }
  } else {
    LogEvent(LogLevel::kWarn, "evaluation_empty",
             {{"round", absl::StrCat(eval->round)},
              {"reason", results.empty() ? absl::StrCat("no client reported an evaluation before ",
                                                        eval->reports.size() < eval->sampled.size()
                                                            ? "the deadline"
                                                            : "all declined")
                                         : std::string(summary.status().message())}});
  }
  waiting_since_ = now;
  if (finish_after_eval_.has_value()) FinishRunLocked(*finish_after_eval_);
  finish_after_eval_.reset();
  BumpLocked();
}

void EngineImpl::RecordSiteEvaluationsLocked(const EvalState& eval, absl::Time now) {
  const bool secure = options_.secure_aggregation.enabled;
  int withheld = 0;
  for (const auto& [id, r] : eval.reports) {
    if (!r.error.empty() || !std::isfinite(r.loss)) continue;
    if (secure && !r.share_site_result) {
      ++withheld;
      continue;
    }
    const auto accuracy = r.metrics.find("accuracy");
    if (absl::Status s = store_->RecordEvaluation(
            run_.run_id, eval.round, absl::StrCat(kSiteEvaluationSource, id), r.loss,
            accuracy == r.metrics.end() ? 0.0 : accuracy->second, r.num_examples, ToMs(now),
            r.metrics);
        !s.ok()) {
      LogEvent(LogLevel::kWarn, "site_evaluation_not_recorded",
               {{"client", id.substr(0, 16)}, {"reason", std::string(s.message())}});
    }
  }
  if (withheld > 0) {
    LogEvent(LogLevel::kInfo, "site_evaluations_withheld",
             {{"round", absl::StrCat(eval.round)},
              {"sites", absl::StrCat(withheld)},
              {"why",
               "secure aggregation: kept in the aggregate only (a site may allow more: "
               "[client] share_site_evaluation)"}});
  }
}

void EngineImpl::WarnIfLossDivergesLocked(int32_t round, double loss) {
  if (!std::isfinite(loss)) return;
  const double lowest = lowest_eval_loss_;
  lowest_eval_loss_ = std::min(lowest_eval_loss_, loss);
  if (warned_eval_loss_) return;
  std::string why;
  if (loss > kDivergedLoss) {
    why = absl::StrCat("evaluation loss ", loss, " is above ", kDivergedLoss);
  } else if (std::isfinite(lowest) && lowest > 0 && loss > kLossGrowthFactor * lowest) {
    why = absl::StrCat("evaluation loss ", loss, " is ", static_cast<int64_t>(loss / lowest),
                       " times the run's lowest, ", lowest);
  }
  if (why.empty()) return;
  warned_eval_loss_ = true;
  absl::StrAppend(&why,
                  ": the model is diverging or the features are on very different scales; "
                  "standardise the sites' features (run.federated_standardization) or lower "
                  "fit.learning_rate");
  LogEvent(LogLevel::kWarn, "evaluation_loss_diverging",
           {{"round", absl::StrCat(round)}, {"reason", why}});
  AuditRecord rec;
  rec.at_ms = ToMs(clock_->Now());
  rec.event = "evaluation_loss_diverging";
  rec.run_id = run_.run_id;
  rec.round = round;
  rec.detail = why;
  (void)store_->Audit(rec);
}

absl::Status EngineImpl::SubmitEvaluation(const std::string& client_id,
                                          const EvaluationReport& report) {
  absl::Status refusal;
  {
    absl::MutexLock lock(&mu_);
    clients_[client_id].last_seen = clock_->Now();
    if (report.run_id != run_.run_id) {
      refusal = absl::FailedPreconditionError(absl::StrCat("request is for run ", report.run_id,
                                                           " but the active run is ", run_.run_id));
    } else if (eval_ == nullptr || eval_->round != report.round) {
      refusal = absl::FailedPreconditionError(
          absl::StrCat("no evaluation of round ", report.round, " is open"));
    } else if (auto it = eval_->task_of.find(client_id);
               it == eval_->task_of.end() || it->second != report.task_id) {
      refusal = absl::FailedPreconditionError(absl::StrCat(
          "task '", report.task_id, "' is not this client's evaluation of round ", report.round));
    } else if (eval_->reports.count(client_id) != 0) {
      refusal = absl::AlreadyExistsError(
          absl::StrCat("an evaluation for task '", report.task_id, "' was already received"));
    } else if (eval_->statistics && report.error.empty()) {
      refusal = CheckFeatureSumsLocked(report);
    } else if (!eval_->statistics && !report.feature_sums.sum.empty()) {
      refusal =
          absl::InvalidArgumentError("feature sums answer a statistics task, not an evaluation");
    } else if (report.error.empty() &&
               (report.num_examples <= 0 || report.num_examples > kMaxExamples)) {
      refusal = absl::InvalidArgumentError(absl::StrCat("evaluation claims ", report.num_examples,
                                                        " examples; it must be in [1, ",
                                                        kMaxExamples, "]"));
    } else if (report.error.empty() && !std::isfinite(report.loss)) {
      refusal = absl::InvalidArgumentError("evaluation loss is not finite");
    } else {
      for (const auto& [k, v] : report.metrics) {
        if (report.error.empty() && !std::isfinite(v)) {
          refusal =
              absl::InvalidArgumentError(absl::StrCat("evaluation metric '", k, "' is not finite"));
        }
      }
    }
    if (refusal.ok()) {
      eval_->reports[client_id] = report;
      MaybeAdvanceLocked();
      BumpLocked();
    } else if (eval_ != nullptr && eval_->statistics && eval_->task_of.count(client_id) != 0 &&
               eval_->reports.count(client_id) == 0 && report.run_id == run_.run_id &&
               report.round == eval_->round) {
      // A refused statistics report counts as the site's decline: the task is not offered again.
      EvaluationReport declined;
      declined.error = std::string(refusal.message());
      eval_->reports[client_id] = declined;
      MaybeAdvanceLocked();
      BumpLocked();
    }
  }
  if (!refusal.ok()) {
    AuditRefusal(client_id, "evaluation_refused", refusal);
  } else if (!report.error.empty()) {
    AuditRefusal(client_id, "evaluation_declined",
                 absl::FailedPreconditionError(absl::StrCat(
                     "the client declined to evaluate round ", report.round, ": ", report.error)));
  }
  AfterUnlock();
  return refusal;
}

}  // namespace fl::server::internal
