// What the engine tells clients: joins, polls, heartbeats and the task each client gets, which
// clients are online, and dropping the sampled clients that went silent.
#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/logging.h"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

absl::StatusOr<int64_t> EngineImpl::Join(const std::string& client_id, const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    auto [it, added] = clients_.try_emplace(client_id);
    ClientState& c = it->second;
    // A join of a client already online under the same name changes nothing but its last_seen
    // (which the tick flushes to the store): no store write, no log line and no wake-up of the
    // parked polls, so that a client that joins in a loop costs little more than a poll.
    const bool news = added || c.name != name || now - c.last_seen > options_.client_timeout;
    if (c.name != name) ++clients_changes_;  // a rename reorders by_name_
    c.name = name;
    c.last_seen = now;
    if (news) {
      (void)store_->TouchClient(client_id, ToMs(c.last_seen));
      c.last_seen_stored = c.last_seen;
      LogEvent(LogLevel::kInfo, "client_joined",
               {{"client", client_id.substr(0, 16)}, {"name", name}});
    }
    MaybeAdvanceLocked();
    if (news) BumpLocked();
  }
  AfterUnlock();
  return run_id_;
}

Task EngineImpl::Poll(const std::string& client_id) {
  Task task;
  {
    absl::MutexLock lock(&mu_);
    clients_[client_id].last_seen = clock_->Now();
    MaybeAdvanceLocked();
    task = TaskForLocked(client_id);
    if (task.kind == Task::Kind::kFit) current_->picked_up.insert(client_id);
  }
  AfterUnlock();
  return task;
}

absl::StatusOr<GlobalModel> EngineImpl::ModelForTask(const std::string& client_id, int64_t run_id,
                                                     int32_t round, const std::string& task_id) {
  absl::MutexLock lock(&mu_);
  if (eval_ != nullptr && run_id == run_.run_id && round == eval_->round) {
    auto task = eval_->task_of.find(client_id);
    if (task != eval_->task_of.end() && task->second == task_id) {
      return GlobalModel{global_, global_sha_};
    }
  }
  if (absl::Status s = CheckTaskLocked(client_id, run_id, round, task_id); !s.ok()) return s;
  if (const SecAggRound* s = current_->secagg; s != nullptr) {
    if (std::optional<std::string> why = s->DroppedWhy(client_id, round)) {
      return absl::FailedPreconditionError(absl::StrCat("this client was ", *why));
    }
  }
  return GlobalModel{global_, global_sha_};
}

std::vector<std::string> EngineImpl::PendingClients() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  if (eval_ != nullptr) {
    for (const std::string& id : eval_->sampled) {
      if (eval_->reports.count(id) == 0) ids.push_back(id);
    }
  }
  if (current_ != nullptr) {
    ids.insert(ids.end(), current_->sampled.begin(), current_->sampled.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void EngineImpl::NoteSeen(const std::vector<std::string>& client_ids) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const std::string& id : client_ids) {
    if (auto it = clients_.find(id); it != clients_.end()) it->second.last_seen = now;
  }
}

bool EngineImpl::Heartbeat(const std::string& client_id, int32_t round,
                           const std::string& task_id) {
  absl::MutexLock lock(&mu_);
  clients_[client_id].last_seen = clock_->Now();
  if (current_ != nullptr && current_->picked_up.count(client_id) == 0) {
    // Sampled in the open round but still at work on an older task (a round closed under it,
    // an evaluation, an attempt the server restarted): not a site that never asks.
    if (auto mine = current_->task_of.find(client_id);
        mine != current_->task_of.end() && (round != current_->round || task_id != mine->second)) {
      current_->busy_heard[client_id] = clock_->Now();
    }
  }
  if (eval_ != nullptr && eval_->round == round) {
    auto task = eval_->task_of.find(client_id);
    return task != eval_->task_of.end() && task->second == task_id &&
           eval_->reports.count(client_id) == 0;
  }
  if (current_ == nullptr || current_->round != round) return false;
  auto task = current_->task_of.find(client_id);
  if (task == current_->task_of.end() || task->second != task_id) return false;
  if (const SecAggRound* s = current_->secagg; s != nullptr) {
    if (s->dropped.count(s->id_of.at(client_id)) != 0) return false;
    if (s->stage != SecAggStage::kMaskedInput) return true;
  }
  auto up = current_->uploads.find(client_id);
  const bool open = up == current_->uploads.end() || up->second->phase == Phase::kStreaming;
  if (open) last_progress_ = clock_->Now();  // a site at work on the round is progress
  return open;
}

void EngineImpl::AuditRefusal(const std::string& client_id, const std::string& event,
                              const absl::Status& status) {
  AuditRoundRefusal(client_id, event, status, 0);
}

void EngineImpl::AuditRoundRefusal(const std::string& client_id, const std::string& event,
                                   const absl::Status& status, int32_t round) {
  if (event == "update_refused" && hooks_.on_update) hooks_.on_update(status, 0);
  LogEvent(LogLevel::kWarn, event,
           {{"client", client_id.substr(0, 16)},
            {"round", absl::StrCat(round)},
            {"reason", std::string(status.message())}});
  AuditRecord rec;
  rec.at_ms = ToMs(clock_->Now());
  rec.client_id = client_id;
  rec.event = event;
  rec.detail = event == "task_declined"
                   ? std::string(status.message())
                   : absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
  rec.run_id = run_id_;
  rec.round = round;
  (void)store_->Audit(rec);
}

absl::Status EngineImpl::CheckTaskLocked(const std::string& client_id, int64_t run_id,
                                         int32_t round, const std::string& task_id) const {
  if (run_id != run_.run_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("request is for run ", run_id, " but the active run is ", run_.run_id));
  }
  if (finished_) return absl::FailedPreconditionError("the run is over");
  if (current_ == nullptr || current_->round != round) {
    std::string now_open = "no round is open";
    if (current_ != nullptr) {
      now_open = absl::StrCat("the open round is ", current_->round);
    } else if (commit_ != nullptr) {
      now_open = absl::StrCat("round ", commit_->round->round, " is closed and being committed");
    }
    return absl::FailedPreconditionError(
        absl::StrCat("request is for round ", round, " but ", now_open));
  }
  auto it = current_->task_of.find(client_id);
  if (it == current_->task_of.end() || it->second != task_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("task '", task_id, "' is not this client's task in round ", round));
  }
  return absl::OkStatus();
}

Task EngineImpl::TaskForLocked(const std::string& client_id) const {
  Task t;
  t.run_id = run_.run_id;
  if (finished_) {
    t.kind = Task::Kind::kDone;
    t.run_status = run_.status;
    t.message = absl::StrCat("run ", run_.run_id, " is ", ToString(run_.status),
                             run_.reason.empty() ? "" : ": ", run_.reason);
    return t;
  }
  if (eval_ != nullptr) {
    t.round = eval_->round;
    auto task = eval_->task_of.find(client_id);
    if (task == eval_->task_of.end() || eval_->reports.count(client_id) != 0) {
      t.message = eval_->statistics ? std::string("waiting for the federated feature statistics")
                                    : absl::StrCat("waiting for the federated evaluation of round ",
                                                   eval_->round);
      return t;
    }
    t.task_id = task->second;
    if (eval_->statistics) {
      t.kind = Task::Kind::kStatistics;
      return t;
    }
    t.kind = Task::Kind::kEvaluate;
    t.feature_statistics = feature_stats_;
    t.spec = global_->spec();
    t.model_bytes = global_->NumBytes();
    t.model_sha256 = global_sha_;
    return t;
  }
  if (current_ == nullptr) {
    t.message = aborted_ ? "the server is shutting down"
                : commit_ != nullptr
                    ? absl::StrCat("round ", commit_->round->round, " is being committed")
                    : "waiting for clients to come online";
    return t;
  }
  t.round = current_->round;
  auto task = current_->task_of.find(client_id);
  if (task == current_->task_of.end()) {
    t.message = absl::StrCat("not sampled in round ", current_->round);
    return t;
  }
  if (current_->secagg != nullptr) return SecAggTaskLocked(client_id, std::move(t));
  if (current_->uploads.count(client_id) != 0) {
    t.message = absl::StrCat("update received; waiting for round ", current_->round, " to close");
    return t;
  }
  t.kind = Task::Kind::kFit;
  t.task_id = task->second;
  FillFitLocked(client_id, t);
  return t;
}

void EngineImpl::FillFitLocked(const std::string& client_id, Task& t) const {
  t.fit = options_.fit;
  if (current_ != nullptr) {  // the strategy's values for this round, then for this site
    for (const auto& [k, v] : current_->fit_config) t.fit.extra[k] = v;
    if (auto site = current_->site_config.find(client_id); site != current_->site_config.end()) {
      for (const auto& [k, v] : site->second) t.fit.extra[k] = v;
    }
  }
  t.update_encoding = update_encoding_;
  if (auto c = client_committed_round_.find(client_id); c != client_committed_round_.end()) {
    t.client_committed_round = c->second;
  }
  t.spec = global_->spec();
  t.model_bytes = global_->NumBytes();
  t.model_sha256 = global_sha_;
  t.feature_statistics = feature_stats_;
}

void EngineImpl::FlushLastSeenLocked(absl::Time now) {
  if (now - last_seen_flushed_ < options_.last_seen_flush) return;
  last_seen_flushed_ = now;
  std::vector<std::pair<std::string, int64_t>> seen;
  for (auto& [id, c] : clients_) {
    if (c.last_seen <= c.last_seen_stored) continue;
    seen.emplace_back(id, ToMs(c.last_seen));
    c.last_seen_stored = c.last_seen;
  }
  if (absl::Status s = store_->TouchClients(seen); !s.ok()) {
    LogEvent(LogLevel::kWarn, "last_seen_not_stored", {{"reason", s.ToString()}});
  }
}

int64_t EngineImpl::CountOnlineLocked(absl::Time now) const {
  int64_t n = 0;
  for (const auto& [id, c] : clients_) n += now - c.last_seen <= options_.client_timeout ? 1 : 0;
  return n;
}

std::vector<std::string> EngineImpl::OnlineLocked(absl::Time now) const {
  std::vector<std::string> online;
  for (const auto& [id, c] : clients_) {
    if (now - c.last_seen <= options_.client_timeout) online.push_back(id);
  }
  return online;  // std::map keeps them sorted
}

void EngineImpl::DropOfflineClientsLocked(absl::Time now) {
  // Called at every poll and upload: with 100 sampled among 100,000 clients, looking each one up
  // every time was most of a simulated round.
  RoundState& round = *current_;
  if (now <= round.no_silence_until && now >= round.checked_silence_at) return;
  absl::Time next = absl::InfiniteFuture();
  for (const std::string& id : round.sampled) {
    if (round.uploads.count(id) != 0) continue;  // reported, refused or uploading
    DropIfSilentLocked(id, now);
    if (round.uploads.count(id) == 0 && round.picked_up.count(id) == 0) {
      absl::Time from = round.started;
      if (auto busy = round.busy_heard.find(id); busy != round.busy_heard.end()) {
        from = std::max(from, busy->second);
      }
      const absl::Time pickup_by = from + options_.task_pickup_timeout;
      if (now > pickup_by) {
        DropFromRoundLocked(
            id, "client_no_pickup",
            absl::StrCat("did not ask for its task within ",
                         absl::FormatDuration(options_.task_pickup_timeout),
                         " of the round's start, nor heartbeat another (task_pickup_timeout_s)"),
            now);
      } else {
        next = std::min(next, pickup_by);
      }
    }
    if (round.uploads.count(id) == 0) {  // still owing its update
      next = std::min(next, clients_[id].last_seen + options_.client_timeout);
    }
  }
  round.no_silence_until = next;
  round.checked_silence_at = now;
}

void EngineImpl::DropIfSilentLocked(const std::string& client_id, absl::Time now) {
  const absl::Duration silent = now - clients_[client_id].last_seen;
  if (silent <= options_.client_timeout) return;
  DropFromRoundLocked(client_id, "client_offline",
                      absl::StrCat("offline: no poll or heartbeat for ",
                                   absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1)))),
                      now);
}

void EngineImpl::DropFromRoundLocked(const std::string& client_id, const std::string& event,
                                     const std::string& reason, absl::Time now) {
  std::string where;
  if (current_->secagg != nullptr) {
    current_->secagg->Drop(client_id, aggregation::SiteFailure::Kind::kDropped, reason);
    where = absl::StrCat(" at stage ", SecAggStageName(current_->secagg->stage));
  } else {
    auto state = std::make_shared<UploadState>();
    state->client_id = client_id;
    state->task_id = current_->task_of[client_id];
    state->reason = reason;
    state->failure = aggregation::SiteFailure::Kind::kDropped;
    state->phase = Phase::kAborted;
    current_->uploads[client_id] = state;
  }
  AuditRecord rec;
  rec.at_ms = ToMs(now);
  rec.client_id = client_id;
  rec.event = event;
  rec.detail = absl::StrCat(reason, "; dropped from round ", current_->round, where);
  rec.run_id = run_.run_id;
  rec.round = current_->round;
  (void)store_->Audit(rec);
  LogEvent(LogLevel::kWarn, event,
           {{"client", client_id.substr(0, 16)},
            {"round", absl::StrCat(current_->round)},
            {"reason", reason}});
}

void EngineImpl::ForgetClient(const std::string& client_id, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (clients_.erase(client_id) == 0) return;  // never seen by this engine
    ++clients_changes_;
    const absl::Time now = clock_->Now();
    if (current_ != nullptr && current_->task_of.count(client_id) != 0) {
      const SecAggRound* s = current_->secagg;
      // A secure round drops it at any stage but while its masked input streams or after it
      // arrived during that stage (an input in the sum stays there).
      const bool uploading = current_->uploads.count(client_id) != 0;
      const bool droppable = s == nullptr
                                 ? !uploading
                                 : s->dropped.count(s->id_of.at(client_id)) == 0 &&
                                       !(s->stage == SecAggStage::kMaskedInput && uploading);
      if (droppable) DropFromRoundLocked(client_id, "client_removed", reason, now);
    }
    MaybeAdvanceLocked();
    BumpLocked();
  }
  AfterUnlock();
}

std::vector<const std::string*> EngineImpl::OnlineByNameLocked(absl::Time now,
                                                               int64_t* online_count) const {
  if (by_name_.size() != clients_.size() || by_name_changes_ != clients_changes_) {
    by_name_.clear();
    by_name_.reserve(clients_.size());
    for (auto it = clients_.begin(); it != clients_.end(); ++it) by_name_.push_back(it);
    std::sort(by_name_.begin(), by_name_.end(), [](const auto& a, const auto& b) {
      return std::tie(a->second.name, a->first) < std::tie(b->second.name, b->first);
    });
    by_name_changes_ = clients_changes_;
  }
  std::vector<const std::string*> online;
  online.reserve(by_name_.size());
  int64_t count = 0;
  for (const auto& it : by_name_) {
    if (now - it->second.last_seen > options_.client_timeout) continue;
    ++count;
    if (excluded_.empty() || !excluded_.contains(it->first)) online.push_back(&it->first);
  }
  if (online_count != nullptr) *online_count = count;
  return online;
}

}  // namespace fl::server::internal
