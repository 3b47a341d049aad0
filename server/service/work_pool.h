// The federation service's own threads: every call into the engine and the store runs here, so
// that gRPC's callback threads only move bytes, a call that waits (a long poll, a stream whose
// client is silent) holds no thread at all, and the threads the service uses are a fixed number
// however many clients are connected.
//
// A fixed set of threads takes work from one queue in order. The queue is bounded: past
// `max_queued` waiting items, Post refuses, and the caller answers its call RESOURCE_EXHAUSTED
// (a server that far behind is better off refusing than queuing without end); Continue, for a
// call already taken, never refuses.
#ifndef FL_SERVER_SERVICE_WORK_POOL_H_
#define FL_SERVER_SERVICE_WORK_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fl::server {

class WorkPool {
 public:
  // Starts `threads` threads (at least 1).
  WorkPool(int threads, size_t max_queued);
  // Runs what is queued, then joins the threads. Work posted from a pool thread while it drains
  // still runs.
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `work` to run on one of the pool's threads. False (and `work` is dropped, not run)
  // when `max_queued` items are already waiting. Thread-safe.
  bool Post(std::function<void()> work);
  // Queues `work` whatever the queue holds: for the next step of a call already taken (a stream's
  // next message, a parked poll's resume), which must run for the call to end. Each call has at
  // most one such step queued, so these are bounded by the calls taken. They run before new calls
  // (but for one new call in every kNewEvery taken), so that a flood of new calls cannot stall the
  // streams under way, nor busy streams the new calls.
  void Continue(std::function<void()> work);

  int threads() const { return static_cast<int>(threads_.size()); }
  // New calls waiting now (not those running, nor the steps of calls taken).
  size_t queued() const;

 private:
  void Loop();
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty() || !continued_.empty();
  }

  static constexpr int kNewEvery = 8;
  const size_t max_queued_;
  int taken_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);      // new calls (Post)
  std::deque<std::function<void()>> continued_ ABSL_GUARDED_BY(mu_);  // calls taken (Continue)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_WORK_POOL_H_
