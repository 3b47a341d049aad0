// Internal to the engine: the implementation of RoundEngine and of its Upload, shared by the
// engine's source files:
//   round_engine.cc    Create, advancing, starting and closing rounds, ending the run
//   run_setup.cc       creating or resuming a run
//   commit.cc          a closed round's commit, off mu_, on the engine's thread or after the call
//   clients.cc         joins, polls, heartbeats, task assignment, liveness, dropping the silent
//   uploads.cc         registering and streaming updates into the round's input; declines
//   plain_input.cc     a plain round's input: decoding, clipping, the strategy's aggregator
//                      (round_input.h says what a round's input is)
//   evaluation.cc      federated evaluation between rounds
//   secagg_round.cc    secure-aggregation rounds: set-up, closing the five stages, the unmasked
//                      result (a secure round's input)
//   secagg_clients.cc  secure-aggregation rounds: stage tasks, messages, masked uploads
//   server_exposure.cc distributed DP's epsilon against the server, per site
//   engine_options.cc  EngineOptions' JSON form and the real clock
//
// Thread safety: EngineImpl's members whose names end in `Locked` expect `mu_` held;
// UploadImpl::RefuseLocked expects the round's gate held shared (see upload.h).
#ifndef FL_SERVER_ENGINE_ENGINE_IMPL_H_
#define FL_SERVER_ENGINE_ENGINE_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/chunking.h"
#include "fl/common/update_codec.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "server/engine/secagg_round.h"
#include "server/engine/upload.h"

namespace fl::server::internal {

// Whether a site's reason for declining a task will hold for the rest of the run: it starts with
// one of the status codes the SDK gives for what its site can never do with this run's model and
// settings (the spec, the feature columns, data that does not fit; its limits, refused with
// PERMISSION_DENIED): INVALID_ARGUMENT, FAILED_PRECONDITION, UNIMPLEMENTED, OUT_OF_RANGE or
// PERMISSION_DENIED. A transient reason (ABORTED for what depends on the round, UNAVAILABLE,
// RESOURCE_EXHAUSTED, INTERNAL, ...) leaves the site in the draw.
bool PermanentDecline(std::string_view reason);

using Phase = UploadState::Phase;

inline int64_t ToMs(absl::Time t) { return absl::ToUnixMillis(t); }

// Client-supplied text (a decline reason) goes into participation rows, WAIT messages,
// secagg_json and the audit log: at most kMaxClientTextBytes of it, cut at a UTF-8 character
// boundary, with "... (truncated)" appended.
inline constexpr size_t kMaxClientTextBytes = 500;
std::string CapClientText(std::string_view text);

// `metrics` as a JSON object.
std::string MetricsJson(const std::map<std::string, double>& metrics);

// A federated evaluation's results under the names the stopping rule knows them by: "eval_loss"
// and "eval_<metric>" ("eval_accuracy", "eval_auc"), apart from the round's own metrics
// ("train_loss", and "test_accuracy" from the server's evaluation hook).
std::map<std::string, double> FederatedStopMetrics(double loss,
                                                   const std::map<std::string, double>& metrics);

// What a site's inputs have revealed to the server under distributed DP: the RDP at order a is
// a / 2 * inverse_z2 + offset (the sum of 1 / z^2 over the sums it was in, z a sum's Gaussian or
// Gaussian-equivalent noise multiplier, and the discrete Gaussian's tau d terms).
struct SiteExposure {
  double inverse_z2 = 0;
  double offset = 0;
};

// The noise multiplier of a sum of `summed` inputs each noised for `planned_for` survivors at
// `noise_multiplier`: z sqrt(summed / planned_for); 0 when either count is not positive.
double SumNoiseMultiplier(double noise_multiplier, int32_t summed, int32_t planned_for);

// Why a strategy's `plan` for `ctx` cannot run (INVALID_ARGUMENT): a site not available or chosen
// twice, fewer than ctx.min_sites, a site_config for a site not chosen. (round_engine.cc)
absl::Status CheckRoundPlan(const aggregation::RoundPlan& plan,
                            const aggregation::RoundContext& ctx);

class EngineImpl;

class UploadImpl final : public Upload {
 public:
  UploadImpl(EngineImpl* engine, std::shared_ptr<RoundState> round,
             std::shared_ptr<UploadState> state, int64_t payload_bytes)
      : engine_(engine),
        round_(std::move(round)),
        state_(std::move(state)),
        assembler_(payload_bytes, round_->input->value_bytes()),
        buffer_values_(round_->input->scratch_values(payload_bytes)),
        buffer_(std::make_unique_for_overwrite<float[]>(buffer_values_)) {}
  ~UploadImpl() override;

  absl::Status AddChunk(int64_t offset, std::string_view data) override;
  absl::Status Finish(std::string_view sha256_hex) override;
  absl::Status Abandon() override {
    return Refuse(absl::DataLossError(
        absl::StrCat("update stream ended after ", assembler_.received(), " of ",
                     assembler_.expected(), " bytes, without its SHA-256")));
  }
  absl::Status Refuse(absl::Status why) override;
  bool RoundClosing() const override { return round_->closing.load(); }

 private:
  // The round is closing or closed: this update is cut off (the close records why).
  absl::Status NoLongerAccepted();
  // Refuses the update: folds it out and records why. Caller holds the gate shared.
  absl::Status RefuseLocked(absl::Status why);

  EngineImpl* engine_;
  std::shared_ptr<RoundState> round_;
  std::shared_ptr<UploadState> state_;
  ChunkAssembler assembler_;
  size_t buffer_values_;
  std::unique_ptr<float[]> buffer_;  // RoundInput::Stage's scratch: buffer_values_, not zeroed
  bool done_ = false;
};

class EngineImpl final : public RoundEngine {
 public:
  EngineImpl(EngineOptions options, Store* store, aggregation::Strategy* strategy, Clock* clock,
             EngineHooks hooks)
      : options_(std::move(options)),
        store_(store),
        strategy_(strategy),
        clock_(clock),
        hooks_(std::move(hooks)),
        staging_(hooks_.staging != nullptr ? hooks_.staging : MakeFileStaging(options_.spill_dir)) {
  }
  // Runs a commit still pending (the engine's thread), then stops that thread.
  ~EngineImpl() override ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Init(Model initial_model) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the engine's own thread for commits, when options_.commit_thread asks for it.
  void StartCommitThread() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      own_commit_thread_ = options_.commit_thread;
    }
    if (own_commit_thread_) commit_thread_ = std::thread([this] { CommitLoop(); });
  }

  absl::StatusOr<int64_t> Join(const std::string& client_id, const std::string& name) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Admit(const std::string& client_id, const SiteProfile& profile,
                     bool dry_run) override ABSL_LOCKS_EXCLUDED(mu_);
  Task Poll(const std::string& client_id) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<GlobalModel> ModelForTask(const std::string& client_id, int64_t run_id,
                                           int32_t round, const std::string& task_id) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(const std::string& client_id,
                                                      const UpdateMeta& meta) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void Abort(const std::string& reason) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Stop(RunStatus status, const std::string& reason) override ABSL_LOCKS_EXCLUDED(mu_);
  EngineOptions options() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return options_;
  }
  absl::StatusOr<std::vector<std::string>> ChangePolicies(const EngineOptions& wanted,
                                                          const std::string& by) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetClient(const std::string& client_id, const std::string& reason) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SubmitEvaluation(const std::string& client_id,
                                const EvaluationReport& report) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Decline(const std::string& client_id, const UpdateMeta& meta,
                       const std::string& reason) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SubmitSecAgg(const std::string& client_id, const SecAggMessage& message) override
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Heartbeat(const std::string& client_id, int32_t round, const std::string& task_id) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void AuditRefusal(const std::string& client_id, const std::string& event,
                    const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);
  // AuditRefusal for a refusal within round `round` (recorded with the round). A declined task's
  // detail is the client's reason alone: it is not an error of the server's.
  // Warns once per run (log and audit_log "evaluation_loss_diverging") when a federated
  // evaluation's mean loss is above kDivergedLoss, or more than kLossGrowthFactor times the
  // run's lowest so far: the signs of unscaled features or too high a learning rate.
  static constexpr double kDivergedLoss = 100;
  static constexpr double kLossGrowthFactor = 100;
  void WarnIfLossDivergesLocked(int32_t round, double loss) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AuditRoundRefusal(const std::string& client_id, const std::string& event,
                         const absl::Status& status, int32_t round);

  std::vector<std::string> PendingClients() const override ABSL_LOCKS_EXCLUDED(mu_);
  void NoteSeen(const std::vector<std::string>& client_ids) override ABSL_LOCKS_EXCLUDED(mu_);
  void Tick() override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      MaybeAdvanceLocked();
      FlushLastSeenLocked(clock_->Now());
    }
    AfterUnlock();
  }

  uint64_t WaitForChange(uint64_t seen_version, absl::Duration timeout) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (version_ == seen_version) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
    }
    return version_;
  }

  uint64_t version() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return version_;
  }
  // Over, and every round's summary delivered (on_round_end): a caller that waits for the run
  // to finish sees its last round reported.
  bool finished() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return finished_ && pending_summaries_.empty() && summaries_in_delivery_ == 0;
  }
  RunActivity Activity() const override ABSL_LOCKS_EXCLUDED(mu_);
  int clients_online() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(CountOnlineLocked(clock_->Now()));
  }
  int64_t run_id() const override ABSL_LOCKS_EXCLUDED(mu_) { return run_id_; }
  int32_t committed_round() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return committed_round_;
  }
  std::shared_ptr<const Model> global_model() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return global_;
  }

  // Called by uploads, without the gate held, after they reached a final phase.
  void OnUploadEnded(const std::shared_ptr<RoundState>& round, const UploadState& up,
                     const absl::Status& refusal, const std::string& event = "update_refused")
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct ClientState {
    std::string name;
    absl::Time last_seen = absl::InfinitePast();
    absl::Time last_seen_stored = absl::InfinitePast();  // as last written to the store
  };
  // Every options_.last_seen_flush, writes the clients' last_seen that moved since last written.
  void FlushLastSeenLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void BumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++version_;
    last_progress_ = clock_->Now();
    cv_.SignalAll();
  }
  // Logs, at most every kWaitingLogInterval, who is connected and who is missing while no round
  // can start.
  void LogWaitingLocked(absl::Time now, int64_t online, int64_t eligible, int64_t least)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The online clients' ids in order of the clients' names, then ids: the order random draws
  // start from, so that a federation of the same names samples the same sites whatever their ids
  // (a simulation's sites over gRPC, a certificate's fingerprint each, and in process, a hash of
  // the name). Pointers into clients_, valid until it next changes. O(online): the name order is
  // kept between rounds (by_name_), so a round start with 100,000 clients sorts nothing.
  // Clients left out for the run (excluded_) are not listed; `online`, when given, is set to the
  // number online, them included.
  std::vector<const std::string*> OnlineByNameLocked(absl::Time now,
                                                     int64_t* online = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ParticipationRecord ParticipationFor(const RoundState& round, const UploadState& up) const;
  absl::Status CheckTaskLocked(const std::string& client_id, int64_t run_id, int32_t round,
                               const std::string& task_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Task TaskForLocked(const std::string& client_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fit task's settings and model (kFit, kSecAggMaskedInput).
  void FillFitLocked(const std::string& client_id, Task& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Records `state` as the client's one upload for the open round and returns that round, or
  // sets `refusal` (stale or foreign task, second update) and returns null.
  std::shared_ptr<RoundState> RegisterUploadLocked(const std::string& client_id,
                                                   const UpdateMeta& meta,
                                                   std::shared_ptr<UploadState> state,
                                                   absl::Status& refusal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Shape, size, example count and metrics of an update against the global model.
  absl::Status CheckUpdateLocked(const UpdateMeta& meta) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeAdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartEvaluationLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishEvaluationLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Clients seen within client_timeout, sorted.
  std::vector<std::string> OnlineLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many clients were seen within client_timeout.
  int64_t CountOnlineLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sampled clients of the open round that have neither reported nor been seen for
  // client_timeout are dropped from it, so that the round does not wait for them.
  void DropOfflineClientsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `client_id` from the open round when it has not been seen for client_timeout.
  void DropIfSilentLocked(const std::string& client_id, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `client_id` (sampled, not yet reported) as dropped from the open round.
  void DropFromRoundLocked(const std::string& client_id, const std::string& event,
                           const std::string& reason, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Differential privacy, once options_ are final (new or resumed run): wraps the strategy in
  // central noise, flags the fit tasks and makes the accountant. INVALID_ARGUMENT for bad
  // settings or a strategy that cannot be wrapped.
  absl::Status SetUpPrivacy() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parses options_.update_encoding into update_encoding_; INVALID_ARGUMENT for an unknown name
  // or for anything but float32 together with secure aggregation.
  absl::Status SetUpUpdateEncoding() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `wanted`, or, when a run of the store already has that name, `wanted`-2, -3, ... (logged as
  // run_renamed): run names stay unique, so that reports and `fl admin` can name a run.
  absl::StatusOr<std::string> UniqueRunNameLocked(const std::string& wanted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MakeAccountant() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leaves `client_id` out of the run's draws, fit and evaluation, for the rest of the run
  // (audited as client_excluded). Called with mu_ held.
  void ExcludeFromRunLocked(const std::string& client_id, int32_t round, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Samples the round's clients from `by_name` (OnlineByNameLocked) and opens it.
  void StartRoundLocked(std::vector<const std::string*> by_name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseRoundLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `closing` and takes the round's gate exclusively: uploads still streaming are aborted
  // with `reason` (their spills removed); none is mid-fold when this returns.
  static void CutOffUploadsLocked(RoundState& round, const std::string& reason);

  // --- A closed round's commit (commit.cc)
  // A round closed with enough accepted updates, on its way to its commit: what the close
  // collected under mu_ (current_ is already null). `summary` carries num_accepted and the
  // training metrics.
  struct PendingCommit {
    std::shared_ptr<RoundState> round;
    std::vector<ParticipationRecord> participations;
    RoundSummary summary;
    // The sampled sites whose update does not count, told to the strategy before its Finish.
    std::vector<aggregation::SiteFailure> failures;
  };
  // What the commit computed without mu_: the next global model, or why there is none; the
  // evaluation hook's metrics; the checkpoint's SHA-256, or why it could not be written.
  struct CommitInputs {
    explicit CommitInputs(absl::StatusOr<Model> model) : next(std::move(model)) {}
    absl::StatusOr<Model> next;
    std::map<std::string, double> hook_metrics;
    absl::StatusOr<std::string> checkpoint = absl::FailedPreconditionError("not written");
    // The strategy's server state after the round (server optimizers), and its checkpoint.
    std::optional<Model> state;
    absl::StatusOr<std::string> state_checkpoint = absl::FailedPreconditionError("not written");
  };
  // Sets commit_: nothing starts until it is committed (MaybeAdvanceLocked waits); the engine's
  // thread, or AfterUnlock, runs it.
  void ScheduleCommitLocked(PendingCommit commit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs commit_, if one is pending and nobody runs it yet: computes the next model, evaluates
  // and checkpoints it without mu_, then commits (EndAttemptLocked) and moves on under mu_.
  void RunPendingCommit() ABSL_LOCKS_EXCLUDED(mu_);
  // The engine's thread (options_.commit_thread): runs each commit as it is scheduled, until
  // the engine is destroyed.
  void CommitLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (mu_ released meanwhile) until no commit is pending.
  void WaitForCommitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a round's model-sized parts (its input's aggregate and global model: DropModels).
  static void DropRoundModels(RoundState& round);
  // The end of an attempt, shared by plain and secure rounds: commits `in.next` with the
  // participations (or, when it or its checkpoint is an error, fails the attempt with the
  // message, counted against max_round_retries), then starts what follows (an evaluation, the
  // run's end).
  void EndAttemptLocked(std::shared_ptr<RoundState> round,
                        std::vector<ParticipationRecord> participations, RoundSummary summary,
                        CommitInputs in, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Secure aggregation (secagg_round.cc)
  // The refusals at Create / resume: min_clients < 3, SCAFFOLD, a train_* stop metric, central
  // DP with it, distributed DP without it, parameters refused for n = min_clients.
  absl::Status CheckSecureAggregation() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets up round.secagg for the sampled clients (`online` counted for the log only).
  absl::Status StartSecAggLocked(RoundState& round, int32_t online)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the silent, closes the open stage when it is complete or past its deadline (maybe
  // several in a row), and ends the attempt after the unmasking stage or on a failure.
  void AdvanceSecAggLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseSecAggStageLocked(const std::string& why, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current secure attempt as failed with `failure`.
  void FailSecAggRoundLocked(const std::string& failure, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ParticipationRecord> SecAggParticipationsLocked(const RoundState& round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Task SecAggTaskLocked(const std::string& client_id, Task t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Refusals of an upload specific to secure rounds (or of a masked one in a plain round).
  absl::Status CheckSecAggUploadLocked(const std::string& client_id, const UpdateMeta& meta) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- A round's differential privacy (round_privacy.cc)
  // n_min: the survivors a distributed round of n sampled sites plans its noise for.
  int32_t DpMinSurvivors(int32_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The discrete Gaussian encoding of a distributed round of n sampled sites (without its
  // rotation seed): each site's sigma = z C / sqrt(n_min), gamma by secagg::DdgGranularity.
  absl::StatusOr<secagg::DdgEncoding> DdgEncodingFor(int32_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What one round that sampled n of the online sites (q = n / online) adds to the accountant,
  // at its orders: the fixed-size draw's bound over the Gaussian at z, or over the discrete
  // Gaussian's sum of n_min sites.
  absl::StatusOr<std::vector<double>> RoundRdpLocked(double q, int32_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An attempt read back on resume whose secure sum was being unmasked when the server stopped
  // (its record says "unmasking", with the sampling rate and the summed sites): the release is
  // counted, by the accountant and against the server, as a committed round's would be, and
  // recorded on the attempt. Returns what the run's failure adds about it ("" when there is
  // nothing to count).
  std::string CountInterruptedReleaseLocked(const RoundRecord& attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- Distributed DP against the server (server_exposure.cc)
  // The epsilon against the server of the site that has spent most once `round`'s sum (its
  // accepted `participations`) is counted; with `apply`, counted. 0 without distributed DP.
  double ServerEpsilonAfterLocked(const RoundState& round,
                                  const std::vector<ParticipationRecord>& participations,
                                  bool apply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epsilon against the server of the site that has spent most so far.
  double ServerEpsilonLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A committed secure round read back on resume, with the participations summed in it.
  void ReplayServerExposureLocked(const RoundRecord& round,
                                  const std::vector<ParticipationRecord>& summed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailRunLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the evaluation and the round in flight, the round recorded as aborted with `reason`.
  void AbortInFlightLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndRunLocked(RunStatus status, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishRunLocked(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why the run's stopping rule ends it after a commit with `metrics`; empty when it does not.
  std::string StoppingRuleMet(const std::map<std::string, double>& metrics) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What a call that may have closed a round does once it released mu_: runs the round's commit
  // (unless the engine's thread does), then delivers the round summaries.
  void AfterUnlock() ABSL_LOCKS_EXCLUDED(mu_) {
    if (!own_commit_thread_) RunPendingCommit();
    FlushSummaries();
  }
  void FlushSummaries() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      // Nothing to deliver: do not wait for another thread's delivery (its hook may prune
      // checkpoint files) on a poll's path.
      absl::MutexLock lock(&mu_);
      if (pending_summaries_.empty()) return;
    }
    absl::MutexLock deliver(&deliver_mu_);
    std::vector<RoundSummary> batch;
    {
      absl::MutexLock lock(&mu_);
      if (pending_summaries_.empty()) return;
      batch.swap(pending_summaries_);
      ++summaries_in_delivery_;
    }
    if (hooks_.on_round_end) {
      for (const RoundSummary& s : batch) hooks_.on_round_end(s);
    }
    absl::MutexLock lock(&mu_);
    --summaries_in_delivery_;
    BumpLocked();
  }

  friend class UploadImpl;

  EngineOptions options_ ABSL_GUARDED_BY(mu_);
  Store* store_;
  aggregation::Strategy* strategy_;
  Clock* clock_;
  EngineHooks hooks_;
  // Where uploads wait while they stream in (hooks_.staging, or files in the spill folder).
  // Fixed at construction.
  std::shared_ptr<StagingSpace> staging_;
  // run_.run_id, set by Init before the engine is shared and constant after: read without mu_.
  int64_t run_id_ = 0;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  RunRecord run_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const Model> global_ ABSL_GUARDED_BY(mu_);
  std::string global_sha_ ABSL_GUARDED_BY(mu_);
  int32_t committed_round_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t next_attempt_ ABSL_GUARDED_BY(mu_) = 0;  // attempt number of the next round to start
  int32_t failed_attempts_ ABSL_GUARDED_BY(mu_) =
      0;  // attempts of that round that failed (not those a restart cut)
  absl::Time waiting_since_
      ABSL_GUARDED_BY(mu_);  // when the engine last started waiting for clients
  // A failed attempt's retry does not start before this (EngineOptions::retry_backoff).
  absl::Time retry_not_before_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_seen_flushed_ ABSL_GUARDED_BY(mu_);  // when FlushLastSeenLocked last wrote
  absl::Time last_progress_
      ABSL_GUARDED_BY(mu_);  // set by BumpLocked and by heartbeats of open tasks
  absl::Time last_waiting_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Why the strategy last could not configure a round (empty since it last could): each reason
  // is logged and audited once.
  std::string configure_failure_ ABSL_GUARDED_BY(mu_);
  // The store's refusal of the last round that could not begin (logged once per cause), and
  // since when rounds have not been able to begin (InfinitePast: they can).
  std::string begin_failure_ ABSL_GUARDED_BY(mu_);
  absl::Time begin_failing_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A federated evaluation in progress (between rounds), if any.
  struct EvalState {
    int32_t round = 0;
    bool statistics = false;  // a statistics collection before round 1, not an evaluation
    absl::Time deadline;
    std::vector<std::string> sampled;
    std::map<std::string, std::string> task_of;  // client id -> task id
    std::map<std::string, EvaluationReport> reports;
  };
  std::unique_ptr<EvalState> eval_ ABSL_GUARDED_BY(mu_);
  // Federated standardisation (statistics.cc): whether the run still needs its statistics
  // before round 1; sending the statistics task to every online client; adding up their sums
  // when all reported or eval_timeout passed; checking one report; loading them on resume.
  bool NeedsStatisticsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartStatisticsLocked(std::vector<std::string> online, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishStatisticsLocked(std::unique_ptr<EvalState> stats, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckFeatureSumsLocked(const EvaluationReport& report) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One evaluations row per site that evaluated (source "site:<client id>"), beside the
  // federation's: in a run with secure aggregation only for the sites that allow it.
  void RecordSiteEvaluationsLocked(const EvalState& eval, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadFeatureStatistics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<std::string> finish_after_eval_
      ABSL_GUARDED_BY(mu_);  // the run ends when the evaluation does
  // The lowest federated evaluation loss of the run so far (this process), and whether the run
  // was already warned that its loss diverges (see WarnIfLossDivergesLocked).
  double lowest_eval_loss_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<double>::infinity();
  // The run's federated feature statistics, once aggregated (federated_standardization).
  std::shared_ptr<const FeatureStatistics> feature_stats_ ABSL_GUARDED_BY(mu_);
  bool warned_eval_loss_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;  // Abort was called: no more rounds in this process
  std::shared_ptr<RoundState> current_ ABSL_GUARDED_BY(mu_);
  // A closed round on its way to its commit (commit.cc), and whether a thread runs it now.
  std::shared_ptr<PendingCommit> commit_ ABSL_GUARDED_BY(mu_);
  bool commit_running_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id commit_owner_ ABSL_GUARDED_BY(mu_);  // the thread whose call closed the round
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // the engine is being destroyed: its thread ends
  bool own_commit_thread_ = false;             // options_.commit_thread, fixed before any call
  std::thread commit_thread_;
  std::map<std::string, ClientState> clients_ ABSL_GUARDED_BY(mu_);
  // Clients left out of sampling for the rest of this run, with why: each declined a task for a
  // reason that will not change while the run's model and settings do not (PermanentDecline).
  std::map<std::string, std::string> excluded_ ABSL_GUARDED_BY(mu_);
  // clients_ in (name, id) order, rebuilt when a client was added (the size changed), removed or
  // renamed (clients_changes_ moved on).
  mutable std::vector<std::map<std::string, ClientState>::const_iterator> by_name_
      ABSL_GUARDED_BY(mu_);
  mutable uint64_t by_name_changes_ ABSL_GUARDED_BY(mu_) = ~uint64_t{0};
  uint64_t clients_changes_ ABSL_GUARDED_BY(mu_) = 0;
  // Client id -> the last committed round that folded an accepted update of that client (see
  // Task::client_committed_round); rebuilt from the store when a run resumes.
  std::map<std::string, int32_t> client_committed_round_ ABSL_GUARDED_BY(mu_);
  std::vector<RoundSummary> pending_summaries_ ABSL_GUARDED_BY(mu_);
  int summaries_in_delivery_ ABSL_GUARDED_BY(mu_) =
      0;  // batches FlushSummaries took and has not delivered yet
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // FlushSummaries takes mu_ under it
  // Differential privacy (see PrivacyOptions): the wrapper strategy_ points to, and the RDP of
  // the committed rounds.
  std::unique_ptr<aggregation::Strategy> dp_strategy_;
  UpdateEncoding update_encoding_ ABSL_GUARDED_BY(mu_) =
      UpdateEncoding::kFloat32;  // options_.update_encoding
  std::optional<aggregation::dp::RdpAccountant> accountant_ ABSL_GUARDED_BY(mu_);
  // Distributed DP: each site's exposure over the sums it was in during the run, whence its
  // epsilon against the server (server_exposure.cc).
  std::map<std::string, SiteExposure> site_exposure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fl::server::internal

#endif  // FL_SERVER_ENGINE_ENGINE_IMPL_H_
