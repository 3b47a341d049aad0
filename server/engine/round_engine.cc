#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fl/common/chunking.h"
#include "fl/common/crash_point.h"
#include "fl/common/crypto.h"
#include "fl/common/logging.h"
#include "fl/common/random.h"
#include "fl/server/engine.h"
#include "nlohmann/json.hpp"
#include "server/engine/upload.h"

namespace fl::server {
namespace {

using internal::RoundState;
using internal::UploadState;
using Phase = internal::UploadState::Phase;

int64_t ToMs(absl::Time t) { return absl::ToUnixMillis(t); }

// The largest example count an update may claim (its FedAvg weight): far above any site's data,
// small enough that one client cannot swamp the float64 sum.
constexpr int64_t kMaxExamples = int64_t{1} << 40;

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

std::string MetricsJson(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : metrics) j[k] = v;
  return j.dump();
}

// Names the first tensor whose name or shape differs between an update and the model.
std::string SpecMismatch(const ModelSpec& got, const ModelSpec& want) {
  auto shape = [](const TensorSpec& t) {
    std::string out = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) absl::StrAppend(&out, i ? "," : "", t.shape[i]);
    return out + "]";
  };
  const size_t n = std::min(got.tensors().size(), want.tensors().size());
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& g = got.tensors()[i];
    const TensorSpec& w = want.tensors()[i];
    if (g.name != w.name) {
      return absl::StrCat("update's tensor ", i, " is '", g.name, "' but the model's is '", w.name,
                          "'");
    }
    if (g.shape != w.shape) {
      return absl::StrCat("update's tensor '", g.name, "' has shape ", shape(g),
                          " but the model's has shape ", shape(w));
    }
  }
  return absl::StrCat("update has ", got.tensors().size(), " tensors but the model has ",
                      want.tensors().size());
}

class EngineImpl;

class UploadImpl final : public Upload {
 public:
  UploadImpl(EngineImpl* engine, std::shared_ptr<RoundState> round,
             std::shared_ptr<UploadState> state, int64_t payload_bytes)
      : engine_(engine),
        round_(std::move(round)),
        state_(std::move(state)),
        assembler_(payload_bytes),
        buffer_(static_cast<size_t>(kMaxChunkBytes / sizeof(float))) {}
  ~UploadImpl() override;

  absl::Status AddChunk(int64_t offset, std::string_view data) override;
  absl::Status Finish(std::string_view sha256_hex) override;
  absl::Status Abandon() override {
    return Refuse(absl::DataLossError(absl::StrCat("update stream ended after ",
                                                   assembler_.received(), " of ",
                                                   assembler_.expected(),
                                                   " bytes, without its SHA-256")));
  }
  absl::Status Refuse(absl::Status why) override;

 private:
  // The round is closing or closed: this update is cut off (the close records why).
  absl::Status NoLongerAccepted();
  // Refuses the update: folds it out and records why. Caller holds the gate shared.
  absl::Status RefuseLocked(absl::Status why);

  EngineImpl* engine_;
  std::shared_ptr<RoundState> round_;
  std::shared_ptr<UploadState> state_;
  ChunkAssembler assembler_;
  std::vector<float> buffer_;
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
        hooks_(std::move(hooks)) {}

  absl::Status Init(Model initial_model);

  absl::StatusOr<int64_t> Join(const std::string& client_id, const std::string& name) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ClientState& c = clients_[client_id];
      c.name = name;
      c.last_seen = clock_->Now();
      (void)store_->TouchClient(client_id, ToMs(c.last_seen));
      LogEvent(LogLevel::kInfo, "client_joined",
               {{"client", client_id.substr(0, 16)}, {"name", name}});
      MaybeAdvanceLocked();
      BumpLocked();
    }
    FlushSummaries();
    return run_.run_id;
  }

  Task Poll(const std::string& client_id) override {
    Task task;
    {
      std::lock_guard<std::mutex> lock(mu_);
      clients_[client_id].last_seen = clock_->Now();
      MaybeAdvanceLocked();
      task = TaskForLocked(client_id);
    }
    FlushSummaries();
    return task;
  }

  absl::StatusOr<GlobalModel> ModelForTask(const std::string& client_id, int64_t run_id,
                                            int32_t round, const std::string& task_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (eval_ != nullptr && run_id == run_.run_id && round == eval_->round) {
      auto task = eval_->task_of.find(client_id);
      if (task != eval_->task_of.end() && task->second == task_id) {
        return GlobalModel{global_, global_sha_};
      }
    }
    if (absl::Status s = CheckTaskLocked(client_id, run_id, round, task_id); !s.ok()) return s;
    return GlobalModel{global_, global_sha_};
  }

  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(const std::string& client_id,
                                                      const UpdateMeta& meta) override;
  void Abort(const std::string& reason) override;
  absl::Status SubmitEvaluation(const std::string& client_id,
                                const EvaluationReport& report) override;
  absl::Status Decline(const std::string& client_id, const UpdateMeta& meta,
                       const std::string& reason) override;

  bool Heartbeat(const std::string& client_id, int32_t round,
                 const std::string& task_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    clients_[client_id].last_seen = clock_->Now();
    if (current_ == nullptr || current_->round != round) return false;
    auto task = current_->task_of.find(client_id);
    if (task == current_->task_of.end() || task->second != task_id) return false;
    auto up = current_->uploads.find(client_id);
    return up == current_->uploads.end() || up->second->phase == Phase::kStreaming;
  }

  void AuditRefusal(const std::string& client_id, const std::string& event,
                    const absl::Status& status) override {
    if (event == "update_refused" && hooks_.on_update) hooks_.on_update(status, 0);
    LogEvent(LogLevel::kWarn, event,
             {{"client", client_id.substr(0, 16)}, {"reason", std::string(status.message())}});
    AuditRecord rec;
    rec.at_ms = ToMs(clock_->Now());
    rec.client_id = client_id;
    rec.event = event;
    rec.detail = absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
    rec.run_id = run_.run_id;
    (void)store_->Audit(rec);
  }

  void Tick() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      MaybeAdvanceLocked();
    }
    FlushSummaries();
  }

  uint64_t WaitForChange(uint64_t seen_version, absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                 [&] { return version_ != seen_version; });
    return version_;
  }

  uint64_t version() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return version_;
  }
  bool finished() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }
  int clients_online() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(OnlineLocked(clock_->Now()).size());
  }
  int64_t run_id() const override { return run_.run_id; }
  int32_t committed_round() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return committed_round_;
  }
  std::shared_ptr<const Model> global_model() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return global_;
  }

  // Called by uploads, without the gate held, after they reached a final phase.
  void OnUploadEnded(const std::shared_ptr<RoundState>& round, const UploadState& up,
                     const absl::Status& refusal, const std::string& event = "update_refused") {
    if (refusal.ok() && hooks_.on_update) hooks_.on_update(refusal, up.bytes_received);
    if (!refusal.ok()) {
      AuditRefusal(up.client_id, event, refusal);
      ParticipationRecord p = ParticipationFor(*round, up);
      (void)store_->RecordParticipation(p);
    } else {
      LogEvent(LogLevel::kInfo, "update_accepted",
               {{"client", up.client_id.substr(0, 16)},
                {"round", absl::StrCat(round->round)},
                {"examples", absl::StrCat(up.num_examples)}});
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      MaybeAdvanceLocked();
      BumpLocked();
    }
    FlushSummaries();
  }

 private:
  struct ClientState {
    std::string name;
    absl::Time last_seen = absl::InfinitePast();
  };

  void BumpLocked() {
    ++version_;
    cv_.notify_all();
  }

  ParticipationRecord ParticipationFor(const RoundState& round, const UploadState& up) const {
    ParticipationRecord p;
    p.run_id = run_.run_id;
    p.round = round.round;
    p.attempt = round.attempt;
    p.client_id = up.client_id;
    p.task_id = up.task_id;
    p.num_examples = up.num_examples;
    p.bytes_received = up.bytes_received;
    p.metrics_json = MetricsJson(up.metrics);
    p.reason = up.reason;
    switch (up.phase) {
      case Phase::kAccepted: p.status = ParticipationStatus::kAccepted; break;
      case Phase::kRefused: p.status = ParticipationStatus::kRefused; break;
      case Phase::kAborted: p.status = ParticipationStatus::kDropped; break;
      case Phase::kStreaming: p.status = ParticipationStatus::kAssigned; break;
    }
    return p;
  }

  absl::Status CheckTaskLocked(const std::string& client_id, int64_t run_id, int32_t round,
                               const std::string& task_id) const {
    if (run_id != run_.run_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("request is for run ", run_id, " but the active run is ", run_.run_id));
    }
    if (finished_) return absl::FailedPreconditionError("the run is over");
    if (current_ == nullptr || current_->round != round) {
      return absl::FailedPreconditionError(absl::StrCat(
          "request is for round ", round, " but ",
          current_ == nullptr ? std::string("no round is open")
                              : absl::StrCat("the open round is ", current_->round)));
    }
    auto it = current_->task_of.find(client_id);
    if (it == current_->task_of.end() || it->second != task_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("task '", task_id, "' is not this client's task in round ", round));
    }
    return absl::OkStatus();
  }

  Task TaskForLocked(const std::string& client_id) const {
    Task t;
    t.run_id = run_.run_id;
    if (finished_) {
      t.kind = Task::Kind::kDone;
      t.message = absl::StrCat("run ", run_.run_id, " is ", ToString(run_.status),
                               run_.reason.empty() ? "" : ": ", run_.reason);
      return t;
    }
    if (eval_ != nullptr) {
      t.round = eval_->round;
      auto task = eval_->task_of.find(client_id);
      if (task == eval_->task_of.end() || eval_->reports.count(client_id) != 0) {
        t.message = absl::StrCat("waiting for the federated evaluation of round ", eval_->round);
        return t;
      }
      t.kind = Task::Kind::kEvaluate;
      t.task_id = task->second;
      t.spec = global_->spec();
      t.model_bytes = global_->NumBytes();
      t.model_sha256 = global_sha_;
      return t;
    }
    if (current_ == nullptr) {
      t.message = aborted_ ? "the server is shutting down" : "waiting for clients to come online";
      return t;
    }
    t.round = current_->round;
    auto task = current_->task_of.find(client_id);
    if (task == current_->task_of.end()) {
      t.message = absl::StrCat("not sampled in round ", current_->round);
      return t;
    }
    if (current_->uploads.count(client_id) != 0) {
      t.message = absl::StrCat("update received; waiting for round ", current_->round, " to close");
      return t;
    }
    t.kind = Task::Kind::kFit;
    t.task_id = task->second;
    t.fit = options_.fit;
    t.spec = global_->spec();
    t.model_bytes = global_->NumBytes();
    t.model_sha256 = global_sha_;
    return t;
  }

  // Records `state` as the client's one upload for the open round and returns that round, or
  // sets `refusal` (stale or foreign task, second update) and returns null.
  std::shared_ptr<RoundState> RegisterUploadLocked(const std::string& client_id,
                                                   const UpdateMeta& meta,
                                                   std::shared_ptr<UploadState> state,
                                                   absl::Status& refusal);
  // Shape, size, example count and metrics of an update against the global model.
  absl::Status CheckUpdateLocked(const UpdateMeta& meta) const;
  void MaybeAdvanceLocked();
  void StartEvaluationLocked(absl::Time now);
  void FinishEvaluationLocked(absl::Time now);
  // Clients seen within client_timeout, sorted.
  std::vector<std::string> OnlineLocked(absl::Time now) const;
  // Sampled clients of the open round that have neither reported nor been seen for
  // client_timeout are dropped from it, so that the round does not wait for them.
  void DropOfflineClientsLocked(absl::Time now);
  void StartRoundLocked(std::vector<std::string> online);
  void CloseRoundLocked(const std::string& why);
  void FailRunLocked(const std::string& reason);
  void FinishRunLocked(const std::string& reason);
  // Why the run's stopping rule ends it after a commit with `metrics`; empty when it does not.
  std::string StoppingRuleMet(const std::map<std::string, double>& metrics) const;

  void FlushSummaries() {
    std::lock_guard<std::mutex> deliver(deliver_mu_);
    std::vector<RoundSummary> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch.swap(pending_summaries_);
    }
    if (!hooks_.on_round_end) return;
    for (const RoundSummary& s : batch) hooks_.on_round_end(s);
  }

  friend class UploadImpl;

  EngineOptions options_;
  Store* store_;
  aggregation::Strategy* strategy_;
  Clock* clock_;
  EngineHooks hooks_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t version_ = 0;
  RunRecord run_;
  bool finished_ = false;
  std::shared_ptr<const Model> global_;
  std::string global_sha_;
  int32_t committed_round_ = 0;
  int32_t next_attempt_ = 0;     // attempt number of the next round to start
  int32_t failed_attempts_ = 0;  // attempts of that round that failed (not those a restart cut)
  absl::Time waiting_since_;     // when the engine last started waiting for clients
  // A federated evaluation in progress (between rounds), if any.
  struct EvalState {
    int32_t round = 0;
    absl::Time deadline;
    std::vector<std::string> sampled;
    std::map<std::string, std::string> task_of;  // client id -> task id
    std::map<std::string, EvaluationReport> reports;
  };
  std::unique_ptr<EvalState> eval_;
  std::optional<std::string> finish_after_eval_;  // the run ends when the evaluation does
  bool aborted_ = false;         // Abort was called: no more rounds in this process
  std::shared_ptr<RoundState> current_;
  std::map<std::string, ClientState> clients_;
  std::vector<RoundSummary> pending_summaries_;
  std::mutex deliver_mu_;
};

absl::Status EngineImpl::Init(Model initial_model) {
  absl::StatusOr<std::optional<RunRecord>> active = store_->ActiveRun();
  if (!active.ok()) return active.status();
  waiting_since_ = clock_->Now();
  const int64_t now_ms = ToMs(waiting_since_);
  if (active->has_value()) {
    run_ = **active;
    std::string spill_dir = options_.spill_dir;
    absl::StatusOr<EngineOptions> stored = EngineOptions::FromJson(run_.config_json);
    if (!stored.ok()) return stored.status();
    options_ = *stored;
    options_.spill_dir = spill_dir;
    if (run_.model_spec_json != initial_model.spec().ToJson()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the unfinished run ", run_.run_id, " in this data directory trains a model of spec ",
          run_.model_spec_json, ", not ", initial_model.spec().ToJson()));
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
    absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run_.run_id);
    if (!rounds.ok()) return rounds.status();
    for (const RoundRecord& r : *rounds) {
      if (r.round != committed_round_ + 1) continue;
      next_attempt_ = std::max(next_attempt_, r.attempt + 1);
      if (r.status == RoundStatus::kFailed) ++failed_attempts_;
    }
    LogEvent(LogLevel::kInfo, "run_resumed",
             {{"run", absl::StrCat(run_.run_id)},
              {"committed_round", absl::StrCat(committed_round_)},
              {"aborted_in_flight", absl::StrCat(*aborted)}});
    if (committed_round_ >= options_.num_rounds) FinishRunLocked("");
    return absl::OkStatus();
  }
  if (absl::Status s = initial_model.spec().Validate(); !s.ok()) return s;
  absl::StatusOr<std::string> sha = store_->WriteCheckpoint(initial_model);
  if (!sha.ok()) return sha.status();
  run_.name = options_.run_name;
  run_.config_json = options_.ToJson();
  run_.model_spec_json = initial_model.spec().ToJson();
  run_.initial_checkpoint = *sha;
  run_.status = RunStatus::kRunning;
  run_.created_at_ms = now_ms;
  absl::StatusOr<int64_t> id = store_->CreateRun(run_);
  if (!id.ok()) return id.status();
  run_.run_id = *id;
  global_ = std::make_shared<const Model>(std::move(initial_model));
  global_sha_ = *sha;
  LogEvent(LogLevel::kInfo, "run_created",
           {{"run", absl::StrCat(run_.run_id)}, {"name", run_.name},
            {"rounds", absl::StrCat(options_.num_rounds)},
            {"parameters", absl::StrCat(global_->spec().NumFloats())}});
  return absl::OkStatus();
}

void EngineImpl::MaybeAdvanceLocked() {
  if (finished_) return;
  const absl::Time now = clock_->Now();
  if (eval_ != nullptr) {
    if (eval_->reports.size() < eval_->sampled.size() && now < eval_->deadline) return;
    FinishEvaluationLocked(now);
    if (finished_) return;
  }
  if (current_ != nullptr) {
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
  if (current_ == nullptr && eval_ == nullptr && !finished_ && !aborted_) {
    std::vector<std::string> online = OnlineLocked(now);
    if (static_cast<int32_t>(online.size()) >= options_.min_clients) {
      StartRoundLocked(std::move(online));
    } else if (now - waiting_since_ > options_.wait_timeout) {
      FailRunLocked(absl::StrCat("only ", online.size(), " of the ", options_.min_clients,
                                 " clients needed (min_clients) came online within ",
                                 absl::FormatDuration(options_.wait_timeout)));
    }
  }
}

std::vector<std::string> EngineImpl::OnlineLocked(absl::Time now) const {
  std::vector<std::string> online;
  for (const auto& [id, c] : clients_) {
    if (now - c.last_seen <= options_.client_timeout) online.push_back(id);
  }
  return online;  // std::map keeps them sorted
}

void EngineImpl::StartEvaluationLocked(absl::Time now) {
  std::vector<std::string> online = OnlineLocked(now);
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
  std::mt19937_64 rng(options_.seed * 1000003u + static_cast<uint64_t>(eval->round) * 7919u +
                      0x65766131u);
  Shuffle(online, rng);
  const int32_t n = static_cast<int32_t>(online.size());
  const int32_t k =
      std::clamp(static_cast<int32_t>(std::ceil(options_.eval_fraction * n - 1e-9)), 1, n);
  online.resize(static_cast<size_t>(k));
  std::sort(online.begin(), online.end());
  eval->sampled = online;
  for (const std::string& id : eval->sampled) {
    eval->task_of[id] = absl::StrFormat("e%d.%s", eval->round, id.substr(0, 12));
  }
  LogEvent(LogLevel::kInfo, "evaluation_started",
           {{"round", absl::StrCat(eval->round)}, {"sampled", absl::StrCat(k)}});
  eval_ = std::move(eval);
  BumpLocked();
}

void EngineImpl::FinishEvaluationLocked(absl::Time now) {
  std::unique_ptr<EvalState> eval = std::move(eval_);
  double examples = 0, loss = 0;
  std::map<std::string, double> metrics;
  int declined = 0;
  for (const auto& [id, r] : eval->reports) {
    if (!r.error.empty()) {
      ++declined;
      continue;
    }
    const double n = static_cast<double>(r.num_examples);
    examples += n;
    loss += n * r.loss;
    for (const auto& [k, v] : r.metrics) metrics[k] += n * v;
  }
  if (examples > 0) {
    loss /= examples;
    for (auto& [k, v] : metrics) v /= examples;
    const double accuracy = metrics.count("accuracy") ? metrics["accuracy"] : 0.0;
    (void)store_->RecordEvaluation(run_.run_id, eval->round, "federated", loss, accuracy,
                                   static_cast<int64_t>(examples), ToMs(now));
    LogEvent(LogLevel::kInfo, "evaluation_finished",
             {{"round", absl::StrCat(eval->round)},
              {"clients", absl::StrCat(eval->reports.size() - declined, "/", eval->sampled.size())},
              {"examples", absl::StrCat(static_cast<int64_t>(examples))},
              {"loss", absl::StrCat(loss)},
              {"accuracy", absl::StrCat(accuracy)}});
  } else {
    LogEvent(LogLevel::kWarn, "evaluation_empty",
             {{"round", absl::StrCat(eval->round)},
              {"reason", absl::StrCat("no client reported an evaluation before ",
                                      eval->reports.size() < eval->sampled.size()
                                          ? "the deadline"
                                          : "all declined")}});
  }
  waiting_since_ = now;
  if (finish_after_eval_.has_value()) FinishRunLocked(*finish_after_eval_);
  finish_after_eval_.reset();
  BumpLocked();
}

absl::Status EngineImpl::SubmitEvaluation(const std::string& client_id,
                                          const EvaluationReport& report) {
  absl::Status refusal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    clients_[client_id].last_seen = clock_->Now();
    if (report.run_id != run_.run_id) {
      refusal = absl::FailedPreconditionError(absl::StrCat(
          "request is for run ", report.run_id, " but the active run is ", run_.run_id));
    } else if (eval_ == nullptr || eval_->round != report.round) {
      refusal = absl::FailedPreconditionError(absl::StrCat(
          "no evaluation of round ", report.round, " is open"));
    } else if (auto it = eval_->task_of.find(client_id);
               it == eval_->task_of.end() || it->second != report.task_id) {
      refusal = absl::FailedPreconditionError(absl::StrCat(
          "task '", report.task_id, "' is not this client's evaluation of round ", report.round));
    } else if (eval_->reports.count(client_id) != 0) {
      refusal = absl::AlreadyExistsError(absl::StrCat(
          "an evaluation for task '", report.task_id, "' was already received"));
    } else if (report.error.empty() &&
               (report.num_examples <= 0 || report.num_examples > kMaxExamples)) {
      refusal = absl::InvalidArgumentError(absl::StrCat(
          "evaluation claims ", report.num_examples, " examples; it must be in [1, ",
          kMaxExamples, "]"));
    } else if (report.error.empty() && !std::isfinite(report.loss)) {
      refusal = absl::InvalidArgumentError("evaluation loss is not finite");
    } else {
      for (const auto& [k, v] : report.metrics) {
        if (report.error.empty() && !std::isfinite(v)) {
          refusal = absl::InvalidArgumentError(
              absl::StrCat("evaluation metric '", k, "' is not finite"));
        }
      }
    }
    if (refusal.ok()) {
      eval_->reports[client_id] = report;
      MaybeAdvanceLocked();
      BumpLocked();
    }
  }
  if (!refusal.ok()) {
    AuditRefusal(client_id, "evaluation_refused", refusal);
  } else if (!report.error.empty()) {
    AuditRefusal(client_id, "evaluation_declined",
                 absl::FailedPreconditionError(absl::StrCat(
                     "the client declined to evaluate round ", report.round, ": ",
                     report.error)));
  }
  FlushSummaries();
  return refusal;
}

void EngineImpl::DropOfflineClientsLocked(absl::Time now) {
  for (const std::string& id : current_->sampled) {
    if (current_->uploads.count(id) != 0) continue;  // reported, refused or uploading
    const absl::Duration silent = now - clients_[id].last_seen;
    if (silent <= options_.client_timeout) continue;
    auto state = std::make_shared<UploadState>();
    state->client_id = id;
    state->task_id = current_->task_of[id];
    state->reason = absl::StrCat("offline: no poll or heartbeat for ",
                                 absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1))));
    state->phase = Phase::kAborted;
    current_->uploads[id] = state;
    AuditRecord rec;
    rec.at_ms = ToMs(now);
    rec.client_id = id;
    rec.event = "client_offline";
    rec.detail = absl::StrCat(state->reason, "; dropped from round ", current_->round);
    rec.run_id = run_.run_id;
    rec.round = current_->round;
    (void)store_->Audit(rec);
    LogEvent(LogLevel::kWarn, "client_offline",
             {{"client", id.substr(0, 16)}, {"round", absl::StrCat(current_->round)},
              {"reason", state->reason}});
  }
}

void EngineImpl::StartRoundLocked(std::vector<std::string> online) {
  auto round = std::make_shared<RoundState>();
  round->round = committed_round_ + 1;
  round->attempt = next_attempt_;
  round->started = clock_->Now();
  round->deadline = round->started + options_.round_timeout;
  std::sort(online.begin(), online.end());
  std::mt19937_64 rng(options_.seed * 1000003u + static_cast<uint64_t>(round->round) * 7919u +
                      static_cast<uint64_t>(round->attempt));
  Shuffle(online, rng);
  const int32_t n = static_cast<int32_t>(online.size());
  // The epsilon keeps 0.07 * 100 = 7.000000000000001 from sampling 8.
  int32_t k = static_cast<int32_t>(std::ceil(options_.sample_fraction * n - 1e-9));
  k = std::clamp(std::max(k, options_.min_fit_clients), 1, n);
  online.resize(static_cast<size_t>(k));
  std::sort(online.begin(), online.end());
  round->sampled = online;
  for (const std::string& id : round->sampled) {
    round->task_of[id] = absl::StrFormat("r%d.a%d.%s", round->round, round->attempt, id.substr(0, 12));
  }
  round->aggregator = strategy_->BeginRound(*global_);

  CrashPoint("round_start");
  RoundRecord rec;
  rec.run_id = run_.run_id;
  rec.round = round->round;
  rec.attempt = round->attempt;
  rec.status = RoundStatus::kRunning;
  rec.started_at_ms = ToMs(round->started);
  rec.num_sampled = k;
  if (absl::Status s = store_->BeginRound(rec); !s.ok()) {
    LogEvent(LogLevel::kError, "round_begin_failed", {{"error", s.ToString()}});
    return;
  }
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
           {{"run", absl::StrCat(run_.run_id)}, {"round", absl::StrCat(round->round)},
            {"attempt", absl::StrCat(round->attempt)}, {"sampled", absl::StrCat(k)},
            {"online", absl::StrCat(n)}});
  current_ = std::move(round);
  BumpLocked();
}

void EngineImpl::CloseRoundLocked(const std::string& why) {
  std::shared_ptr<RoundState> round = std::move(current_);
  current_ = nullptr;
  const absl::Time now = clock_->Now();
  std::vector<ParticipationRecord> participations;
  std::map<std::string, double> metric_sums;
  double metric_weight = 0;
  {
    round->closing = true;
    std::unique_lock<std::shared_mutex> gate(round->gate);
    for (auto& [id, up] : round->uploads) {
      if (up->phase != Phase::kStreaming) continue;
      up->reason = absl::StrCat("round closed (", why, ") before the update was complete");
      up->phase = Phase::kAborted;
      up->RemoveSpill();
    }
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
        participations.push_back(std::move(p));
        continue;
      }
      const UploadState& up = *it->second;
      participations.push_back(ParticipationFor(*round, up));
      if (up.phase == Phase::kAccepted) {
        for (const auto& [k, v] : up.metrics) metric_sums[k] += v * up.num_examples;
        metric_weight += static_cast<double>(up.num_examples);
      }
    }
  }
  RoundSummary summary;
  summary.run_id = run_.run_id;
  summary.round = round->round;
  summary.attempt = round->attempt;
  summary.num_sampled = static_cast<int32_t>(round->sampled.size());
  summary.num_accepted = round->aggregator->num_accepted();
  summary.duration = now - round->started;
  for (const auto& [k, v] : metric_sums) summary.metrics["train_" + k] = v / metric_weight;

  std::string failure;
  if (round->poisoned) {
    failure = "a refused update could not be folded out of the aggregate (spill unreadable)";
  } else if (summary.num_accepted < options_.min_fit_clients) {
    failure = absl::StrCat("only ", summary.num_accepted, " of ", summary.num_sampled,
                           " sampled clients delivered an accepted update (", why,
                           "); min_fit_clients is ", options_.min_fit_clients);
  }
  CrashPoint("aggregate");
  absl::StatusOr<Model> next = failure.empty() ? round->aggregator->Finish()
                                               : absl::StatusOr<Model>(absl::AbortedError(failure));
  if (next.ok()) {
    if (hooks_.evaluate) {
      for (const auto& [k, v] : hooks_.evaluate(*next)) summary.metrics[k] = v;
    }
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
    absl::StatusOr<std::string> sha = store_->WriteCheckpoint(*next);
    absl::Status committed = sha.ok() ? (rec.checkpoint = *sha, store_->CommitRound(rec, participations))
                                      : sha.status();
    if (committed.ok()) CrashPoint("after_commit");
    if (committed.ok()) {
      if (summary.metrics.count("test_accuracy") != 0) {
        double loss = summary.metrics.count("test_loss") ? summary.metrics["test_loss"] : 0.0;
        (void)store_->RecordEvaluation(run_.run_id, round->round, "server", loss,
                                       summary.metrics["test_accuracy"], 0, ToMs(now));
      }
      summary.committed = true;
      global_ = std::make_shared<const Model>(*std::move(next));
      global_sha_ = *sha;
      committed_round_ = round->round;
      next_attempt_ = 0;
      failed_attempts_ = 0;
      LogEvent(LogLevel::kInfo, "round_committed",
               {{"run", absl::StrCat(run_.run_id)}, {"round", absl::StrCat(round->round)},
                {"accepted", absl::StrCat(summary.num_accepted)},
                {"checkpoint", global_sha_.substr(0, 16)}});
      std::optional<std::string> finish;
      if (committed_round_ >= options_.num_rounds) {
        finish = "";
      } else if (std::string why = StoppingRuleMet(summary.metrics); !why.empty()) {
        finish = why;
      }
      if (options_.eval_every > 0 && committed_round_ % options_.eval_every == 0) {
        finish_after_eval_ = finish;
        StartEvaluationLocked(now);
      } else if (finish.has_value()) {
        FinishRunLocked(*finish);
      }
    } else {
      failure = absl::StrCat("could not commit the round: ", committed.message());
    }
  } else if (failure.empty()) {
    failure = std::string(next.status().message());
  }
  if (!summary.committed) {
    summary.reason = failure;
    (void)store_->EndRound(run_.run_id, round->round, round->attempt, RoundStatus::kFailed, failure,
                           ToMs(now));
    for (const ParticipationRecord& p : participations) (void)store_->RecordParticipation(p);
    LogEvent(LogLevel::kWarn, "round_failed",
             {{"round", absl::StrCat(round->round)}, {"attempt", absl::StrCat(round->attempt)},
              {"reason", failure}});
    ++next_attempt_;
    ++failed_attempts_;
    if (failed_attempts_ > options_.max_round_retries) {
      FailRunLocked(absl::StrCat("round ", round->round, " failed ", failed_attempts_,
                                 " times; last reason: ", failure));
    }
  }
  waiting_since_ = now;
  pending_summaries_.push_back(std::move(summary));
  BumpLocked();
}

void EngineImpl::FinishRunLocked(const std::string& reason) {
  finished_ = true;
  run_.status = RunStatus::kFinished;
  run_.reason = reason;
  (void)store_->FinishRun(run_.run_id, RunStatus::kFinished, reason, ToMs(clock_->Now()));
  LogEvent(LogLevel::kInfo, "run_finished",
           {{"run", absl::StrCat(run_.run_id)}, {"rounds", absl::StrCat(committed_round_)},
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    if (current_ != nullptr) {
      std::shared_ptr<RoundState> round = std::move(current_);
      current_ = nullptr;
      round->closing = true;
      std::unique_lock<std::shared_mutex> gate(round->gate);
      for (auto& [id, up] : round->uploads) {
        if (up->phase != Phase::kStreaming) continue;
        up->reason = absl::StrCat("round aborted: ", reason);
        up->phase = Phase::kAborted;
        up->RemoveSpill();
      }
      (void)store_->EndRound(run_.run_id, round->round, round->attempt, RoundStatus::kAborted,
                             reason, ToMs(clock_->Now()));
      LogEvent(LogLevel::kInfo, "round_aborted",
               {{"round", absl::StrCat(round->round)}, {"reason", reason}});
    }
    BumpLocked();
  }
}

void EngineImpl::FailRunLocked(const std::string& reason) {
  finished_ = true;
  run_.status = RunStatus::kFailed;
  run_.reason = reason;
  (void)store_->FinishRun(run_.run_id, RunStatus::kFailed, reason, ToMs(clock_->Now()));
  LogEvent(LogLevel::kError, "run_failed", {{"run", absl::StrCat(run_.run_id)}, {"reason", reason}});
  BumpLocked();
}

std::shared_ptr<RoundState> EngineImpl::RegisterUploadLocked(const std::string& client_id,
                                                             const UpdateMeta& meta,
                                                             std::shared_ptr<UploadState> state,
                                                             absl::Status& refusal) {
  clients_[client_id].last_seen = clock_->Now();
  refusal = CheckTaskLocked(client_id, meta.run_id, meta.round, meta.task_id);
  if (!refusal.ok()) return nullptr;
  if (auto it = current_->uploads.find(client_id);
      it != current_->uploads.end() && it->second->phase == Phase::kAborted) {
    refusal = absl::FailedPreconditionError(absl::StrCat(
        "this client was dropped from round ", meta.round, ": ", it->second->reason));
    return nullptr;
  }
  if (current_->uploads.count(client_id) != 0) {
    // The first update keeps its place; this one is not the round's business.
    refusal = absl::AlreadyExistsError(absl::StrCat(
        "an update for task '", meta.task_id, "' was already received in round ", meta.round));
    return nullptr;
  }
  current_->uploads[client_id] = std::move(state);
  return current_;
}

absl::Status EngineImpl::CheckUpdateLocked(const UpdateMeta& meta) const {
  const int64_t expected = global_->NumBytes();
  if (meta.spec.has_value() && !(*meta.spec == global_->spec())) {
    return absl::InvalidArgumentError(SpecMismatch(*meta.spec, global_->spec()));
  }
  if (meta.payload_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "update payload is ", meta.payload_bytes, " bytes but the model has ",
        global_->spec().NumFloats(), " float32 parameters (", expected, " bytes)"));
  }
  if (meta.num_examples <= 0 || meta.num_examples > kMaxExamples) {
    return absl::InvalidArgumentError(absl::StrCat("update claims ", meta.num_examples,
                                                   " examples; it must be in [1, ", kMaxExamples,
                                                   "]"));
  }
  for (const auto& [k, v] : meta.metrics) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat("update metric '", k, "' is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Upload>> EngineImpl::BeginUpload(const std::string& client_id,
                                                                 const UpdateMeta& meta) {
  auto state = std::make_shared<UploadState>();
  state->client_id = client_id;
  state->task_id = meta.task_id;
  state->num_examples = meta.num_examples;
  state->metrics = meta.metrics;
  absl::Status refusal;
  std::shared_ptr<RoundState> round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    round = RegisterUploadLocked(client_id, meta, state, refusal);
    if (round != nullptr) {
      // Registered: from here on the client's one update for this task is spent, whether it is
      // accepted or refused, and the round need not wait for it.
      refusal = CheckUpdateLocked(meta);
      if (refusal.ok()) {
        // One upload per client per attempt: the name is unique to them.
        state->spill_path = absl::StrCat(options_.spill_dir, "/", run_.run_id, "-", round->round,
                                         "-", round->attempt, "-",
                                         fl::Sha256Hex(client_id).substr(0, 32), ".part");
        state->spill_fd = ::open(state->spill_path.c_str(),
                                 O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (state->spill_fd < 0) {
          refusal = absl::InternalError(absl::StrCat("cannot create spill file ",
                                                     state->spill_path, ": ",
                                                     std::strerror(errno)));
          state->spill_path.clear();
        }
      }
      if (!refusal.ok()) {
        std::shared_lock<std::shared_mutex> gate(round->gate);
        state->reason = std::string(refusal.message());
        state->phase = Phase::kRefused;
      }
    }
  }
  if (!refusal.ok()) {
    if (round != nullptr) {
      OnUploadEnded(round, *state, refusal);
    } else {
      AuditRefusal(client_id, "update_refused", refusal);
    }
    return refusal;
  }
  return std::make_unique<UploadImpl>(this, std::move(round), std::move(state), meta.payload_bytes);
}

absl::Status EngineImpl::Decline(const std::string& client_id, const UpdateMeta& meta,
                                 const std::string& reason) {
  auto state = std::make_shared<UploadState>();
  state->client_id = client_id;
  state->task_id = meta.task_id;
  state->phase = Phase::kRefused;
  state->reason = absl::StrCat("the client declined the task: ", reason);
  absl::Status refusal;
  std::shared_ptr<RoundState> round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    round = RegisterUploadLocked(client_id, meta, state, refusal);
  }
  if (round == nullptr) {
    AuditRefusal(client_id, "decline_refused", refusal);
    return refusal;
  }
  OnUploadEnded(round, *state, absl::FailedPreconditionError(state->reason), "task_declined");
  return absl::OkStatus();
}

UploadImpl::~UploadImpl() {
  if (!done_) (void)Abandon();
}

absl::Status UploadImpl::Refuse(absl::Status why) {
  {
    std::shared_lock<std::shared_mutex> gate(round_->gate);
    done_ = true;
    if (state_->phase != Phase::kStreaming) {
      return absl::FailedPreconditionError(
          absl::StrCat("update no longer accepted: ", state_->reason));
    }
    (void)RefuseLocked(why);
  }
  engine_->OnUploadEnded(round_, *state_, why);
  return why;
}

absl::Status UploadImpl::RefuseLocked(absl::Status why) {
  state_->reason = std::string(why.message());
  state_->phase = Phase::kRefused;
  state_->RemoveSpill();
  done_ = true;
  return why;
}

absl::Status UploadImpl::NoLongerAccepted() {
  done_ = true;
  std::shared_lock<std::shared_mutex> gate(round_->gate);
  return absl::FailedPreconditionError(absl::StrCat(
      "update no longer accepted: ",
      state_->reason.empty() ? "the round is closing" : state_->reason));
}

absl::Status UploadImpl::AddChunk(int64_t offset, std::string_view data) {
  if (round_->closing.load()) return NoLongerAccepted();
  absl::Status why;
  {
    std::shared_lock<std::shared_mutex> gate(round_->gate);
    if (state_->phase != Phase::kStreaming) {
      done_ = true;
      return absl::FailedPreconditionError(
          absl::StrCat("update no longer accepted: ", state_->reason));
    }
    why = assembler_.Add(offset, data);
    if (why.ok()) {
      std::span<float> values(buffer_.data(), data.size() / sizeof(float));
      std::memcpy(values.data(), data.data(), data.size());
      why = CheckFinite(values, offset / static_cast<int64_t>(sizeof(float)));
    }
    if (why.ok()) {
      ssize_t written = ::pwrite(state_->spill_fd, data.data(), data.size(), offset);
      if (written != static_cast<ssize_t>(data.size())) {
        why = absl::InternalError(absl::StrCat("cannot stage the update in ", state_->spill_path,
                                               ": ", std::strerror(errno)));
      }
    }
    if (why.ok()) {
      state_->bytes_received += static_cast<int64_t>(data.size());
      CrashPoint("mid_upload");
      return absl::OkStatus();
    }
    (void)RefuseLocked(why);
  }
  engine_->OnUploadEnded(round_, *state_, why);
  return why;
}

absl::Status UploadImpl::Finish(std::string_view sha256_hex) {
  if (round_->closing.load()) return NoLongerAccepted();
  absl::Status why;
  {
    std::shared_lock<std::shared_mutex> gate(round_->gate);
    done_ = true;
    if (state_->phase != Phase::kStreaming) {
      return absl::FailedPreconditionError(
          absl::StrCat("update no longer accepted: ", state_->reason));
    }
    why = assembler_.Finish(sha256_hex);
    if (why.ok()) {
      // Verified whole: only now does it touch the aggregate.
      why = state_->FoldInto(*round_->aggregator);
      if (!why.ok()) round_->poisoned = true;
    }
    if (why.ok()) {
      round_->aggregator->Accept(static_cast<double>(state_->num_examples));
      state_->phase = Phase::kAccepted;
      state_->RemoveSpill();
    } else {
      (void)RefuseLocked(why);
    }
  }
  engine_->OnUploadEnded(round_, *state_, why);
  return why;
}

}  // namespace

namespace internal {

UploadState::~UploadState() { RemoveSpill(); }

void UploadState::RemoveSpill() {
  if (spill_fd >= 0) ::close(spill_fd);
  spill_fd = -1;
  if (!spill_path.empty()) ::unlink(spill_path.c_str());
  spill_path.clear();
}

absl::Status UploadState::FoldInto(aggregation::RoundAggregator& aggregator) const {
  std::vector<float> buf(static_cast<size_t>(kMaxChunkBytes / sizeof(float)));
  for (int64_t off = 0; off < bytes_received;) {
    size_t n = static_cast<size_t>(std::min<int64_t>(kMaxChunkBytes, bytes_received - off));
    ssize_t got = ::pread(spill_fd, buf.data(), n, off);
    if (got != static_cast<ssize_t>(n)) {
      return absl::InternalError(absl::StrCat("cannot read back the staged update ", spill_path,
                                              ": ", got < 0 ? std::strerror(errno) : "short read"));
    }
    aggregator.Fold(off / static_cast<int64_t>(sizeof(float)),
                    std::span<const float>(buf.data(), n / sizeof(float)),
                    static_cast<double>(num_examples));
    off += static_cast<int64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace internal

Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

std::string EngineOptions::ToJson() const {
  nlohmann::json j = {
      {"run_name", run_name},
      {"num_rounds", num_rounds},
      {"min_clients", min_clients},
      {"min_fit_clients", min_fit_clients},
      {"sample_fraction", sample_fraction},
      {"round_timeout_ms", absl::ToInt64Milliseconds(round_timeout)},
      {"client_timeout_ms", absl::ToInt64Milliseconds(client_timeout)},
      {"max_round_retries", max_round_retries},
      {"wait_timeout_ms", absl::ToInt64Milliseconds(wait_timeout)},
      {"seed", seed},
      {"stop_metric", stop_metric},
      {"stop_threshold", stop_threshold},
      {"stop_when_below", stop_when_below},
      {"eval_every", eval_every},
      {"eval_fraction", eval_fraction},
      {"eval_timeout_ms", absl::ToInt64Milliseconds(eval_timeout)},
      {"local_epochs", fit.local_epochs},
      {"batch_size", fit.batch_size},
      {"learning_rate", fit.learning_rate},
  };
  return j.dump();
}

absl::StatusOr<EngineOptions> EngineOptions::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("run configuration is not a JSON object");
  }
  EngineOptions o;
  try {
    o.run_name = j.value("run_name", o.run_name);
    o.num_rounds = j.at("num_rounds").get<int32_t>();
    o.min_clients = j.value("min_clients", o.min_clients);
    o.min_fit_clients = j.value("min_fit_clients", o.min_fit_clients);
    o.sample_fraction = j.value("sample_fraction", o.sample_fraction);
    o.round_timeout = absl::Milliseconds(
        j.value("round_timeout_ms", absl::ToInt64Milliseconds(o.round_timeout)));
    o.client_timeout = absl::Milliseconds(
        j.value("client_timeout_ms", absl::ToInt64Milliseconds(o.client_timeout)));
    o.max_round_retries = j.value("max_round_retries", o.max_round_retries);
    o.wait_timeout = absl::Milliseconds(
        j.value("wait_timeout_ms", absl::ToInt64Milliseconds(o.wait_timeout)));
    o.seed = j.value("seed", o.seed);
    o.fit.local_epochs = j.value("local_epochs", o.fit.local_epochs);
    o.fit.batch_size = j.value("batch_size", o.fit.batch_size);
    o.fit.learning_rate = j.value("learning_rate", o.fit.learning_rate);
    o.stop_metric = j.value("stop_metric", o.stop_metric);
    o.stop_threshold = j.value("stop_threshold", o.stop_threshold);
    o.stop_when_below = j.value("stop_when_below", o.stop_when_below);
    o.eval_every = j.value("eval_every", o.eval_every);
    o.eval_fraction = j.value("eval_fraction", o.eval_fraction);
    o.eval_timeout = absl::Milliseconds(
        j.value("eval_timeout_ms", absl::ToInt64Milliseconds(o.eval_timeout)));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("run configuration: ", e.what()));
  }
  return o;
}

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
  auto engine = std::make_unique<EngineImpl>(std::move(options), store, strategy, clock,
                                             std::move(hooks));
  if (absl::Status s = engine->Init(std::move(initial_model)); !s.ok()) return s;
  return engine;
}

}  // namespace fl::server
