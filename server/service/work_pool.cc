#include "server/service/work_pool.h"

#include <algorithm>
#include <utility>

namespace fl::server {

WorkPool::WorkPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  threads = std::max(threads, 1);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkPool::~WorkPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkPool::Post(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(work));
  return true;
}

void WorkPool::Continue(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  continued_.push_back(std::move(work));
}

size_t WorkPool::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void WorkPool::Loop() {
  while (true) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkPool::ReadyLocked));
      const bool new_turn = ++taken_ % kNewEvery == 0 && !queue_.empty();
      std::deque<std::function<void()>>& from =
          continued_.empty() || new_turn ? queue_ : continued_;
      if (from.empty()) return;  // stopping, and nothing left
      work = std::move(from.front());
      from.pop_front();
    }
    work();
  }
}

}  // namespace fl::server
