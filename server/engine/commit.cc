// A round's commit: what follows its close. The close (under mu_) collects the round's
// participations and metrics and hands a round with enough accepted updates to the commit, which
// computes the next global model (the strategy's finish; a secure round's unmasking), runs the
// evaluation hook and writes the checkpoint (fsync included) without mu_, so that polls,
// heartbeats, downloads and the other calls go on meanwhile; then it takes mu_ to commit the
// round to the store and start what comes next. It runs on the engine's own thread
// (EngineOptions::commit_thread, a server) or at the end of the call that closed the round, once
// mu_ is released (a simulation, unit tests: deterministic under a fake clock).
#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fl/common/crash_point.h"
#include "fl/common/logging.h"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

void EngineImpl::DropRoundModels(RoundState& round) {
  // The attempt is over and every upload in it was cut off at the close, so nothing reads its
  // models again; but an upload call that is still returning holds this RoundState, and the next
  // round may start at once. Drop the model-sized parts now, or the previous global model (and,
  // after a failed attempt, its sum) would sit beside the next round's: 4x the model, not 3x.
  if (round.input != nullptr) round.input->DropModels();
}

void EngineImpl::ScheduleCommitLocked(PendingCommit commit) {
  commit_ = std::make_shared<PendingCommit>(std::move(commit));
  commit_running_ = false;
  commit_owner_ = std::this_thread::get_id();
  cv_.SignalAll();  // the engine's thread, when it has one
}

void EngineImpl::WaitForCommitLocked() {
  while (commit_ != nullptr) cv_.Wait(&mu_);
}

void EngineImpl::RunPendingCommit() {
  std::shared_ptr<PendingCommit> job;
  {
    absl::MutexLock lock(&mu_);
    if (commit_ == nullptr || commit_running_) return;
    // Without the engine's thread, the call that closed the round commits it: not a poll or a
    // heartbeat of another site that happens to take the lock first.
    if (!own_commit_thread_ && commit_owner_ != std::this_thread::get_id()) return;
    commit_running_ = true;  // commit_ stays set: nothing starts until it is committed
    job = commit_;
  }
  // Without mu_: only this job touches the closed round now (current_ no longer names it, and
  // every upload in it was cut off), and nothing else uses the strategy or writes checkpoints
  // until the next round starts, after this commit.
  CommitInputs in(absl::InternalError("not computed"));
  try {
    // A secure round's record says first that the masks are coming off (round_input.h), with
    // the round's sampling rate: a server stopped from here on counts the release when it
    // restarts (EngineImpl::CountInterruptedReleaseLocked).
    if (std::string json = job->round->input->UnmaskingRecordJson(); !json.empty()) {
      (void)store_->SetRoundSecAgg(run_id_, job->round->round, job->round->attempt, json,
                                   {.sampling_rate = job->round->dp_sampling_rate});
    }
    // The strategy's next model: a plain round's aggregate, or a secure round's unmasked sum
    // (round_input.h), the failed sites told first.
    in.next = job->round->input->Finish(job->failures, in.state);
    DropRoundModels(*job->round);
    if (in.next.ok() && hooks_.evaluate) in.hook_metrics = hooks_.evaluate(*in.next);
    if (in.next.ok()) in.checkpoint = store_->WriteCheckpoint(*in.next);
    if (in.next.ok() && in.checkpoint.ok() && in.state.has_value()) {
      in.state_checkpoint = store_->WriteCheckpoint(*in.state);
    }
  } catch (const std::exception& e) {  // std::bad_alloc for a large model: the attempt fails
    in.next = absl::ResourceExhaustedError(
        absl::StrCat("the round's commit failed: ", e.what(), " (out of memory?)"));
    DropRoundModels(*job->round);
  }
  {
    absl::MutexLock lock(&mu_);
    EndAttemptLocked(std::move(job->round), std::move(job->participations), std::move(job->summary),
                     std::move(in), clock_->Now());
    commit_.reset();
    commit_running_ = false;
    MaybeAdvanceLocked();
    BumpLocked();
  }
  FlushSummaries();
}

void EngineImpl::CommitLoop() {
  mu_.Lock();
  while (true) {
    while (!closing_ && (commit_ == nullptr || commit_running_)) cv_.Wait(&mu_);
    if (commit_ != nullptr && !commit_running_) {
      mu_.Unlock();
      RunPendingCommit();
      mu_.Lock();
      continue;
    }
    if (closing_) break;
  }
  mu_.Unlock();
}

EngineImpl::~EngineImpl() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;  // a commit pending now is still run (CommitLoop runs it before it returns)
    // Without the engine's thread, a commit another thread is running ends first.
    while (commit_running_) cv_.Wait(&mu_);
  }
  cv_.SignalAll();
  if (commit_thread_.joinable()) commit_thread_.join();
}

void EngineImpl::EndAttemptLocked(std::shared_ptr<RoundState> round,
                                  std::vector<ParticipationRecord> participations,
                                  RoundSummary summary, CommitInputs in, absl::Time now) {
  DropRoundModels(*round);
  absl::StatusOr<Model>& next = in.next;
  summary.run_id = run_.run_id;
  summary.round = round->round;
  summary.attempt = round->attempt;
  summary.num_sampled = static_cast<int32_t>(round->sampled.size());
  summary.duration = now - round->started;
  std::string failure;
  if (next.ok()) {
    const std::map<std::string, double>& hook_metrics = in.hook_metrics;
    for (const auto& [k, v] : hook_metrics) summary.metrics[k] = v;
    RoundRecord rec;
    rec.run_id = run_.run_id;
    rec.round = round->round;
    rec.attempt = round->attempt;
    rec.status = RoundStatus::kCommitted;
    rec.started_at_ms = ToMs(round->started);
    rec.ended_at_ms = ToMs(now);
    rec.num_sampled = summary.num_sampled;
    rec.num_reported = summary.num_accepted;
    rec.metrics_json = MetricsJson(summary.metrics);
    rec.secagg_json = round->input->RecordJson(/*failed=*/false);
    if (accountant_.has_value()) {
      absl::StatusOr<aggregation::dp::PrivacySpent> spent =
          accountant_->SpentAfterRdp(round->dp_rdp, options_.privacy.delta);
      // StartRoundLocked computed the same value: it cannot fail here.
      rec.dp_sampling_rate = round->dp_sampling_rate;
      rec.dp_epsilon = spent.ok() ? spent->epsilon : 0;
      rec.dp_epsilon_server = ServerEpsilonAfterLocked(*round, participations, /*apply=*/false);
    }
    const absl::StatusOr<std::string>& sha = in.checkpoint;
    absl::Status committed = sha.status();
    if (committed.ok() && in.state.has_value()) {
      committed = in.state_checkpoint.status();
      if (committed.ok()) rec.state_checkpoint = *in.state_checkpoint;
    }
    if (committed.ok()) {
      rec.checkpoint = *sha;
      committed = store_->CommitRound(rec, participations);
    }
    if (committed.ok()) CrashPoint("after_commit");
    if (committed.ok()) {
      if (summary.metrics.count("test_accuracy") != 0) {
        double loss = summary.metrics.count("test_loss") ? summary.metrics["test_loss"] : 0.0;
        // The evaluation row names the hook's metrics as a site's are named ("test_auc" ->
        // "auc"), so that both sources read alike; the loss has its own column.
        std::map<std::string, double> metrics;
        for (const auto& [k, v] : hook_metrics) {
          if (k == "test_loss" || !std::isfinite(v)) continue;
          metrics[absl::StartsWith(k, "test_") ? k.substr(5) : k] = v;
        }
        (void)store_->RecordEvaluation(run_.run_id, round->round, "server", loss,
                                       summary.metrics["test_accuracy"], 0, ToMs(now), metrics);
      }
      summary.committed = true;
      global_ = std::make_shared<const Model>(*std::move(next));
      global_sha_ = *sha;
      committed_round_ = round->round;
      if (in.state.has_value()) {
        // The next round starts from the state just committed (a failed attempt's is dropped).
        if (absl::Status s = strategy_->AdoptState(*std::move(in.state)); !s.ok()) {
          FailRunLocked(absl::StrCat("the strategy refused its own state: ", s.message()));
        }
      }
      for (const ParticipationRecord& p : participations) {
        if (p.status == ParticipationStatus::kAccepted) {
          client_committed_round_[p.client_id] = round->round;
        }
      }
      if (accountant_.has_value()) {
        (void)accountant_->AddRdp(round->dp_rdp);
        (void)ServerEpsilonAfterLocked(*round, participations, /*apply=*/true);
      }
      next_attempt_ = 0;
      failed_attempts_ = 0;
      LogEvent(LogLevel::kInfo, "round_committed",
               {{"run", absl::StrCat(run_.run_id)},
                {"round", absl::StrCat(round->round)},
                {"accepted", absl::StrCat(summary.num_accepted)},
                {"checkpoint", global_sha_.substr(0, 16)}});
      std::optional<std::string> finish;
      if (committed_round_ >= options_.num_rounds) {
        finish = "";
      } else if (std::string why = StoppingRuleMet(summary.metrics); !why.empty()) {
        finish = why;
      }
      if (finished_) {
        // The run failed above (its strategy refused its state): nothing follows.
      } else if (!aborted_ && options_.eval_every > 0 &&
                 committed_round_ % options_.eval_every == 0) {
        finish_after_eval_ = finish;
        StartEvaluationLocked(now);
      } else if (finish.has_value()) {
        FinishRunLocked(*finish);
      }
    } else {
      failure = absl::StrCat("could not commit the round: ", committed.message());
    }
  } else {
    failure = std::string(next.status().message());
  }
  if (!summary.committed) {
    summary.reason = failure;
    // A secure sum unmasked but not committed was released to the server all the same: the
    // accountant counts it (the run then stops, below).
    SpentPrivacy spent_privacy;
    if (round->input->revealed() && accountant_.has_value() && round->dp_sampling_rate > 0) {
      const PrivacyOptions& p = options_.privacy;
      absl::StatusOr<aggregation::dp::PrivacySpent> spent =
          accountant_->SpentAfterRdp(round->dp_rdp, p.delta);
      if (spent.ok() && accountant_->AddRdp(round->dp_rdp).ok()) {
        spent_privacy = {
            .sampling_rate = round->dp_sampling_rate,
            .epsilon = spent->epsilon,
            .epsilon_server = ServerEpsilonAfterLocked(*round, participations, /*apply=*/true)};
      }
    }
    const double spent_epsilon = spent_privacy.epsilon;
    // failed_at: the stage a secure attempt could not get past (not a checkpoint that failed).
    if (std::string json = round->input->RecordJson(/*failed=*/!next.ok()); !json.empty()) {
      (void)store_->SetRoundSecAgg(run_.run_id, round->round, round->attempt, json, spent_privacy);
    }
    (void)store_->EndRound(run_.run_id, round->round, round->attempt, RoundStatus::kFailed, failure,
                           ToMs(now));
    for (const ParticipationRecord& p : participations) (void)store_->RecordParticipation(p);
    LogEvent(LogLevel::kWarn, "round_failed",
             {{"round", absl::StrCat(round->round)},
              {"attempt", absl::StrCat(round->attempt)},
              {"reason", failure}});
    ++next_attempt_;
    ++failed_attempts_;
    if (round->input->revealed()) {
      // The server holds this attempt's sum. Another attempt from the same global model over a
      // different set of sites would let the difference of the two sums reveal one site's
      // update (and, with DP, release more than the accountant counted): stop instead.
      FailRunLocked(absl::StrCat(
          "round ", round->round, ": the secure sum was unmasked but could not be committed (",
          failure,
          "); the run stops rather than run the round again from the same model, where two sums "
          "over different sites could reveal one site's update",
          spent_epsilon > 0 ? absl::StrCat("; the release is counted: epsilon ", spent_epsilon)
                            : ""));
    } else if (failed_attempts_ > options_.max_round_retries) {
      FailRunLocked(absl::StrCat("round ", round->round, " failed ", failed_attempts_,
                                 " times; last reason: ", failure));
    } else if (options_.retry_backoff > absl::ZeroDuration()) {
      // Bounded exponential: backoff, 2 x backoff, 4 x ... up to kMaxRetryBackoff.
      absl::Duration delay = options_.retry_backoff;
      for (int32_t i = 1; i < failed_attempts_ && delay < kMaxRetryBackoff; ++i) delay *= 2;
      delay = std::min(delay, kMaxRetryBackoff);
      retry_not_before_ = now + delay;
      LogEvent(LogLevel::kInfo, "round_retry_scheduled",
               {{"round", absl::StrCat(round->round)},
                {"attempt", absl::StrCat(next_attempt_)},
                {"in", absl::FormatDuration(delay)}});
    }
  }
  waiting_since_ = std::max(now, retry_not_before_);
  pending_summaries_.push_back(std::move(summary));
  BumpLocked();
}

}  // namespace fl::server::internal
