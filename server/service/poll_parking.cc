#include "server/service/poll_parking.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"

namespace fl::server {

PollParking::PollParking(WorkPool* pool) : pool_(pool), thread_([this] { Loop(); }) {}

PollParking::~PollParking() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void PollParking::Park(std::shared_ptr<RoundEngine> engine, std::string client_id,
                       uint64_t seen_version, absl::Time deadline, grpc::ServerContextBase* ctx,
                       std::function<void()> resume) {
  // Over already. A change of the engine since the caller's poll waits for the next sweep, like
  // every other: resuming at once would let a stream of changes spin the polls on the pool.
  if (absl::Now() >= deadline || ctx->IsCancelled()) {
    pool_->Continue(std::move(resume));
    return;
  }
  absl::MutexLock lock(&mu_);
  parked_.push_back(
      {std::move(engine), std::move(client_id), seen_version, deadline, ctx, std::move(resume)});
}

size_t PollParking::parked() const {
  absl::MutexLock lock(&mu_);
  return parked_.size();
}

PollParking::Swept PollParking::Sweep() {
  std::vector<Parked> parked;
  {
    absl::MutexLock lock(&mu_);
    parked.swap(parked_);
  }
  const absl::Time now = absl::Now();
  absl::flat_hash_map<RoundEngine*, uint64_t> versions;
  std::vector<Parked> kept;
  Swept swept;
  swept.next = now + kCheckEvery;
  for (Parked& p : parked) {
    auto [it, added] = versions.try_emplace(p.engine.get(), 0);
    if (added) it->second = p.engine->version();
    const bool due = it->second != p.seen_version || now >= p.deadline || p.ctx->IsCancelled();
    if (due) {
      pool_->Continue(std::move(p.resume));
      continue;
    }
    swept.next = std::min(swept.next, p.deadline);
    // The engine the most recently parked poll waits on, at the version this sweep saw.
    swept.engine = p.engine;
    swept.version = it->second;
    kept.push_back(std::move(p));
  }
  if (now - noted_seen_ >= kNoteSeenEvery) {
    // A parked poll is a live client; the engine no longer sees it poll while it waits.
    noted_seen_ = now;
    absl::flat_hash_map<RoundEngine*, std::vector<std::string>> waiting;
    for (const Parked& p : kept) waiting[p.engine.get()].push_back(p.client_id);
    for (auto& [engine, ids] : waiting) engine->NoteSeen(ids);
  }
  absl::MutexLock lock(&mu_);
  parked_.insert(parked_.end(), std::make_move_iterator(kept.begin()),
                 std::make_move_iterator(kept.end()));
  return swept;
}

void PollParking::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [](PollParking* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return self->stopping_ || !self->parked_.empty();
      };
      mu_.Await(absl::Condition(+ready, this));
      if (stopping_) return;
    }
    const Swept swept = Sweep();
    // Waits for a change after what the sweep saw (one since: returns at once), on the engine
    // the newest poll waits on (the current run's, unless the server just moved on; polls on
    // another engine are seen at the next check).
    const absl::Duration wait = std::max(swept.next - absl::Now(), absl::ZeroDuration());
    if (swept.engine != nullptr && wait > absl::ZeroDuration()) {
      swept.engine->WaitForChange(swept.version, wait);
    }
    absl::SleepFor(kMinSweep);
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
  }
}

}  // namespace fl::server
