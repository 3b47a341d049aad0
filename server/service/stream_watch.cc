#include "server/service/stream_watch.h"

#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fl::server {
namespace {

constexpr absl::Duration kCheckEvery = absl::Milliseconds(250);

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StreamWatch::Watched::Watched(absl::Duration idle, std::function<void()> cut,
                              std::function<bool()> unwanted)
    : idle_(idle), cut_(std::move(cut)), unwanted_(std::move(unwanted)) {}

void StreamWatch::Watched::WaitForPeer() {
  absl::MutexLock lock(&mu_);
  waiting_ = true;
  waiting_since_ns_ = SteadyNanos();
}

bool StreamWatch::Watched::PeerMoved() {
  absl::MutexLock lock(&mu_);
  waiting_ = false;
  return cut_reason_.empty();
}

void StreamWatch::Watched::Release() {
  absl::MutexLock lock(&mu_);
  released_ = true;
  cut_ = nullptr;
  unwanted_ = nullptr;
  if (cutting_on_ == std::this_thread::get_id()) return;
  mu_.Await(absl::Condition(
      +[](std::thread::id* on) { return *on == std::thread::id(); }, &cutting_on_));
}

std::string StreamWatch::Watched::cut_reason() const {
  absl::MutexLock lock(&mu_);
  return cut_reason_;
}

bool StreamWatch::Watched::CutIfDue(int64_t now_ns) {
  std::function<void()> cut;
  {
    absl::MutexLock lock(&mu_);
    if (released_) return true;
    if (!waiting_) return false;  // the server is at work on the stream's last message
    const absl::Duration waited = absl::Nanoseconds(now_ns - waiting_since_ns_);
    if (unwanted_ && unwanted_()) {
      cut_reason_ = "its round closed while it was open";
    } else if (waited >= idle_) {
      cut_reason_ = absl::StrCat(
          "no data moved for ", absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(100))),
          " (limits.stream_idle_timeout_s is ", absl::FormatDuration(idle_), ")");
    } else {
      return false;
    }
    cut = std::move(cut_);
    cut_ = nullptr;
    unwanted_ = nullptr;
    released_ = true;
    cutting_on_ = std::this_thread::get_id();
  }
  // Outside the lock: cancelling a call may run its reactor's callbacks on this thread, and they
  // may Release().
  if (cut) cut();
  absl::MutexLock lock(&mu_);
  cutting_on_ = std::thread::id();
  return true;
}

StreamWatch::StreamWatch() : thread_([this] { Loop(); }) {}

StreamWatch::~StreamWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::shared_ptr<StreamWatch::Watched> StreamWatch::Watch(absl::Duration idle,
                                                         std::function<void()> cut,
                                                         std::function<bool()> unwanted) {
  std::shared_ptr<Watched> watched(new Watched(idle, std::move(cut), std::move(unwanted)));
  absl::MutexLock lock(&mu_);
  streams_.push_back(watched);
  return watched;
}

size_t StreamWatch::watched() const {
  absl::MutexLock lock(&mu_);
  return streams_.size();
}

void StreamWatch::Loop() {
  while (true) {
    std::vector<std::shared_ptr<Watched>> streams;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), kCheckEvery)) return;
      streams = streams_;
    }
    const int64_t now = SteadyNanos();
    absl::flat_hash_set<Watched*> done;
    for (const std::shared_ptr<Watched>& s : streams) {
      if (s->CutIfDue(now)) done.insert(s.get());
    }
    if (done.empty()) continue;
    absl::MutexLock lock(&mu_);
    std::erase_if(streams_,
                  [&](const std::shared_ptr<Watched>& s) { return done.contains(s.get()); });
  }
}

}  // namespace fl::server
